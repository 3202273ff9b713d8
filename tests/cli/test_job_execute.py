"""The CLI tier: `dagster job execute` against a temporary DAGSTER_HOME and targets folder."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pytest

from benchmarks.support.job_runs import execute
from tests.assets.test_checks_sim import CHECKS
from tests.cli.conftest import FAST_SIM_TARGET, stored_check_executions, stored_metadata, write_target

pytestmark = pytest.mark.cli


def stored_checks(home: Path, partition: str) -> dict[str, bool]:
    """Each check's latest result for the partition, as the UI's Checks tab reads it."""
    keys = [dg.AssetCheckKey(dg.AssetKey(asset), name) for asset, names in CHECKS.items() for name in names]
    latest = stored_check_executions(home, keys, partition)
    return {key.name: record.status.value == "SUCCEEDED" for key, record in latest.items()}


def test_optimize_job_on_a_sim_target(tmp_path, home) -> None:
    targets = tmp_path / "targets"
    write_target(targets, "sim-cli", {**FAST_SIM_TARGET, "max_trials": 3, "sweep_concurrencies": [4, 16]})
    (targets / "broken.yaml").write_text("engine: [vllm\n")  # a bad file must not stop the others
    done = execute("optimize_job", "sim-cli", home, targets, timeout_s=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "RUN_SUCCESS" in done.stderr
    # Progress at INFO on stderr: servers and their ready time, rounds, each launch of a
    # trial, each validation pair, each rung of the sweep, the stop reason.
    for progress in (r"baseline: server ready in \d+\.\d s", r"baseline: repeat-1 [\d.]+ output tok/s",
                     r"trial 1 [^\n]*: launch 1 \(variant\) [\d.]+ output tok/s",
                     r"validate pair 1 stack: [\d.]+ output tok/s",
                     r"sweep-baseline rung 1 of 2 \(concurrency 4\): [\d.]+ output tok/s",
                     r"stop reason: (budget_exhausted|target_reached|no_more_candidates)"):
        assert re.search(r" - INFO - [^\n]*" + progress, done.stderr), f"no INFO line matching {progress!r}"
    report = stored_metadata(home, "final_report", "sim-cli")
    assert Path(report["report_path"]).is_file()
    assert report["final_output_throughput"] > report["baseline_output_throughput"]
    assert stored_metadata(home, "baseline", "sim-cli")["repeats"] == 2
    checks = stored_checks(home, "sim-cli")
    assert set(checks) == {name for names in CHECKS.values() for name in names}, "every check, filed under its target"
    assert checks["report_matches_store"] and checks["no_measurement_above_roofline"]
    assert "PreviewWarning" not in done.stderr
