"""How long `make demo` takes to show its headline, and what it launched.

Runs the README's first command (`make demo`) in this checkout, keeps its output in
`.dagster_home/demo_time.log` (ignored by git: a rerun starts on a clean tree), and reads
back the job's own wall time ("succeeded in N s"), the headline it printed, each step's
time, and the run's report.json (its launches by step, validated gain and interval, stop
reason), against the budget of 15 minutes for the job. Run it in a
fresh clone of a clean commit, after `make setup` (not counted), with nothing else running:
the README's demo table quotes its JSON.

Run: make setup && .venv/bin/python benchmarks/demo_time.py
Writes benchmarks/results/demo_time.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.results import start_run, write_results  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/", "targets/", "Makefile")

BUDGET_S = 15 * 60
TARGET = "tiny-llama-cpu"


def latest_report(home: Path) -> dict:
    runs = sorted((home / "hyperloom" / "runs" / TARGET).iterdir(), key=lambda path: path.stat().st_mtime)
    return json.loads((runs[-1] / "report" / "report.json").read_text())


def read_demo(log: str, report: dict) -> dict:
    job_s = float(re.search(r"succeeded in (\d+) s", log).group(1))
    return {
        "command": "make demo", "job_s": job_s, "budget_s": BUDGET_S, "within_budget": job_s <= BUDGET_S,
        "headline": re.search(rf"^{TARGET}: .*$", log, re.M).group(0),
        "launches": report["launches"], "launch_count": sum(report["launches"].values()),
        "validated_gain_pct": report["validated_gain_pct"],
        "validated_gain_ci": [report["validated_gain_ci_low"], report["validated_gain_ci_high"]],
        "stop_reason": report["stop_reason"],
        "step_times": {m.group(1): m.group(2) for m in
                       re.finditer(r'Finished execution of step "([a-z_]+)" in ([0-9.]+[a-z]+(?:[0-9.]+[a-z]+)?)', log)}}


def main() -> int:
    _, bench_run = start_run(argparse.ArgumentParser(description=__doc__))
    log_path = ROOT / ".dagster_home" / "demo_time.log"
    log_path.parent.mkdir(exist_ok=True)
    with log_path.open("w") as out:
        code = subprocess.run(["make", "demo"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        print(f"make demo failed (exit {code}); see {log_path}")
        return code
    result = read_demo(log_path.read_text(), latest_report(ROOT / ".dagster_home"))
    write_results("demo_time", result, bench_run)
    print(f"make demo: job {result['job_s']:.0f} s (budget {BUDGET_S} s: "
          f"{'met' if result['within_budget'] else 'not met'}), {result['launch_count']} launches {result['launches']}")
    print(result["headline"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
