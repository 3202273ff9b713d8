"""Run monitoring as the instance config turns it on: the settings load, and the daemon frees
the pool slot of a run whose worker died (after the run was marked failed), so the host
is not held by a dead run. (Marking such a run failed is the host's job at the next run,
tests/cli/test_faults_cli.py: Dagster's default launcher has no worker health check.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.resources.hosts.local import pool_name
from hyperloom_assets.resources.hosts.process_group import read_pidfiles, terminate_group
from tests.conftest import SIM_MODEL
from tests.sensors.test_daemon import stop_group

POOL = pool_name("local")


def instance_at(home: Path) -> dg.DagsterInstance:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        return dg.DagsterInstance.get()


def test_the_instance_config_turns_run_monitoring_on(tmp_path) -> None:
    home = tmp_path / "home"
    write_instance_config(home)
    with instance_at(home) as instance:
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 300
        assert instance.run_monitoring_cancel_timeout_seconds > 20, "longer than a teardown's worst case"
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 30
        assert instance.run_monitoring_max_runtime_seconds == 0, "a GPU run may take many hours"
        assert "MONITORING" in instance.get_required_daemon_types()


def claimed(home: Path) -> list:
    with instance_at(home) as instance:
        return list(instance.event_log_storage.get_concurrency_info(POOL).claimed_slots)


@pytest.mark.cli
def test_the_daemon_frees_the_slot_a_dead_run_kept(tmp_path) -> None:
    home, targets = tmp_path / "home", tmp_path / "targets"
    write_instance_config(home)
    targets.mkdir()
    (targets / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "server_args": ["--gpu", "H100", "--time-scale", "1"],
        "workload": {"kind": "random", "isl": 256, "osl": 256, "concurrency": 4, "num_prompts": 64}}))
    env = {**os.environ, "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets)}
    worker = subprocess.Popen([sys.executable, "-m", "dagster", "job", "execute", "-m", "hyperloom_assets.definitions",
                               "-j", "baseline_job", "--tags", json.dumps({"dagster/partition": "sim"})],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    pids = home / "hyperloom" / "pids"
    try:
        deadline = time.monotonic() + 120
        while not read_pidfiles(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert read_pidfiles(pids), "the baseline never launched"
    finally:
        worker.kill()  # the run worker dies holding the host's slot
        worker.wait(timeout=30)
        for path, record in read_pidfiles(pids):
            terminate_group(record.pgid, term_wait_s=5.0)
            path.unlink(missing_ok=True)
    assert claimed(home), "the dead run still holds the pool slot"
    with instance_at(home) as instance:  # as the host does at the next run, or a code server for its worker
        run = instance.get_runs()[0]
        instance.report_run_failed(run, "the run worker died")
    assert claimed(home), "marking the run failed does not free its slot: without the daemon it stays taken"

    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        daemon = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run",
                                   "-m", "hyperloom_assets.definitions"],
                                  env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while claimed(home) and time.monotonic() < deadline:
            time.sleep(2)
        assert not claimed(home), f"the slot was never freed; daemon log:\n{log.read_text()[-3000:]}"
    finally:
        stop_group(daemon)
