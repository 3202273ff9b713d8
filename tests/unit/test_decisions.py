"""Every branch of the decision rule, with hand-computed numbers.

Evidence is per launch: a list of launches, each a list of per-repeat throughputs.
Each of the 3 looks that can keep uses a 1 - 5%/3 = 98.33% interval (t = 7.6488 at 2 dof).
"""

import math

import pytest

from hyperloom_assets.core.decisions.rule import (
    MAX_MEASUREMENTS,
    Outcome,
    decide_stack,
    decide_trial,
    failed,
    is_overtime,
    killed_overtime,
    look_confidence,
)

BEST = [[100.0] * 3, [101.0] * 3]  # two launches; log launch means differ by ln(1.01)


def test_each_look_that_can_keep_spends_its_share_of_the_trials_five_percent():
    assert look_confidence(MAX_MEASUREMENTS) == pytest.approx(1 - 0.05 / 3)
    # a trial whose first look had no interval splits the 5% over the two looks left:
    # at 97.5% (t 6.2053 at 2 dof) this interval is [+0.59%, +9.55%] and keeps; at 98.33%
    # (t 7.6488) it is [-0.40%, +10.64%] and does not
    variant = [[105.0] * 3, [106.0] * 3]
    d = decide_trial(variant, BEST, measurements=2, tests=2)
    assert d.outcome is Outcome.KEEP and "97.5% interval" in d.reason
    assert d.ci_low_pct == pytest.approx(0.59, abs=0.01)
    assert decide_trial(variant, BEST, measurements=2).outcome is Outcome.NEEDS_REVIEW


def test_keep_when_gain_and_interval_clear_zero():
    # variant ln120, ln121; best ln100, ln101: pooled launch variance
    # (ln(121/120)^2 + ln(1.01)^2) / 4 = 4.1970e-5 with 2 dof; se = sqrt(4.1970e-5 * (1/2 + 1/2))
    # = 0.0064784; half = 7.648804 * 0.0064784 = 0.049552; diff = ln(sqrt(120 * 121 / (100 * 101))) = 0.181496
    d = decide_trial([[120.0] * 3, [121.0] * 3], BEST)
    assert d.outcome is Outcome.KEEP
    assert d.gain_pct == pytest.approx(100 * math.expm1(0.181496), abs=1e-3)  # +19.9009%
    assert d.ci_low_pct == pytest.approx(100 * math.expm1(0.181496 - 0.049552), abs=1e-3)
    assert d.ci_high_pct == pytest.approx(100 * math.expm1(0.181496 + 0.049552), abs=1e-3)
    assert "98.3% interval" in d.reason


def test_a_single_look_is_held_to_its_share_of_the_five_percent():
    # At 95% (t 4.3027) this interval is [+0.94%, +7.11%] and would keep; at 98.33% it does not.
    d = decide_trial([[104.0] * 3, [105.0] * 3], BEST)
    assert d.outcome is Outcome.NEEDS_REVIEW
    assert d.ci_low_pct < 0 < d.gain_pct


def test_keep_at_exactly_the_threshold():
    d = decide_trial([[101.0, 101.0], [101.0, 101.0]], [[100.0, 100.0], [100.0, 100.0]])  # no noise at all
    assert d.outcome is Outcome.KEEP and d.gain_pct == pytest.approx(1.0)


def test_revert_when_gain_is_under_threshold_even_if_significant():
    d = decide_trial([[100.5] * 3, [101.5] * 3], BEST)  # sqrt(100.5 * 101.5 / (100 * 101)) - 1 = +0.4975%
    assert d.outcome is Outcome.REVERT
    assert d.gain_pct == pytest.approx(0.4975, abs=1e-3)
    assert "under 1.0%" in d.reason


def test_revert_when_interval_says_worse():
    d = decide_trial([[80.0] * 3, [81.0] * 3], BEST)
    assert d.outcome is Outcome.REVERT
    assert d.ci_high_pct < 0 and "worse" in d.reason


def test_one_launch_each_cannot_prove_a_gain_however_tight_its_repeats():
    # Repeats on one server share that launch's offset: with no config launched twice there
    # is no launch-level estimate, so the variant and the best are launched again.
    d = decide_trial([[120.0, 120.1, 119.9]], [[100.0, 100.1, 99.9]])
    assert d.outcome is Outcome.NEEDS_REVIEW
    assert d.gain_pct == pytest.approx(20.0) and d.ci_low_pct is None
    assert "no launch-level interval yet" in d.reason


def test_the_runs_other_evidence_sharpens_the_estimate():
    variant, best = [[120.0, 120.1, 119.9]], [[100.0, 100.1, 99.9]]
    quiet_config = [[100.0] * 3, [100.5] * 3, [99.5] * 3]  # launched three times, within 1%
    assert decide_trial(variant, best, others=[quiet_config]).outcome is Outcome.KEEP
    noisy_config = [[100.0] * 3, [130.0] * 3, [75.0] * 3]
    assert decide_trial(variant, best, others=[noisy_config]).outcome is Outcome.NEEDS_REVIEW


def test_needs_review_becomes_revert_after_the_last_measurement():
    variant = [[104.0] * 3, [105.0] * 3]
    assert decide_trial(variant, BEST, measurements=MAX_MEASUREMENTS - 1).outcome is Outcome.NEEDS_REVIEW
    d = decide_trial(variant, BEST, measurements=MAX_MEASUREMENTS)
    assert d.outcome is Outcome.REVERT and "after 3 measurements" in d.reason


def test_stack_check_keeps_only_above_the_margin():
    joined = decide_stack([[100.6, 100.6]], [[100.0, 100.0]])
    assert joined.outcome is Outcome.KEEP and joined.gain_pct == pytest.approx(0.6)
    evicted = decide_stack([[100.4, 100.4]], [[100.0, 100.0]])
    assert evicted.outcome is Outcome.KEEP_UNSTABLE and "evicted" in evicted.reason
    assert decide_stack([[100.5]], [[100.0]]).outcome is Outcome.KEEP  # exactly the margin joins


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
        decide_trial([[1.0, 2.0]], [[0.0, 0.0]])
