"""Distribution-free upper confidence bounds on a latency percentile, from order statistics. Pure code.

Of n independent draws, fewer than k fall below the q-quantile with probability
P(Binomial(n, q) <= k - 1), and then the k-th smallest draw X_(k) is at or above it. So
X_(k) bounds the quantile from above with that confidence, whatever the latency's
distribution: the only assumption is that the requests are independent draws of one
launch's latency. The bound is the smallest such order statistic, and there is none when
even the largest draw is not enough: 1 - q^n < confidence, which for p99 at 95% means
fewer than 299 requests (`min_samples`).

The same counting bounds it from below: at least k draws fall below the q-quantile with
probability P(Binomial(n, q) >= k), and then X_(k) is at or under it. The largest such k
gives the lower bound (`lower_rank`): a launch whose lower bound is over a limit is shown
breaking it, not merely not shown meeting it (slo_verdict.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import binom


def _check(percentile: float, confidence: float) -> float:
    if not 0 < percentile < 100:
        raise ValueError(f"percentile must lie strictly between 0 and 100, got {percentile}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    return percentile / 100


def upper_rank(n: int, percentile: float, confidence: float = 0.95) -> int | None:
    """The smallest 1-based rank k whose order statistic bounds the percentile from above; None if none of n does."""
    q = _check(percentile, confidence)
    # The least k - 1 with P(Bin(n, q) <= k - 1) >= confidence, found from the binomial's quantile in O(1)
    # (every round's latency sets are bounded: a long round's ITL gaps run to hundreds of thousands).
    x = _first_at_least(n, q, confidence)
    return x + 1 if x + 1 <= n else None


def lower_rank(n: int, percentile: float, confidence: float = 0.95) -> int | None:
    """The largest 1-based rank k whose order statistic bounds the percentile from below; None if none of n does."""
    q = _check(percentile, confidence)
    # The largest k - 1 with P(Bin(n, q) <= k - 1) <= 1 - confidence, i.e. P(Bin(n, q) >= k) >= confidence.
    x = _first_at_least(n, q, 1 - confidence)
    if binom.cdf(x, n, q) > 1 - confidence:
        x -= 1
    return min(x, n - 1) + 1 if x >= 0 else None


def _first_at_least(n: int, q: float, level: float) -> int:
    """The least x with P(Bin(n, q) <= x) >= level, from scipy's quantile, checked against the cdf itself."""
    x = int(binom.ppf(level, n, q))
    while x > 0 and binom.cdf(x - 1, n, q) >= level:
        x -= 1
    while binom.cdf(x, n, q) < level:
        x += 1
    return x


def percentile_upper_bound(values: Sequence[float], percentile: float, confidence: float = 0.95) -> float | None:
    """An upper bound on the population percentile at `confidence`; None when too few values admit one."""
    rank = upper_rank(len(values), percentile, confidence)
    return None if rank is None else sorted(values)[rank - 1]


def min_samples(percentile: float, confidence: float = 0.95) -> int:
    """The fewest draws whose largest bounds the percentile: the least n with 1 - q^n >= confidence."""
    q = _check(percentile, confidence)
    n = 1
    while 1 - q ** n < confidence:  # counted, not solved with a log, so no rounding can miss the least n
        n += 1
    return n
