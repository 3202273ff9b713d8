"""The asset checks in the graph, on the sim: each filed under its target, each failing when
what it guards breaks (the mutation is in each test's name and first lines)."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._core.event_api import PartitionKeyFilter

from hyperloom_assets.core.measurement.stats import spread_pct
from hyperloom_assets.core.roofline.roofline import gpu_hardware
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.bench import monitor
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.process_group import read_pidfiles, terminate_group
from hyperloom_assets.resources.store.results import STACKS, TRIALS, ResultStore
from tests.assets.test_optimize_sim import CAPPED, write_target
from tests.unit.test_plot_markdown import embedded_pngs

NAME, FLAT = "sim-checks", "sim-checks-flat"
# The names are the UI's contract (a browser test reads them from the baseline's page).
CHECKS = {"baseline": ("baseline_converged", "baseline_client_not_saturated"),
          "optimization_stack": ("validated_gain_interval_excludes_zero",),
          "final_report": ("no_measurement_above_roofline", "report_matches_store")}
WARN, ERROR = dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR


class Run:
    def __init__(self, folder: Path, host: LocalHost, store: ResultStore, instance: dg.DagsterInstance):
        self.folder, self.host, self.store, self.instance = folder, host, store, instance
        self.defs = build_defs(folder, host=host, store=store)
        self.result = self.defs.resolve_job_def("optimize_job").execute_in_process(partition_key=NAME, instance=instance)
        self.measured = len([row for row in store.measurements(NAME) if row["measurement"]])

    def rerun(self, *assets: str, partition: str = NAME) -> dict[str, dg.AssetCheckEvaluation]:
        """Materialize `assets` again (their checks with them); upstream values come from storage."""
        job = dg.define_asset_job("again", selection=list(assets)).resolve(asset_graph=self.defs.resolve_asset_graph())
        result = job.execute_in_process(partition_key=partition, instance=self.instance)
        return {e.check_name: e for e in result.get_asset_check_evaluations()}

    def context_key(self) -> str:
        return self.store.measurements(NAME, "baseline")[0]["context_key"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Iterator[Run]:
    folder = tmp_path_factory.mktemp("checks")
    write_target(folder / "targets", NAME, CAPPED)
    write_target(folder / "targets", FLAT, CAPPED, max_trials=1)
    state = folder / "state"
    host = LocalHost(state_dir=str(state), check_foreign_processes=False, teardown_term_wait_s=15.0)
    try:
        with dg.instance_for_test() as instance:
            yield Run(folder / "targets", host, ResultStore(url=f"sqlite:///{folder / 'results.db'}"), instance)
    finally:
        for path, record in read_pidfiles(state / "pids"):
            terminate_group(record.pgid, term_wait_s=5.0)
            path.unlink(missing_ok=True)


def values(evaluation: dg.AssetCheckEvaluation) -> dict:
    return {k: getattr(v, "value", v) for k, v in evaluation.metadata.items()}


def test_every_check_runs_with_its_asset_and_is_filed_under_its_target(run) -> None:
    evaluations = {e.check_name: e for e in run.result.get_asset_check_evaluations()}
    assert set(evaluations) == {name for names in CHECKS.values() for name in names}
    for asset, names in CHECKS.items():
        for name in names:
            assert evaluations[name].asset_key == dg.AssetKey(asset) and evaluations[name].partition == NAME
    for name in ("validated_gain_interval_excludes_zero", "no_measurement_above_roofline", "report_matches_store"):
        assert evaluations[name].passed, evaluations[name].description
    # The baseline's two depend on how loaded this machine is: their verdict must be the
    # stored measurement's, recomputed here.
    stored = run.store.measurements(NAME, "baseline")[0]["measurement"]
    spread = spread_pct([r["output_throughput"] for r in stored["repeats"]])
    assert evaluations["baseline_converged"].passed == (spread <= 3.0)
    assert values(evaluations["baseline_converged"])["spread_pct"] == round(spread, 2)
    saturated = (stored["client_loop_lag_p99_ms"] > monitor.LAG_P99_LIMIT_MS
                 or stored["client_cpu_pct"] > monitor.CPU_LIMIT_PCT)
    assert evaluations["baseline_client_not_saturated"].passed == (not saturated) == (not stored["client_saturated"])
    assert values(evaluations["no_measurement_above_roofline"])["measurements_checked"] == run.measured, \
        "every measurement of the run: baseline, trials, relaunches, validation and sweep"

    keys = [dg.AssetCheckKey(dg.AssetKey(asset), name) for asset, names in CHECKS.items() for name in names]
    latest = run.instance.event_log_storage.get_latest_asset_check_execution_by_key(
        keys, partition_filter=PartitionKeyFilter(key=NAME))
    assert set(latest) == set(keys) and {r.partition for r in latest.values()} == {NAME}
    assert not run.instance.event_log_storage.get_latest_asset_check_execution_by_key(
        keys, partition_filter=PartitionKeyFilter(key=FLAT)), "another target's checks are its own"


def test_converged_fails_when_the_repeats_spread(run, monkeypatch) -> None:
    # Mutation: the baseline's top repeat is reported 50% higher than it measured.
    import hyperloom_assets.assets.baseline as baseline_module

    real = baseline_module.run_measurement

    def spread_out(**kwargs):
        measured = real(**kwargs)
        repeats = sorted(measured.measurement.repeats, key=lambda r: r.output_throughput)
        repeats[-1] = repeats[-1].model_copy(update={"output_throughput": repeats[-1].output_throughput * 1.5})
        return measured.model_copy(update={"measurement": measured.measurement.model_copy(update={"repeats": repeats})})

    monkeypatch.setattr(baseline_module, "run_measurement", spread_out)
    check = run.rerun("baseline", partition=FLAT)["baseline_converged"]
    assert not check.passed and check.severity == WARN and check.partition == FLAT
    assert values(check)["spread_pct"] > 30 and values(check)["limit_pct"] == 3.0


def test_client_not_saturated_fails_when_the_client_lags(run, monkeypatch) -> None:
    # Mutation: the load monitor's lag limit at -1 ms, so every round's client counts as saturated.
    monkeypatch.setattr(monitor, "LAG_P99_LIMIT_MS", -1.0)
    check = run.rerun("baseline", partition=FLAT)["baseline_client_not_saturated"]
    assert not check.passed and check.severity == WARN
    assert values(check)["loop_lag_p99_ms"] >= 0 > values(check)["loop_lag_limit_ms"]


def test_a_stored_sweep_measurement_above_its_ceiling_fails_the_report(run) -> None:
    # Mutation: a sweep row of this context at 100x the sim's throughput, written to the store.
    row = run.store.measurements(NAME, "sweep")[-1]
    inflated = {**row["measurement"], "output_throughput": row["measurement"]["output_throughput"] * 100}
    extra = run.store.record_measurement(target=NAME, kind="sweep", argv=row["argv"], env=row["env"],
                                         started_at=row["started_at"], measurement=inflated,
                                         context_key=row["context_key"], run_id=row["run_id"])
    try:
        check = run.rerun("final_report")["no_measurement_above_roofline"]
    finally:
        with run.store.engine().begin() as conn:
            conn.execute(sa.text("DELETE FROM measurements WHERE id = :id"), {"id": extra})
    assert not check.passed and check.severity == ERROR
    assert f"sweep measurement {extra}" in check.description and values(check)["above_ceiling"] == 1


def test_a_roofline_on_slower_hardware_than_served_fails_the_report(run, monkeypatch) -> None:
    # Mutation: the roofline computed for an H100 with a fiftieth of its bandwidth and compute.
    import hyperloom_assets.assets.roofline as roofline_module

    def slow(target, host, dtype):
        h100 = gpu_hardware("H100", 1, dtype)
        return h100.model_copy(update={"mem_bw_gbps": h100.mem_bw_gbps / 50, "peak_tflops": h100.peak_tflops / 50}), []

    with monkeypatch.context() as patch:
        patch.setattr(roofline_module, "target_hardware", slow)
        check = run.rerun("roofline", "final_report")["no_measurement_above_roofline"]
    run.rerun("roofline")
    assert not check.passed and check.severity == ERROR
    assert values(check)["above_ceiling"] == values(check)["measurements_checked"]


def test_a_stored_stack_that_differs_from_the_report_fails_it(run) -> None:
    # Mutation: a newer stack row in the store whose validated gain is one point higher.
    stack = run.store.latest_stack(NAME)
    edited = {**stack["result"], "validated_gain_pct": stack["result"]["validated_gain_pct"] + 1}
    run.store.record_stack(target=NAME, context_key=stack["context_key"], keepers=stack["keepers"], result=edited)
    try:
        check = run.rerun("final_report")["report_matches_store"]
    finally:
        with run.store.engine().begin() as conn:
            newest = conn.execute(sa.select(sa.func.max(STACKS.c.id))).scalar()
            conn.execute(STACKS.delete().where(STACKS.c.id == newest))
    assert not check.passed and check.severity == ERROR
    assert "validated gain %" in check.description
    assert values(check)["mismatches"] == 2, "the JSON's gain and the Markdown headline's"


def test_a_stored_trial_outcome_that_differs_from_the_report_fails_it(run) -> None:
    # Mutation: the ledger says the first trial was FAILED.
    key = run.context_key()
    first = run.store.trials(key)[0]
    with run.store.engine().begin() as conn:
        conn.execute(TRIALS.update().where(TRIALS.c.id == first["id"]).values(outcome="FAILED"))
    try:
        check = run.rerun("final_report")["report_matches_store"]
    finally:
        with run.store.engine().begin() as conn:
            conn.execute(TRIALS.update().where(TRIALS.c.id == first["id"]).values(outcome=first["outcome"]))
    assert not check.passed and check.severity == ERROR
    assert f"{first['fingerprint']} outcome" in check.description
    assert values(check)["mismatches"] == 2, "the JSON's outcome and the Markdown row's"


def test_a_headline_that_shows_another_number_fails_the_report(run, monkeypatch) -> None:
    # Mutation: the Markdown headline prints the final throughput 10% high.
    import hyperloom_assets.assets.final_report as report_module

    real = report_module.render_markdown
    monkeypatch.setattr(report_module, "render_markdown", lambda inputs: real(inputs.model_copy(update={
        "final_output_throughput": inputs.final_output_throughput * 1.1})))
    check = run.rerun("final_report")["report_matches_store"]
    assert not check.passed and "headline throughputs" in check.description


def test_the_report_shows_the_new_plots(run) -> None:
    report = run.instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey("final_report"), asset_partitions=[NAME]), limit=1).records[0]
    metadata = report.asset_materialization.metadata
    path = Path(metadata["report_path"].value)
    text = path.read_text()
    for key, name in (("plot_waterfall", "gains_waterfall.png"), ("plot_roofline", "roofline_position.png"),
                      ("plot_pareto", "pareto_frontier.png")):
        assert Path(metadata[key].value) == path.with_name(name) and path.with_name(name).stat().st_size > 5000
        assert f"![{name}]({name})" in text
    assert json.loads(path.with_name("report.json").read_text())["waterfall_plot"] == "gains_waterfall.png"
    # The UI cannot read the host's disk: its copy of the report holds every plot the file links.
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    assert len(linked) == 5 and embedded_pngs(metadata["report"].value) == {
        name: path.with_name(name).read_bytes() for name in linked}
    sweep = run.instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey("concurrency_sweep"), asset_partitions=[NAME]), limit=1).records[0]
    shown = sweep.asset_materialization.metadata
    files = [Path(shown[key].value) for key in ("plot_concurrency", "plot_interactivity")]
    assert embedded_pngs(shown["plots"].value) == {file.name: file.read_bytes() for file in files}


def test_validated_gain_warns_when_its_interval_includes_zero(run, monkeypatch) -> None:
    # Mutation: the validation's interval comes out as [-2%, +4%] (no launches: the stack's
    # validation is replaced, the check sees only the rule's numbers).
    import hyperloom_assets.assets.optimization_stack as stack_module

    monkeypatch.setattr(stack_module, "validate_stack",
                        lambda *args, **kwargs: stack_module.Validation(base=[[1.0]], top=[[1.0]]))
    monkeypatch.setattr(stack_module, "validated_gain", lambda *args: (1.0, -2.0, 4.0))
    check = run.rerun("optimization_stack")["validated_gain_interval_excludes_zero"]
    assert not check.passed and check.severity == WARN and "includes zero" in check.description
    assert (values(check)["validated_gain_ci_low"], values(check)["validated_gain_ci_high"]) == (-2.0, 4.0)


def test_validated_gain_says_it_cannot_run_without_a_keeper(run, monkeypatch) -> None:
    # Mutation: the planner proposes nothing and the recipe memory (which holds the other
    # target's keepers, of the same class) offers nothing, so nothing is kept and nothing validated.
    import hyperloom_assets.assets.candidates as candidates_module

    monkeypatch.setattr(candidates_module, "plan_for_target", lambda *args, **kwargs: [])
    monkeypatch.setattr(candidates_module, "class_recipes", lambda *args, **kwargs: [])
    checks = run.rerun("baseline", "roofline", "profile", "candidates", "trials",
                       "accepted_patches", "optimization_stack", partition=FLAT)
    check = checks["validated_gain_interval_excludes_zero"]
    assert not check.passed and check.severity == WARN and check.description.startswith("cannot run: no keeper")


def test_a_roofline_stored_before_it_kept_its_hardware_says_the_check_cannot_run(run) -> None:
    # An older hyperloom's pickled roofline: its state has no `hardware`.
    stored = Path(run.instance.storage_directory()) / "roofline" / NAME
    original = stored.read_bytes()
    old = pickle.loads(original)
    del old.__dict__["hardware"]
    stored.write_bytes(pickle.dumps(old))
    try:
        check = run.rerun("final_report")["no_measurement_above_roofline"]
    finally:
        stored.write_bytes(original)
    assert not check.passed and check.severity == WARN and "materialize roofline again" in check.description
