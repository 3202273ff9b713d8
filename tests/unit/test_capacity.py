"""Capacity at the SLO by bisection: doubling while the SLO holds, halving while it breaks,
then bisecting to the resolution, within the probe budget; a config that meets it at the
ceiling is said to be at least that."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.report.markdown import capacity_text
from hyperloom_assets.core.measurement.capacity import (
    CEILING_FACTOR,
    CapacityAtSlo,
    find_capacity,
    probe_prompts,
)


MAX_PROBES = 7


def limit_at(capacity: float):
    """An SLO met up to `capacity` (latency grows with load)."""
    return lambda load: (load <= capacity, f"load {load}")


@pytest.mark.parametrize("true, start", [(37, 16), (16, 16), (5, 16), (60, 16)])
def test_concurrency_is_found_within_the_resolution_from_above_and_below(true, start) -> None:
    found = find_capacity(limit_at(true), start, "concurrency", MAX_PROBES)
    assert found.load <= true, found
    assert found.load >= true * 0.875 - 1, found
    assert len(found.probes) <= MAX_PROBES and found.probes[0].load == start
    assert all(p.met == (p.load <= true) for p in found.probes)
    assert found.at_ceiling is False


def test_a_config_that_breaks_the_slo_even_at_one_stream_has_no_capacity() -> None:
    found = find_capacity(limit_at(0), 4, "concurrency", MAX_PROBES)
    assert found.load == 0 and [p.load for p in found.probes] == [4, 2, 1]


def test_a_config_that_meets_it_at_the_ceiling_is_a_lower_bound() -> None:
    found = find_capacity(limit_at(10_000), 8, "concurrency", MAX_PROBES)
    assert found.load == CEILING_FACTOR * 8 and found.at_ceiling is True
    assert [p.load for p in found.probes] == [8, 16, 32]


def test_request_rate_is_bisected_as_a_real_number() -> None:
    found = find_capacity(limit_at(3.3), 2.0, "request_rate", MAX_PROBES)
    assert 3.3 * 0.875 <= found.load <= 3.3 and found.unit == "request_rate"
    assert [p.load for p in found.probes][:3] == [2.0, 4.0, 3.0]


def test_a_spent_budget_says_where_it_broke() -> None:
    found = find_capacity(limit_at(37), 16, "concurrency", 4)
    assert [p.load for p in found.probes] == [16, 32, 64, 48] and found.load == 32 and found.broke_at == 48
    text = capacity_text(CapacityAtSlo(baseline=found.load, stack=None, unit="concurrency",
                                       baseline_broke_at=found.broke_at))
    assert text == "Capacity at the SLO: the baseline serves 32 concurrent streams within it (48 broke it), the stack " \
                   "not measured."


def test_probe_rounds_carry_enough_requests_for_the_bound() -> None:
    assert probe_prompts(4, "concurrency", 99, 10) == 299 and probe_prompts(64, "concurrency", 90, 10) == 128
    assert probe_prompts(2.0, "request_rate", 95, 200) == 200 and probe_prompts(2.0, "request_rate", 95, 10) == 59


def test_the_gain_is_the_stack_over_the_baseline() -> None:
    assert CapacityAtSlo(baseline=16, stack=24, unit="concurrency").gain_pct() == pytest.approx(50.0)
    assert CapacityAtSlo(baseline=0, stack=24, unit="concurrency").gain_pct() is None
