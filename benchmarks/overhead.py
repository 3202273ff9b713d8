"""How much of an optimize run is spent outside server start-up and measurement?

Runs `optimize_job` in process for a target (default: the shipped sim target, or a
vLLM CPU target with --target tiny-llama-cpu) with the host's `serve` timed from launch
to teardown. Everything else (Dagster, the store, planning, rendering) is overhead.
Target: under 3% of the wall time. Prints a table and writes
benchmarks/results/overhead.json. tiny-llama-cpu serves from `.cache/trees/vllm`: build it
first (`make .cache/trees/vllm/.git`, which `make demo` also does).

    .venv/bin/python benchmarks/overhead.py [--target sim-llama-8b-h100] [--max-trials N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.definitions import build_defs, check_foreign_servers
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.store.results import ResultStore

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/",)

REPO = Path(__file__).resolve().parent.parent


class TimedHost(LocalHost):
    """The local host, appending each launch's span (launch to teardown) to a JSONL file."""

    timings_path: str = ""

    @contextmanager
    def serve(self, spec, run_dir, label=None):
        started = time.monotonic()
        try:
            with super().serve(spec, run_dir, label) as launch:
                yield launch
        finally:
            with open(self.timings_path, "a") as out:
                out.write(json.dumps({"server_s": time.monotonic() - started}) + "\n")


def copy_target(name: str, folder: Path, max_trials: int | None) -> None:
    body = yaml.safe_load((REPO / "targets" / f"{name}.yaml").read_text())
    for field in ("model", "framework_tree"):  # relative to the repo, not the copy's folder
        if field in body:
            body[field] = str((REPO / body[field]).resolve())
    if max_trials is not None:
        body["max_trials"] = max_trials
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))


def measure(name: str, max_trials: int | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "targets").mkdir()
        copy_target(name, work / "targets", max_trials)
        timings = work / "timings.jsonl"
        host = TimedHost(state_dir=str(work / "state"), timings_path=str(timings),
                         check_foreign_processes=check_foreign_servers())
        defs = build_defs(work / "targets", host=host, store=ResultStore(url=f"sqlite:///{work / 'r.db'}"))
        with dg.instance_for_test() as instance:
            started = time.monotonic()
            result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key=name, instance=instance)
            wall = time.monotonic() - started
        spans = [json.loads(line)["server_s"] for line in timings.read_text().splitlines()]
    server = sum(spans)
    return {"target": name, "success": result.success, "wall_s": wall, "server_s": server, "launches": len(spans),
            "overhead_s": wall - server, "overhead_pct": 100 * (wall - server) / wall, "target_pct": 3.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", action="append", help="a shipped target name (repeatable)")
    parser.add_argument("--max-trials", type=int, default=None)
    args, bench_run = start_run(parser)
    rows = [measure(name, args.max_trials) for name in (args.target or ["sim-llama-8b-h100"])]
    print(f"{'target':<22} {'ok':>3} {'launches':>8} {'wall s':>8} {'server s':>9} {'overhead s':>10} {'overhead %':>10}")
    for r in rows:
        print(f"{r['target']:<22} {'yes' if r['success'] else 'no':>3} {r['launches']:>8} {r['wall_s']:>8.1f} "
              f"{r['server_s']:>9.1f} {r['overhead_s']:>10.1f} {r['overhead_pct']:>9.2f}%")
    write_results("overhead", rows, bench_run)


if __name__ == "__main__":
    main()
