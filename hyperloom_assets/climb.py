"""The climb: trials against the running best, re-planning after every keeper. Pure code.

The `trials` asset supplies three callbacks: `plan` (the planner on top of the current
stack), `measure` (one launch of the stack plus a variant, through the resources) and a
ledger (`recall`/`remember`) keyed by the trial fingerprint within the run's context, so
re-executing a run replays recorded trials instead of measuring them again.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from hyperloom_assets.decisions import Decision, Outcome, decide_stack, decide_trial, failed, is_overtime, killed_overtime
from hyperloom_assets.fingerprints import trial_fingerprint
from hyperloom_assets.variants import Variant


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrialMeasurement(Strict):
    """One launch of a trial's config: per-repeat throughputs, or the failure."""

    throughputs: list[float] = []
    measuring_s: float = 0.0
    measurement_id: int | None = None
    error_class: str | None = None
    error: str | None = None
    argv: list[str] = []
    env: dict[str, str] = {}


class TrialRecord(Strict):
    index: int
    name: str
    fingerprint: str  # of the whole launched change, relative to the operator's base
    variant: Variant
    against: str  # "baseline" or "stack of N keepers"
    decision: Decision
    measurements: int
    throughputs: list[float]
    measurement_ids: list[int] = []
    error_class: str | None = None
    argv: list[str] = []
    env: dict[str, str] = {}
    replayed: bool = False  # taken from the ledger, not measured in this execution

    @property
    def outcome(self) -> str:
        return self.decision.outcome.value

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.throughputs) if self.throughputs else None


class Budget(Strict):
    max_trials: int
    target_gain_pct: float
    deadline_s: float | None = None  # time.monotonic() value after which no trial starts


class ClimbResult(Strict):
    trials: list[TrialRecord]
    keepers: list[Variant]
    best_throughputs: list[float]
    stop_reason: str


PlanFn = Callable[[list[Variant], set[str]], list[Variant]]
MeasureFn = Callable[[list[Variant], Variant], TrialMeasurement]
RecallFn = Callable[[str], TrialRecord | None]
RememberFn = Callable[[TrialRecord], None]


def gain_pct(throughputs: list[float], anchor: list[float]) -> float:
    base = statistics.fmean(anchor)
    return 100.0 * (statistics.fmean(throughputs) - base) / base


def _judge(variant: Variant, keepers: list[Variant], best: list[float], baseline_measuring_s: float,
           measure: MeasureFn) -> tuple[Decision, int, list[float], TrialMeasurement, list[int]]:
    """Measure until decided: NEEDS_REVIEW is measured again, at most MAX_MEASUREMENTS times."""
    pooled: list[float] = []
    ids: list[int] = []
    count = 0
    while True:
        result = measure(keepers, variant)
        count += 1
        ids += [result.measurement_id] if result.measurement_id is not None else []
        if result.error_class is not None:
            return failed(f"{result.error_class}: {(result.error or '').splitlines()[0][:300]}"), count, pooled, result, ids
        if is_overtime(result.measuring_s, baseline_measuring_s):
            return killed_overtime(result.measuring_s, baseline_measuring_s), count, result.throughputs, result, ids
        pooled += result.throughputs
        decision = decide_trial(pooled, best, measurements=count)
        if decision.outcome != Outcome.NEEDS_REVIEW:
            if decision.outcome == Outcome.KEEP:
                decision = _stack_check(decision, pooled, best)
            return decision, count, pooled, result, ids


def _stack_check(decision: Decision, stack: list[float], best: list[float]) -> Decision:
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


def _stop_reason(trials: list[TrialRecord], best: list[float], baseline: list[float], budget: Budget) -> str | None:
    if gain_pct(best, baseline) >= budget.target_gain_pct:
        return "target_reached"
    if len(trials) >= budget.max_trials:
        return "budget_exhausted"
    if budget.deadline_s is not None and time.monotonic() >= budget.deadline_s:
        return "time_exhausted"
    return None


def climb(baseline: list[float], baseline_measuring_s: float, budget: Budget, plan: PlanFn, measure: MeasureFn,
          recall: RecallFn, remember: RememberFn, on_trial: Callable[[TrialRecord], None] | None = None) -> ClimbResult:
    keepers: list[Variant] = []
    best = list(baseline)
    trials: list[TrialRecord] = []
    seen: set[str] = set()
    candidates = plan(keepers, set())
    while True:
        reason = _stop_reason(trials, best, baseline, budget)
        if reason:
            return ClimbResult(trials=trials, keepers=keepers, best_throughputs=best, stop_reason=reason)
        variant = _next_variant(candidates, keepers, seen)
        if variant is None:
            return ClimbResult(trials=trials, keepers=keepers, best_throughputs=best, stop_reason="no_more_candidates")
        fingerprint = trial_fingerprint(keepers, variant)
        seen.add(fingerprint)
        record = recall(fingerprint)
        if record is not None:
            record = record.model_copy(update={"index": len(trials) + 1, "replayed": True})
        else:
            record = _measure_trial(len(trials) + 1, fingerprint, variant, keepers, best, baseline_measuring_s, measure)
            remember(record)
        trials.append(record)
        if on_trial is not None:
            on_trial(record)
        if record.decision.outcome == Outcome.KEEP:
            keepers = [*keepers, variant]
            best = record.throughputs
            candidates = plan(keepers, set())


def _measure_trial(index: int, fingerprint: str, variant: Variant, keepers: list[Variant], best: list[float],
                   baseline_measuring_s: float, measure: MeasureFn) -> TrialRecord:
    decision, count, pooled, last, ids = _judge(variant, keepers, best, baseline_measuring_s, measure)
    against = f"stack of {len(keepers)} keeper(s)" if keepers else "baseline"
    return TrialRecord(index=index, name=variant.name, fingerprint=fingerprint, variant=variant, against=against,
                       decision=decision, measurements=count, throughputs=pooled, measurement_ids=ids,
                       error_class=last.error_class, argv=last.argv, env=last.env)
