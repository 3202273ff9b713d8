"""A run stopped mid-trial, through `dagster job execute` on the sim: terminated (SIGTERM,
what the UI's Terminate and Ctrl-C also deliver as an interrupt) or killed outright
(SIGKILL, its server left running). Either way the next run resumes from the ledger."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.store.results import ResultStore
from tests.cli.test_job_execute import execute
from tests.conftest import SIM_MODEL, reap_leftovers

pytestmark = pytest.mark.cli

# A sequence cap of 2 under 4 streams, CUDA graphs off: two decisive keepers (the cap, the
# graphs). At time scale 2 a launch measures for several seconds, room to stop it mid-way.
SLOW_TARGET = {
    "engine": "sim", "model": str(SIM_MODEL),
    "server_args": ["--gpu", "H100", "--time-scale", "2", "--max-num-seqs", "2", "--enforce-eager"],
    "workload": {"kind": "random", "isl": 256, "osl": 128, "concurrency": 4, "num_prompts": 16},
    "repeats": 2, "max_trials": 3, "target_gain_pct": 1000, "sweep_concurrencies": [4]}
DEADLINE_S = 300


def write_targets(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sim.yaml").write_text(yaml.safe_dump({**SLOW_TARGET, **changes}))
    return folder


def start(job: str, home: Path, targets: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets)}
    argv = [sys.executable, "-m", "dagster", "job", "execute", "-m", "hyperloom_assets.definitions", "-j", job,
            "--tags", json.dumps({"dagster/partition": "sim"})]
    with log.open("w") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=home)


def wait_mid_trial(process: subprocess.Popen, log: Path, home: Path, trial: int = 2) -> int:
    """Until `trial` has a finished launch and its next server is up; returns that server's pid."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the run ended early:\n{log.read_text()[-3000:]}"
        text = log.read_text()
        finished = re.search(rf"trial {trial} [^\n]*: launch 1 \(variant\)", text)
        decided = re.search(rf"trial {trial} [^\n]*: (KEEP|REVERT|KEEP_UNSTABLE|FAILED|KILLED_OVERTIME) \(", text)
        assert not decided, f"trial {trial} ended at its first launch: this target no longer tests a stop mid-trial"
        if finished and "server ready" in text[finished.end():]:
            pids = [record.pid for _, record in read_pidfiles(home / "hyperloom" / "pids")]
            alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
            if alive:
                return alive[0]
        time.sleep(0.1)
    raise AssertionError(f"never reached the middle of trial 2:\n{log.read_text()[-3000:]}")


def stop_mid_trial(process: subprocess.Popen, reach: Callable[[], int], stop: Callable[[], None],
                   wait_teardown: bool = True) -> tuple[int, float | None]:
    """Once `reach` says a server is up mid-trial, `stop` the run: (that server, seconds until it was gone)."""
    try:
        server = reach()
        stop()
        torn_down_s = wait_gone(server, 60) if wait_teardown else None
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return server, torn_down_s


def store_of(home: Path) -> ResultStore:
    return ResultStore(url=f"sqlite:///{home / 'hyperloom' / 'results.db'}")


def instance_of(home: Path) -> dg.DagsterInstance:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        return dg.DagsterInstance.get()


def runs_of(home: Path) -> list[dg.DagsterRun]:
    """Oldest first."""
    with instance_of(home) as instance:
        return list(reversed(instance.get_runs()))


def materialized(home: Path, asset: str) -> bool:
    with instance_of(home) as instance:
        return bool(instance.fetch_materializations(dg.AssetKey(asset), limit=1).records)


def launches_after(trials: list[dict], replayed_looks: int) -> int:
    """Servers a resumed climb must start: every launch of the unfinished trials, less the recorded ones."""
    return sum(t["record"]["measurements"] + len(t["record"]["best_launches"]) + t["record"]["rebenches"]
               for t in trials) - replayed_looks


def climb_launches(store: ResultStore, run_id: str, target: str = "sim") -> int:
    return len([row for row in store.measurements(target) if row["run_id"] == run_id
                and row["kind"] in ("trial", "best_relaunch")])


def wait_gone(pid: int, timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.stop_reason("cancelled")
def test_sigterm_mid_trial_tears_down_records_cancelled_and_re_execution_resumes(tmp_path, home) -> None:
    targets = write_targets(tmp_path / "targets")
    log = tmp_path / "first.log"
    process = start("optimize_job", home, targets, log)
    server, torn_down_s = stop_mid_trial(process, lambda: wait_mid_trial(process, log, home),
                                         lambda: process.send_signal(signal.SIGTERM))
    assert torn_down_s < 20, f"the server outlived the SIGTERM by {torn_down_s:.1f} s"
    text = log.read_text()
    assert process.returncode != 0
    assert "stop reason: cancelled: terminated during trials" in text, "the run log says why it stopped"
    store = store_of(home)
    assert [row["stop_reason"] for row in store.stops("sim")] == ["cancelled"], "and so does the result store"
    assert not materialized(home, "final_report"), "a cancelled run has no report"
    context = store.measurements("sim", "baseline")[0]["context_key"]
    assert len(store.trials(context)) == 1, "trial 1 is in the ledger"
    looks = store.looks(context)
    assert [row["record"]["role"] for row in looks][:1] == ["variant"], "so are trial 2's finished launches"

    again = execute("optimize_job", "sim", home, targets, timeout_s=DEADLINE_S)
    assert again.returncode == 0, again.stderr[-4000:]
    assert re.search(r"trial 1 [^\n]*, replayed from the ledger", again.stderr)
    assert re.search(r"trial 2 [^\n]*: launch 1 \(variant\)[^\n]*replayed from the ledger", again.stderr)
    resumed = runs_of(home)[-1].run_id
    assert climb_launches(store, resumed) == launches_after(store.trials(context)[1:], len(looks)), \
        "only what was interrupted, and what came after it, is measured again"
    assert materialized(home, "final_report")


def test_terminate_from_dagster_stops_a_run_started_by_dagster_job_execute(tmp_path, home) -> None:
    # What the UI's Terminate does: the run launcher marks the run CANCELING; a run started
    # from the command line has no code server to interrupt it, so the host's watch does.
    targets = write_targets(tmp_path / "targets")
    log = tmp_path / "run.log"
    process = start("optimize_job", home, targets, log)

    def terminate() -> None:
        with instance_of(home) as instance:
            instance.run_launcher.terminate(instance.get_runs()[0].run_id)

    server, torn_down_s = stop_mid_trial(process, lambda: wait_mid_trial(process, log, home, trial=1), terminate)
    run_id = runs_of(home)[0].run_id
    assert torn_down_s < 20, f"the server outlived the Terminate by {torn_down_s:.1f} s"
    with instance_of(home) as instance:
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED
    assert "stop reason: cancelled: terminated during trials" in log.read_text()
    assert [row["stop_reason"] for row in store_of(home).stops("sim")] == ["cancelled"]


def test_sigkill_mid_trial_the_next_run_releases_the_dead_run_reaps_its_server_and_ends_with_the_same_stack(
        tmp_path, home) -> None:
    reference_home = tmp_path / "reference_home"
    write_instance_config(reference_home)
    # The same climb uninterrupted (faster: decisions are made in the sim's own time).
    reference = execute("optimize_job", "sim", reference_home, write_targets(
        tmp_path / "reference_targets", server_args=SLOW_TARGET["server_args"][:3] + ["10"] +
        SLOW_TARGET["server_args"][4:]), timeout_s=DEADLINE_S)
    assert reference.returncode == 0, reference.stderr[-4000:]

    targets = write_targets(tmp_path / "targets")
    log = tmp_path / "killed.log"
    process = start("optimize_job", home, targets, log)
    # SIGKILL: no teardown, no log line, no run status
    server, _ = stop_mid_trial(process, lambda: wait_mid_trial(process, log, home), process.kill, wait_teardown=False)
    time.sleep(1)
    assert psutil.Process(server).is_running(), "the killed run's server is left running: an orphan"
    killed_run = runs_of(home)[0].run_id
    store = store_of(home)
    context = store.measurements("sim", "baseline")[0]["context_key"]
    looks = store.looks(context)
    assert looks, "trial 2's finished launches were recorded as they finished"

    resumed = execute("optimize_job", "sim", home, targets, timeout_s=DEADLINE_S)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE, "reaped"
    assert f"the run worker of run {killed_run}" in resumed.stderr
    with instance_of(home) as instance:
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.FAILURE, \
            "the dead run is marked failed, and its pool slot freed (else the next run would wait forever)"
    assert re.search(r"trial 2 [^\n]*: launch 1 \(variant\)[^\n]*replayed from the ledger", resumed.stderr)
    assert climb_launches(store, runs_of(home)[-1].run_id) == launches_after(store.trials(context)[1:], len(looks))
    names = [keeper["name"] for keeper in store.latest_stack("sim")["keepers"]]
    assert names == [keeper["name"] for keeper in store_of(reference_home).latest_stack("sim")["keepers"]]
    assert names, "a stack with keepers, so the comparison says something"
    assert reap_leftovers(reference_home) == []
