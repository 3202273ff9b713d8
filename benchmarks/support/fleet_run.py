"""A whole fleet deployment on this machine, as the README describes it: the daemon (its run
queue limits one run per host tag), one dagster-celery worker per host with concurrency 1,
Postgres for state and Redis as the broker. tests/fleet/test_celery_fleet.py and
benchmarks/fleet.py run targets through it and read back when each run ran."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import dagster as dg
import psutil
import yaml
from dagster._core.instance.ref import InstanceRef

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.core.fleet.tags import celery_queue

BIN = Path(sys.executable).parent


def write_fleet(root: Path, hosts: dict[str, dict], targets: dict[str, dict]) -> Path:
    """hosts.yaml, one target file per target (each naming its host) and a workspace file."""
    (root / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    folder = root / "targets"
    folder.mkdir(exist_ok=True)
    for name, body in targets.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    (root / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"python_module": {
        "module_name": "hyperloom_assets.definitions", "attribute": "defs"}}]}))
    return folder


def fleet_env(root: Path, postgres_url: str, broker: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERLOOM_")}
    return {**env, "DAGSTER_HOME": str(root / "home"), "HYPERLOOM_TARGETS_DIR": str(root / "targets"),
            "HYPERLOOM_POSTGRES_URL": postgres_url, "HYPERLOOM_CELERY_BROKER": broker,
            "HYPERLOOM_CHECK_FOREIGN_SERVERS": "0", "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def _spawn(argv: list[str], env: dict, log: Path, cwd: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def group_alive(pgid: int) -> list[int]:
    alive = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.info["pid"])
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def stop_group(process: subprocess.Popen, timeout_s: float = 20.0) -> list[int]:
    """TERM the process group, KILL what stays; the pids still alive afterwards (none, normally)."""
    for signum, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + wait_s
        while group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not group_alive(process.pid):
            break
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    return group_alive(process.pid)


@contextmanager
def deployed(root: Path, hosts: list[str], env: dict) -> Iterator[list[subprocess.Popen]]:
    """The daemon and one worker per host, stopped (whole process groups) on every path."""
    write_instance_config(Path(env["DAGSTER_HOME"]), env)
    # The schema first, once: a daemon and workers starting together on a fresh database
    # race to create it, and the loser fails its run ("relation instance_info already exists").
    subprocess.run([str(BIN / "dagster"), "instance", "migrate"], env=env, cwd=root, check=True,
                   capture_output=True, timeout=300)
    processes = [_spawn([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], env, root / "daemon.log", root)]
    try:
        for host in hosts:
            processes.append(_spawn([str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
                                     "-y", str(Path(env["DAGSTER_HOME"]) / "celery.yaml"), "-q", celery_queue(host),
                                     "-n", host, "--", "--concurrency", "1"], env, root / f"worker-{host}.log", root))
        yield processes
    finally:
        survivors = [pid for process in processes for pid in stop_group(process)]
        if survivors:
            raise RuntimeError(f"fleet processes outlived their stop: {survivors}")


def backfill(root: Path, env: dict, job: str, partitions: list[str]) -> None:
    done = subprocess.run([str(BIN / "dagster"), "job", "backfill", "-w", "workspace.yaml", "-j", job,
                           "--partitions", ",".join(partitions), "--noprompt"],
                          env=env, cwd=root, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"dagster job backfill failed: {done.stdout}{done.stderr}")


def run_records(home: Path) -> list[dg.RunRecord]:
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        return list(instance.get_run_records())


def wait_finished(root: Path, count: int, deadline_s: float) -> list[dg.RunRecord]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        records = run_records(root / "home")
        if len(records) == count and all(r.dagster_run.is_finished for r in records):
            return records
        time.sleep(2)
    statuses = {r.dagster_run.tags.get("dagster/partition"): r.dagster_run.status.value for r in records}
    events = [f"--- {p.name}\n" + "\n".join(line for line in p.read_text(errors="replace").splitlines()
                                           if any(word in line for word in ("received", "succeeded", "ERROR", "rror:")))
              for p in sorted(root.glob("worker-*.log"))]
    daemon = (root / "daemon.log").read_text(errors="replace")
    problems = "\n".join(line for line in daemon.splitlines() if "ERROR" in line or "rror" in line)[-4000:]
    raise TimeoutError(f"runs not finished in {deadline_s:.0f} s: {statuses}\n" + "\n".join(events)
                       + f"\n--- daemon errors\n{problems}")


def overlaps(first: dg.RunRecord, second: dg.RunRecord) -> bool:
    return first.start_time < second.end_time and second.start_time < first.end_time


def failures(home: Path) -> dict[str, list[str]]:
    """Why each run that did not succeed failed: its failure events, by target."""
    found: dict[str, list[str]] = {}
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        for run in instance.get_runs():
            if run.status != dg.DagsterRunStatus.SUCCESS:
                found[run.tags.get("dagster/partition", run.run_id)] = [
                    str(e.dagster_event.event_specific_data)[:2000] for e in instance.all_logs(run.run_id)
                    if e.dagster_event and e.dagster_event.event_type_value in ("STEP_FAILURE", "RUN_FAILURE",
                                                                                 "ENGINE_EVENT") and "rror" in str(e.dagster_event.event_specific_data)]
    return found
