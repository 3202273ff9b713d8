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
one shown breaking the SLO (a lower bound over a limit) is REVERT `slo_missed` at once,
whatever its throughput, since more launches can only add another; one whose launch is
unclear (bound over, lower bound under) is looked at again, that launch not read, at most
SLO_UNCLEAR_LOOKS times, and is never kept on it. While the running best is shown breaking
the SLO, a variant that meets it is KEEP `slo_reached` down to SLO_REACHED_MAX_LOSS_PCT under
the best's throughput (REVERT `slo_floor` further down), so the search first finds a config
that meets the SLO and then climbs throughput among those that do; on the way, one that still
misses it but is measurably closer (slo_verdict.measurably_closer) is KEEP `slo_closer`, a
stepping stone within the same floor whose rebench must be closer too; a best that merely is
not shown meeting it gets the plain rules. The rebench's fresh launch must meet the SLO too, and
an slo_reached keeper's must stay within the same floor. With the objective goodput
(SloCheck.objective) every comparison reads each launch's goodputs, the requests per second
within the SLO, instead of its output tok/s (objective.py). A plan is made once per keeper; `Checks.skip`
passes over what the trials since then ruled out (a sequence cap the SLO's TPOT was seen
to break: planning/slo_ceiling.py). Once the plan is spent, `Checks.more` (the target's
continuation, planning/continuation.py) proposes the next variant from everything measured,
judged as any other, until the budget, the target gain or its evidence stops the climb
(`expected_gain_below_noise`); under an SLO the best is shown breaking, it proposes first once
the plan's last SLO_HANDOVER trials broke the SLO too (climb_state.py).
"""

from __future__ import annotations

from hyperloom_assets.core.decisions.climb_state import (  # noqa: F401 - the climb's vocabulary, from here too
    BASELINE,
    OVERTIME,
    AdmitFn,
    Budget,
    Checks,
    ClimbResult,
    ClimbState,
    GateFn,
    PlanFn,
    ReviewFn,
    SkipFn,
    SloCheck,
    SloState,
    gain_pct,
    launched_changes,
)
from hyperloom_assets.core.decisions.ledger import Launcher, Ledger, MeasureFn
from hyperloom_assets.core.decisions.rule import (
    SLO_UNCLEAR_LOOKS,
    Decision,
    Outcome,
    accuracy_gated,
    critic_rejected,
    decide_reached_stack,
    decide_stack,
    decide_trial,
    failed,
    is_overtime,
    killed_overtime,
    max_looks,
    rejected,
    slo_missed,
    slo_not_shown,
    slo_closer_or_floor,
    slo_reached_or_floor,
    slo_unclear,
    stack_unstable,
)
from hyperloom_assets.core.decisions.stop_reasons import StopReason
from hyperloom_assets.core.decisions.trial_record import TrialMeasurement, TrialRecord
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.slo_verdict import SloVerdict, measurably_closer
from hyperloom_assets.core.measurement.stats import Launches, LaunchNoise
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.proposer.critic_rules import Review


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
    slo: SloVerdict | None = None  # over `latencies[slo_from:]`
    slo_from: int = 0  # the first launch the verdict reads: past an unclear one
    unclear: list[str] = []  # why each unclear launch was not read
    reached: bool = False  # kept as slo_reached: its rebench holds the floor, not the margin
    closer: bool = False  # kept as slo_closer (a stepping stone): its rebench must be closer too, within the floor
    ran_on: list[str] = []  # every launch's slot (the variant's, the best's beside it, the rebench's)
    last: TrialMeasurement


def objective_values(result: TrialMeasurement, slo: SloState | None) -> list[float]:
    """The launch's per-repeat values of the objective: what decisions compare."""
    if slo is None or slo.check.objective == "throughput":
        return result.throughputs
    if not result.goodputs:
        raise ValueError("a launch judged on goodput was measured without counting it (no slo in its rounds)")
    return result.goodputs


def _ids(result: TrialMeasurement) -> list[int]:
    return [result.measurement_id] if result.measurement_id is not None else []


def _placed(judged: _Judged, result: TrialMeasurement) -> TrialMeasurement:
    """The launch, its slot noted among the trial's."""
    judged.ran_on += [result.ran_on] if result.ran_on else []
    return result


def _judge(variant: Variant, keepers: list[Variant], best: Launches, others: list[Launches],
           baseline_measuring_s: float, launch: Launcher, prior: LaunchNoise | None = None,
           slo: SloState | None = None, paired: bool = False) -> _Judged:
    """Measure until decided: NEEDS_REVIEW is measured again, at most max_looks(prior) times.

    From the second look on, the running best is re-launched first whenever it has no
    more launches than the variant, so both sides carry launch noise and time drift alike.
    Under an SLO each launch of the variant is held to it first (the module docstring).
    `paired` (the parallel climb, parallel.py): the best is launched again before every look, the
    first included, and `launch` serves each such launch beside the look's, at the same moment.
    """
    judged = _Judged(decision=failed("not measured"), last=TrialMeasurement())
    tests = max_looks(prior)  # looks that can keep; a look without an interval is not one
    for look in range(1, max_looks(prior) + 1):
        if paired or (look > 1 and len(best) + len(judged.best_launches) <= len(judged.launches)):
            again = _best_again(judged, keepers, launch, slo)
            if again.error_class is not None:
                judged.decision, judged.last = failed(f"the running best failed when launched again: "
                                                      f"{_first_line(again)}"), again
                return judged
        result = _placed(judged, launch("variant", keepers, variant))
        judged.looks, judged.last = look, result
        judged.ids += _ids(result)
        if result.error_class == OVERTIME:
            judged.decision = killed_overtime(result.measuring_s, baseline_measuring_s)
            return judged
        if result.error_class is not None:
            judged.decision = failed(f"{result.error_class}: {_first_line(result)}")
            return judged
        judged.launches.append(objective_values(result, slo))
        if slo is not None and slo.check.objective != "throughput":
            judged.output_throughputs.append(result.throughputs)
        if is_overtime(result.measuring_s, baseline_measuring_s):  # a measure that does not stop launches
            judged.decision = killed_overtime(result.measuring_s, baseline_measuring_s)
            return judged
        judged.decision = decide_trial(judged.launches, best + judged.best_launches, others, measurements=look,
                                       tests=tests, prior=prior)
        if slo is not None and _held_to_slo(judged, result, slo, more=look < max_looks(prior)):
            return judged
        if judged.decision.outcome != Outcome.NEEDS_REVIEW:
            break
        if judged.decision.ci_low_pct is None:
            tests = max(1, tests - 1)
    return judged


def _best_again(judged: _Judged, keepers: list[Variant], launch: Launcher, slo: SloState | None) -> TrialMeasurement:
    """The running best launched again; a launch that served joins the trial's launches of the best."""
    again = _placed(judged, launch("best", keepers, None))
    judged.best_ids += _ids(again)
    if again.error_class is None:
        judged.best_launches.append(objective_values(again, slo))
    return again


def _held_to_slo(judged: _Judged, result: TrialMeasurement, slo: SloState, more: bool) -> bool:
    """Judge the variant's launches so far on the SLO; True when that decides the trial.
    `more`: whether the trial may look again."""
    judged.latencies.append(result.latency)
    judged.slo = slo.check.verdict(judged.latencies[judged.slo_from:])
    if judged.unclear:
        judged.slo = judged.slo.model_copy(update={"why": f"{judged.slo.why}; not read: an earlier unclear launch "
                                                          f"({'; '.join(judged.unclear)})"})
    if not judged.slo.met and slo.best_breaks and measurably_closer(slo.check.slo, judged.slo, slo.best_excess):
        judged.decision = slo_closer_or_floor(judged.decision, judged.slo.why)
        judged.closer = judged.decision.outcome == Outcome.KEEP
        return True
    if judged.slo.broken:
        judged.decision = slo_missed(judged.decision, judged.slo.why)
        return True
    if not judged.slo.met:
        if judged.decision.outcome == Outcome.REVERT or len(judged.unclear) >= SLO_UNCLEAR_LOOKS or not more:
            judged.decision = slo_not_shown(judged.decision, judged.slo.why, len(judged.latencies))
            return True
        judged.unclear.append(judged.slo.why)
        judged.slo_from = len(judged.latencies)
        judged.decision = slo_unclear(judged.decision, judged.slo.why, len(judged.latencies))
        return False
    if slo.best_breaks:
        judged.decision = slo_reached_or_floor(judged.decision, judged.slo.why)
        judged.reached = judged.decision.outcome == Outcome.KEEP
        return True
    return False


def _rebench(judged: _Judged, stack: list[Variant], best: Launches, launch: Launcher,
             slo: SloState | None = None, paired: bool = False) -> None:
    """The reference's stack rebench: a fresh launch of the whole new stack must confirm the KEEP
    (under an SLO: meet it; and gain on throughput, or for a KEEP for meeting it stay within the floor
    an SLO may cost: rule.SLO_REACHED_MAX_LOSS_PCT). `best`: the
    best's launches before the trial's. `paired`: the best launched again beside it (a best that
    fails then leaves the rebench to the best's other launches)."""
    if paired:
        _best_again(judged, stack[:-1], launch, slo)
    fresh = _placed(judged, launch("rebench", stack, None))
    judged.rebenches += 1
    judged.rebench_ids += _ids(fresh)
    if fresh.error_class is not None:
        judged.decision = stack_unstable(f"a fresh launch of the whole stack failed: {fresh.error_class}: "
                                         f"{_first_line(fresh)}")
        return
    judged.rebench_launches.append(objective_values(fresh, slo))
    if slo is not None:
        fresh_slo = slo.check.verdict([fresh.latency])
        if judged.closer and not measurably_closer(slo.check.slo, fresh_slo, slo.best_excess):
            judged.decision = stack_unstable(f"a fresh launch of the whole stack is not measurably closer to the SLO "
                                             f"than the running best: {fresh_slo.why}")
            return
        if not fresh_slo.met and not judged.closer:
            said = "breaks the SLO" if fresh_slo.broken else "is not shown within the SLO"
            judged.decision = stack_unstable(f"a fresh launch of the whole stack {said}: {fresh_slo.why}")
            return
    fresh_values, against = [objective_values(fresh, slo)], best + judged.best_launches
    if judged.closer:
        joined = decide_reached_stack(fresh_values, against, held="is measurably closer to the SLO too")
    else:
        joined = (decide_reached_stack if judged.reached else decide_stack)(fresh_values, against)
    if joined.outcome == Outcome.KEEP_UNSTABLE:
        judged.decision = joined
    else:
        judged.decision = judged.decision.model_copy(update={"reason": f"{judged.decision.reason}; {joined.reason}"})


def _first_line(result: TrialMeasurement) -> str:
    return (result.error or "").splitlines()[0][:300] if result.error else ""


def climb(baseline: list[float], baseline_measuring_s: float, budget: Budget, plan: PlanFn, measure: MeasureFn,
          ledger: Ledger, *, checks: Checks | None = None, prior: LaunchNoise | None = None) -> ClimbResult:
    """`baseline` is the baseline's per-repeat values of the objective (objective.repeat_values):
    its one launch; `prior` the launch noise of earlier runs of the same host, engine and model
    (decisions/history.py)."""
    checks = checks or Checks()
    state = ClimbState(baseline, plan, checks)
    while True:
        reason = state.stop(budget)
        if reason:
            return state.result(reason.value)
        variant = state.next_variant()
        if variant is None:
            return state.result((state.spent or StopReason.NO_MORE_CANDIDATES).value)
        index, fingerprint = len(state.trials) + 1, trial_fingerprint(state.keepers, variant)
        record = ledger.recall(fingerprint)
        if record is not None:
            record = record.model_copy(update={"index": index, "replayed": True})
        else:
            launch = Launcher(fingerprint, index, variant.name, measure, ledger, state.best_key)
            record = _measure_trial(index, fingerprint, variant, state.keepers, state.evidence[state.best_key],
                                    state.others(fingerprint), baseline_measuring_s, launch, checks, prior,
                                    state.slo())
            ledger.remember(record)
        state.settle(record, variant, ledger)


def _against(keepers: list[Variant]) -> str:
    return f"stack of {len(keepers)} keeper(s)" if keepers else "baseline"


def checked(index: int, fingerprint: str, variant: Variant, keepers: list[Variant],
             checks: Checks) -> tuple[TrialRecord | None, Review | None]:
    """(the record of a trial the critic or the tree refuses before any launch, or None; the review)."""
    review = checks.review(keepers, variant) if checks.review and variant.patches and variant.llm is None else None
    decision = critic_rejected(review.text()) if review is not None and not review.approved else None
    if decision is None:
        refusal = checks.admit(keepers, variant) if checks.admit and variant.patches else None
        decision = rejected(refusal) if refusal is not None else None
    if decision is None:
        return None, review
    return TrialRecord(index=index, name=variant.name, fingerprint=fingerprint, variant=variant,
                       against=_against(keepers), decision=decision, measurements=0, launches=[],
                       review=review), review


def _measure_trial(index: int, fingerprint: str, variant: Variant, keepers: list[Variant], best: Launches,
                   others: list[Launches], baseline_measuring_s: float, launch: Launcher,
                   checks: Checks, prior: LaunchNoise | None = None, slo: SloState | None = None) -> TrialRecord:
    refused, review = checked(index, fingerprint, variant, keepers, checks)
    if refused is not None:
        return refused
    return judged_trial(index, fingerprint, variant, keepers, best, others, baseline_measuring_s, launch, checks,
                        prior, slo, review)


def judged_trial(index: int, fingerprint: str, variant: Variant, keepers: list[Variant], best: Launches,
                 others: list[Launches], baseline_measuring_s: float, launch: Launcher, checks: Checks,
                 prior: LaunchNoise | None = None, slo: SloState | None = None, review: Review | None = None,
                 paired: bool = False) -> TrialRecord:
    """A checked trial measured until decided, gated and rebenched: its record."""
    judged = _judge(variant, keepers, best, others, baseline_measuring_s, launch, prior, slo, paired)
    if judged.decision.outcome == Outcome.KEEP and variant.accuracy_risky and checks.gate is not None:
        judged.decision = accuracy_gated(judged.decision, *checks.gate(keepers, variant))
    if judged.decision.outcome == Outcome.KEEP:  # after the gate: a wrong answer is not worth a launch
        _rebench(judged, [*keepers, variant], best, launch, slo, paired)
    last = judged.last
    return TrialRecord(index=index, name=variant.name, fingerprint=fingerprint, variant=variant,
                       against=_against(keepers),
                       decision=judged.decision, measurements=judged.looks,
                       launches=judged.launches, best_launches=judged.best_launches, rebenches=judged.rebenches,
                       rebench_launches=judged.rebench_launches, measurement_ids=judged.ids,
                       best_measurement_ids=judged.best_ids, rebench_measurement_ids=judged.rebench_ids,
                       error_class=last.error_class, argv=last.argv, env=last.env, telemetry=last.telemetry,
                       review=review, slo=judged.slo, objective=slo.check.objective if slo else "throughput",
                       output_throughputs=judged.output_throughputs, ran_on=judged.ran_on)
