"""Runs that write one result store at once, as two targets' runs would: each process
records what a climb records (a measurement and a look per launch, the trial that drops
its looks, a stop at the end), so a test or the fault matrix can check nothing collided."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa

from hyperloom_assets.resources.store.results import ResultStore

TRIALS_PER_RUN = 40
STARTUP_S = 8.0  # time for every writer's interpreter to import, so they start writing together
REPO = Path(__file__).resolve().parents[2]


def write_like_a_run(url: str, target: str, trials: int = TRIALS_PER_RUN, start_at: float = 0.0) -> None:
    """One run's writes for `target`, as fast as the store takes them, from `start_at` (epoch seconds) on."""
    time.sleep(max(0.0, start_at - time.time()))  # every writer touches the store at the same moment
    store = ResultStore(url=url)
    context = f"ctx-{target}"
    for index in range(trials):
        fingerprint = f"{target}-{index:04d}"
        measurement = store.record_measurement(target=target, kind="trial", argv=["serve", str(index)], env={},
                                               started_at=datetime.now(timezone.utc), context_key=context,
                                               fingerprint=fingerprint, run_id=target,
                                               measurement={"output_throughput": float(index)})
        store.record_look(context_key=context, fingerprint=fingerprint, look=1, record={"m": measurement},
                          run_id=target)
        store.record_trial(context_key=context, target=target, fingerprint=fingerprint, variant={"name": fingerprint},
                           outcome="REVERT", record={"index": index}, measurement_id=measurement, run_id=target)
    store.record_stop(target=target, stop_reason="budget_exhausted", run_id=target)


def run_writers_at_once(url: str, targets: list[str], trials: int = TRIALS_PER_RUN) -> tuple[float, list[str]]:
    """Each target's writer in its own process, writing from one moment on: (wall seconds from that moment,
    their stderr tails on failure)."""
    code = "import sys; from benchmarks.support.store_writers import write_like_a_run as w; " \
           "w(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))"
    start_at = time.time() + STARTUP_S
    started = time.monotonic()
    processes = [subprocess.Popen([sys.executable, "-c", code, url, target, str(trials), str(start_at)],
                                  stderr=subprocess.PIPE, cwd=REPO) for target in targets]
    errors = []
    for process in processes:
        _, stderr = process.communicate(timeout=600)
        if process.returncode != 0:
            errors.append(stderr.decode(errors="replace")[-2000:])
    return time.monotonic() - started - STARTUP_S, errors


def damage(url: str, targets: list[str], trials: int = TRIALS_PER_RUN) -> dict[str, int]:
    """What the writers should have left and did not: rows missing or extra, per kind, summed over targets."""
    store = ResultStore(url=url)
    missing = {"measurements": 0, "trials": 0, "looks_left": 0, "stops": 0, "mismatched": 0}
    for target in targets:
        measurements = store.measurements(target)
        rows = store.trials(f"ctx-{target}")
        missing["measurements"] += abs(trials - len(measurements))
        missing["trials"] += abs(trials - len(rows))
        missing["looks_left"] += len(store.looks(f"ctx-{target}"))
        missing["stops"] += abs(1 - len(store.stops(target)))
        ids = {row["id"]: row for row in measurements}
        missing["mismatched"] += sum(1 for row in rows if row["measurement_id"] not in ids
                                     or ids[row["measurement_id"]]["fingerprint"] != row["fingerprint"])
    return missing


def fill_up(store: ResultStore) -> None:
    """Cap the file at the pages it has: SQLite then answers SQLITE_FULL, as on a full disk."""
    engine = store.engine()
    with engine.connect() as conn:
        pages = conn.execute(sa.text("PRAGMA page_count")).scalar()

    @sa.event.listens_for(engine, "connect")
    def _cap(dbapi_connection, _record) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    engine.dispose()


def integrity(url: str) -> str:
    """SQLite's own verdict on the file ('ok'), or 'n/a' for another database."""
    if not url.startswith("sqlite"):
        return "n/a"
    with ResultStore(url=url).engine().connect() as conn:
        return json.dumps([row[0] for row in conn.execute(sa.text("PRAGMA integrity_check"))])[2:-2]
