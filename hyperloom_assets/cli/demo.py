"""`make demo`: run a job for one target through `dagster job execute`, then say what it found.

The run goes through the real CLI (as a user would run it), its full log is kept in
DAGSTER_HOME, and the headline is read back from the instance's materializations.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROGRESS_MARKERS = ("STEP_START", "STEP_SUCCESS", "STEP_FAILURE", "RUN_SUCCESS", "RUN_FAILURE", "ASSET_MATERIALIZATION",
                    "ASSET_CHECK_EVALUATION")


def run_job(job: str, target: str, log_path: Path) -> int:
    argv = [sys.executable, "-m", "dagster", "job", "execute", "-m", "hyperloom_assets.definitions", "-j", job,
            "--tags", json.dumps({"dagster/partition": target})]
    print(f"running: {' '.join(argv[2:])}\nfull log: {log_path}", flush=True)
    with log_path.open("w") as log, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if any(marker in line for marker in PROGRESS_MARKERS):
                print("  " + line.strip()[:200], flush=True)
        return proc.wait()


def latest_metadata(asset: str, target: str) -> dict:
    import dagster as dg  # imported late: the job above must not wait for it

    with dg.DagsterInstance.get() as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[target]), limit=1).records
        if not records:
            return {}
        materialization = records[0].asset_materialization
        return {key: getattr(value, "value", value) for key, value in (materialization.metadata or {}).items()}


def print_summary(target: str) -> None:
    report = latest_metadata("final_report", target)
    if report:
        print(f"\n{target}: {report.get('baseline_output_throughput', 0):.1f} -> {report.get('final_output_throughput', 0):.1f} "
              f"output tok/s ({report.get('gain_pct', 0):+.1f}%), stop reason: {report.get('stop_reason')}, "
              f"{report.get('launches', '?')} server launches")
        print(f"report: {report.get('report_path')}")
    baseline = latest_metadata("baseline", target)
    if baseline and not report:
        print(f"\n{target} baseline: {baseline['output_throughput']:.1f} output tok/s "
              f"[{baseline['output_throughput_ci_low']:.1f}, {baseline['output_throughput_ci_high']:.1f}] "
              f"over {baseline['repeats']} repeats")
        print(f"server: {baseline['argv']}")
    print(f"\nDagster state: {os.environ.get('DAGSTER_HOME')}; open the UI with `make ui` "
          "(dagster dev -w workspace.yaml) and look at the target's partition.")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hyperloom_assets.cli.demo", description=__doc__.splitlines()[0].strip("`"))
    p.add_argument("--job", default="optimize_job", help="the Dagster job to run (default optimize_job)")
    p.add_argument("--target", default="tiny-llama-cpu", help="the target (the job's partition) to run it for")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    home = Path(os.environ.get("DAGSTER_HOME") or ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    started = time.monotonic()
    code = run_job(args.job, args.target, home / f"demo-{time.strftime('%Y%m%d-%H%M%S')}.log")
    print(f"\n{args.job} for {args.target}: {'succeeded' if code == 0 else 'FAILED'} in {time.monotonic() - started:.0f} s")
    print_summary(args.target)
    return code


if __name__ == "__main__":
    sys.exit(main())
