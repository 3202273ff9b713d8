"""The one way a benchmark writes its results: JSON under benchmarks/results/, with the machine.

The README quotes these files; a number is only checkable against its source when the
file says where and when it was measured (cores, load, CPU, commit), because these
machines are shared and noisy.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "benchmarks" / "results"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _git_dirty() -> bool | None:
    """Whether tracked files differ from the commit (the run's code is not the commit's); None: unknown."""
    try:
        return bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, check=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None


# The commit the benchmark's code was loaded from, and whether the tree matched it: a long
# run outlives a commit made meanwhile, and HEAD at the end would name code never executed.
STARTED_ON_COMMIT = _git_commit()
STARTED_DIRTY = _git_dirty()


def machine() -> dict[str, Any]:
    """Where and when: what a reader needs to weigh a timing."""
    return {
        "hostname": platform.node(), "cpu": _cpu_model(), "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version(),
        "git_commit": STARTED_ON_COMMIT, "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def write_results(name: str, payload: dict[str, Any] | list[Any]) -> Path:
    """benchmarks/results/NAME.json: {"benchmark", "machine", "results"}; returns the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "commit": STARTED_ON_COMMIT, "dirty": STARTED_DIRTY,
                                "machine": machine(), "results": payload}, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path
