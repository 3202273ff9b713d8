"""Every measurement's total limit (core/measurement/limits.py): its workload at the floor speed,
never past the cap, a caller's tighter limit kept."""

import pytest

from hyperloom_assets.core.measurement import limits
from hyperloom_assets.core.measurement.workloads import PlannedRequest

# Two sessions: 100 output and 1000 prompt tokens in all, 2 s of thinking.
PLAN = [[PlannedRequest(prompt_ids=[20] * 500, output_tokens=50, think_ms=1000)],
        [PlannedRequest(prompt_ids=[20] * 500, output_tokens=50, think_ms=1000)]]


def test_a_round_at_the_floor_speed_counts_its_tokens_thinking_and_arrivals() -> None:
    base = limits.ROUND_ALLOWANCE_S + 100 / limits.FLOOR_OUTPUT_TOKENS_PER_S + 1000 / limits.FLOOR_PROMPT_TOKENS_PER_S
    assert limits.round_floor_s(PLAN) == pytest.approx(base + 2.0)
    assert limits.round_floor_s(PLAN, request_rate=0.5) == pytest.approx(base + 2.0 + limits.ARRIVAL_ALLOWANCE * 4)


def test_the_limit_is_the_tightest_of_the_workload_the_cap_and_the_callers() -> None:
    floor = 2 * limits.round_floor_s(PLAN)
    assert limits.measurement_limit_s([PLAN, PLAN, []], None, cap_s=1e6) == (
        pytest.approx(floor), f"the workload at the floor speed ({limits.FLOOR_OUTPUT_TOKENS_PER_S:g} output tok/s)")
    assert limits.measurement_limit_s([PLAN], None, cap_s=10.0) == (10.0, "the client's max_measurement_s")
    assert limits.measurement_limit_s([PLAN], None, cap_s=1e6, limit_s=3.0) == (3.0, "the caller's limit")
    with pytest.raises(ValueError, match="max_measurement_s must be positive"):
        limits.measurement_limit_s([PLAN], None, cap_s=0)
