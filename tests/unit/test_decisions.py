"""Every branch of the decision rule, with hand-computed numbers."""

import pytest

from hyperloom_assets.decisions import (
    MAX_MEASUREMENTS, Outcome, decide_stack, decide_trial, failed, is_overtime, killed_overtime,
)

BEST = [100.0, 100.5, 99.5]  # mean 100, variance 0.25


def test_keep_when_gain_and_interval_clear_zero():
    # diff 3; va = vb = 0.25/3; se 0.40825; Welch dof 4, t 2.776; half 1.13330
    d = decide_trial([103.0, 103.5, 102.5], BEST)
    assert d.outcome is Outcome.KEEP
    assert d.gain_pct == pytest.approx(3.0)
    assert d.ci_low_pct == pytest.approx(3 - 1.13330, abs=1e-4)
    assert d.ci_high_pct == pytest.approx(3 + 1.13330, abs=1e-4)


def test_keep_at_exactly_the_threshold():
    d = decide_trial([101.0, 101.0], [100.0, 100.0])  # no variance: the interval is the point 1%
    assert d.outcome is Outcome.KEEP and d.gain_pct == pytest.approx(1.0)


def test_revert_when_gain_is_under_threshold_even_if_significant():
    d = decide_trial([100.5, 101.0, 100.0], BEST)  # +0.5%
    assert d.outcome is Outcome.REVERT
    assert d.gain_pct == pytest.approx(0.5)
    assert "under 1.0%" in d.reason


def test_revert_when_interval_says_worse():
    d = decide_trial([95.0, 95.5, 94.5], BEST)
    assert d.outcome is Outcome.REVERT
    assert d.ci_high_pct < 0 and "worse" in d.reason


def test_needs_review_when_gain_is_big_but_interval_includes_zero():
    # mean 102 (+2%); var 13 -> va 4.3333, vb 0.08333; se 2.10159; dof 2.08 -> t 4.303; half 9.0431
    variant = [101.0, 106.0, 99.0]
    d = decide_trial(variant, BEST, measurements=1)
    assert d.outcome is Outcome.NEEDS_REVIEW
    assert d.gain_pct == pytest.approx(2.0)
    assert d.ci_low_pct == pytest.approx(2 - 9.0431, abs=1e-3)
    assert decide_trial(variant, BEST, measurements=MAX_MEASUREMENTS - 1).outcome is Outcome.NEEDS_REVIEW


def test_needs_review_becomes_revert_after_the_last_measurement():
    d = decide_trial([101.0, 106.0, 99.0], BEST, measurements=MAX_MEASUREMENTS)
    assert d.outcome is Outcome.REVERT and "after 3 measurements" in d.reason


def test_one_repeat_cannot_prove_a_gain():
    assert decide_trial([110.0], [100.0]).outcome is Outcome.NEEDS_REVIEW


def test_stack_check_keeps_only_above_the_margin():
    joined = decide_stack([100.6, 100.6], [100.0, 100.0])
    assert joined.outcome is Outcome.KEEP and joined.gain_pct == pytest.approx(0.6)
    evicted = decide_stack([100.4, 100.4], [100.0, 100.0])
    assert evicted.outcome is Outcome.KEEP_UNSTABLE and "evicted" in evicted.reason
    assert decide_stack([100.5], [100.0]).outcome is Outcome.KEEP  # exactly the margin joins


def test_failed_and_overtime():
    assert failed("argv_invalid: unrecognized arguments").outcome is Outcome.FAILED
    assert is_overtime(21.0, 10.0) and not is_overtime(20.0, 10.0)
    assert not is_overtime(100.0, 0.0)  # no baseline time, no verdict
    d = killed_overtime(21.0, 10.0)
    assert d.outcome is Outcome.KILLED_OVERTIME and d.gain_pct is None


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        decide_trial([], BEST)
    with pytest.raises(ValueError):
        decide_trial([1.0, 2.0], [0.0, 0.0])
