"""The daemon path for real: the sensor on, a commit to a sim target's tree (made by
`framework-tree init`) launches a run that finishes and serves the committed code;
bounded in time, and nothing is left running afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from benchmarks.support.fleet_run import group_alive
from hyperloom_assets.cli.instance_config import write_instance_config
from tests.conftest import SIM_MODEL

pytestmark = pytest.mark.cli

DEADLINE_S = 300
SERVED_MARK = "hyperloom test: the second commit is served"


def git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(tree), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                   check=True, capture_output=True)


def dagster(env: dict, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dagster", *args, "-m", "hyperloom_assets.definitions"],
                          env=env, capture_output=True, text=True, timeout=120, **kwargs)


def stop_group(process: subprocess.Popen) -> None:
    """TERM the daemon's process group (code servers, run workers), then KILL what stays."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


def runs(home: Path, env: dict) -> list:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.get() as instance:
            return list(instance.get_runs())


def baseline_metadata(home: Path) -> dict:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.get() as instance:
            records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("baseline")),
                                                      limit=1).records
            assert records, "the run materialized a baseline"
            return {k: getattr(v, "value", v) for k, v in records[0].asset_materialization.metadata.items()}


def wait_for(condition, what: str, deadline: float, log: Path):
    # Polled every half second: each wait below ends on something the daemon does, and a 2 s
    # poll added a second on average to each of them.
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; daemon log tail:\n{log.read_text()[-4000:]}")


def test_a_commit_to_a_target_tree_launches_a_run_that_finishes(tmp_path) -> None:
    home, targets, tree = tmp_path / "home", tmp_path / "targets", tmp_path / "engine-src"
    write_instance_config(home)
    subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "framework-tree", "init", "--engine", "sim",
                    str(tree)], check=True, capture_output=True)
    targets.mkdir()
    (targets / "sim-tree.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "framework_tree": str(tree),
        "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4"],
        "workload": {"kind": "random", "isl": 128, "osl": 32, "concurrency": 4, "num_prompts": 16},
        "repeats": 1, "max_trials": 1, "sweep_concurrencies": [4]}))
    env = {**os.environ, "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets),
           "HYPERLOOM_TARGET_POLL_SECONDS": "2"}
    started = dagster(env, "sensor", "start", "target_change_sensor")
    assert started.returncode == 0, started.stderr[-2000:]

    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        daemon = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run",
                                   "-m", "hyperloom_assets.definitions"],
                                  env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    deadline = time.monotonic() + DEADLINE_S
    try:
        # The first tick sees the target for the first time: it records the key, no run.
        wait_for(lambda: "Sensor target_change_sensor skipped" in log.read_text(), "the first sensor tick", deadline, log)
        time.sleep(6)
        assert runs(home, env) == [], "first sight of a target asks for no run"
        cli = tree / "hyperloom_assets" / "sim" / "cli.py"
        anchor = '    print("INFO:     Application startup complete.", flush=True)\n'
        assert anchor in cli.read_text()
        cli.write_text(cli.read_text().replace(anchor, anchor + f'    print("{SERVED_MARK}", flush=True)\n'))
        git(tree, "commit", "-qam", "second: the server says so")
        run = wait_for(lambda: next(iter(runs(home, env)), None), "a run after the commit", deadline, log)
        assert run.job_name == "optimize_job"
        assert run.tags.get("dagster/partition") == "sim-tree"
        finished = wait_for(lambda: [r for r in runs(home, env) if r.is_finished], "the run to finish", deadline, log)
        assert finished[0].status == dg.DagsterRunStatus.SUCCESS, log.read_text()[-4000:]
        assert len(runs(home, env)) == 1, "one commit, one run"
        baseline_log = Path(baseline_metadata(home)["server_log"])
        assert SERVED_MARK in baseline_log.read_text(), "the run served the committed code, not the venv's"
    finally:
        stop_group(daemon)
    # Grandchildren reparented to init need a moment to be reaped after the KILL.
    settle = time.monotonic() + 15
    while group_alive(daemon.pid) and time.monotonic() < settle:
        time.sleep(0.5)
    assert group_alive(daemon.pid) == [], "nothing the daemon started outlives the test"
