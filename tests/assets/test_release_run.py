"""A release-triggered optimize_job, end to end on the sim: the release's own environment is
built with pip from a loopback index, the baseline is served from it, and the stack validated
before is re-validated on it; an environment that cannot be built is a recorded outcome."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.core.releases.run import PACKAGE_TAG, TRIGGER_TAG, VERSION_TAG
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.releases.envs import ReleaseEnvironments
from hyperloom_assets.resources.releases.ledger import ReleaseLedger
from tests.conftest import SIM_MODEL
from tests.sensors.loopback_index import LoopbackIndex
from tests.sensors.sim_wheel import DISTRIBUTION, MODULE, build_sim_wheel


@pytest.fixture
def index(tmp_path):
    served = LoopbackIndex().start()
    try:
        served.publish(DISTRIBUTION, "0.2.0", build_sim_wheel(tmp_path / "wheels", "0.2.0"))
        yield served
    finally:
        served.stop()


def metadata(instance, asset: str) -> dict:
    record = instance.fetch_materializations(dg.AssetKey(asset), limit=1).records[0]
    return {k: getattr(v, "value", v) for k, v in record.asset_materialization.metadata.items()}


def release_tags(version: str) -> dict[str, str]:
    return {PACKAGE_TAG: DISTRIBUTION, VERSION_TAG: version, TRIGGER_TAG: "release"}


def test_release_run_serves_the_new_release_and_revalidates_the_stack(tmp_path, host, store, index) -> None:
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL),
        "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"],
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
        "repeats": 2, "max_trials": 2, "target_gain_pct": 1000, "sweep_concurrencies": [16]}))
    envs = ReleaseEnvironments(root=str(tmp_path / "envs"), simple_url=index.simple_url, install_deps=False)
    defs = build_defs(targets, host=host, store=store, envs=envs)
    job = defs.resolve_job_def("optimize_job")
    with dg.instance_for_test() as instance:
        assert job.execute_in_process(partition_key="sim", instance=instance).success
        before = metadata(instance, "optimization_stack")
        assert before["validated_gain_pct"] > 0
        released = job.execute_in_process(partition_key="sim", instance=instance, tags=release_tags("0.2.0"))
        assert released.success
        baseline = metadata(instance, "baseline")
        stack = metadata(instance, "optimization_stack")
        report = Path(metadata(instance, "final_report")["report_path"]).read_text()
    assert f"-m {MODULE} " in baseline["argv"], "served from the release's environment"
    assert str(tmp_path / "envs") in baseline["argv"]
    assert "## Release" in report and f"{DISTRIBUTION}==0.2.0" in report
    assert "still holds" in report  # the sim release performs like the project's sim
    assert stack["validated_gain_pct"] > 0
    outcomes = [row["outcome"] for row in ReleaseLedger(store).rows("sim", DISTRIBUTION, "0.2.0")]
    assert outcomes == ["succeeded"]
    launches = [row for row in store.measurements("sim") if row["kind"] == "validation"]
    assert len(launches) == 4 + 4 + 4, "first run 4, release run 4 for its own stack and 4 for the earlier one"


@pytest.mark.stop_reason("environment_unavailable", case="release_install")
def test_an_environment_that_cannot_be_built_is_a_recorded_outcome(tmp_path, host, store, index) -> None:
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "server_args": ["--gpu", "H100", "--time-scale", "50"],
        "workload": {"kind": "random", "isl": 64, "osl": 16, "concurrency": 2}}))
    envs = ReleaseEnvironments(root=str(tmp_path / "envs"), simple_url=index.simple_url, install_deps=False)
    defs = build_defs(targets, host=host, store=store, envs=envs)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("baseline_job").execute_in_process(
            partition_key="sim", instance=instance, tags=release_tags("9.9.9"), raise_on_error=False)
        assert not result.success
        assert not instance.fetch_materializations(dg.AssetKey("baseline"), limit=1).records
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "environment_unavailable" in str(failure.event_specific_data.error)
    outcomes = [row["outcome"] for row in ReleaseLedger(store).rows("sim", DISTRIBUTION, "9.9.9")]
    assert outcomes == ["environment_unavailable"]
    assert store.measurements("sim") == [], "no server was launched"
