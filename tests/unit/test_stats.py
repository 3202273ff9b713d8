"""Intervals and spreads against values computed by hand."""

import math

import pytest

from hyperloom_assets.stats import diff_ci95, mean_ci95, percentile, spread_pct, t95


def test_t95_table_and_its_edges():
    assert t95(1) == 12.706
    assert t95(4.7) == 2.776  # fractional Welch dof rounds down, the conservative side
    assert t95(35) == 2.0
    assert t95(200) == 1.96
    assert math.isinf(t95(0.5))


def test_mean_ci95_of_three_values():
    # mean 2, stdev 1, half-width 4.303 / sqrt(3) = 2.48434
    mean, low, high = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert low == pytest.approx(2 - 2.48434, abs=1e-4)
    assert high == pytest.approx(2 + 2.48434, abs=1e-4)


def test_mean_ci95_of_one_value_has_zero_width():
    assert mean_ci95([5.0]) == (5.0, 5.0, 5.0)


def test_diff_ci95_equal_variances():
    # diff 2; va = vb = 1/3; se = sqrt(2/3) = 0.81650; Welch dof = 4, t = 2.776; half 2.26660
    diff, low, high = diff_ci95([11.0, 12.0, 13.0], [9.0, 10.0, 11.0])
    assert diff == 2.0
    assert low == pytest.approx(2 - 2.26660, abs=1e-4)
    assert high == pytest.approx(2 + 2.26660, abs=1e-4)


def test_diff_ci95_one_side_without_variance():
    # va = 2/2 = 1, vb = 0: se 1, dof = 1, t = 12.706
    diff, low, high = diff_ci95([10.0, 12.0], [8.0, 8.0])
    assert (diff, low, high) == pytest.approx((3.0, 3 - 12.706, 3 + 12.706))


def test_diff_ci95_needs_two_values_each_side():
    diff, low, high = diff_ci95([10.0], [8.0, 9.0])
    assert diff == pytest.approx(1.5)
    assert math.isinf(low) and math.isinf(high)


def test_diff_ci95_without_any_variance_is_exact():
    assert diff_ci95([3.0, 3.0], [1.0, 1.0]) == (2.0, 2.0, 2.0)


def test_spread_and_percentile():
    assert spread_pct([90.0, 100.0, 110.0]) == pytest.approx(20.0)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([40.0, 10.0, 30.0, 20.0], 25) == pytest.approx(17.5)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99) == pytest.approx(4.96)
    assert percentile([], 50) == 0.0
