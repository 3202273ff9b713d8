"""The climb: trials against the running best, re-planning after every keeper. Pure code.

The `trials` asset supplies three callbacks: `plan` (the planner on top of the current
stack), `measure` (one launch of the stack plus a variant, or of the stack alone when
the variant is None, through the resources) and a ledger (`recall`/`remember`) keyed by
the trial fingerprint within the run's context, so re-executing a run replays recorded
trials instead of measuring them again.

Evidence is kept per launch (stats.Launches). A variant that needs review is launched
again with the running best re-launched beside it, so both sides carry launch-to-launch
noise; every config the climb launched sharpens the noise estimate of later decisions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from hyperloom_assets.core.decisions.rule import (
    Decision,
    Outcome,
    decide_stack,
    decide_trial,
    failed,
    is_overtime,
    killed_overtime,
    max_looks,
)
from hyperloom_assets.core.measurement.stats import Launches, LaunchNoise, launch_gain_interval, repeats_of
from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import Variant

BASELINE = "baseline"  # the evidence key of the operator's config


class TrialMeasurement(Strict):
    """One launch of a trial's config: per-repeat throughputs, or the failure."""

    throughputs: list[float] = []
    measuring_s: float = 0.0
    measurement_id: int | None = None
    error_class: str | None = None
    error: str | None = None
    argv: list[str] = []
    env: dict[str, str] = {}
    telemetry: Telemetry | None = None  # the engine's /metrics over the measured rounds


class TrialRecord(Strict):
    index: int
    name: str
    fingerprint: str  # of the whole launched change, relative to the operator's base
    variant: Variant
    against: str  # "baseline" or "stack of N keepers"
    decision: Decision
    measurements: int  # launches of the variant
    launches: Launches  # the variant's per-repeat throughputs, launch by launch
    best_launches: Launches = []  # the running best, re-launched beside the variant
    measurement_ids: list[int] = []
    best_measurement_ids: list[int] = []
    error_class: str | None = None
    argv: list[str] = []
    env: dict[str, str] = {}
    replayed: bool = False  # taken from the ledger, not measured in this execution
    telemetry: Telemetry | None = None  # the variant's last launch, as the engine reported it

    @property
    def outcome(self) -> str:
        return self.decision.outcome.value

    @property
    def mean(self) -> float | None:
        repeats = repeats_of(self.launches)
        return statistics.fmean(repeats) if repeats else None

    @property
    def launch_count(self) -> int:
        """Servers this trial started: the variant's and the best's relaunches beside it."""
        return self.measurements + len(self.best_launches)


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
MeasureFn = Callable[[list[Variant], Variant | None], TrialMeasurement]  # None: the stack alone
RecallFn = Callable[[str], TrialRecord | None]
RememberFn = Callable[[TrialRecord], None]


def launched_changes(keepers: list[Variant], variant: Variant | None) -> list[Variant]:
    """What a `measure` call launches on top of the operator's config."""
    return [*keepers, variant] if variant is not None else list(keepers)


def gain_pct(launches: Launches, anchor: Launches) -> float:
    return launch_gain_interval(launches, anchor)[0]


class _Judged(Strict):
    decision: Decision
    looks: int = 0  # launches of the variant, failed ones included
    launches: Launches = []
    ids: list[int] = []
    best_launches: Launches = []
    best_ids: list[int] = []
    last: TrialMeasurement


def _judge(variant: Variant, keepers: list[Variant], best: Launches, others: list[Launches],
           baseline_measuring_s: float, measure: MeasureFn, prior: LaunchNoise | None = None) -> _Judged:
    """Measure until decided: NEEDS_REVIEW is measured again, at most max_looks(prior) times.

    From the second look on, the running best is re-launched first whenever it has no
    more launches than the variant, so both sides carry launch noise and time drift alike.
    """
    judged = _Judged(decision=failed("not measured"), last=TrialMeasurement())
    tests = max_looks(prior)  # looks that can keep; a look without an interval is not one
    for look in range(1, max_looks(prior) + 1):
        if look > 1 and len(best) + len(judged.best_launches) <= len(judged.launches):
            again = measure(keepers, None)
            judged.best_ids += [again.measurement_id] if again.measurement_id is not None else []
            if again.error_class is not None:
                judged.decision, judged.last = failed(f"the running best failed when launched again: "
                                                      f"{_first_line(again)}"), again
                return judged
            judged.best_launches.append(again.throughputs)
        result = measure(keepers, variant)
        judged.looks, judged.last = look, result
        judged.ids += [result.measurement_id] if result.measurement_id is not None else []
        if result.error_class is not None:
            judged.decision = failed(f"{result.error_class}: {_first_line(result)}")
            return judged
        judged.launches.append(result.throughputs)
        if is_overtime(result.measuring_s, baseline_measuring_s):
            judged.decision = killed_overtime(result.measuring_s, baseline_measuring_s)
            return judged
        judged.decision = decide_trial(judged.launches, best + judged.best_launches, others, measurements=look,
                                       tests=tests, prior=prior)
        if judged.decision.outcome != Outcome.NEEDS_REVIEW:
            break
        if judged.decision.ci_low_pct is None:
            tests = max(1, tests - 1)
    if judged.decision.outcome == Outcome.KEEP:
        judged.decision = _stack_check(judged.decision, judged.launches, best + judged.best_launches)
    return judged


def _first_line(result: TrialMeasurement) -> str:
    return (result.error or "").splitlines()[0][:300] if result.error else ""


def _stack_check(decision: Decision, stack: Launches, best: Launches) -> Decision:
    # The variant was launched on top of the stack, so its numbers are the whole stack's.
    joined = decide_stack(stack, best)
    if joined.outcome == Outcome.KEEP_UNSTABLE:
        return joined
    return decision


def _next_variant(plan: list[Variant], keepers: list[Variant], seen: set[str]) -> Variant | None:
    for variant in plan:
        if trial_fingerprint(keepers, variant) not in seen:
            return variant
    return None


def _stop_reason(trials: list[TrialRecord], gain: float, budget: Budget) -> str | None:
    if gain >= budget.target_gain_pct:
        return "target_reached"
    if len(trials) >= budget.max_trials:
        return "budget_exhausted"
    if budget.deadline_s is not None and time.monotonic() >= budget.deadline_s:
        return "time_exhausted"
    return None


def climb(baseline: list[float], baseline_measuring_s: float, budget: Budget, plan: PlanFn, measure: MeasureFn,
          recall: RecallFn, remember: RememberFn, on_trial: Callable[[TrialRecord], None] | None = None,
          prior: LaunchNoise | None = None) -> ClimbResult:
    """`baseline` is the baseline's per-repeat throughputs: its one launch; `prior` the launch
    noise of earlier runs of the same host, engine and model (decisions/history.py)."""
    keepers: list[Variant] = []
    evidence: dict[str, Launches] = {BASELINE: [list(baseline)]}  # config key -> its launches
    best_key = BASELINE
    trials: list[TrialRecord] = []
    seen: set[str] = set()
    candidates = plan(keepers, set())

    def result(stop_reason: str) -> ClimbResult:
        return ClimbResult(trials=trials, keepers=keepers, evidence=evidence, best_key=best_key,
                           stop_reason=stop_reason)

    while True:
        reason = _stop_reason(trials, gain_pct(evidence[best_key], evidence[BASELINE]), budget)
        if reason:
            return result(reason)
        variant = _next_variant(candidates, keepers, seen)
        if variant is None:
            return result("no_more_candidates")
        fingerprint = trial_fingerprint(keepers, variant)
        seen.add(fingerprint)
        record = recall(fingerprint)
        if record is not None:
            record = record.model_copy(update={"index": len(trials) + 1, "replayed": True})
        else:
            others = [launches for key, launches in evidence.items() if key not in (best_key, fingerprint)]
            record = _measure_trial(len(trials) + 1, fingerprint, variant, keepers, evidence[best_key], others,
                                    baseline_measuring_s, measure, prior)
            remember(record)
        evidence[best_key] = evidence[best_key] + record.best_launches
        if record.launches:
            evidence[fingerprint] = evidence.get(fingerprint, []) + record.launches
        trials.append(record)
        if on_trial is not None:
            on_trial(record)
        if record.decision.outcome == Outcome.KEEP:
            keepers = [*keepers, variant]
            best_key = fingerprint
            candidates = plan(keepers, set())


def _measure_trial(index: int, fingerprint: str, variant: Variant, keepers: list[Variant], best: Launches,
                   others: list[Launches], baseline_measuring_s: float, measure: MeasureFn,
                   prior: LaunchNoise | None = None) -> TrialRecord:
    judged = _judge(variant, keepers, best, others, baseline_measuring_s, measure, prior)
    against = f"stack of {len(keepers)} keeper(s)" if keepers else "baseline"
    last = judged.last
    return TrialRecord(index=index, name=variant.name, fingerprint=fingerprint, variant=variant, against=against,
                       decision=judged.decision, measurements=judged.looks,
                       launches=judged.launches, best_launches=judged.best_launches, measurement_ids=judged.ids,
                       best_measurement_ids=judged.best_ids, error_class=last.error_class, argv=last.argv,
                       env=last.env, telemetry=last.telemetry)
