"""`dagster job execute` runs as subprocesses, stopped mid-trial on purpose, and what they
leave behind: the helpers the fault tests (tests/cli/test_faults_cli.py) and the fault
matrix (benchmarks/faults.py) share."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml

from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.store.results import ResultStore

SIM_MODEL = Path(__file__).resolve().parents[2] / "models" / "llama-3-8b"


def execute(job: str, partition: str, home: Path, targets: Path, timeout_s: float,
            select: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets)}
    return subprocess.run(job_argv(job, partition, select), env=env, capture_output=True, text=True,
                          timeout=timeout_s, cwd=home)


# A sequence cap of 2 under 4 streams, CUDA graphs off: two decisive keepers (the cap, the
# graphs). At time scale 4 a launch measures for seconds, room to stop it mid-way.
# No profile: on the sim it rides on the baseline's server, seconds more of every run's baseline
# at this time scale; a run stopped while profiling asks for it (`write_targets(profile=True)`).
SLOW_TARGET = {
    "engine": "sim", "model": str(SIM_MODEL),
    "server_args": ["--gpu", "H100", "--time-scale", "4", "--max-num-seqs", "2", "--enforce-eager"],
    "workload": {"kind": "random", "isl": 256, "osl": 128, "concurrency": 4, "num_prompts": 16},
    "repeats": 2, "max_trials": 3, "target_gain_pct": 1000, "sweep_concurrencies": [4], "profile": False}
DEADLINE_S = 300


def write_targets(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sim.yaml").write_text(yaml.safe_dump({**SLOW_TARGET, **changes}))
    return folder


def job_argv(job: str, partition: str, select: str | None = None) -> list[str]:
    """`dagster job execute` of a job's partition; `select`: its assets to run (comma-separated), else all."""
    return [sys.executable, "-m", "dagster", "job", "execute", "-m", "hyperloom_assets.definitions", "-j", job,
            "--tags", json.dumps({"dagster/partition": partition}), *(["-o", select] if select else [])]


def start(job: str, home: Path, targets: Path, log: Path, select: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets)}
    with log.open("w") as out:
        return subprocess.Popen(job_argv(job, "sim", select), env=env, stdout=out, stderr=subprocess.STDOUT, cwd=home)


def wait_mid_trial(process: subprocess.Popen, log: Path, home: Path, trial: int = 1,
                   deadline_s: float = DEADLINE_S) -> int:
    """Until `trial` has a finished launch and its next server is up; returns that server's pid."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the run ended early:\n{log.read_text()[-3000:]}"
        text = log.read_text()
        finished = re.search(rf"trial {trial} [^\n]*: launch 1 \(variant\)", text)
        decided = re.search(rf"trial {trial} [^\n]*: (KEEP|REVERT|KEEP_UNSTABLE|FAILED|KILLED_OVERTIME) \(", text)
        assert not decided, f"trial {trial} ended at its first launch: this target no longer tests a stop mid-trial"
        if finished and "server ready" in text[finished.end():] and (alive := live_servers(home)):
            return alive[0]
        time.sleep(0.1)
    raise AssertionError(f"never reached the middle of trial {trial}:\n{log.read_text()[-3000:]}")


def wait_profiling(process: subprocess.Popen, log: Path, home: Path, deadline_s: float = DEADLINE_S) -> int:
    """Until the profiler runs on the baseline's server, after its measured rounds; returns its pid."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the run ended early:\n{log.read_text()[-3000:]}"
        text = log.read_text()
        assert "roofline - " not in text, "the baseline step ended before its profile could be stopped"
        if "profile: profiler started" in text and (alive := live_servers(home)):
            return alive[0]
        time.sleep(0.1)
    raise AssertionError(f"never saw the profiled server up:\n{log.read_text()[-3000:]}")


def live_servers(home: Path) -> list[int]:
    """The pids of the servers the home's pidfiles name that still run."""
    pids = [record.pid for _, record in read_pidfiles(home / "hyperloom" / "pids")]
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


# Only the climb, in the run worker's own process (the implicit asset job's default
# executor would put the step in a child process, and a kill of the parent would miss it).
# A resumed climb may leave `profile` out: the killed run materialized it before its trials.
def materialize_climb(home: Path, targets: Path, log: Path, partition: str,
                      select: str = "profile,candidates,trials") -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets)}
    argv = [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "hyperloom_assets.definitions",
            "--select", select, "--partition", partition]  # in process: Definitions' executor
    with log.open("w") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=home)


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


def kept(store: ResultStore, target: str) -> list[str]:
    """The names of the target's kept trials, in the order the climb kept them (its stack)."""
    context = store.measurements(target, "baseline")[0]["context_key"]
    return [trial["variant"]["name"] for trial in store.trials(context) if trial["outcome"] == "KEEP"]


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
