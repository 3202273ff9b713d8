"""A parallel climb (`parallel_trials: 4` on a host that declares 4 GPUs) killed outright
(SIGKILL) through `dagster job execute` while trials measure at once: the next run replays
every trial and launch the killed one finished, measures none of them again, reaps the
orphan servers and takes over the dead run's device leases, and completes."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest
import yaml

from benchmarks.support.job_runs import (
    DEADLINE_S,
    SIM_MODEL,
    execute,
    runs_of,
    start,
    stop_mid_trial,
    store_of,
)
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.process_group import PidRecord, read_pidfiles
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.sim.devices import DEVICES_DIR_ENV
from tests.conftest import reap_pid_dir

pytestmark = pytest.mark.cli

REPLAYED_LAUNCH = re.compile(r"- trials - trial \d+ [^\n]*: launch \d+ \([a-z]+\) [^\n]*, replayed from the ledger$",
                             re.M)
REPLAYED_TRIAL = re.compile(r"- trials - trial \d+ [^\n]*: [A-Z_]+ \([^\n]*, replayed from the ledger$", re.M)
ROLE_IDS = {"variant": "measurement_ids", "best": "best_measurement_ids", "rebench": "rebench_measurement_ids"}
UPTO_TRIALS = "baseline,roofline,profile,candidates,trials"
# Three values of the cap and one of the batch: more trials than the run's two pairs of slots (each
# launch beside one of the best's), so a trial settles while others measure. At time scale 2 a launch
# measures for seconds and four servers with their clients do not starve each other of two cores.
PARALLEL_TARGET = {
    "engine": "sim", "model": str(SIM_MODEL), "host": "box", "parallel_trials": 4,
    "server_args": ["--gpu", "H100", "--time-scale", "2", "--max-num-seqs", "4"],
    "search_space": {"args": {"--max-num-seqs": [8, 16, 32], "--max-num-batched-tokens": [4096]}, "only": True},
    "workload": {"kind": "random", "isl": 256, "osl": 32, "concurrency": 16, "num_prompts": 32},
    "repeats": 2, "max_trials": 6, "target_gain_pct": 1000, "profile": False, "sweep_concurrencies": [16]}


@pytest.fixture
def four_gpu_box(tmp_path, home, monkeypatch) -> Path:
    """The hosts file's `box`, 4 emulated GPUs (the subprocesses inherit the environment); its
    pidfiles' folder, where no server may outlive the test."""
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"box": {"kind": "local", "gpus": [0, 1, 2, 3]}}))
    monkeypatch.setenv("HYPERLOOM_HOSTS_FILE", str(tmp_path / "hosts.yaml"))
    monkeypatch.setenv(DEVICES_DIR_ENV, str(tmp_path / "devices"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # As the in-process tests' host: another test's servers on this machine are not this run's business.
    monkeypatch.setenv("HYPERLOOM_CHECK_FOREIGN_SERVERS", "0")
    pids = LocalHost(name="box", state_dir=str(home / "hyperloom")).pid_dir()
    yield pids
    untracked = servers_in(home)
    for server in untracked:  # a server no pidfile names: its run's worker is the test's child, so it is ours
        server.kill()
    assert reap_pid_dir(pids) == [] and untracked == [], "a server outlived the runs"


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def servers_in(home: Path) -> list[psutil.Process]:
    """The live sim servers started in `home` (a run worker's servers run in its folder), pidfile or not."""
    found = []
    for proc in psutil.process_iter():
        try:
            if "sim-serve" in proc.cmdline() and Path(proc.cwd()).is_relative_to(home) and running(proc.pid):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def live_servers(pids: Path, owner: int | None = None) -> list[PidRecord]:
    """The live servers of the pidfiles; of one run worker's launches, where `owner` names its pid."""
    return [record for _, record in read_pidfiles(pids)
            if running(record.pid) and owner in (None, record.owner_pid)]


def context_of(store: ResultStore) -> str | None:
    rows = store.measurements("sim", "baseline")
    return rows[0]["context_key"] if rows else None


class Killed(NamedTuple):
    """A run at its kill, and the ledger's rows then as the result store keeps them (resources/store/
    results.py: a trial row's "record" is a TrialRecord, a look row's a Look, core/decisions/trial_record.py)."""

    run_id: str
    servers: list[int]  # its servers up when it was killed: orphans now
    settled: dict[str, dict]  # the trials settled, by key
    looks: list[dict]  # the finished launches of unsettled trials, and the bests' fresh launches


def trials_at_once(up: list[PidRecord], store: ResultStore, context: str) -> bool:
    """Whether two trials' servers are among `up`. A launch's folder is named for its kind and config
    (trials.py); one of a config no best has had is a trial's (its variant, or its stack's rebench),
    and a trial launches its own config alone, so two such configs are two trials'."""
    kept = [row["fingerprint"].split("@")[0] for row in store.trials(context) if row["outcome"] == "KEEP"]
    bests = {"baseline", *kept}
    return len({Path(record.log_path or "").parent.name.split("-")[1] for record in up} - bests) >= 2


def in_flight(store: ResultStore, context: str) -> set[str]:
    """Keys of the unsettled trials with a finished launch in the ledger (a best's fresh launch is no trial)."""
    settled = {row["fingerprint"] for row in store.trials(context)}
    return {row["fingerprint"] for row in store.looks(context)
            if row["fingerprint"] not in settled and not row["fingerprint"].startswith("best-relaunch:")}


def killed_when(home: Path, targets: Path, log: Path, pids: Path,
                ready: Callable[[ResultStore, str, list[PidRecord]], bool]) -> Killed:
    """A run up to the trials SIGKILLed once `ready(store, context, its live servers)`; the servers up
    then are left running."""
    process = start("optimize_job", home, targets, log, select=UPTO_TRIALS)
    store, servers = store_of(home), []

    def reach() -> int:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            assert process.poll() is None, f"the run ended before the moment to kill it:\n{log.read_text()[-3000:]}"
            if (context := context_of(store)) and (up := live_servers(pids, process.pid)) \
                    and ready(store, context, up):
                servers.extend(record.pid for record in up)
                return servers[0]
            time.sleep(0.05)
        raise AssertionError(f"never reached the moment to kill the run:\n{log.read_text()[-3000:]}")

    stop_mid_trial(process, reach, process.kill, wait_teardown=False)
    context = context_of(store)
    return Killed(run_id=runs_of(home)[-1].run_id, servers=servers,
                  settled={row["fingerprint"]: row for row in store.trials(context)}, looks=store.looks(context))


def measured_again(killed: Killed, store: ResultStore, context: str) -> list[str]:
    """The launches finished before the kill that later runs measured anew: a trial's launch left out of
    its record while the trial launched its role again (a best's launch: under the same best), or a
    launch of a trial never settled, or of a best's fresh launch, gone from the ledger."""
    trials, looks = {row["fingerprint"]: row["record"] for row in store.trials(context)}, store.looks(context)
    found = []
    for row in killed.looks:
        key, look = row["fingerprint"], row["record"]
        what = f"{key} launch {row['look']} ({look['role']}, measurement {look['measurement']['measurement_id']})"
        record = trials.get(key)
        if record is None:
            found += [] if any(now["record"] == look for now in looks) else [what]
            continue
        if look["role"] not in ROLE_IDS:
            continue  # a launch of a role no trial asks for, so never one of its looks
        if look["role"] == "best" and look["against"] != record["against_key"]:
            continue  # a launch of the best it was measured against before the kill, not of the one it settled on
        finished = {r["record"]["measurement"]["measurement_id"] for r in killed.looks if r["fingerprint"] == key}
        ids = record[ROLE_IDS[look["role"]]]
        if look["measurement"]["measurement_id"] not in ids and set(ids) - finished:
            found.append(what)
    return found


def test_sigkill_with_trials_in_flight_resumes_without_measuring_a_finished_launch_again(
        tmp_path, home, four_gpu_box) -> None:
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "sim.yaml").write_text(yaml.safe_dump(PARALLEL_TARGET))
    store = store_of(home)
    killed = killed_when(home, targets, tmp_path / "killed.log", four_gpu_box,
                         lambda store, context, up: trials_at_once(up, store, context)
                         and bool(store.trials(context) or in_flight(store, context)))
    time.sleep(1)
    assert [pid for pid in killed.servers if running(pid)], "the killed run's servers are orphans"
    held = HostLeases(store).of_host("box")
    assert {lease.holder.run_id for lease in held} == {killed.run_id} and len(held) == 4, \
        "the dead run still holds its four devices"

    # Re-executed from the failed step, as Dagster's "from failure" does: the baseline stands.
    resumed = execute("optimize_job", "sim", home, targets, timeout_s=DEADLINE_S, select="trials")
    (tmp_path / "resumed.log").write_text(resumed.stderr)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    replays = len(REPLAYED_TRIAL.findall(resumed.stderr)) + len(REPLAYED_LAUNCH.findall(resumed.stderr))
    assert len(REPLAYED_TRIAL.findall(resumed.stderr)) == len(killed.settled) and replays > 0, \
        "every trial settled before the kill is replayed, and the trials in flight resume from their launches"
    assert f"reclaimed the lease of dead run {killed.run_id}" in resumed.stderr
    assert not [pid for pid in killed.servers if running(pid)], "the orphans were reaped"
    assert servers_in(home) == [], "no server is left, even one started as the run was killed"
    context = context_of(store)
    for fingerprint, row in killed.settled.items():
        now = next(r for r in store.trials(context) if r["fingerprint"] == fingerprint)
        assert (now["run_id"], now["record"]) == (killed.run_id, row["record"]), f"{fingerprint}: settled once"
    assert measured_again(killed, store, context) == []
    assert HostLeases(store).of_host("box") == [], "the dead run's device leases were taken over and released"
