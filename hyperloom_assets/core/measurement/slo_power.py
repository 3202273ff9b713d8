"""How many requests one launch needs so that its SLO verdict has power. Pure code.

A bound that exists is not yet a bound that can pass: with p99's minimum, 299 requests, the
bound is the largest request, and a config whose true p99 sits at 80% of its limit reads as
meeting it only when none of 299 requests passes the limit. Power needs more requests.

Power depends on how far past the statistic the limit lies in the latency's own quantiles,
so it needs a tail model; the one stated here (`TAIL_SIGMA`) is a lognormal latency of log
spread 0.5, the "moderately skewed" latency docs/decisions.md sizes the mean's bound by. A
config is at `AT_LIMIT` (80%) of its limit when its statistic is 0.8 times the limit; the
limit then sits at the quantile Φ(z_q + ln(1/0.8) / σ) of its latency. With n requests the
bound is the k-th smallest, k = percentile_bound.upper_rank(n, q) (its 95% coverage holds
whatever the distribution), and the launch reads as meeting the limit exactly when at least k
of the n fall under it: P(Binomial(n, q') >= k). `requests_for_power` is the fewest requests
from which that stays at POWER (90%) or more (the power falls a little each time k steps up,
so the least n that reaches 90% once is not enough). A lighter tail (TPOT in a steady decode)
has more power at the same n, a heavier one (a queueing TTFT, exponential or worse) less:
benchmarks/slo_power.py measures both, and the error rate at the limit.

The mean's bound is Student-t's with a skewness correction (slo_statistic.py); its power is
read from the normal approximation of the sample mean, with the model's coefficient of
variation and skewness, and never asks for fewer than the bound's own minimum.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.stats import binom, norm
from scipy.stats import t as student_t

from hyperloom_assets.core.config.targets import SloStatistic
from hyperloom_assets.core.measurement.slo_statistic import MEAN_MIN_SAMPLES, min_samples

POWER = 0.90  # how often a config at AT_LIMIT of its limit must read as meeting it
AT_LIMIT = 0.80  # the statistic's share of the limit at which POWER is asked
TAIL_SIGMA = 0.5  # the tail model: lognormal latency of this log spread
CONFIDENCE = 0.95  # the bound's (latency.BOUND_CONFIDENCE)
# The power's dips as k steps up shrink with n; a window this many times the first n that reaches
# POWER holds every dip that could still fall under it (tests/unit/test_slo_power.py checks further).
DIP_WINDOW = 3


def limit_quantile(statistic: float, at_limit: float = AT_LIMIT, sigma: float = TAIL_SIGMA) -> float:
    """Where the limit lies in the latency's quantiles when the percentile is `at_limit` of it."""
    return float(norm.cdf(norm.ppf(statistic / 100) + math.log(1 / at_limit) / sigma))


def percentile_power(n: np.ndarray | int, statistic: float, at_limit: float = AT_LIMIT,
                     sigma: float = TAIL_SIGMA) -> np.ndarray:
    """P(the launch's bound is within the limit) for n requests, under the tail model (0 without a bound)."""
    n = np.atleast_1d(np.asarray(n, dtype=int))
    q = statistic / 100
    # upper_rank's k, for every n at once: the least k with P(Bin(n, q) <= k - 1) >= CONFIDENCE.
    rank = binom.ppf(CONFIDENCE, n, q).astype(int) + 1
    power = binom.sf(rank - 1, n, limit_quantile(statistic, at_limit, sigma))
    return np.where(rank <= n, power, 0.0)


def mean_power(n: int, at_limit: float = AT_LIMIT, sigma: float = TAIL_SIGMA) -> float:
    """P(the mean's bound is within the limit): Φ(margin √n / cv - t - γ(2t² + 1) / (6√n))."""
    if n < MEAN_MIN_SAMPLES:
        return 0.0
    cv = math.sqrt(math.expm1(sigma ** 2))
    skew = (math.exp(sigma ** 2) + 2) * cv
    t = float(student_t.ppf(CONFIDENCE, n - 1))
    margin = 1 / at_limit - 1  # the limit's distance above the mean, as a share of the mean
    return float(norm.cdf(margin * math.sqrt(n) / cv - t - skew * (2 * t ** 2 + 1) / (6 * math.sqrt(n))))


@functools.cache  # every verdict asks; the answer depends on its arguments alone
def requests_for_power(statistic: SloStatistic, at_limit: float = AT_LIMIT, sigma: float = TAIL_SIGMA,
                       power: float = POWER) -> int:
    """The fewest requests of one launch from which a config at `at_limit` of its limit reads as meeting it
    at least `power` of the time, under the tail model."""
    if statistic == "mean":
        n = MEAN_MIN_SAMPLES
        while mean_power(n, at_limit, sigma) < power:  # rises with n: the first n that reaches it
            n += 1
        return n
    start = min_samples(statistic, CONFIDENCE)
    sizes = np.arange(start, start + 64)
    while percentile_power(sizes[-1], statistic, at_limit, sigma)[0] < power:  # find a size that reaches it
        sizes = np.arange(start, 2 * sizes[-1])
    first = int(sizes[np.argmax(percentile_power(sizes, statistic, at_limit, sigma) >= power)])
    window = np.arange(first, DIP_WINDOW * first + 1)
    short = window[percentile_power(window, statistic, at_limit, sigma) < power]
    return int(short[-1]) + 1 if short.size else first


def prompts_for_power(statistic: SloStatistic, repeats: int, power: float = POWER) -> int:
    """Prompts per round so that one launch's rounds together give the verdict its power."""
    return -(-requests_for_power(statistic, power=power) // repeats)
