"""The one table of thresholds and the decision rule (DESIGN.md, "Decisions"). Pure code.

A trial compares a variant's per-repeat output throughputs with the running best's.
gain = (variant - best) / best. KEEP needs both a gain of at least MIN_GAIN_PCT and a
95% interval of the difference that excludes zero; a gain under the threshold, or an
interval that says worse, is REVERT; anything else is NEEDS_REVIEW and is measured
again, MAX_MEASUREMENTS times in all, after which it is REVERT. A keeper joins the
stack only if the whole stack stays STACK_MARGIN_PCT above the running best.
"""

from __future__ import annotations

import statistics
from enum import Enum

from pydantic import BaseModel, ConfigDict

from hyperloom_assets.stats import diff_ci95

MIN_GAIN_PCT = 1.0
STACK_MARGIN_PCT = 0.5
MAX_MEASUREMENTS = 3  # a NEEDS_REVIEW variant is measured at most this often in all
OVERTIME_FACTOR = 2.0  # measuring past this multiple of the baseline's is KILLED_OVERTIME


class Outcome(str, Enum):
    KEEP = "KEEP"
    REVERT = "REVERT"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    KEEP_UNSTABLE = "KEEP_UNSTABLE"
    FAILED = "FAILED"
    KILLED_OVERTIME = "KILLED_OVERTIME"


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: Outcome
    gain_pct: float | None = None
    ci_low_pct: float | None = None  # 95% interval of the difference, as % of the best
    ci_high_pct: float | None = None
    reason: str


def _relative(variant: list[float], best: list[float]) -> tuple[float, float, float]:
    """(gain, interval low, interval high), all in percent of the best's mean."""
    if not variant or not best:
        raise ValueError("a decision needs at least one throughput on each side")
    base = statistics.fmean(best)
    if base <= 0:
        raise ValueError(f"the running best's throughput must be positive, got {base}")
    diff, low, high = diff_ci95(variant, best)
    return 100 * diff / base, 100 * low / base, 100 * high / base


def decide_trial(variant: list[float], best: list[float], measurements: int = 1) -> Decision:
    """Judge a variant against the running best.

    `variant` and `best` are per-repeat output throughputs; after a NEEDS_REVIEW the
    caller re-measures, passes every repeat so far and the count of measurements made.
    """
    gain, low, high = _relative(variant, best)
    numbers = dict(gain_pct=gain, ci_low_pct=low, ci_high_pct=high)
    interval = f"95% interval [{low:+.2f}%, {high:+.2f}%]"
    if high < 0:
        return Decision(outcome=Outcome.REVERT, reason=f"worse than the running best: {interval}", **numbers)
    if gain < MIN_GAIN_PCT:
        return Decision(outcome=Outcome.REVERT, reason=f"gain {gain:+.2f}% is under {MIN_GAIN_PCT}%", **numbers)
    if low > 0:
        return Decision(outcome=Outcome.KEEP, reason=f"gain {gain:+.2f}%, {interval} excludes zero", **numbers)
    if measurements >= MAX_MEASUREMENTS:
        return Decision(outcome=Outcome.REVERT, reason=f"gain {gain:+.2f}% but {interval} still includes zero "
                        f"after {measurements} measurements", **numbers)
    return Decision(outcome=Outcome.NEEDS_REVIEW, reason=f"gain {gain:+.2f}% but {interval} includes zero; "
                    f"measure again ({measurements} of {MAX_MEASUREMENTS})", **numbers)


def decide_stack(stack: list[float], best: list[float]) -> Decision:
    """May a keeper join? Only if the whole stack stays STACK_MARGIN_PCT above the best."""
    gain, low, high = _relative(stack, best)
    numbers = dict(gain_pct=gain, ci_low_pct=low, ci_high_pct=high)
    if gain >= STACK_MARGIN_PCT:
        return Decision(outcome=Outcome.KEEP, reason=f"the stack is {gain:+.2f}% over the running best", **numbers)
    return Decision(outcome=Outcome.KEEP_UNSTABLE, reason=f"the stack is only {gain:+.2f}% over the running best "
                    f"(needs {STACK_MARGIN_PCT}%); evicted", **numbers)


def failed(reason: str) -> Decision:
    """A crash, an argv rejection or a timeout."""
    return Decision(outcome=Outcome.FAILED, reason=reason)


def is_overtime(measuring_s: float, baseline_measuring_s: float) -> bool:
    """Measuring (after readiness) past OVERTIME_FACTOR times the baseline's."""
    return baseline_measuring_s > 0 and measuring_s > OVERTIME_FACTOR * baseline_measuring_s


def killed_overtime(measuring_s: float, baseline_measuring_s: float) -> Decision:
    return Decision(outcome=Outcome.KILLED_OVERTIME,
                    reason=f"measuring took {measuring_s:.1f}s, more than {OVERTIME_FACTOR:g}x "
                           f"the baseline's {baseline_measuring_s:.1f}s")
