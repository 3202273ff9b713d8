"""Goodput on a sped-up sim is counted in its engine's time (issue 47, point 1).

One short round through the measurement protocol every asset uses, on a real `sim-serve`
at time scale 20, with an E2E limit that sits between the client's wall-clock latencies
and the engine-time ones: a request of 64 output tokens takes at least 64 decode steps of
an 8B model on an H100 (about 500 ms of engine time, 25 ms on the wall clock).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Slo, Workload
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.measure import run_measurement
from tests.conftest import SIM_MODEL

SCALE = 20.0
E2E_LIMIT_MS = 150.0  # engine time, as every target's slo is


def test_a_sims_goodput_counts_requests_against_limits_in_its_engines_time(tmp_path: Path, host, store) -> None:
    workload = Workload(kind="random", isl=256, osl=64, concurrency=8, slo=Slo(e2e_ms=E2E_LIMIT_MS))
    contract = WorkloadContract(workload=workload, vocab_size=load_shape(SIM_MODEL).vocab, max_model_len=4096,
                                num_prompts=16, warmups=0, repeats=1)
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=["--gpu", "H100", "--time-scale", f"{SCALE:g}"])
    run_dir = tmp_path / "round"
    measured = run_measurement(host=host, bench=BenchmarkClient(), store=store, target="sim", kind="baseline",
                               spec=spec, contract=contract, run_dir=run_dir).measurement

    records = [RequestRecord.model_validate_json(line)
               for line in (run_dir / "requests-repeat-1.jsonl").read_text().splitlines()]
    wall_ms = [r.e2el_s * 1000 for r in records if r.ok]
    assert len(wall_ms) == 16 and min(wall_ms) < E2E_LIMIT_MS < min(wall_ms) * SCALE, \
        f"the limit must sit between the clocks: wall-clock E2E {min(wall_ms):.0f}-{max(wall_ms):.0f} ms"
    good = sum(1 for ms in wall_ms if ms * SCALE <= E2E_LIMIT_MS)  # counted in the engine's time
    [round_] = measured.repeats
    assert measured.goodput == round_.goodput == pytest.approx(good / round_.duration_s), \
        f"{good} of 16 met {E2E_LIMIT_MS:g} ms in engine time; the wall clock would count " \
        f"{sum(1 for ms in wall_ms if ms <= E2E_LIMIT_MS)}"
    assert measured.request_throughput > 0 and measured.workload["slo"]["time_scale"] == SCALE
