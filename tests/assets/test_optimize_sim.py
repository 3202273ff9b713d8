"""The whole optimize_job on the sim engine, in process: baseline to report."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from tests.conftest import SIM_MODEL

CAPPED = ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"]


def write_target(folder: Path, name: str, server_args: list[str], **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = {"engine": "sim", "model": str(SIM_MODEL), "server_args": server_args,
            "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
            "repeats": 2, "max_trials": 4, "target_gain_pct": 1000, "sweep_concurrencies": [4, 16], **extra}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def materialization(instance: dg.DagsterInstance, asset: str, partition: str) -> dict:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
    assert records, f"no materialization of {asset} for {partition}"
    return {k: getattr(v, "value", v) for k, v in records[0].asset_materialization.metadata.items()}


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def test_optimize_job_on_sim_climbs_validates_and_reports(tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", "sim-capped", CAPPED)
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim-capped", instance=instance)
    assert result.success

    baseline = materialization(instance, "baseline", "sim-capped")
    assert baseline["repeats"] == 2
    assert baseline["launch_evidence"]["max_num_seqs"] == 4
    assert "--max-num-seqs 4" in baseline["argv"]
    predicted_by = engine_for("sim").predictor_of(CAPPED)
    assert baseline["predicted_by"] == predicted_by and "uncalibrated" in predicted_by
    assert f"Predicted by {predicted_by}" in Path(baseline["server_log"]).read_text(), "the server says it too"

    roofline = materialization(instance, "roofline", "sim-capped")
    assert 0 < roofline["achieved_pct"] < 100, "the sim's numbers are in simulated GPU time, under its ceiling"

    trials = materialization(instance, "trials", "sim-capped")
    assert trials["kept"] >= 1
    assert 1 <= trials["trials_run"] <= 4

    stack = materialization(instance, "optimization_stack", "sim-capped")
    assert stack["validated_gain_pct"] > 0
    assert stack["validated_gain_ci_low"] > 0
    assert "--time-scale" not in stack["final_argv"], "harness flags never enter the final argv"

    report = materialization(instance, "final_report", "sim-capped")
    path = Path(report["report_path"])
    assert path.is_absolute() and path.is_file()
    text = path.read_text()
    for section in ("# Optimization report", "## Roofline", "## Where the time goes", "## Trials", "## Stack",
                    "## Concurrency sweep", "## Reproduce", "## Launch evidence", "## Environment", "## Warnings"):
        assert section in text
    assert f"| predicted by | {predicted_by} |" in text
    profiled = materialization(instance, "profile", "sim-capped")
    assert profiled["taken"] is True
    assert f"`{profiled['top_ops'].records[0].data['op']}`" in text, "the report shows the profile's top op"
    data = json.loads(path.with_name("report.json").read_text())
    assert data["final_output_throughput"] == pytest.approx(stack["final_output_throughput"], abs=0.05), "metadata to 0.1 tok/s"
    assert len(data["sweep_rows"]) == 4
    assert (path.parent / "throughput_vs_concurrency.png").stat().st_size > 1000

    stored_baseline = store.measurements("sim-capped", "baseline")[0]["measurement"]["output_throughput"]
    assert data["baseline"]["output_throughput"] == pytest.approx(stored_baseline), "the report's numbers are the store's"
    assert f"{stored_baseline:,.1f}" in text
    trial_rows = {row["fingerprint"]: row for row in store.trials(store.measurements("sim-capped", "baseline")[0]["context_key"])}
    assert {t["fingerprint"] for t in data["trials"]} == set(trial_rows)
    assert all(row["fingerprint"] in text for row in trial_rows.values())

    stored = store.measurements("sim-capped")
    kinds = [row["kind"] for row in stored]
    assert kinds.count("baseline") == 1 and kinds.count("validation") == 4
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "every server is torn down"

    # Launches: the profile rode on the baseline's server and the sweep on the validation's last pair.
    by_step = report["launches_by_step"]
    assert by_step["baseline"] == 1 and by_step["validate"] == 4
    assert set(by_step) <= {"baseline", "trial", "best_relaunch", "validate", "accuracy"}
    assert report["launches"] == sum(by_step.values())
    measured = len({row["log_path"] for row in stored})  # the accuracy gate's launches store no measurement
    assert report["launches"] - by_step.get("accuracy", 0) == measured
    assert f"Server launches in this run: {report['launches']} (" in text
    assert instance.get_run_by_id(result.run_id).tags["hyperloom/launches"] == str(report["launches"])
    assert Path(profiled["trace"]).parent.parent.name == "baseline", "the profile's trace is the baseline server's"
    sweep = materialization(instance, "concurrency_sweep", "sim-capped")
    assert sweep["measured_on"] == "the validation's last base/stack pair"
    last_pair = {row["log_path"] for row in stored if row["kind"] == "validation"
                 and Path(row["log_path"]).parent.name.startswith("validate-2-")}
    assert {row["log_path"] for row in stored if row["kind"] == "sweep"} == last_pair


def test_re_execution_measures_no_trial_twice(tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", "sim-capped", CAPPED, max_trials=2)
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    job = defs.resolve_job_def("baseline_job")
    assert job.execute_in_process(partition_key="sim-capped", instance=instance).success
    trials_job = dg.define_asset_job("trials_only", selection=["profile", "candidates", "trials"]).resolve(
        asset_graph=defs.resolve_asset_graph())
    for _ in range(2):
        assert trials_job.execute_in_process(partition_key="sim-capped", instance=instance).success
    trial_rows = [row for row in store.measurements("sim-capped") if row["kind"] == "trial"]
    ledger = store.trials(store.measurements("sim-capped", "baseline")[0]["context_key"])
    assert len(ledger) == 2
    assert len(trial_rows) == sum(row["record"]["measurements"] for row in ledger)
    relaunches = [row for row in store.measurements("sim-capped") if row["kind"] == "best_relaunch"]
    assert len(relaunches) == sum(len(row["record"]["best_launches"]) + row["record"]["rebenches"] for row in ledger), \
        "the running best's relaunches and each keeper's rebench: nothing measured twice"


def test_a_second_run_in_the_same_context_launches_only_its_baseline(tmp_path, host, store, instance) -> None:
    """Its trials and its validation, and the sweep measured with it, are replayed from the store."""
    write_target(tmp_path / "targets", "sim-capped", CAPPED, max_trials=2)
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    first = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim-capped", instance=instance)
    before = materialization(instance, "optimization_stack", "sim-capped")
    assert before["validated"] and before["validated_in_run"] == first.run_id
    assert materialization(instance, "final_report", "sim-capped")["launches_by_step"]["validate"] == 4

    again = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim-capped", instance=instance)
    report = materialization(instance, "final_report", "sim-capped")
    assert report["launches_by_step"] == {"baseline": 1}, "the baseline is the new run's anchor; the rest is replayed"
    after = materialization(instance, "optimization_stack", "sim-capped")
    assert after["validated_in_run"] == first.run_id
    assert after["validated_gain_pct"] == before["validated_gain_pct"]
    assert materialization(instance, "concurrency_sweep", "sim-capped")["measured_on"] == \
        "the validation's last base/stack pair"
    assert again.success and not [row for row in store.measurements("sim-capped")
                                  if row["run_id"] == again.run_id and row["kind"] != "baseline"]
