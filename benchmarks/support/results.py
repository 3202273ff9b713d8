"""The one way a benchmark starts and writes its results: JSON under benchmarks/results/.

docs/benchmarks.md is rendered from these files (benchmarks/render_page.py); a number is
only checkable against its source when the file says what ran it and where: the commit
and whether the tree matched it, the exact command line, the CPU, its cores and the load
average at the start and the end of the run (these machines are shared and noisy), and
the source paths the script declares it exercises (its `EXERCISES`), by which the page
marks the result stale once they change (benchmarks/support/staleness.py).

Every benchmark script parses its arguments with `start_run(parser)`, which refuses a
dirty tree at once (before minutes of measurement) unless `--allow-dirty` is given, and
passes the returned `RunStart` to `write_results`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict

from benchmarks.support.staleness import for_result, read_declaration

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "benchmarks" / "results"
# Benchmarks' own output: results written by earlier runs of this session change no code
# that runs, so they do not make the tree dirty (a run of several benchmarks in a row).
OWN_OUTPUT = "benchmarks/results/"


class DirtyTree(SystemExit):
    """The tree differs from its commit and --allow-dirty was not given."""


class RunStart(BaseModel):
    """What a run is from its first moment: the code it loaded, its command, the machine's load."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    commit: str
    dirty: bool | None
    dirty_files: list[str]
    command: list[str]
    started_at: str
    load_average_at_start: list[float]
    exercises: dict[str, tuple[str, ...]] | None = None  # the script's EXERCISES by result name; None: none


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                          timeout=10).stdout


def git_commit(root: Path = ROOT) -> str:
    try:
        return _git(root, "rev-parse", "--short", "HEAD").strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def dirty_files(root: Path = ROOT) -> list[str] | None:
    """`git status --porcelain` lines, less those under benchmarks/results/; None: git failed."""
    try:
        lines = _git(root, "status", "--porcelain", "--untracked-files=all").splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return [line for line in lines if not line[3:].startswith(OWN_OUTPUT)]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def check_tree(root: Path, allow_dirty: bool) -> tuple[bool | None, list[str]]:
    """(dirty, the files that make it so); raises DirtyTree for a dirty tree unless allowed."""
    files = dirty_files(root)
    dirty = None if files is None else bool(files)
    if dirty and not allow_dirty:
        shown = "\n  ".join(files[:20]) + ("\n  ..." if len(files) > 20 else "")
        raise DirtyTree(f"refusing to benchmark a dirty tree: the results would name commit {git_commit(root)}, "
                        f"whose code differs from what would run:\n  {shown}\n"
                        "commit (or stash) first, or pass --allow-dirty to record the run as dirty: true")
    return dirty, files or []


def start_run(parser: argparse.ArgumentParser, argv: list[str] | None = None, root: Path = ROOT,
              script: Path | None = None) -> tuple[argparse.Namespace, RunStart]:
    """Parse the benchmark's arguments (plus --allow-dirty), refuse a dirty tree, note the start.

    SCRIPT (default: the one running, sys.argv[0]) is read for its EXERCISES declaration.
    """
    parser.add_argument("--allow-dirty", action="store_true",
                        help="run on a tree that differs from its commit; the results say dirty: true")
    args = parser.parse_args(argv)
    dirty, files = check_tree(root, args.allow_dirty)
    command = [sys.executable, *(sys.argv if argv is None else [sys.argv[0], *argv])]
    return args, RunStart(commit=git_commit(root), dirty=dirty, dirty_files=files, command=command,
                          started_at=_now(), load_average_at_start=_load(),
                          exercises=read_declaration(script or Path(sys.argv[0]).resolve()))


def machine(run: RunStart) -> dict[str, Any]:
    """Where and when: what a reader needs to weigh a timing."""
    return {
        "hostname": platform.node(), "cpu": _cpu_model(), "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(), "git_commit": run.commit,
        "load_average_1_5_15_at_start": run.load_average_at_start, "load_average_1_5_15_at_end": _load(),
        "started_at": run.started_at, "finished_at": _now(),
    }


def write_results(name: str, payload: dict[str, Any] | list[Any], run: RunStart,
                  results_dir: Path | None = None) -> Path:
    """RESULTS_DIR/NAME.json: {"benchmark", "commit", "dirty", "command", "exercises", "machine", "results"}."""
    folder = results_dir or RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    exercises = for_result(run.exercises, name)
    record = {"benchmark": name, "commit": run.commit, "dirty": run.dirty, "command": run.command,
              "exercises": None if exercises is None else list(exercises), "machine": machine(run), "results": payload}
    if run.dirty:
        record["dirty_files"] = run.dirty_files
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path
