"""The climb: trials against the running best, re-planning after every keeper. Pure code.

The `trials` asset supplies two callbacks, `plan` (the planner on top of the current
stack) and `measure` (one launch of the stack plus a variant, or of the stack alone when
the variant is None, through the resources), and a Ledger (ledger.py) that replays what a
run already measured. Replay is exact because the climb is deterministic given its
measurements: the same launches in the same order lead it to ask for the same next launch.

Evidence is kept per launch (stats.Launches). A variant that needs review is launched
again with the running best re-launched beside it, so both sides carry launch-to-launch
noise; every config the climb launched sharpens the noise estimate of later decisions.
A KEEP is then confirmed by one fresh launch of the whole new stack (the reference's
stack rebench): a keeper won on lucky launches that the fresh launch does not confirm
is evicted as KEEP_UNSTABLE, and the fresh launch joins the evidence like any other.

Under a target's SLO (Checks.slo) a variant is judged on latency first, launch by launch
(slo_verdict.py: each launch's 95% upper bound at the SLO's percentile within every limit):
one that breaks the SLO is REVERT `slo_missed` at once, whatever its throughput, since
more launches can only add a worse one; while the running best itself breaks the SLO,
a variant that meets it is KEEP `slo_reached` whatever its throughput, so the search first
finds a config that meets the SLO and then climbs throughput among those that do. The
rebench's fresh launch must meet the SLO too. With the objective goodput (SloCheck.objective)
every comparison reads each launch's goodputs, the requests per second within the SLO,
instead of its output tok/s (objective.py). A plan is made once per keeper; `Checks.skip`
passes over what the trials since then ruled out (a sequence cap the SLO's TPOT was seen
to break: planning/slo_ceiling.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from hyperloom_assets.core.decisions.rule import (
    Decision,
    Outcome,
    accuracy_gated,
    critic_rejected,
    decide_stack,
    decide_trial,
    failed,
    is_overtime,
    killed_overtime,
    max_looks,
    rejected,
    slo_missed,
    slo_reached,
    stack_unstable,
)
from hyperloom_assets.core.decisions.stop_reasons import StopReason
from hyperloom_assets.core.config.targets import Objective, TargetSlo
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.slo_verdict import SloVerdict, slo_verdict
from hyperloom_assets.core.measurement.stats import Launches, LaunchNoise, launch_gain_interval
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.decisions.ledger import Launcher, Ledger, MeasureFn
from hyperloom_assets.core.decisions.trial_record import TrialMeasurement, TrialRecord
from hyperloom_assets.core.proposer.critic_rules import Review

BASELINE = "baseline"  # the evidence key of the operator's config
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


class Checks(NamedTuple):
    """What a trial must pass besides throughput; all optional (a target without a tree has no patches)."""
    admit: AdmitFn | None = None
    gate: GateFn | None = None
    review: ReviewFn | None = None
    slo: SloCheck | None = None
    skip: SkipFn | None = None


def launched_changes(keepers: list[Variant], variant: Variant | None) -> list[Variant]:
    """What a `measure` call launches on top of the operator's config."""
    return [*keepers, variant] if variant is not None else list(keepers)


def gain_pct(launches: Launches, anchor: Launches) -> float:
    return launch_gain_interval(launches, anchor)[0]


class _SloState(NamedTuple):
    check: SloCheck
    best_meets: bool  # whether the running best meets the SLO: a keeper always does


class _Judged(Strict):
    decision: Decision
    looks: int = 0  # launches of the variant, failed ones included
    launches: Launches = []
    ids: list[int] = []
    best_launches: Launches = []
    best_ids: list[int] = []
    rebenches: int = 0
    rebench_launches: Launches = []
    rebench_ids: list[int] = []
    latencies: list[Latency | None] = []  # the variant's launches'
    output_throughputs: Launches = []  # the variant's launches' output tok/s, kept where they are not `launches`
    slo: SloVerdict | None = None  # over `latencies`
    last: TrialMeasurement


def _values(result: TrialMeasurement, slo: _SloState | None) -> list[float]:
    """The launch's per-repeat values of the objective: what decisions compare."""
    if slo is None or slo.check.objective == "throughput":
        return result.throughputs
    if not result.goodputs:
        raise ValueError("a launch judged on goodput was measured without counting it (no slo in its rounds)")
    return result.goodputs


def _ids(result: TrialMeasurement) -> list[int]:
    return [result.measurement_id] if result.measurement_id is not None else []


def _judge(variant: Variant, keepers: list[Variant], best: Launches, others: list[Launches],
           baseline_measuring_s: float, launch: Launcher, prior: LaunchNoise | None = None,
           slo: _SloState | None = None) -> _Judged:
    """Measure until decided: NEEDS_REVIEW is measured again, at most max_looks(prior) times.

    From the second look on, the running best is re-launched first whenever it has no
    more launches than the variant, so both sides carry launch noise and time drift alike.
    Under an SLO each launch of the variant is held to it first (the module docstring).
    """
    judged = _Judged(decision=failed("not measured"), last=TrialMeasurement())
    tests = max_looks(prior)  # looks that can keep; a look without an interval is not one
    for look in range(1, max_looks(prior) + 1):
        if look > 1 and len(best) + len(judged.best_launches) <= len(judged.launches):
            again = launch("best", keepers, None)
            judged.best_ids += _ids(again)
            if again.error_class is not None:
                judged.decision, judged.last = failed(f"the running best failed when launched again: "
                                                      f"{_first_line(again)}"), again
                return judged
            judged.best_launches.append(_values(again, slo))
        result = launch("variant", keepers, variant)
        judged.looks, judged.last = look, result
        judged.ids += _ids(result)
        if result.error_class == OVERTIME:
            judged.decision = killed_overtime(result.measuring_s, baseline_measuring_s)
            return judged
        if result.error_class is not None:
            judged.decision = failed(f"{result.error_class}: {_first_line(result)}")
            return judged
        judged.launches.append(_values(result, slo))
        if slo is not None and slo.check.objective != "throughput":
            judged.output_throughputs.append(result.throughputs)
        if is_overtime(result.measuring_s, baseline_measuring_s):  # a measure that does not stop launches
            judged.decision = killed_overtime(result.measuring_s, baseline_measuring_s)
            return judged
        judged.decision = decide_trial(judged.launches, best + judged.best_launches, others, measurements=look,
                                       tests=tests, prior=prior)
        if slo is not None and _held_to_slo(judged, result, slo):
            return judged
        if judged.decision.outcome != Outcome.NEEDS_REVIEW:
            break
        if judged.decision.ci_low_pct is None:
            tests = max(1, tests - 1)
    return judged


def _held_to_slo(judged: _Judged, result: TrialMeasurement, slo: _SloState) -> bool:
    """Judge the variant's launches so far on the SLO; True when that decides the trial."""
    judged.latencies.append(result.latency)
    judged.slo = slo.check.verdict(judged.latencies)
    if not judged.slo.met:
        judged.decision = slo_missed(judged.decision, judged.slo.why)
        return True
    if not slo.best_meets:
        judged.decision = slo_reached(judged.decision, judged.slo.why)
        return True
    return False


def _rebench(judged: _Judged, stack: list[Variant], best: Launches, launch: Launcher,
             slo: _SloState | None = None) -> None:
    """The reference's stack rebench: a fresh launch of the whole new stack must confirm the KEEP
    (under an SLO: meet it; and gain on throughput unless the KEEP was for meeting it)."""
    fresh = launch("rebench", stack, None)
    judged.rebenches += 1
    judged.rebench_ids += _ids(fresh)
    if fresh.error_class is not None:
        judged.decision = stack_unstable(f"a fresh launch of the whole stack failed: {fresh.error_class}: "
                                         f"{_first_line(fresh)}")
        return
    judged.rebench_launches.append(_values(fresh, slo))
    if slo is not None:
        fresh_slo = slo.check.verdict([fresh.latency])
        if not fresh_slo.met:
            judged.decision = stack_unstable(f"a fresh launch of the whole stack breaks the SLO: {fresh_slo.why}")
            return
        if not slo.best_meets:
            judged.decision = judged.decision.model_copy(
                update={"reason": f"{judged.decision.reason}; a fresh launch of the stack meets the SLO too"})
            return
    joined = decide_stack([_values(fresh, slo)], best)
    if joined.outcome == Outcome.KEEP_UNSTABLE:
        judged.decision = joined
    else:
        judged.decision = judged.decision.model_copy(update={"reason": f"{judged.decision.reason}; {joined.reason}"})


def _first_line(result: TrialMeasurement) -> str:
    return (result.error or "").splitlines()[0][:300] if result.error else ""


def _next_variant(plan: list[Variant], keepers: list[Variant], seen: set[str],
                  skip: Callable[[Variant], bool] | None = None) -> Variant | None:
    for variant in plan:
        if trial_fingerprint(keepers, variant) not in seen and not (skip and skip(variant)):
            return variant
    return None


def _stop_reason(trials: list[TrialRecord], gain: float, budget: Budget) -> StopReason | None:
    # The running estimate, not the validated gain: validating costs four launches, so it
    # runs once, on the final stack (StopReason.TARGET_REACHED's description says so).
    if gain >= budget.target_gain_pct:
        return StopReason.TARGET_REACHED
    if len(trials) >= budget.max_trials:
        return StopReason.BUDGET_EXHAUSTED
    if budget.deadline_s is not None and time.monotonic() >= budget.deadline_s:
        return StopReason.TIME_EXHAUSTED
    return None


def climb(baseline: list[float], baseline_measuring_s: float, budget: Budget, plan: PlanFn, measure: MeasureFn,
          ledger: Ledger, *, checks: Checks | None = None, prior: LaunchNoise | None = None) -> ClimbResult:
    """`baseline` is the baseline's per-repeat values of the objective (objective.repeat_values):
    its one launch; `prior` the launch noise of earlier runs of the same host, engine and model
    (decisions/history.py)."""
    checks = checks or Checks()
    best_meets = checks.slo.verdict([checks.slo.baseline]).met if checks.slo else True
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
            return result(reason.value)
        variant = _next_variant(candidates, keepers, seen,
                                (lambda v: checks.skip(v, trials)) if checks.skip else None)
        if variant is None:
            return result(StopReason.NO_MORE_CANDIDATES.value)
        fingerprint = trial_fingerprint(keepers, variant)
        seen.add(fingerprint)
        record = ledger.recall(fingerprint)
        if record is not None:
            record = record.model_copy(update={"index": len(trials) + 1, "replayed": True})
        else:
            others = [launches for key, launches in evidence.items() if key not in (best_key, fingerprint)]
            launch = Launcher(fingerprint, len(trials) + 1, variant.name, measure, ledger)
            slo = _SloState(checks.slo, best_meets) if checks.slo else None
            record = _measure_trial(len(trials) + 1, fingerprint, variant, keepers, evidence[best_key], others,
                                    baseline_measuring_s, launch, checks, prior, slo)
            ledger.remember(record)
        evidence[best_key] = evidence[best_key] + record.best_launches
        if record.launches or record.rebench_launches:  # the rebench launched the same config
            evidence[fingerprint] = evidence.get(fingerprint, []) + record.launches + record.rebench_launches
        trials.append(record)
        ledger.on_trial(record)
        if record.decision.outcome == Outcome.KEEP:
            keepers = [*keepers, variant]
            best_key = fingerprint
            best_meets = True  # under an SLO nothing that breaks it is kept
            candidates = plan(keepers, set())


def _measure_trial(index: int, fingerprint: str, variant: Variant, keepers: list[Variant], best: Launches,
                   others: list[Launches], baseline_measuring_s: float, launch: Launcher,
                   checks: Checks, prior: LaunchNoise | None = None, slo: _SloState | None = None) -> TrialRecord:
    against = f"stack of {len(keepers)} keeper(s)" if keepers else "baseline"
    review = checks.review(keepers, variant) if checks.review and variant.patches and variant.llm is None else None
    if review is not None and not review.approved:
        return TrialRecord(index=index, name=variant.name, fingerprint=fingerprint, variant=variant, against=against,
                           decision=critic_rejected(review.text()), measurements=0, launches=[], review=review)
    refusal = checks.admit(keepers, variant) if checks.admit and variant.patches else None
    if refusal is not None:
        return TrialRecord(index=index, name=variant.name, fingerprint=fingerprint, variant=variant, against=against,
                           decision=rejected(refusal), measurements=0, launches=[], review=review)
    judged = _judge(variant, keepers, best, others, baseline_measuring_s, launch, prior, slo)
    if judged.decision.outcome == Outcome.KEEP and variant.accuracy_risky and checks.gate is not None:
        judged.decision = accuracy_gated(judged.decision, *checks.gate(keepers, variant))
    if judged.decision.outcome == Outcome.KEEP:  # after the gate: a wrong answer is not worth a launch
        _rebench(judged, [*keepers, variant], best + judged.best_launches, launch, slo)
    last = judged.last
    return TrialRecord(index=index, name=variant.name, fingerprint=fingerprint, variant=variant, against=against,
                       decision=judged.decision, measurements=judged.looks,
                       launches=judged.launches, best_launches=judged.best_launches, rebenches=judged.rebenches,
                       rebench_launches=judged.rebench_launches, measurement_ids=judged.ids,
                       best_measurement_ids=judged.best_ids, rebench_measurement_ids=judged.rebench_ids,
                       error_class=last.error_class, argv=last.argv, env=last.env, telemetry=last.telemetry,
                       review=review, slo=judged.slo, objective=slo.check.objective if slo else "throughput",
                       output_throughputs=judged.output_throughputs)
