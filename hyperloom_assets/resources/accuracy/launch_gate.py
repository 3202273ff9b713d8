"""The accuracy gate inside a climb: the running best's answers against the candidate's.

Each side's answers are kept per configuration (its trial fingerprint, or `baseline`).
Where they can be, they are asked of a server that is up anyway, right after its measured
rounds (`ask_on`): the baseline's server in a run that climbs, and an accuracy-risky
variant's own trial launch. The agreement check's few short prompts cost seconds there
and a launch anywhere else. A side without answers (a trial replayed from the ledger, a
baseline measured in a run that did not climb, an lm-eval check, whose task is too long
to run on every risky launch) is served on a fresh server of its own, one after the
other (one launch per host at a time). Any failure to launch or to answer a gate launch
is `unavailable`: the gate fails closed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from hyperloom_assets.core.accuracy.agreement import PromptOutput
from hyperloom_assets.core.config.targets import AgreementCheck, LmEvalCheck
from hyperloom_assets.core.decisions.climb import BASELINE
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.resources.accuracy.client import GateUnavailable, collect_outputs
from hyperloom_assets.resources.accuracy.gate import SideEvidence, evidence_of, verdict_of
from hyperloom_assets.resources.hosts.host import Host

log = logging.getLogger(__name__)

def answers_on(check: AgreementCheck | LmEvalCheck, launch: LaunchRecord) -> list[PromptOutput] | None:
    """The agreement check's answers from a server already up; None for lm-eval or when it cannot answer.

    None is never a verdict: that side is then served on a launch of its own when a gate needs it."""
    if not isinstance(check, AgreementCheck):
        return None
    try:
        return collect_outputs(launch.base_url, launch.served_model, check)
    except GateUnavailable as exc:
        log.warning("the accuracy gate's prompts went unanswered after the measured rounds (%s); "
                    "a gate that needs them launches this configuration", exc)
        return None


class LaunchGate:
    """`spec_for(keepers, variant)` gives a launch spec, its tree checked out and held for the block;
    `log` says each verdict."""

    def __init__(self, host: Host, check: AgreementCheck | LmEvalCheck, folder: Path,
                 spec_for: Callable[[list[Variant], Variant | None], AbstractContextManager[ServerSpec]],
                 log: Any = None,
                 baseline_answers: list[PromptOutput] | None = None):
        self.host, self.check, self.folder, self.spec_for, self.log = host, check, folder, spec_for, log
        self.answers: dict[str, SideEvidence] = {}  # configuration key -> what its server answered
        if baseline_answers is not None:
            self.answers[BASELINE] = baseline_answers
        self.launched: list[str] = []  # the sides a gate had to launch, in order

    def ask_on(self, key: str) -> Callable[[LaunchRecord], None] | None:
        """An after-rounds hook that keeps this configuration's answers, if it has none yet."""
        if key in self.answers or not isinstance(self.check, AgreementCheck):
            return None

        def ask(launch: LaunchRecord) -> None:
            answers = answers_on(self.check, launch)
            if answers is not None:
                self.answers[key] = answers
        return ask

    def judge_variant(self, keepers: list[Variant], variant: Variant) -> tuple[str, str]:
        """The climb's gate: the running best (keepers) against the candidate on top of it."""
        best_key = trial_fingerprint(keepers[:-1], keepers[-1]) if keepers else BASELINE
        launched = len(self.launched)
        verdict, why = self.judge(best_key, lambda: self.spec_for(keepers, None),
                                  trial_fingerprint(keepers, variant), lambda: self.spec_for(keepers, variant))
        if self.log is not None:
            served = ", ".join(self.launched[launched:]) or "none: both sides answered on servers already up"
            self.log.info("accuracy gate for %s: %s (%s); gate launches: %s", variant.name, verdict, why, served)
        return verdict, why

    def _answers(self, side: AbstractContextManager[ServerSpec], label: str) -> SideEvidence:
        folder = self.folder / f"gate-{label}-{time.time_ns()}"
        self.launched.append(label)
        with side as spec, self.host.serve(spec, folder) as launch:
            return evidence_of(launch.base_url, launch.served_model, self.check, folder)

    def judge(self, best_key: str, reference: Callable[[], AbstractContextManager[ServerSpec]], candidate_key: str,
              candidate: Callable[[], AbstractContextManager[ServerSpec]]) -> tuple[str, str]:
        """(verdict, why). `reference` and `candidate` give each side's spec, its tree held, right around
        its launch, so the two never share a checkout; a side whose answers are kept is not launched."""
        try:
            for key, side, label in ((best_key, reference, "reference"), (candidate_key, candidate, "candidate")):
                if key not in self.answers:
                    self.answers[key] = self._answers(side(), label)
        except (ServerError, GateUnavailable) as exc:
            return "unavailable", str(exc).splitlines()[0]
        result = verdict_of(self.check, self.answers[best_key], self.answers[candidate_key])
        return result.verdict, result.reason
