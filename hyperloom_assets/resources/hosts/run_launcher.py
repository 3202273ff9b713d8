"""Dagster's default run launcher, with the worker health check run monitoring needs.

Run monitoring (the daemon) marks a STARTED run failed when its launcher says the worker
is gone, but DefaultRunLauncher has no health check, so a run whose worker was killed
would hold its host in the run queue forever. This launcher answers from the worker
records every run writes while it holds a host (run_workers.py), for runs launched by
the daemon and by `dagster job execute` alike. A run with no record (not of one target,
or between its start and its resources' setup) is not ours to judge: RUNNING.
"""

from __future__ import annotations

from pathlib import Path

from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun

from hyperloom_assets.resources.hosts.run_workers import worker_alive


def workers_dir(dagster_home: str | Path) -> Path:
    """Where the local host records run workers by default ($DAGSTER_HOME/hyperloom/workers)."""
    return Path(dagster_home) / "hyperloom" / "workers"


class WorkerCheckingRunLauncher(DefaultRunLauncher):
    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        alive = worker_alive(workers_dir(self._instance.root_directory), run.run_id)
        if alive is False:
            return CheckRunHealthResult(WorkerStatus.FAILED, f"the run worker recorded for run {run.run_id} is gone")
        return CheckRunHealthResult(WorkerStatus.RUNNING)
