"""A sim's measurement converted back to its simulated GPU's time."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.measurement.measurement import RepeatMetrics
from hyperloom_assets.core.measurement.metrics import summarize
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.engine_time import to_engine_time
from hyperloom_assets.sim.timescale import time_scale_of


def repeat(throughput: float) -> RepeatMetrics:
    return RepeatMetrics(output_throughput=throughput, request_throughput=2.0, ttft_p50_ms=10, ttft_p99_ms=20,
                         tpot_p50_ms=1.0, itl_p50_ms=1.0, e2el_p50_ms=50, completed=8, duration_s=4.0)


def test_rates_divide_and_latencies_multiply_by_the_scale() -> None:
    wall = summarize([repeat(2000.0), repeat(2200.0)])
    sim = to_engine_time(wall, 20.0)
    assert sim.output_throughput == pytest.approx(105.0)
    assert sim.output_throughput_ci_low == pytest.approx(wall.output_throughput_ci_low / 20)
    assert sim.tpot_p50_ms == pytest.approx(20.0)
    assert sim.interactivity == pytest.approx(50.0)
    assert [r.output_throughput for r in sim.repeats] == pytest.approx([100.0, 110.0])
    assert sim.repeats[0].duration_s == pytest.approx(80.0)
    assert sim.completed == wall.completed


def test_the_scale_is_read_from_the_harness_flags() -> None:
    assert time_scale_of(["--gpu", "H100", "--time-scale", "20", "--max-num-seqs", "8"]) == 20.0
    assert time_scale_of(["--time-scale=4"]) == 4.0
    assert time_scale_of(["--max-num-seqs", "8"]) == 1.0


def test_the_sim_hands_its_scale_to_the_harness_and_real_engines_run_in_their_own_time() -> None:
    args = ["--gpu", "H100", "--time-scale", "20"]
    assert engine_for("sim").time_scale_of(args) == 20.0
    assert engine_for("vllm").time_scale_of(args) == 1.0
    wall = summarize([repeat(2000.0)])
    assert to_engine_time(wall, 1.0) is wall
