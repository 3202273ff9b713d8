"""Which Dagster run each worker process on this host serves, and the runs whose worker died.

A run whose worker process is killed (SIGKILL, the OOM killer, a closed laptop) stays
STARTED in Dagster's storage and keeps the host pool's slot its step claimed, so the
next run's first serving step would wait for that slot forever. Dagster's run
monitoring cannot see it: the default run launcher has no worker health check, and a
`dagster job execute` run has no code server watching its process. So every run that
uses a host records its worker here (pid and creation time, so a reused pid never
counts as alive), and the next run on the host marks the runs of dead workers failed
and frees their slots before it claims its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
from pydantic import ValidationError

from hyperloom_assets.core.models import Strict
from hyperloom_assets.resources.hosts.process_group import process_alive

WORKER_SUFFIX = ".worker.json"


class WorkerRecord(Strict):
    run_id: str
    pid: int
    create_time: float


def record_worker(folder: Path, run_id: str) -> Path:
    """This process serves `run_id`: written at the run's start, removed at its end."""
    folder.mkdir(parents=True, exist_ok=True)
    me = psutil.Process()
    path = folder / f"{run_id}{WORKER_SUFFIX}"
    partial = path.with_suffix(".tmp")
    partial.write_text(WorkerRecord(run_id=run_id, pid=os.getpid(), create_time=me.create_time()).model_dump_json())
    partial.replace(path)
    return path


def dead_workers(folder: Path) -> list[tuple[Path, WorkerRecord]]:
    """Records whose process is gone; an unreadable record is not ours to judge and is left."""
    found = []
    for path in sorted(folder.glob(f"*{WORKER_SUFFIX}")) if folder.is_dir() else []:
        try:
            record = WorkerRecord.model_validate_json(path.read_text())
        except (OSError, ValidationError, ValueError):
            continue
        if not process_alive(record.pid, record.create_time):
            found.append((path, record))
    return found
