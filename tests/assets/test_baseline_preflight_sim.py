"""A busy host is not a failed attempt of the config: after a preflight refusal the same
baseline runs once the host is free, instead of being dropped as a duplicate."""

from __future__ import annotations

import subprocess
import sys
import time

import dagster as dg
import pytest
import yaml

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.local import LocalHost
from tests.conftest import SIM_MODEL


@pytest.mark.stop_reason("baseline_failed", case="preflight")
def test_a_preflight_refusal_is_not_an_attempt(tmp_path, store) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "server_args": ["--gpu", "H100", "--time-scale", "50"],
        "workload": {"kind": "random", "isl": 64, "osl": 16, "concurrency": 2}, "repeats": 1}))
    host = LocalHost(state_dir=str(tmp_path / "state"), check_foreign_processes=True)
    defs = build_defs(folder, host=host, store=store)
    job = defs.resolve_job_def("baseline_job")
    # Something else serving on this host: a process whose argv looks like a sim server.
    look_alike = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                   "hyperloom_assets.cli", "sim-serve", "--model", "m"])
    try:
        time.sleep(0.2)
        with dg.instance_for_test() as instance:
            busy = job.execute_in_process(partition_key="sim", instance=instance, raise_on_error=False)
        assert not busy.success
        failure = next(e for e in busy.all_events if e.event_type_value == "STEP_FAILURE")
        assert "preflight" in str(failure.event_specific_data.error)
        assert store.baseline_attempts("sim") == []
    finally:
        look_alike.kill()
        look_alike.wait()
    with dg.instance_for_test() as instance:
        assert job.execute_in_process(partition_key="sim", instance=instance).success
    assert [row["outcome"] for row in store.baseline_attempts("sim")] == ["ok"]
