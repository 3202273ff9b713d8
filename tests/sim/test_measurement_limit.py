"""Every measurement has a total limit, a baseline's and a sweep rung's too (issue 48, point 10):
on a real sim-serve too slow for the client's max_measurement_s, the round is cancelled, the
failure stored with its reason, the server torn down; a baseline takes it as a failed attempt."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperloom_assets.assets.baseline import _baseline_measurement
from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.measure import MeasurementOvertime, load_round, run_on_server
from tests.conftest import SIM_MODEL

# At the sim's own time scale an 8B model's 400-token answer takes seconds; the cap is 1 s.
WORKLOAD = Workload(kind="random", isl=64, osl=400, concurrency=1)
SPEC = ServerSpec(engine="sim", model=SIM_MODEL, server_args=["--gpu", "H100", "--time-scale", "1"])
CAPPED = BenchmarkClient(max_measurement_s=1.0)
WHY = "(the client's max_measurement_s)"


def contract() -> WorkloadContract:
    return WorkloadContract(workload=WORKLOAD, vocab_size=load_shape(SIM_MODEL).vocab, max_model_len=4096,
                            num_prompts=2, warmups=0, repeats=1)


def test_a_baseline_past_the_clients_cap_is_a_failed_attempt_with_its_reason_stored(tmp_path: Path, host,
                                                                                   store) -> None:
    with pytest.raises(ServerError) as failed:  # a server that never finishes is retried like one that never starts
        _baseline_measurement(host=host, bench=CAPPED, store=store, target="sim", kind="baseline", spec=SPEC,
                              contract=contract(), run_dir=tmp_path / "baseline")
    assert failed.value.error_class == "timeout" and f"overtime: measuring passed 1.0 s {WHY}" in str(failed.value)
    [row] = store.measurements("sim", "baseline")
    assert row["measurement"] is None and row["error"].startswith(f"overtime: measuring passed 1.0 s {WHY}")
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "its server is torn down"


def test_a_sweep_rung_past_the_clients_cap_is_stored_and_raised_as_overtime(tmp_path: Path, host, store) -> None:
    def rung(launch) -> None:
        load_round(host=host, bench=CAPPED, store=store, target="sim", spec=SPEC, contract=contract(),
                   launch=launch, workload=WORKLOAD, num_prompts=2, records_dir=tmp_path / "c1",
                   label="sweep rung 1 of 1 (concurrency 1)", kind="sweep")

    with pytest.raises(MeasurementOvertime, match=r"measuring passed 1\.0 s"):
        run_on_server(host, SPEC, tmp_path / "sweep", rung)
    [row] = store.measurements("sim", "sweep")
    assert row["measurement"] is None and row["error"].startswith(f"overtime: measuring passed 1.0 s {WHY}")
    assert read_pidfiles(Path(host.state_path()) / "pids") == []
