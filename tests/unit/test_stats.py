"""Intervals and spreads against values computed by hand."""

import math

import pytest

from hyperloom_assets.core.measurement.stats import (
    between_launch_variance,
    launch_gain_interval,
    mean_ci95,
    percentile,
    spread_pct,
    t_critical,
    within_launch_floor,
)


def test_t_critical_against_the_table_and_its_edges():
    assert t_critical(0.95, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_critical(0.95, 4) == pytest.approx(2.776, abs=1e-3)
    assert t_critical(0.99, 10) == pytest.approx(3.169, abs=1e-3)
    assert math.isinf(t_critical(0.95, 0))


def test_mean_ci95_of_three_values():
    # mean 2, stdev 1, half-width 4.302653 / sqrt(3) = 2.48414
    mean, low, high = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert low == pytest.approx(2 - 2.48414, abs=1e-4)
    assert high == pytest.approx(2 + 2.48414, abs=1e-4)


def test_mean_ci95_of_one_value_has_zero_width():
    assert mean_ci95([5.0]) == (5.0, 5.0, 5.0)


def test_launch_interval_takes_the_launch_as_the_unit():
    # log launch means: variant ln110, ln121 (variance ln(1.1)^2 / 2 = 0.0045420, 1 dof);
    # best ln100 twice (0, 1 dof): pooled 0.0022710 with 2 dof; repeats alone imply 0.
    # diff = ln(sqrt(110 * 121) / 100) = 0.142965, gain +15.369%; se = sqrt(0.0022710 * (1/2 + 1/2))
    # = 0.047655; t(95%, 2) = 4.302653; half 0.205043 -> [exp(-0.062078) - 1, exp(0.348008) - 1]
    gain, low, high = launch_gain_interval([[110.0, 110.0], [121.0, 121.0]], [[100.0, 100.0], [100.0, 100.0]])
    assert gain == pytest.approx(15.3690, abs=1e-3)
    assert low == pytest.approx(-6.0190, abs=1e-3)
    assert high == pytest.approx(41.6244, abs=1e-3)


def test_launch_interval_is_never_narrower_than_the_repeats_imply():
    # One launch each side; others: one config launched twice, ln(1.002)^2 / 2 = 1.996e-6 (1 dof).
    # Repeats: relative variances 0.25/103^2 and 0.25/100^2, 2 dof each of 8, over 3 repeats a
    # launch: 4.0471e-6, larger, so it is used with the between-launch 1 dof (t 12.706):
    # half = 12.706 * sqrt(4.0471e-6 * 2) = 0.036150 around ln(1.03).
    variant, best, others = [[103.0, 103.5, 102.5]], [[100.0, 100.5, 99.5]], [[[100.0] * 3, [100.2] * 3]]
    assert between_launch_variance([variant, best, *others]) == pytest.approx((1.996007e-6, 1))
    assert within_launch_floor([variant, best, *others]) == pytest.approx(4.047075e-6)
    gain, low, high = launch_gain_interval(variant, best, others)
    assert gain == pytest.approx(3.0)
    assert low == pytest.approx(-0.6569, abs=1e-3)
    assert high == pytest.approx(6.7915, abs=1e-3)


def test_launch_interval_without_any_config_launched_twice_is_unbounded():
    gain, low, high = launch_gain_interval([[120.0, 121.0, 119.0]], [[100.0, 101.0, 99.0]])
    assert gain == pytest.approx(20.0)
    assert low == -100.0 and math.isinf(high)


def test_launch_interval_refuses_empty_sides_and_non_positive_launches():
    with pytest.raises(ValueError):
        launch_gain_interval([], [[1.0]])
    with pytest.raises(ValueError, match="positive"):
        launch_gain_interval([[1.0]], [[0.0, 0.0]])


def test_spread_and_percentile():
    assert spread_pct([90.0, 100.0, 110.0]) == pytest.approx(20.0)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([40.0, 10.0, 30.0, 20.0], 25) == pytest.approx(17.5)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99) == pytest.approx(4.96)
    assert percentile([], 50) == 0.0
