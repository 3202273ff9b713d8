"""The one table of thresholds and the decision rule (docs/design.md, "Decisions"). Pure code.

A trial compares a variant's launches with the running best's: each side is a list of
launches, each launch a list of per-repeat output throughputs. gain = (variant - best) /
best, as a ratio of geometric means of launch means. KEEP needs both a gain of at least
MIN_GAIN_PCT and an interval of the gain that excludes zero; a gain under the threshold,
or an interval that says worse, is REVERT; anything else is NEEDS_REVIEW and is measured
again (the variant, and the best beside it), MAX_MEASUREMENTS times in all, after which
it is REVERT. A keeper joins the stack only if a fresh launch of the whole new stack
(the rebench) stays STACK_MARGIN_PCT above the running best; else it is KEEP_UNSTABLE,
a REVERT with reason `stack_unstable`. A launch whose measuring runs past
OVERTIME_FACTOR times the baseline's is stopped there: KILLED_OVERTIME.

Departure from docs/design.md, measured in benchmarks/decision_launch_noise.py and
benchmarks/noise.py: the interval is launch-level (stats.launch_gain_interval), because
repeats on one server share that launch's offset; and the 95% holds for the whole trial,
not per look (Bonferroni), because looking again after NEEDS_REVIEW is another chance for
noise: the 5% is split evenly over the looks that can keep. A look without a
launch-level interval (no config launched twice yet) cannot keep and spends nothing, so
a trial whose first look had none splits it over the two looks left.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from hyperloom_assets.core.measurement.stats import Launches, LaunchNoise, launch_gain_interval
from hyperloom_assets.core.models import Strict

MIN_GAIN_PCT = 1.0
STACK_MARGIN_PCT = 0.5
MAX_MEASUREMENTS = 3  # a NEEDS_REVIEW variant is measured at most this often in all
TRIAL_CONFIDENCE = 0.95  # over all of a trial's looks together
# With a launch-noise prior pooled from earlier runs (decisions/history.py) every look has
# an interval, so a trial may look more often: up to this many looks, each at one constant
# level (a Pocock-style boundary, not a Bonferroni split), which benchmarks/
# decision_launch_noise.py measured at <= 2% false KEEPs and >= 80% of true +10% gains
# kept at 5% launch sd.
MAX_MEASUREMENTS_WITH_HISTORY = 12
HISTORY_LOOK_CONFIDENCE = 0.994
# With history a look past the first must also show a gain of MIN_GAIN_PCT plus this much
# per earlier look, or the trial stops (REVERT): a gain of a percent or two would
# otherwise spend all its looks, each with the best relaunched beside it.
FUTILITY_STEP_PCT = 0.5
# With history both futility rules (under MIN_GAIN_PCT, under the growing floor) judge the
# upper end of this two-sided interval, not the estimate: at 5% launch sd a first look's
# estimate has a 7.5% sd, so judging the estimate ended one true +10% trial in nine at its
# first look (kept 75.9%); at 0.3 it is kept 81.7%, for 6.2 launches per null variant instead
# of 4.3 and false KEEPs still 1-2% (benchmarks/decision_launch_noise.py). A KEEP still
# needs the estimate itself at MIN_GAIN_PCT or more.
FUTILITY_CONFIDENCE = 0.3
VALIDATION_CONFIDENCE = 0.95  # the stack's validated gain is one look
# Under an SLO the running best breaks (shown on a bound), a variant that meets it is kept at a
# throughput loss of at most this much (its estimate; its rebench too): meeting a latency limit
# usually costs batch, but a loss past a quarter is more than the SLO asks for and would anchor
# the climb that low (docs/decisions.md, "Power and independence").
SLO_REACHED_MAX_LOSS_PCT = 25.0
# A variant launch whose SLO reading is unclear (bound over a limit, lower bound under it) earns
# the trial this many more looks, read without it; past them it is REVERT slo_missed, not shown within.
SLO_UNCLEAR_LOOKS = 1
OVERTIME_FACTOR = 2.0  # measuring past this multiple of the baseline's is KILLED_OVERTIME


class Outcome(str, Enum):
    KEEP = "KEEP"
    REVERT = "REVERT"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    KEEP_UNSTABLE = "KEEP_UNSTABLE"
    FAILED = "FAILED"
    KILLED_OVERTIME = "KILLED_OVERTIME"
    REJECTED = "REJECTED"  # a source patch the critic rejected, or that does not apply to the running best's tree: never launched
    # won against a running best that another trial replaced while it ran: judged again on the new stack
    SUPERSEDED = "SUPERSEDED"


class Decision(Strict):
    outcome: Outcome
    gain_pct: float | None = None
    ci_low_pct: float | None = None  # the look's interval of the gain, in %; None before one exists
    ci_high_pct: float | None = None
    reason: str


def _interval_text(low: float, high: float, confidence: float) -> str:
    return f"{100 * confidence:.1f}% interval [{low:+.2f}%, {high:+.2f}%]"


def look_confidence(tests: int, prior: LaunchNoise | None = None) -> float:
    """Each of `tests` looks that can keep spends an equal share of the trial's 5%; with a prior, the constant level."""
    return HISTORY_LOOK_CONFIDENCE if prior is not None else 1 - (1 - TRIAL_CONFIDENCE) / tests


def max_looks(prior: LaunchNoise | None) -> int:
    """How often a trial may be measured: more often when earlier runs give the launch noise."""
    return MAX_MEASUREMENTS_WITH_HISTORY if prior is not None else MAX_MEASUREMENTS


def decide_trial(variant: Launches, best: Launches, others: Sequence[Launches] = (),
                 measurements: int = 1, tests: int | None = None, prior: LaunchNoise | None = None) -> Decision:
    """Judge a variant against the running best.

    `variant` and `best` hold every launch so far; `others` is the run's other evidence,
    which sharpens the launch-noise estimate. `measurements` counts the variant's looks;
    `tests` is how many of the trial's looks can keep (see the module docstring);
    `prior` is the launch noise of earlier runs (decisions/history.py).
    """
    tests = max_looks(prior) if tests is None else tests
    confidence = look_confidence(tests, prior)
    gain, low, high = launch_gain_interval(variant, best, others, confidence, prior)
    looks = max_looks(prior)
    known = high != float("inf")
    numbers = dict(gain_pct=gain, ci_low_pct=low if known else None, ci_high_pct=high if known else None)
    interval = _interval_text(low, high, confidence) if known else "no launch-level interval yet"
    hopeful = _hopeful_gain(variant, best, others, prior, gain)
    if high < 0:
        return Decision(outcome=Outcome.REVERT, reason=f"worse than the running best: {interval}", **numbers)
    if hopeful < MIN_GAIN_PCT:
        return Decision(outcome=Outcome.REVERT, reason=f"gain {gain:+.2f}% is under {MIN_GAIN_PCT}%", **numbers)
    if low > 0 and gain >= MIN_GAIN_PCT:
        return Decision(outcome=Outcome.KEEP, reason=f"gain {gain:+.2f}%, {interval} excludes zero", **numbers)
    floor = MIN_GAIN_PCT + (FUTILITY_STEP_PCT * (measurements - 1) if prior is not None else 0.0)
    if hopeful < floor:
        return Decision(outcome=Outcome.REVERT, reason=f"gain {gain:+.2f}% is under {floor:g}% after "
                        f"{measurements} measurements: too small to show within {looks}", **numbers)
    small = gain < MIN_GAIN_PCT  # with history a real but small gain may look again: it could reach 1%
    if measurements >= looks:
        said = f"is still under {MIN_GAIN_PCT}%" if small else f"but {interval} still includes zero"
        return Decision(outcome=Outcome.REVERT, reason=f"gain {gain:+.2f}% {said} after {measurements} measurements",
                        **numbers)
    if small:
        why = f"it is under {MIN_GAIN_PCT}%"
    else:
        why = f"{interval} includes zero" if known else f"{interval} (one launch of each)"
    return Decision(outcome=Outcome.NEEDS_REVIEW, reason=f"gain {gain:+.2f}% but {why}; "
                    f"measure again ({measurements} of {looks})", **numbers)


def _hopeful_gain(variant: Launches, best: Launches, others: Sequence[Launches], prior: LaunchNoise | None,
                 gain: float) -> float:
    """The gain the futility rules judge: the estimate itself without history; with history
    the upper end of a FUTILITY_CONFIDENCE interval, so that one unlucky look of a real gain
    does not end its trial."""
    if prior is None:
        return gain
    return launch_gain_interval(variant, best, others, FUTILITY_CONFIDENCE, prior)[2]


STACK_UNSTABLE = "stack_unstable"  # the reason code of a keeper the rebench evicted


def decide_stack(fresh: Launches, best: Launches) -> Decision:
    """May a keeper join? Only if fresh launches of the whole new stack stay STACK_MARGIN_PCT
    above the running best (launch means against the best's launch means)."""
    gain, _, _ = launch_gain_interval(fresh, best)
    if gain >= STACK_MARGIN_PCT:
        return Decision(outcome=Outcome.KEEP, reason=f"a fresh launch of the stack confirmed it ({gain:+.2f}% over "
                        "the running best)", gain_pct=gain)
    return stack_unstable(f"a fresh launch of the whole stack is only {gain:+.2f}% over the running best "
                          f"(needs {STACK_MARGIN_PCT}%)", gain)


def stack_unstable(why: str, gain: float | None = None) -> Decision:
    """KEEP_UNSTABLE: a REVERT of a keeper the stack rebench did not confirm."""
    return Decision(outcome=Outcome.KEEP_UNSTABLE, reason=f"{STACK_UNSTABLE}: {why}; evicted", gain_pct=gain)


def superseded(won: Decision, new_best: str, then: str = "judged again on the new stack") -> Decision:
    """A parallel trial's KEEP against a running best that another trial replaced while it ran
    (core/decisions/parallel.py): never kept as it stands; `then` says what becomes of it."""
    return won.model_copy(update={"outcome": Outcome.SUPERSEDED, "reason": (
        f"superseded: won against the old running best ({won.reason}), but {new_best} was kept while it ran; "
        f"{then}")})


def failed(reason: str) -> Decision:
    """A crash, an argv rejection or a timeout."""
    return Decision(outcome=Outcome.FAILED, reason=reason)


def overtime_limit_s(baseline_measuring_s: float) -> float | None:
    """How long a trial's launch may measure (after readiness) before it is stopped; None: no limit."""
    return OVERTIME_FACTOR * baseline_measuring_s if baseline_measuring_s > 0 else None


def critic_rejected(review: str) -> Decision:
    """The critic said no to a planned patch (or failed, and the target skips); nothing was applied or launched."""
    return Decision(outcome=Outcome.REJECTED, reason=f"the critic did not approve the patch: {review}")


def rejected(reason: str) -> Decision:
    """`git apply --check` refused the patch; nothing was launched."""
    return Decision(outcome=Outcome.REJECTED, reason=f"patch does not apply to the running best: {reason}")


SLO_MISSED = "slo_missed"  # the reason code of a variant that breaks the target's SLO
SLO_REACHED = "slo_reached"  # the reason code of a variant kept for meeting an SLO the running best breaks


def slo_missed(decision: Decision, why: str) -> Decision:
    """REVERT: the variant is shown breaking the SLO, whatever its throughput (the throughput's word is kept)."""
    return decision.model_copy(update={"outcome": Outcome.REVERT,
                                       "reason": f"{SLO_MISSED}: {why} (on throughput: {decision.reason})"})


def slo_reached(decision: Decision, why: str) -> Decision:
    """KEEP: the running best breaks the SLO and the variant meets it: meeting it comes before throughput
    (within SLO_REACHED_MAX_LOSS_PCT: slo_reached_or_floor)."""
    return decision.model_copy(update={"outcome": Outcome.KEEP,
                                       "reason": f"{SLO_REACHED}: meets the SLO the running best breaks ({why}); "
                                                 f"on throughput: {decision.reason}"})


SLO_FLOOR = "slo_floor"  # the reason code of a variant that meets an SLO the best breaks, but too far below it
# The reason code of a stepping stone: a variant that still misses an SLO the best breaks, measurably closer to it
SLO_CLOSER = "slo_closer"


def slo_not_shown(decision: Decision, why: str, launches: int) -> Decision:
    """REVERT: the variant's launches never showed it within the SLO, nor breaking it."""
    return decision.model_copy(update={"outcome": Outcome.REVERT, "reason": (
        f"{SLO_MISSED}: not shown within the SLO in {launches} launch(es), nor shown breaking it: {why} "
        f"(on throughput: {decision.reason})")})


def slo_unclear(decision: Decision, why: str, looks: int) -> Decision:
    """NEEDS_REVIEW: one launch neither meets the SLO nor breaks it; the next look is read without it."""
    return decision.model_copy(update={"outcome": Outcome.NEEDS_REVIEW, "reason": (
        f"the SLO is unclear on this launch ({why}); measure again ({looks} of {looks + SLO_UNCLEAR_LOOKS} on the "
        f"SLO; on throughput: {decision.reason})")})


def slo_reached_or_floor(decision: Decision, why: str) -> Decision:
    """The running best was shown breaking the SLO and the variant meets it: KEEP slo_reached within
    SLO_REACHED_MAX_LOSS_PCT of the best's throughput, else REVERT slo_floor."""
    return _below_floor(decision, f"meets the SLO the running best breaks ({why})") or slo_reached(decision, why)


def _below_floor(decision: Decision, what: str) -> Decision | None:
    """REVERT slo_floor where a variant kept for the SLO's sake (`what` it did) is more than
    SLO_REACHED_MAX_LOSS_PCT under the running best's throughput; None within that floor."""
    gain = decision.gain_pct
    if gain is None or gain >= -SLO_REACHED_MAX_LOSS_PCT:
        return None
    return decision.model_copy(update={"outcome": Outcome.REVERT, "reason": (
        f"{SLO_FLOOR}: {what}, but at {gain:+.2f}% it is more than {SLO_REACHED_MAX_LOSS_PCT:g}% below the "
        f"running best; on throughput: {decision.reason}")})


def slo_closer_or_floor(decision: Decision, why: str) -> Decision:
    """The running best was shown breaking the SLO and the variant, still missing it, is measurably closer
    (slo_verdict.measurably_closer): KEEP slo_closer, a stepping stone the climb plans on, within
    SLO_REACHED_MAX_LOSS_PCT of the best's throughput; else REVERT slo_floor."""
    return _below_floor(decision, f"measurably closer to the SLO the running best breaks ({why})") or \
        decision.model_copy(update={"outcome": Outcome.KEEP, "reason": (
            f"{SLO_CLOSER}: a stepping stone, still missing the SLO but measurably closer than the running best "
            f"({why}); on throughput: {decision.reason}")})


def decide_reached_stack(fresh: Launches, best: Launches, held: str = "meets the SLO too") -> Decision:
    """May an slo_reached (or slo_closer) keeper join? Its fresh launch, which `held` what it was kept for
    already, must stay within SLO_REACHED_MAX_LOSS_PCT of the best."""
    gain, _, _ = launch_gain_interval(fresh, best)
    if gain >= -SLO_REACHED_MAX_LOSS_PCT:
        return Decision(outcome=Outcome.KEEP, gain_pct=gain, reason=(
            f"a fresh launch of the stack {held}, {gain:+.2f}% from the running best (within the "
            f"{SLO_REACHED_MAX_LOSS_PCT:g}% an SLO may cost)"))
    return stack_unstable(f"a fresh launch of the stack is {gain:+.2f}% from the running best, more than the "
                          f"{SLO_REACHED_MAX_LOSS_PCT:g}% an SLO may cost", gain)


ACCURACY_REASONS = {"drop": "accuracy_drop", "unavailable": "accuracy_unavailable"}


def accuracy_gated(decision: Decision, verdict: str, why: str) -> Decision:
    """A risky keeper after the accuracy gate: kept on `pass`, else REVERT (the gate fails closed)."""
    if verdict == "pass":
        return decision.model_copy(update={"reason": f"{decision.reason}; accuracy gate passed: {why}"})
    code = ACCURACY_REASONS.get(verdict, "accuracy_unavailable")
    return decision.model_copy(update={"outcome": Outcome.REVERT, "reason": f"{code}: {why} (won on throughput: "
                                                                           f"{decision.reason})"})


def is_overtime(measuring_s: float, baseline_measuring_s: float) -> bool:
    """Measuring (after readiness) past OVERTIME_FACTOR times the baseline's."""
    limit = overtime_limit_s(baseline_measuring_s)
    return limit is not None and measuring_s > limit


def killed_overtime(measuring_s: float, baseline_measuring_s: float) -> Decision:
    return Decision(outcome=Outcome.KILLED_OVERTIME,
                    reason=f"stopped after {measuring_s:.1f}s of measuring, past {OVERTIME_FACTOR:g}x "
                           f"the baseline's {baseline_measuring_s:.1f}s")


def validated_gain(top: Launches, base: Launches, others: list[Launches]) -> tuple[float, float, float]:
    """Gain of `top` over `base` and its 95% interval, in percent, launch by launch.

    The gain comes from the validation's own launches only, so the climb's selection
    cannot inflate it; `others` (the climb's evidence) only sharpens the launch-noise estimate.
    """
    return launch_gain_interval(top, base, others, VALIDATION_CONFIDENCE)
