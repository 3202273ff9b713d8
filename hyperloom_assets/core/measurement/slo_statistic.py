"""The statistic an SLO holds its limits at, its name, and its 95% upper bound. Pure code.

A percentile (p50, p90, p95, p99) is bounded by an order statistic (percentile_bound.py):
distribution-free, needing only that the requests are independent draws of one launch's
latency; the median's bound needs 5 requests, p99's 299.

The mean has no distribution-free bound: latency has no upper limit, so one request can
move it anywhere. Its bound is Student-t's one-sided upper limit with Hall's skewness
correction, x̄ + s/√n · (t + γ̂(2t² + 1)/(6√n)), from the Edgeworth expansion of the
studentized mean: latency is skewed to the right, and plain t then covers less than it
says. It asks for MEAN_MIN_SAMPLES requests, where the correction brings a moderately
skewed latency near 95%; a heavier tail still reads under it (benchmarks/slo_power.py
measures both; docs/decisions.md says what follows).

Each statistic has a 95% lower bound by the same reasoning (the order statistic from below,
the expansion's other tail), so that a verdict can tell a launch shown breaking a limit from
one merely not shown within it (slo_verdict.py).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import t as student_t

from hyperloom_assets.core.config.targets import SloStatistic
from hyperloom_assets.core.measurement import percentile_bound

STATISTICS: tuple[SloStatistic, ...] = (50, 90, 95, 99, "mean")
MEAN_MIN_SAMPLES = 100


def label(statistic: SloStatistic) -> str:
    """How a report names it: `p99`, `p50`, `mean`."""
    return "mean" if statistic == "mean" else f"p{statistic}"


def min_samples(statistic: SloStatistic, confidence: float = 0.95) -> int:
    """The fewest requests of one launch that give the statistic an upper bound."""
    if statistic == "mean":
        return MEAN_MIN_SAMPLES
    return percentile_bound.min_samples(statistic, confidence)


def mean_upper_bound(ordered: np.ndarray, confidence: float = 0.95) -> float | None:
    """The skewness-corrected one-sided t bound on the mean; None under MEAN_MIN_SAMPLES values."""
    return _mean_bound(ordered, confidence, +1)


def mean_lower_bound(ordered: np.ndarray, confidence: float = 0.95) -> float | None:
    """The same expansion's lower limit, x̄ - s/√n · (t - γ̂(2t² + 1)/(6√n)): a right skew shortens
    the studentized mean's upper tail, so the lower limit sits closer to x̄ than plain t's."""
    return _mean_bound(ordered, confidence, -1)


def _mean_bound(ordered: np.ndarray, confidence: float, side: int) -> float | None:
    """Hall's skewness-corrected t limit on the mean: side +1 the upper, -1 the lower."""
    n = len(ordered)
    if n < MEAN_MIN_SAMPLES:
        return None
    mean, sd = float(np.mean(ordered)), float(np.std(ordered, ddof=1))
    if sd == 0:
        return mean
    skew = float(np.mean((ordered - mean) ** 3)) / sd ** 3
    quantile = float(student_t.ppf(confidence, n - 1))
    return mean + side * sd / math.sqrt(n) * (quantile + side * skew * (2 * quantile ** 2 + 1) / (6 * math.sqrt(n)))


def lower_bound(ordered: np.ndarray, statistic: SloStatistic, confidence: float = 0.95) -> float | None:
    """The statistic's lower bound over sorted values: over a limit, the launch surely breaks it."""
    if statistic == "mean":
        return mean_lower_bound(ordered, confidence)
    rank = percentile_bound.lower_rank(len(ordered), statistic, confidence)
    return None if rank is None else float(ordered[rank - 1])


def upper_bound(ordered: np.ndarray, statistic: SloStatistic, confidence: float = 0.95) -> float | None:
    """The statistic's upper bound over sorted values (same unit); None when too few admit one."""
    if statistic == "mean":
        return mean_upper_bound(ordered, confidence)
    rank = percentile_bound.upper_rank(len(ordered), statistic, confidence)
    return None if rank is None else float(ordered[rank - 1])
