"""How long `make test` takes, by tier, and its slowest tests.

Runs the README's test command (`make test`, as CI runs it) in this checkout with
pytest's JUnit XML switched on, then reads each test's time from it: minutes per tier
(the folder under tests/), the 15 slowest tests, and the wall time against the budget
of 30 minutes. Run it in a fresh clone of a clean commit, after `make setup` (whose
first run, about 3 minutes, is not counted; `make test` re-checks it in seconds), on a
machine with nothing else running: the README's tier table quotes its JSON.

Run: make setup && .venv/bin/python benchmarks/suite_time.py
Writes benchmarks/results/suite_time.json.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.results import start_run, write_results  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/", "tests/", "benchmarks/support/", "Makefile", "pyproject.toml")

BUDGET_MIN = 30.0


def test_times(junit: Path) -> list[dict]:
    """Each test case's file, name, seconds and outcome, from pytest's JUnit XML."""
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        path = case.get("classname", "").replace(".", "/")
        cases.append({"test": f"{path}.py::{case.get('name')}", "seconds": float(case.get("time", 0.0)),
                      "outcome": outcome})
    return cases


def tier_of(test: str) -> str:
    parts = test.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def summary(cases: list[dict], wall_s: float) -> dict:
    tiers = collections.defaultdict(float)
    for case in cases:
        tiers[tier_of(case["test"])] += case["seconds"]
    outcomes = collections.Counter(case["outcome"] for case in cases)
    return {"wall_min": wall_s / 60, "tests_min": sum(tiers.values()) / 60,
            "budget_min": BUDGET_MIN, "within_budget": wall_s / 60 <= BUDGET_MIN, "outcomes": dict(outcomes),
            "tiers_min": {tier: seconds / 60 for tier, seconds in sorted(tiers.items(), key=lambda kv: -kv[1])},
            "slowest": sorted(cases, key=lambda c: -c["seconds"])[:15]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    _, bench_run = start_run(parser)
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        env = {**os.environ, "PYTEST_ADDOPTS": f"--junitxml={junit}"}
        started = time.monotonic()
        done = subprocess.run(["make", "test"], cwd=ROOT, env=env)
        wall_s = time.monotonic() - started
        result = summary(test_times(junit), wall_s)
    result["exit_code"] = done.returncode
    print(f"\nmake test: {result['wall_min']:.1f} min wall (tests "
          f"{result['tests_min']:.1f}), budget {BUDGET_MIN:.0f}: {'met' if result['within_budget'] else 'not met'}; "
          f"{result['outcomes']}")
    print(f"{'tier':<14} {'minutes':>8}")
    for tier, minutes in result["tiers_min"].items():
        print(f"{tier:<14} {minutes:>8.1f}")
    print("\nslowest:")
    for case in result["slowest"]:
        print(f"{case['seconds']:>8.1f} s  {case['test']}")
    write_results("suite_time", result, bench_run)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
