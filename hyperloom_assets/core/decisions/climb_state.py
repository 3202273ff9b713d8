"""The climb's state and its vocabulary: budgets, results, checks, the running best. Pure code.

climb.py measures and judges one trial at a time against the running best; parallel.py
measures several trials at once. Both keep what they learn in a ClimbState: the
keepers, each config's launches (the evidence), the trials so far and what was tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from hyperloom_assets.core.config.targets import Objective, TargetSlo
from hyperloom_assets.core.decisions.ledger import Ledger
from hyperloom_assets.core.decisions.rule import SLO_CLOSER, SLO_MISSED, Outcome
from hyperloom_assets.core.decisions.stop_reasons import StopReason
from hyperloom_assets.core.decisions.trial_record import TrialRecord
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.slo_verdict import SloVerdict, slo_verdict, worst_ratio
from hyperloom_assets.core.measurement.stats import Launches, launch_gain_interval
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.proposer.critic_rules import Review

BASELINE = "baseline"  # the evidence key of the operator's config
SLO_HANDOVER = 3  # trials on a best that breaks the SLO, each breaking it too, before the continuation goes first
OVERTIME = "overtime"  # the error class of a launch the measure stopped at the overtime limit


class Budget(Strict):
    max_trials: int
    target_gain_pct: float
    deadline_s: float | None = None  # time.monotonic() value after which no trial starts


class ClimbResult(Strict):
    trials: list[TrialRecord]
    keepers: list[Variant]
    evidence: dict[str, Launches]  # config key -> its launches: the launch-noise estimate's data
    best_key: str
    stop_reason: str

    @property
    def baseline_launches(self) -> Launches:  # relaunches beside trials included
        return self.evidence[BASELINE]

    @property
    def best_launches(self) -> Launches:
        return self.evidence[self.best_key]

    def best_gain_pct(self) -> float:
        return gain_pct(self.best_launches, self.baseline_launches)


PlanFn = Callable[[list[Variant], set[str]], list[Variant]]
# (keepers, variant) -> why its source patch does not apply to the running best, or None (before any launch)
AdmitFn = Callable[[list[Variant], Variant], "str | None"]
# (keepers, variant) -> (verdict, why): the accuracy gate on a risky variant that won on throughput
GateFn = Callable[[list[Variant], Variant], "tuple[str, str]"]
# (keepers, variant) -> the critic's review of a planned patch, before `git apply` (a model's
# proposal was reviewed when it was proposed)
ReviewFn = Callable[[list[Variant], Variant], Review]
# (variant, the trials so far) -> True to pass it over: what the trials since the plan was made rule out
SkipFn = Callable[[Variant, list[TrialRecord]], bool]


class SloCheck(NamedTuple):
    """The target's SLO, and the baseline launch's latency: whether the climb starts inside it.
    With `objective` goodput (which needs an SLO) launches are compared on their goodputs."""
    slo: TargetSlo
    baseline: Latency | None
    objective: Objective = "throughput"

    def verdict(self, latencies: list[Latency | None]) -> SloVerdict:
        return slo_verdict(self.slo, latencies)


class Progress(NamedTuple):
    """What the climb has measured so far, as the continuation reads it (planning/continuation.py)."""
    keepers: list[Variant]
    trials: list[TrialRecord]
    evidence: dict[str, Launches]
    best_key: str


# What the climb has measured -> the next variant past the rule plan, or why the climb stops
MoreFn = Callable[[Progress], "Variant | StopReason"]


class Checks(NamedTuple):
    """What a trial must pass besides throughput; all optional (a target without a tree has no patches).
    `more`: where the climb goes once the rule plan is spent (the continuation); None: it stops there."""
    admit: AdmitFn | None = None
    gate: GateFn | None = None
    review: ReviewFn | None = None
    slo: SloCheck | None = None
    skip: SkipFn | None = None
    more: MoreFn | None = None


def launched_changes(keepers: list[Variant], variant: Variant | None) -> list[Variant]:
    """What a `measure` call launches on top of the operator's config."""
    return [*keepers, variant] if variant is not None else list(keepers)


def gain_pct(launches: Launches, anchor: Launches) -> float:
    return launch_gain_interval(launches, anchor)[0]


class SloState(NamedTuple):
    check: SloCheck
    best_meets: bool  # whether the running best meets the SLO: a keeper always does
    # Whether the running best was shown breaking it (a lower bound over a limit): only then may a
    # variant be kept for meeting it at a throughput loss (slo_reached). Neither: unclear, the plain rules.
    best_breaks: bool = False
    # While it breaks: the 95% lower bound of its worst limit's ratio (slo_verdict.worst_ratio), the mark a
    # stepping stone (slo_closer) must be measurably under.
    best_excess: float | None = None


def next_variant(plan: list[Variant], keepers: list[Variant], seen: set[str],
                  skip: Callable[[Variant], bool] | None = None) -> Variant | None:
    for variant in plan:
        if trial_fingerprint(keepers, variant) not in seen and not (skip and skip(variant)):
            return variant
    return None


def budget_stop(trials: list[TrialRecord], gain: float, budget: Budget) -> StopReason | None:
    # The running estimate, not the validated gain: validating costs four launches, so it
    # runs once, on the final stack (StopReason.TARGET_REACHED's description says so).
    if gain >= budget.target_gain_pct:
        return StopReason.TARGET_REACHED
    if len(trials) >= budget.max_trials:
        return StopReason.BUDGET_EXHAUSTED
    if budget.deadline_s is not None and time.monotonic() >= budget.deadline_s:
        return StopReason.TIME_EXHAUSTED
    return None


class ClimbState:
    """What the climb holds between trials: the keepers, each config's launches, the trials so far
    (the serial climb and the parallel climb, parallel.py, share it)."""

    def __init__(self, baseline: list[float], plan: PlanFn, checks: Checks):
        self.plan, self.checks = plan, checks
        start = checks.slo.verdict([checks.slo.baseline]) if checks.slo else None
        self.best_meets = start.met if start else True
        self.best_breaks = start.broken if start else False
        self.best_excess = worst_ratio(checks.slo.slo, start, "lower") if start and start.broken else None
        self.keepers: list[Variant] = []
        self.evidence: dict[str, Launches] = {BASELINE: [list(baseline)]}  # config key -> its launches
        self.best_key = BASELINE
        self.trials: list[TrialRecord] = []
        self.seen: set[str] = set()
        self.spent: StopReason | None = None  # why the continuation found nothing more, once it did
        self.candidates = plan(self.keepers, set())

    def result(self, stop_reason: str) -> ClimbResult:
        return ClimbResult(trials=self.trials, keepers=self.keepers, evidence=self.evidence, best_key=self.best_key,
                           stop_reason=stop_reason)

    def stop(self, budget: Budget) -> StopReason | None:
        return budget_stop(self.trials, gain_pct(self.evidence[self.best_key], self.evidence[BASELINE]), budget)

    def next_variant(self, first: list[Variant] = ()) -> Variant | None:
        """The next variant not yet tried on the running best, marked seen (`first`: ahead of the plan)."""
        skip = (lambda v: self.checks.skip(v, self.trials)) if self.checks.skip else None
        variant = self._continued() if not first and self._plan_breaks_slo() else None
        variant = variant or next_variant([*first, *self.candidates], self.keepers, self.seen, skip)
        if variant is None and self.checks.more is not None:
            variant = self._continued()
        if variant is not None:
            self.seen.add(trial_fingerprint(self.keepers, variant))
        return variant

    def _plan_breaks_slo(self) -> bool:
        """Under an SLO the running best is shown breaking, the plan's last SLO_HANDOVER trials on it all broke
        it too: its moves, one knob at a time from a config far outside, are not reaching it, and the
        continuation (where on) proposes first until a config within the SLO is kept."""
        if self.checks.more is None or not self.best_breaks:
            return False
        since = [t for t in self.trials[-SLO_HANDOVER:] if t.against == self.trials[-1].against] if self.trials else []
        return len(since) == SLO_HANDOVER and all(t.decision.reason.startswith(SLO_MISSED) for t in since)

    def continued(self) -> Variant | None:
        """The continuation's next variant, marked seen (the parallel climb asks with no trial in flight)."""
        variant = self._continued() if self.checks.more is not None else None
        if variant is not None:
            self.seen.add(trial_fingerprint(self.keepers, variant))
        return variant

    def _continued(self) -> Variant | None:
        """The continuation's next variant past the spent plan; None, with `spent` saying why, when it has none."""
        found = self.checks.more(Progress(self.keepers, self.trials, self.evidence, self.best_key))
        if isinstance(found, StopReason):
            self.spent = found
            return None
        if trial_fingerprint(self.keepers, found) in self.seen:  # a point it reached by another stack
            self.spent = StopReason.NO_MORE_CANDIDATES
            return None
        return found

    def slo(self) -> SloState | None:
        return (SloState(self.checks.slo, self.best_meets, self.best_breaks, self.best_excess)
                if self.checks.slo else None)

    def others(self, fingerprint: str) -> list[Launches]:
        return [launches for key, launches in self.evidence.items() if key not in (self.best_key, fingerprint)]

    def settle(self, record: TrialRecord, variant: Variant, ledger: Ledger, against: str | None = None,
               replan: bool = True) -> None:
        """A finished trial: its launches join the evidence (the best's relaunches under `against`, the
        config it was measured against), and a KEEP becomes the running best."""
        against = against or self.best_key
        self.evidence[against] = self.evidence[against] + record.best_launches
        if record.launches or record.rebench_launches:  # the rebench launched the same config
            self.evidence[record.fingerprint] = (self.evidence.get(record.fingerprint, []) + record.launches
                                                 + record.rebench_launches)
        self.trials.append(record)
        ledger.on_trial(record)
        if record.decision.outcome == Outcome.KEEP:
            self.keepers = [*self.keepers, variant]
            self.best_key = record.fingerprint
            self._after_keep(record)
            if replan:
                self.replan()

    def _after_keep(self, record: TrialRecord) -> None:
        """A keeper meets the SLO, or is a stepping stone (slo_closer): still missing it, its own lower bound
        the next stone's mark while it is shown breaking it (a stone only unclear leaves the plain rules)."""
        if record.decision.reason.startswith(SLO_CLOSER) and record.slo is not None and self.checks.slo:
            excess = worst_ratio(self.checks.slo.slo, record.slo, "lower")
            self.best_meets, self.best_breaks = False, excess is not None and excess > 1
            self.best_excess = excess if self.best_breaks else None
        else:
            self.best_meets, self.best_breaks, self.best_excess = True, False, None

    def replan(self) -> None:
        self.candidates = self.plan(self.keepers, set())
