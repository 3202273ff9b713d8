"""The fault matrix: every fault of issue 16, made real, and what each left behind.

On the sim: a run stopped mid-trial by SIGTERM, by Dagster's Terminate and by SIGKILL
(each resumed by the next run), a variant past the overtime limit, the result store
failing a write (full, read-only), two runs writing one store at once (SQLite and a real
PostgreSQL), the target file edited mid-run, each of the sim's server faults under a
trial (and one under the baseline; among them a stream chunk of the wrong shape and a
line that never ends), a port taken between preflight and launch, bad target files
beside a good one (undecodable, an unsafe name, an alias bomb), a variant whose env no
process can be launched with, and a foreign database at the store's URL. On
vLLM CPU (the generated tiny Llama): a server SIGKILLed mid-round, and the climb's
worker SIGKILLed mid-trial then resumed. For each it prints the outcome or stop reason,
the servers leaked, the launches measured twice, the records lost and the time to
recover, and writes benchmarks/results/faults.json.

Goal: zero in the leaked, measured-twice and lost columns (`target_met`); a row the
benchmark could not stage says NOT MEASURED and misses the goal.

    HYPERLOOM_CHECK_FOREIGN_SERVERS=0 .venv/bin/python benchmarks/faults.py [--no-vllm] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.support import fault_runs, fault_scenarios as scenarios  # noqa: E402
from benchmarks.support.fleet_services import start_postgres  # noqa: E402
from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.sim.engine_args import FAULTS  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/", "benchmarks/support/fault_runs.py", "benchmarks/support/fault_scenarios.py",
             "benchmarks/support/job_runs.py", "benchmarks/support/sim_climbs.py",
             "benchmarks/support/store_writers.py", "benchmarks/support/fleet_services.py")

COLUMNS = ("fault", "engine", "outcome", "leaked", "measured_twice", "lost", "recover_s")


def sim_rows() -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [(f"{how} mid-trial", lambda how=how: fault_runs.stopped_sim_run(how))
                                      for how in ("SIGTERM", "SIGINT", "Terminate", "SIGKILL")]
    rows += [("overtime", scenarios.overtime), ("store full", scenarios.store_full_mid_climb),
             ("store read-only", scenarios.store_read_only), ("writers sqlite", _sqlite_writers),
             ("writers postgres", _postgres_writers), ("target edited", fault_runs.target_edited_mid_run)]
    rows += [(f"sim server {kind}", lambda kind=kind: scenarios.sim_server_fault(kind)) for kind in FAULTS]
    rows += [("baseline server fault", scenarios.baseline_server_fault), ("port taken", scenarios.port_taken)]
    rows += [("bad target files", scenarios.bad_target_files), ("unlaunchable env", scenarios.unlaunchable_env),
             ("foreign database", scenarios.foreign_database)]
    return rows


def vllm_rows(model: Path) -> list[tuple[str, object]]:
    return [("vllm server killed", lambda: scenarios.vllm_server_killed_mid_round(model)),
            ("vllm sigkill resume", lambda: fault_runs.vllm_killed_and_resumed(model))]


def _sqlite_writers() -> dict:
    with tempfile.TemporaryDirectory(prefix="hyperloom-faults-") as folder:
        return scenarios.concurrent_writers(f"sqlite:///{folder}/shared.db", "sqlite")


def _postgres_writers() -> dict:
    postgres = start_postgres()
    try:
        return scenarios.concurrent_writers(postgres.create_database(), "postgres")
    finally:
        postgres.stop()


def _previous_rows() -> list[dict]:
    """The last run's rows, each with the commit it was measured on (the file's, unless the row says)."""
    path = Path(__file__).resolve().parent / "results" / "faults.json"
    if not path.is_file():
        return []
    last = json.loads(path.read_text())
    return [{"commit": last["commit"], **r} for r in last["results"]["rows"]]


def _measured(key: str, scenario) -> dict:  # noqa: ANN001
    """The scenario's row; one that fails to stage its fault is a row saying so, never the end of the run."""
    print(f"... {key}", file=sys.stderr, flush=True)
    try:
        return scenario()
    except Exception as exc:  # the benchmark's own failure: recorded, so the other rows still land
        traceback.print_exc()
        reason = (str(exc).splitlines() or [""])[0][:200]
        return {"fault": key, "engine": "vllm" if key.startswith("vllm") else "sim",
                "outcome": f"NOT MEASURED: {type(exc).__name__}: {reason}", "leaked": None, "measured_twice": None,
                "lost": None, "recover_s": None, "detail": "the benchmark could not stage this fault"}


def print_table(rows: list[dict]) -> None:
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in COLUMNS}
    print("  ".join(c.ljust(widths[c]) for c in COLUMNS))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in COLUMNS))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-vllm", action="store_true", help="the sim rows only")
    parser.add_argument("--only", default="", help="rows whose key contains this")
    args, bench_run = start_run(parser)
    with tempfile.TemporaryDirectory(prefix="hyperloom-tiny-") as folder:
        model = Path(folder) / "tiny-llama"
        plan = sim_rows()
        if not args.no_vllm:
            subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "tiny-model", str(model)], check=True,
                           capture_output=True)
            plan += vllm_rows(model)
        results = [_measured(key, scenario) for key, scenario in plan if args.only in key]
    print_table(results)
    for r in results:
        if r["detail"]:
            print(f"{r['fault']}: {r['detail']}")
    if args.only:  # a partial rerun replaces its rows in the last full run's results; each row keeps its commit
        kept = [r for r in _previous_rows() if (r["fault"], r["engine"]) not in {(n["fault"], n["engine"]) for n in results}]
        results = kept + [{"commit": bench_run.commit, **r} for r in results]
    met = all(r["leaked"] == r["measured_twice"] == r["lost"] == 0 for r in results)
    write_results("faults", {"rows": results, "target_met": met}, bench_run)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
