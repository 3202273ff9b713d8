"""The `final_report` asset: Markdown, plots and JSON, on disk and in the UI.

The headline, the run's server launches, every trial, the stack, the sweep and the
commands to reproduce it, with every flagged measurement of the run read back from the
result store.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.assets.checks import (
    REPORT_CHECKS,
    check_specs,
    no_measurement_above_roofline,
    report_matches_store,
    roofline_unavailable,
)
from hyperloom_assets.assets.metadata import run_secrets, table_value, with_embedded_plots
from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.stats import repeats_of
from hyperloom_assets.core.report.consistency import compare_report
from hyperloom_assets.core.report.markdown import (
    ReportInputs,
    SourceTree,
    capacity_text,
    measurement_warnings,
    render_markdown,
    run_measurement_warnings,
    slo_caveat,
    slo_text,
)
from hyperloom_assets.core.measurement.objective import mean_goodput
from hyperloom_assets.core.measurement.slo_verdict import slo_verdict
from hyperloom_assets.core.report.pareto import run_frontier
from hyperloom_assets.core.report.plots import Step, keeper_steps, plot_gains_waterfall, plot_pareto, plot_roofline_position
from hyperloom_assets.core.report.tables import pareto_table
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.results import (
    AcceptedPatches,
    BaselineResult,
    ProfileResult,
    RooflineResult,
    StackResult,
    SweepResult,
    TrialsResult,
)
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.core.roofline.position import positions, report_rows
from hyperloom_assets.core.roofline.roofline import achieved
from hyperloom_assets.core.secrets import Redactor
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.run_folders import launches_in, step_dir
from hyperloom_assets.resources.releases.ledger import ReleaseLedger
from hyperloom_assets.resources.store.results import ResultStore


def build_report_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="sweep", dagster_type=str,
              check_specs=check_specs("final_report", REPORT_CHECKS, partitions),
              description="Markdown, plots and JSON: the headline, every trial, the stack, the sweep, the commands.")
    def final_report(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet, store: ResultStore,
                     baseline: BaselineResult, roofline: RooflineResult, trials: TrialsResult,
                     optimization_stack: StackResult, accepted_patches: AcceptedPatches,
                     concurrency_sweep: SweepResult, profile: ProfileResult,
                     ) -> Iterator[dg.Output | dg.AssetCheckResult]:
        name = context.partition_key
        target = catalog.run_target(name, context.run.run_id, store)
        host = hosts.for_target(target)
        folder = step_dir(host, name, context.run.run_id, "report")
        inputs = report_inputs(target, host, baseline, roofline, trials, optimization_stack,
                               concurrency_sweep, folder, store.measurements(name), context.run.run_id,
                               accepted_patches, profile)
        inputs = inputs.model_copy(update={"launches": launches_in(host, name, context.run.run_id)})
        inputs = ReportInputs.model_validate(report_secrets(target, baseline).value(inputs.model_dump()))
        launches = sum(inputs.launches.values())
        context.instance.add_run_tags(context.run.run_id, {"hyperloom/launches": str(launches)})
        markdown = render_markdown(inputs)
        path = folder / "report.md"
        path.write_text(markdown)
        (folder / "report.json").write_text(inputs.model_dump_json(indent=2))
        if baseline.release is not None:
            ReleaseLedger(store).record(name, baseline.release.package, baseline.release.version, "succeeded",
                                        optimization_stack.release_check.summary if optimization_stack.release_check
                                        else "", run_id=context.run.run_id)
        yield dg.Output(str(path), metadata={
            "report_path": dg.MetadataValue.path(str(path.resolve())),
            "baseline_output_throughput": rounded(baseline.measurement.output_throughput, "tok/s"),
            "final_output_throughput": rounded(optimization_stack.final_output_throughput, "tok/s"),
            "gain_pct": rounded(optimization_stack.validated_gain_pct, "%"),
            "stop_reason": dg.MetadataValue.text(optimization_stack.stop_reason),
            "launches": launches, "launches_by_step": dg.MetadataValue.json(inputs.launches),
            # The UI's copy shows its plots in place; report.md links the PNGs beside it.
            "report": dg.MetadataValue.md(with_embedded_plots(markdown, folder)),
            "plot_waterfall": dg.MetadataValue.path(str(folder / inputs.waterfall_plot)),
            "plot_roofline": dg.MetadataValue.path(str(folder / inputs.roofline_plot)),
            "plot_pareto": dg.MetadataValue.path(str(folder / inputs.pareto_plot)),
            "pareto_frontier": table_value(pareto_table(inputs.pareto)),
            **({"recommended": dg.MetadataValue.json(inputs.pareto.recommended.model_dump(mode="json"))}
               if inputs.pareto.recommended else {}),
        })
        yield from report_checks(store, target, baseline, roofline, trials, path.resolve())

    return final_report


def report_secrets(target: Target, baseline: BaselineResult) -> Redactor:
    """What report.md, report.json and the UI's copy must not show: the target's secrets, the
    baseline launch's and this process's environment's; the Reproduce block names a variable instead."""
    return run_secrets(target.env, target.server_args).joined(run_secrets(baseline.spec.env, baseline.launch.argv))


def run_rows(stored: list[dict], baseline: BaselineResult, trials: TrialsResult) -> list[dict]:
    """The stored measurements this report draws on: its context's from its baseline on, and
    the replayed trials' own (measured by an earlier run)."""
    replayed = {i for t in trials.climb.trials if t.replayed for i in t.measurement_ids + t.best_measurement_ids}
    return report_rows(stored, baseline.context_key, baseline.measurement_id, replayed)


def report_checks(store: ResultStore, target: Target, baseline: BaselineResult, roofline: RooflineResult,
                  trials: TrialsResult, path: Path) -> list[dg.AssetCheckResult]:
    """The report's checks, from what was written to disk and what the store holds."""
    stored = store.measurements(baseline.target)
    rows = run_rows(stored, baseline, trials)
    hardware = getattr(roofline, "hardware", None)  # a roofline stored by an older hyperloom has none
    if hardware is None:
        ceilings = roofline_unavailable("the stored roofline predates recording its hardware; materialize roofline again")
    else:
        ceilings = no_measurement_above_roofline(*positions(rows, load_shape(target.model), hardware, roofline.roofline))
    stack = store.latest_stack(baseline.target)
    stack_result = stack["result"] if stack and stack["context_key"] == baseline.context_key else None
    stored_baseline = next((row["measurement"] for row in stored if row["id"] == baseline.measurement_id), None)
    comparisons = compare_report(json.loads(path.with_name("report.json").read_text()), path.read_text(),
                                 stored_baseline, stack_result, store.trials(baseline.context_key))
    return [ceilings, report_matches_store(comparisons, path)]


def report_inputs(target: Target, host: Host, baseline: BaselineResult, roofline: RooflineResult,
                  trials: TrialsResult,
                  stack: StackResult, sweep: SweepResult, folder: Path, stored: list[dict], run_id: str,
                  accepted: AcceptedPatches, profile: ProfileResult | None = None) -> ReportInputs:
    plots = []
    for plot in sweep.plots:  # copied beside the report so the Markdown's links work anywhere
        copy = folder / Path(plot).name
        copy.write_bytes(Path(plot).read_bytes())
        plots.append(copy.name)
    top = repeats_of(stack.stack_launches) or baseline.measurement.repeats_throughputs()
    after = achieved(roofline.roofline, stack.final_output_throughput, min(top), max(top))
    validated = (Step(label="validated stack", gain_pct=stack.validated_gain_pct, ci_low_pct=stack.validated_gain_ci_low,
                      ci_high_pct=stack.validated_gain_ci_high) if stack.validated else None)
    waterfall = plot_gains_waterfall(baseline.measurement, keeper_steps(trials.climb.trials), validated,
                                     folder / "gains_waterfall.png", target.objective)
    position = plot_roofline_position(roofline.roofline, roofline.achieved, after, folder / "roofline_position.png")
    pareto = run_frontier(run_rows(stored, baseline, trials), target.engine, target.server_args, stack.keepers,
                          trials.climb.trials, target.slo)
    pareto_plot = plot_pareto(pareto, folder / "pareto_frontier.png")
    warnings = measurement_warnings("baseline", baseline.measurement) + list(roofline.warnings)
    warnings += [f"stack flag conflict: {c}" for c in stack.conflicts]
    warnings += run_measurement_warnings(stored, run_id)
    if stack.release_check and not stack.release_check.holds:
        warnings.append(f"{stack.release_check.release}: {stack.release_check.summary}")
    warnings += [f"trial {t.index} {t.name}: {t.outcome} ({t.decision.reason})"
                 for t in trials.climb.trials if t.outcome in ("FAILED", "KILLED_OVERTIME", "KEEP_UNSTABLE", "REJECTED")]
    if profile is not None and not profile.taken:
        warnings.append(f"profile not taken: {profile.reason}")
    environment = {"engine": target.engine, "engine release": baseline.launch.engine_version or "unknown",
                   "host": host.name, "engine identity (framework_tree)": baseline.framework_version,
                   "server config version": baseline.config_version, "ledger context": baseline.context_key}
    predictor = engine_for(baseline.spec.engine).predictor_of(baseline.spec.server_args)
    if predictor is not None:
        environment["predicted by"] = predictor
    base_slo = slo_verdict(target.slo, [baseline.measurement.latency]) if target.slo else None
    return ReportInputs(
        target=baseline.target, baseline=baseline.measurement, baseline_argv=baseline.launch.argv,
        baseline_env=baseline.spec.env, baseline_run_id=baseline.run_id, launch_evidence=baseline.launch.evidence,
        final_output_throughput=stack.final_output_throughput, validated_gain_pct=stack.validated_gain_pct,
        validated_gain_ci_low=stack.validated_gain_ci_low, validated_gain_ci_high=stack.validated_gain_ci_high,
        validated=stack.validated, final_argv=stack.launch_argv, final_env=stack.final_env, stop_reason=stack.stop_reason,
        roofline_before=roofline.achieved, roofline_after=after, roofline_explanation=roofline.roofline.explanation,
        trials=trials.climb.trials, keepers=[k.name for k in stack.keepers], conflicts=stack.conflicts,
        sweep_rows=sweep.rows, plots=plots, waterfall_plot=waterfall.name, roofline_plot=position.name,
        pareto=pareto, pareto_plot=pareto_plot.name,
        environment=environment, warnings=warnings,
        release_check=stack.release_check, source_tree=source_tree(baseline, accepted), profile=profile,
        slo=" ".join([slo_text(target.slo, base_slo, stack.slo), slo_caveat(base_slo, stack.slo),
                      *([capacity_text(stack.capacity_at_slo)] if stack.capacity_at_slo else [])])
        if target.slo else None,
        objective=target.objective, baseline_goodput=mean_goodput(baseline.measurement), final_goodput=stack.final_goodput,
    )


def source_tree(baseline: BaselineResult, accepted: AcceptedPatches) -> SourceTree | None:
    tree = baseline.run_tree
    if tree is None:
        return None
    return SourceTree(operator_tree=str(tree.operator_tree), branch=tree.branch, base_commit=tree.base_commit,
                      tree_commit=accepted.tree_commit or tree.base_commit, unserved=tree.unserved,
                      patches=[p.model_dump(mode="json") for p in accepted.patches],
                      engine_path=baseline.launch.engine_path)
