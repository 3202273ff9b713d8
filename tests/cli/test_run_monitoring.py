"""Run monitoring as the instance config turns it on: the settings load, the launcher answers
the worker health check from the worker records, and the daemon marks failed a run whose
worker was killed, so its host is free again. (Without the daemon the next run on this
machine does it: tests/cli/test_faults_cli.py.)"""

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
from dagster._core.launcher import WorkerStatus

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.resources.hosts.process_group import read_pidfiles, terminate_group
from hyperloom_assets.resources.hosts.run_launcher import workers_dir
from hyperloom_assets.resources.hosts.run_workers import record_worker
from tests.conftest import SIM_MODEL
from tests.sensors.test_daemon import stop_group
from tests.unit.test_run_workers import dead_worker, some_job


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


def test_the_launcher_reads_worker_health_from_the_worker_records(tmp_path) -> None:
    home = tmp_path / "home"
    write_instance_config(home)
    with instance_at(home) as instance:
        launcher = instance.run_launcher
        assert launcher.supports_check_run_worker_health
        dead, alive, unknown = (instance.create_run_for_job(some_job, status=dg.DagsterRunStatus.STARTED)
                                for _ in range(3))
        dead_worker(workers_dir(home), dead.run_id)
        record_worker(workers_dir(home), alive.run_id)  # this process
        assert launcher.check_run_worker_health(dead).status == WorkerStatus.FAILED
        assert launcher.check_run_worker_health(alive).status == WorkerStatus.RUNNING
        assert launcher.check_run_worker_health(unknown).status == WorkerStatus.RUNNING, "no record: not ours to judge"


@pytest.mark.cli
def test_the_daemon_marks_failed_a_run_whose_worker_was_killed(tmp_path) -> None:
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
        worker.kill()  # the run worker dies with its run STARTED
        worker.wait(timeout=30)
        for path, record in read_pidfiles(pids):
            terminate_group(record.pgid, term_wait_s=5.0)
            path.unlink(missing_ok=True)
    with instance_at(home) as instance:
        run_id = instance.get_runs()[0].run_id
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED

    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        daemon = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run",
                                   "-m", "hyperloom_assets.definitions"],
                                  env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    try:
        deadline, status = time.monotonic() + 150, None
        while time.monotonic() < deadline:
            with instance_at(home) as instance:
                status = instance.get_run_by_id(run_id).status
            if status == dg.DagsterRunStatus.FAILURE:
                break
            time.sleep(2)
        assert status == dg.DagsterRunStatus.FAILURE, f"run still {status}; daemon log:\n{log.read_text()[-3000:]}"
    finally:
        stop_group(daemon)
