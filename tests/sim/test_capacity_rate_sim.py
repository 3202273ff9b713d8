"""Capacity in requests/s is a rate the server served (issue 47, point 2).

A real `sim-serve` with one sequence in flight (--max-num-seqs 1) behind the client's cap of 4
streams, offered several times what it serves: the arrivals queue at the client while the
server's own latency stays flat, which the search once read as meeting the SLO at every rate
up to its ceiling. Timed from their scheduled arrival, the probes' requests show the wait, and
the client's shortfall against the offered rate breaks them too, so the search reports where
it broke, never the ceiling.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from hyperloom_assets.assets.capacity import capacity_result, measure_capacity
from hyperloom_assets.core.config.targets import Target, TargetSlo, Workload
from hyperloom_assets.core.measurement.capacity import CEILING_FACTOR
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.report.markdown import capacity_text
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.measure import run_on_server
from tests.conftest import SIM_MODEL

SCALE = 5  # a request of 32 tokens, one at a time: about 45 ms of wall time, some 20 req/s served
RATE = 100.0  # req/s offered, on the client's clock: five times that
E2E_LIMIT_MS = 2000.0  # engine time: 4 requests in flight take under 1 s, not the 40 queued at the client
SPEC = ServerSpec(engine="sim", model=SIM_MODEL,
                  server_args=["--gpu", "H100", "--time-scale", str(SCALE), "--max-num-seqs", "1"])
WORKLOAD = Workload(kind="random", isl=64, osl=32, concurrency=4, request_rate=RATE)


def test_a_rate_the_cap_cannot_sustain_breaks_its_probe_and_the_ceiling_is_never_reported(tmp_path: Path, host,
                                                                                             store) -> None:
    slo = TargetSlo(e2e_ms=E2E_LIMIT_MS, percentile=50, capacity_probes=2)
    target = Target(engine="sim", model=SIM_MODEL, server_args=SPEC.server_args, workload=WORKLOAD, slo=slo)
    contract = WorkloadContract(workload=WORKLOAD, vocab_size=load_shape(SIM_MODEL).vocab, max_model_len=4096,
                                num_prompts=60, warmups=4, repeats=1)
    baseline = SimpleNamespace(contract=contract, context_key="ctx", measuring_s=4.0,
                               measurement=SimpleNamespace(completed=60))
    context = SimpleNamespace(partition_key="sim", run=SimpleNamespace(run_id="run"),
                              log=logging.getLogger("capacity-test"))
    folder = tmp_path / "capacity"
    found = run_on_server(host, SPEC, folder, lambda launch: measure_capacity(
        context, target, host, BenchmarkClient(), store, baseline, SPEC, launch, folder, "baseline"))

    assert found is not None and [p.load for p in found.probes] == [RATE, RATE / 2], found
    assert found.load == 0 and found.broke_at == RATE / 2 and not found.at_ceiling, found
    assert all(p.why.startswith("the client sent") and not p.met for p in found.probes), found.probes
    # Timed from arrival, the wait for a slot is in every probe's E2E: far past the limit.
    rows = store.measurements("sim", "capacity")
    assert len(rows) == 2 and all(r["measurement"]["latency"]["e2el_ms"]["p50"] > E2E_LIMIT_MS for r in rows), \
        [r["measurement"]["latency"]["e2el_ms"] for r in rows]
    text = capacity_text(capacity_result(target, found, found))
    assert "the baseline serves under 50 requests/s within it (50 broke it, the lowest load probed)" in text, text
    assert f"{CEILING_FACTOR * RATE:g}" not in text and "at least" not in text, text
