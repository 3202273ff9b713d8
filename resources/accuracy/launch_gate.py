"""The accuracy gate inside a climb: the running best and the candidate each on a fresh server.

The two are served one after the other (one launch per host at a time), each asked the
gate's prompts (or scored by lm-eval); the running best's answers are kept per
configuration, so a later gate against the same best costs one launch, not two. Any
failure to launch or to answer is `unavailable`: the gate fails closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperloom_assets.core.config.targets import AgreementCheck, LmEvalCheck
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.resources.accuracy.client import GateUnavailable
from hyperloom_assets.resources.accuracy.gate import SideEvidence, evidence_of, verdict_of


class LaunchGate:
    """`spec_for(keepers, variant)` builds a launch spec (checking its tree out); `log` says each verdict."""

    def __init__(self, host: Any, check: AgreementCheck | LmEvalCheck, folder: Path,
                 spec_for: Callable[[list[Variant], Variant | None], ServerSpec], log: Any = None):
        self.host, self.check, self.folder, self.spec_for, self.log = host, check, folder, spec_for, log
        self.references: dict[str, SideEvidence] = {}

    def judge_variant(self, keepers: list[Variant], variant: Variant) -> tuple[str, str]:
        """The climb's gate: the running best (keepers) against the candidate on top of it."""
        best_key = trial_fingerprint(keepers[:-1], keepers[-1]) if keepers else "baseline"
        verdict, why = self.judge(best_key, lambda: self.spec_for(keepers, None), lambda: self.spec_for(keepers, variant))
        if self.log is not None:
            self.log.info("accuracy gate for %s: %s (%s)", variant.name, verdict, why)
        return verdict, why

    def _answers(self, spec: ServerSpec, label: str) -> SideEvidence:
        folder = self.folder / f"gate-{label}-{time.time_ns()}"
        with self.host.serve(spec, folder) as launch:
            return evidence_of(launch.base_url, launch.served_model, self.check, folder)

    def judge(self, best_key: str, reference: Callable[[], ServerSpec],
              candidate: Callable[[], ServerSpec]) -> tuple[str, str]:
        """(verdict, why). `reference` and `candidate` build each side's spec right before its launch
        (they check the tree out), so the two never share a checkout."""
        try:
            if best_key not in self.references:
                self.references[best_key] = self._answers(reference(), "reference")
            answers = self._answers(candidate(), "candidate")
        except (ServerError, GateUnavailable) as exc:
            return "unavailable", str(exc).splitlines()[0]
        result = verdict_of(self.check, self.references[best_key], answers)
        return result.verdict, result.reason
