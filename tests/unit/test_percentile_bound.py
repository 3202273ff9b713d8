"""The order-statistic bound on a latency percentile: its rank, its coverage, and when it has none."""

from __future__ import annotations

import math
import random

import pytest

from hyperloom_assets.core.measurement.percentile_bound import min_samples, percentile_upper_bound, upper_rank


def exact_rank(n: int, q: float, confidence: float) -> int | None:
    """The smallest k with P(Binomial(n, q) <= k - 1) >= confidence, summed term by term."""
    below = 0.0
    for k in range(1, n + 1):
        below += math.comb(n, k - 1) * q ** (k - 1) * (1 - q) ** (n - k + 1)
        if below >= confidence:
            return k
    return None


@pytest.mark.parametrize(("n", "percentile", "confidence"),
                         [(100, 50, 0.95), (20, 50, 0.9), (300, 99, 0.95), (1000, 99, 0.95),
                          (500, 90, 0.99), (40, 95, 0.8), (1, 50, 0.4)])
def test_the_rank_is_the_smallest_the_binomial_allows(n, percentile, confidence) -> None:
    assert upper_rank(n, percentile, confidence) == exact_rank(n, percentile / 100, confidence)


def test_p99_needs_299_requests_at_95_percent_and_then_its_bound_is_the_largest() -> None:
    assert min_samples(99) == 299
    assert upper_rank(298, 99) is None and percentile_upper_bound(list(range(298)), 99) is None
    assert upper_rank(299, 99) == 299 and percentile_upper_bound(list(range(299)), 99) == 298
    assert min_samples(50) == 5 and upper_rank(4, 50) is None and upper_rank(5, 50) == 5


def test_the_bound_is_an_order_statistic_of_the_values_given_in_any_order() -> None:
    values = [float(v) for v in range(1, 101)]
    random.Random(1).shuffle(values)
    assert percentile_upper_bound(values, 50) == 59.0  # P(Bin(100, .5) <= 58) = 0.956, <= 57: 0.933


def test_the_bound_covers_the_true_percentile_about_as_often_as_it_says() -> None:
    """Exponential latencies (mean 1): the true p90 is ln 10; 95% bounds from 60 draws cover it."""
    rng = random.Random(7)
    truth, trials = math.log(10), 2000
    covered = sum(percentile_upper_bound([rng.expovariate(1) for _ in range(60)], 90) >= truth
                  for _ in range(trials))
    assert 0.94 <= covered / trials <= 0.99, covered / trials


@pytest.mark.parametrize(("percentile", "confidence", "field"),
                         [(0, 0.95, "percentile"), (100, 0.95, "percentile"), (99, 1.0, "confidence"),
                          (99, 0, "confidence")])
def test_an_out_of_range_argument_is_refused_by_name(percentile, confidence, field) -> None:
    with pytest.raises(ValueError, match=field):
        upper_rank(10, percentile, confidence)
    with pytest.raises(ValueError, match=field):
        min_samples(percentile, confidence)


def test_no_values_have_no_bound() -> None:
    assert percentile_upper_bound([], 50) is None


@pytest.mark.parametrize(("percentile", "confidence"), [(50, 0.75), (50, 0.95), (90, 0.9), (99, 0.95)])
def test_min_samples_is_the_least_count_that_has_a_bound(percentile, confidence) -> None:
    """p50 at 75% is the exact edge: two draws reach 1 - 0.5^2 = 0.75 and so suffice."""
    n = min_samples(percentile, confidence)
    assert upper_rank(n, percentile, confidence) is not None and upper_rank(n - 1, percentile, confidence) is None
