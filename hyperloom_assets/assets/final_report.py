"""The `final_report` asset: Markdown, plots and JSON, on disk and in the UI.

The headline, every trial, the stack, the sweep and the commands to reproduce it, with
every flagged measurement of the run read back from the result store.
"""

from pathlib import Path

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.core.measurement.stats import repeats_of
from hyperloom_assets.core.report.markdown import (
    ReportInputs,
    measurement_warnings,
    render_markdown,
    run_measurement_warnings,
)
from hyperloom_assets.core.results import BaselineResult, RooflineResult, StackResult, SweepResult, TrialsResult
from hyperloom_assets.core.roofline.roofline import achieved
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.releases.ledger import ReleaseLedger
from hyperloom_assets.resources.store.results import ResultStore


def build_report_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="sweep",
              description="Markdown, plots and JSON: the headline, every trial, the stack, the sweep, the commands.")
    def final_report(context: AssetExecutionContext, catalog: TargetCatalog, host: LocalHost, store: ResultStore,
                     baseline: BaselineResult, roofline: RooflineResult, trials: TrialsResult,
                     optimization_stack: StackResult, concurrency_sweep: SweepResult) -> dg.Output[str]:
        name = context.partition_key
        folder = step_dir(host, name, context.run.run_id, "report")
        inputs = report_inputs(catalog.target(name), host, baseline, roofline, trials, optimization_stack,
                               concurrency_sweep, folder, store.measurements(name), context.run.run_id)
        markdown = render_markdown(inputs)
        path = folder / "report.md"
        path.write_text(markdown)
        (folder / "report.json").write_text(inputs.model_dump_json(indent=2))
        if baseline.release is not None:
            ReleaseLedger(store).record(name, baseline.release.package, baseline.release.version, "succeeded",
                                        optimization_stack.release_check.summary if optimization_stack.release_check
                                        else "", run_id=context.run.run_id)
        return dg.Output(str(path), metadata={
            "report_path": dg.MetadataValue.path(str(path.resolve())),
            "baseline_output_throughput": baseline.measurement.output_throughput,
            "final_output_throughput": optimization_stack.final_output_throughput,
            "gain_pct": optimization_stack.validated_gain_pct,
            "stop_reason": dg.MetadataValue.text(optimization_stack.stop_reason),
            "report": dg.MetadataValue.md(markdown),
        })

    return final_report


def report_inputs(target, host, baseline: BaselineResult, roofline: RooflineResult, trials: TrialsResult,
                  stack: StackResult, sweep: SweepResult, folder: Path, stored: list[dict], run_id: str) -> ReportInputs:
    plots = []
    for plot in sweep.plots:  # copied beside the report so the Markdown's links work anywhere
        copy = folder / Path(plot).name
        copy.write_bytes(Path(plot).read_bytes())
        plots.append(copy.name)
    top = repeats_of(stack.stack_launches) or baseline.measurement.repeats_throughputs()
    after = achieved(roofline.roofline, stack.final_output_throughput, min(top), max(top))
    warnings = measurement_warnings("baseline", baseline.measurement) + list(roofline.warnings)
    warnings += [f"stack flag conflict: {c}" for c in stack.conflicts]
    warnings += run_measurement_warnings(stored, run_id)
    if stack.release_check and not stack.release_check.holds:
        warnings.append(f"{stack.release_check.release}: {stack.release_check.summary}")
    warnings += [f"trial {t.index} {t.name}: {t.outcome} ({t.decision.reason})"
                 for t in trials.climb.trials if t.outcome in ("FAILED", "KILLED_OVERTIME", "KEEP_UNSTABLE")]
    environment = {"engine": target.engine, "engine release": baseline.launch.engine_version or "unknown",
                   "host": host.name, "engine identity (framework_tree)": baseline.framework_version,
                   "server config version": baseline.config_version, "ledger context": baseline.context_key}
    return ReportInputs(
        target=baseline.target, baseline=baseline.measurement, baseline_argv=baseline.launch.argv,
        baseline_env=baseline.spec.env, baseline_run_id=baseline.run_id, launch_evidence=baseline.launch.evidence,
        final_output_throughput=stack.final_output_throughput, validated_gain_pct=stack.validated_gain_pct,
        validated_gain_ci_low=stack.validated_gain_ci_low, validated_gain_ci_high=stack.validated_gain_ci_high,
        validated=stack.validated, final_argv=stack.launch_argv, final_env=stack.final_env, stop_reason=stack.stop_reason,
        roofline_before=roofline.achieved, roofline_after=after, roofline_explanation=roofline.roofline.explanation,
        trials=trials.climb.trials, keepers=[k.name for k in stack.keepers], conflicts=stack.conflicts,
        sweep_rows=sweep.rows, plots=plots, environment=environment, warnings=warnings,
        release_check=stack.release_check,
    )
