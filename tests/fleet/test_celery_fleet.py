"""Scale-out for real: a Redis broker, the daemon, and one Celery worker (concurrency 1) per
host, standing in for two GPU hosts. Runs of targets on two hosts overlap in time; runs of
two targets on one host never do. Bounded in time; nothing is left running afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.instance.ref import InstanceRef

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.core.fleet.tags import CELERY_QUEUE_TAG, HOST_TAG, celery_queue
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.results import ResultStore
from tests.conftest import SIM_MODEL
from tests.sensors.test_daemon import group_alive, stop_group

pytestmark = pytest.mark.cli

DEADLINE_S = 420
HOST_OF = {"a1": "gpu-a", "a2": "gpu-a", "b1": "gpu-b", "b2": "gpu-b"}
BIN = Path(sys.executable).parent


def fleet_repo(root: Path) -> Path:
    (root / "hosts.yaml").write_text(yaml.safe_dump({"gpu-a": {"kind": "local"}, "gpu-b": {"kind": "local"}}))
    targets = root / "targets"
    targets.mkdir()
    for name, host in HOST_OF.items():
        (targets / f"{name}.yaml").write_text(yaml.safe_dump({
            "engine": "sim", "model": str(SIM_MODEL), "host": host, "repeats": 2,
            "server_args": ["--gpu", "H100", "--time-scale", "20", "--max-num-seqs", "4", "--enforce-eager"],
            "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 8, "num_prompts": 32}}))
    (root / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"python_module": {
        "module_name": "hyperloom_assets.definitions", "attribute": "defs"}}]}))
    return targets


def spawn(argv: list[str], env: dict, log: Path, cwd: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def finished_runs(home: Path) -> list[dg.RunRecord]:
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        return list(instance.get_run_records())


def gone(pgid: int, timeout_s: float = 15.0) -> bool:
    """The group is empty (a KILLed process takes a moment to be reaped by init)."""
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not group_alive(pgid)


def overlaps(first: dg.RunRecord, second: dg.RunRecord) -> bool:
    return first.start_time < second.end_time and second.start_time < first.end_time


def test_two_hosts_overlap_and_one_host_never_does(tmp_path, postgres_url, redis_server) -> None:
    targets, home = fleet_repo(tmp_path), tmp_path / "home"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HYPERLOOM_")},
           "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets), "HYPERLOOM_POSTGRES_URL": postgres_url,
           "HYPERLOOM_CELERY_BROKER": redis_server.url, "HYPERLOOM_CHECK_FOREIGN_SERVERS": "0",
           "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    write_instance_config(home, env)
    daemon = spawn([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], env, tmp_path / "daemon.log", tmp_path)
    workers = [spawn([str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
                      "-y", str(home / "celery.yaml"), "-q", celery_queue(host), "-n", host, "--", "--concurrency", "1"],
                     env, tmp_path / f"worker-{host}.log", tmp_path) for host in ("gpu-a", "gpu-b")]
    try:
        backfill = subprocess.run([str(BIN / "dagster"), "job", "backfill", "-w", "workspace.yaml", "-j", "baseline_job",
                                   "--partitions", ",".join(HOST_OF), "--noprompt"],
                                  env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
        assert backfill.returncode == 0, backfill.stdout + backfill.stderr
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            records = finished_runs(home)
            if len(records) == 4 and all(r.dagster_run.is_finished for r in records):
                break
            time.sleep(3)
        else:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log")))
            raise AssertionError(f"runs did not finish in {DEADLINE_S} s: {[r.dagster_run.status for r in records]}\n{logs}")
    finally:
        for process in (daemon, *workers):
            stop_group(process)
    for process in (daemon, *workers):
        assert gone(process.pid), f"a daemon or worker process outlived the test: {group_alive(process.pid)}"

    by_target = {r.dagster_run.tags["dagster/partition"]: r for r in records}
    assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records), {
        name: r.dagster_run.status for name, r in by_target.items()}
    for name, record in by_target.items():
        assert record.dagster_run.tags[HOST_TAG] == HOST_OF[name], "runs carry their target's host"
        assert record.dagster_run.tags[CELERY_QUEUE_TAG] == celery_queue(HOST_OF[name])
    assert not overlaps(by_target["a1"], by_target["a2"]), "two targets on one host never overlap"
    assert not overlaps(by_target["b1"], by_target["b2"]), "two targets on one host never overlap"
    assert any(overlaps(by_target[a], by_target[b]) for a in ("a1", "a2") for b in ("b1", "b2")), \
        "targets on two hosts run at the same time"
    store = ResultStore(url=postgres_url)
    assert HostLeases(store).held() == [], "no lease outlives its run"
    assert sorted({row["target"] for name in HOST_OF for row in store.measurements(name)}) == sorted(HOST_OF)
