"""A run whose worker died is released by the next run on this machine: marked failed, so it
no longer counts as the run in progress on its host."""

from __future__ import annotations

import subprocess
import sys

import dagster as dg
import psutil

from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.run_workers import WORKER_SUFFIX, WorkerRecord, dead_workers, record_worker


@dg.op
def noop() -> None:
    pass


@dg.job
def some_job() -> None:
    noop()


def dead_worker(folder, run_id: str) -> None:
    """The record a killed run worker leaves: its pid and start time, its process gone."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    create_time = psutil.Process(gone.pid).create_time()
    gone.wait()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{run_id}{WORKER_SUFFIX}").write_text(
        WorkerRecord(run_id=run_id, pid=gone.pid, create_time=create_time).model_dump_json())


def test_the_next_run_marks_a_dead_workers_run_failed(tmp_path) -> None:
    host = LocalHost(state_dir=str(tmp_path / "state"), check_foreign_processes=False)
    with dg.instance_for_test() as instance:
        dead = instance.create_run_for_job(some_job, status=dg.DagsterRunStatus.STARTED)
        alive = instance.create_run_for_job(some_job, status=dg.DagsterRunStatus.STARTED)
        dead_worker(host.workers_dir(), dead.run_id)
        record_worker(host.workers_dir(), alive.run_id)  # this process: alive

        released = host.release_dead_runs(instance, "the-next-run")

        assert released == [dead.run_id]
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED, "a live worker's run is left"
        assert [record.run_id for _, record in dead_workers(host.workers_dir())] == []
        assert (host.workers_dir() / f"{alive.run_id}{WORKER_SUFFIX}").exists()
