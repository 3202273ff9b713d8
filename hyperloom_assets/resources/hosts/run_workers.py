"""Which Dagster run each worker process on this host serves, and the runs whose worker died.

A run whose worker process is killed (SIGKILL, the OOM killer, a closed laptop) stays
STARTED in Dagster's storage and holds its host (the run queue's `hyperloom/host`
limit), so the next queued run on the host would wait forever. Dagster's default run
launcher has no worker health check, and a `dagster job execute` run has no code server
watching its process. So every run that uses a host records its worker here (pid and
creation time, so a reused pid never counts as alive); the daemon's run monitoring asks
WorkerCheckingRunLauncher (run_launcher.py), which reads these records, and the next
run on this machine marks the runs of dead workers failed before it starts serving. While a run lives, CancelWatch turns a
Terminate from the UI into the same interrupt SIGTERM gives, however the run was started.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

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


def worker_alive(folder: Path, run_id: str) -> bool | None:
    """Is the worker recorded for `run_id` alive? None when there is no readable record."""
    try:
        record = WorkerRecord.model_validate_json((folder / f"{run_id}{WORKER_SUFFIX}").read_text())
    except (OSError, ValidationError, ValueError):
        return None
    return process_alive(record.pid, record.create_time)


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


class CancelWatch:
    """Interrupts this worker when its run is being terminated from Dagster.

    The UI's Terminate reaches a run the daemon launched through its code server, which
    interrupts the worker; a run started by `dagster job execute` has no code server, so
    Terminate only marks it CANCELING and the run would go on measuring. Watching the run's
    status from a thread and interrupting the main thread (SIGINT, as Ctrl-C does) gives
    both the same cancel: the step's interrupt, its servers torn down, `cancelled` recorded.
    """

    def __init__(self, instance: Any, run_id: str, poll_s: float = 2.0):
        self._instance, self._run_id, self._poll_s = instance, run_id, poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"cancel-watch-{run_id[:8]}", daemon=True)

    def start(self) -> CancelWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._poll_s + 5)

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                run = self._instance.get_run_by_id(self._run_id)
            except Exception:  # noqa: BLE001 - a storage hiccup must not kill the watch; try again next poll
                continue
            if run is not None and run.status.value == "CANCELING":
                os.kill(os.getpid(), signal.SIGINT)
                return
