"""The `concurrency_sweep` asset: baseline and stack over the concurrency ladder.

In the run that validated the stack, the ladder was already climbed on the validation's
last base/stack pair (assets/optimization_stack.py), and this asset only tabulates and
plots it. Otherwise (`sweep_job` on a stored stack, a stack with no keepers, a sweep that
failed there) each configuration gets one launch here and climbs the ladder on it.
"""

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.assets.metadata import plots_value, table_value
from hyperloom_assets.assets.stops import recorded_stops
from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.planning.fingerprints import BASELINE_FINGERPRINT, config_fingerprint
from hyperloom_assets.core.planning.stack import stack_spec
from hyperloom_assets.core.report.plots import plot_sweep
from hyperloom_assets.core.report.tables import sweep_rows, sweep_table
from hyperloom_assets.core.results import BaselineResult, StackResult, SweepResult
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.measure import run_sweep
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.resources.trees.workspace import served_at


def swept_in_validation(stack: StackResult, run_id: str, ladder: list[int]) -> list[dict] | None:
    """The rows the validation's servers measured in this run for this ladder, if they did."""
    if stack.sweep_rows is None or stack.run_id != run_id or stack.sweep_ladder != ladder:
        return None
    return stack.sweep_rows


def launch_sweep(context, target: Target, host: Host, bench: BenchmarkClient, store: ResultStore,
                 baseline: BaselineResult, stack: StackResult,
                 ladder: list[int]) -> list[dict]:
    """One launch per configuration, each climbing the ladder."""
    name, run_tree = context.partition_key, baseline.run_tree
    base_commit = run_tree.base_commit if run_tree else None
    configs = [("baseline", baseline.spec, base_commit, BASELINE_FINGERPRINT)]
    if stack.keepers:
        configs.append(("stack", stack_spec(target, stack.keepers, baseline.spec), stack.tree_commit or base_commit,
                        config_fingerprint(stack.keepers)))
    rows: list[dict] = []
    for label, spec, commit, fingerprint in configs:
        spec = spec.model_copy(update={"framework_tree": served_at(run_tree, commit)})
        folder = step_dir(host, name, context.run.run_id, f"sweep-{label}")
        results = run_sweep(host=host, bench=bench, store=store, target=name, spec=spec, contract=baseline.contract,
                            rungs=ladder, run_dir=folder, run_id=context.run.run_id, context_key=baseline.context_key,
                            fingerprint=fingerprint)
        rows += sweep_rows(label, results)
    if not stack.keepers:  # the stack is the baseline: same server, same numbers
        rows += [{**row, "config": "stack"} for row in rows]
    return rows


def build_sweep_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="sweep",
              description="Baseline and stack over the concurrency ladder, on the validation's last servers "
                          "in the run that validated, else one launch per configuration.")
    def concurrency_sweep(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet,
                          bench: BenchmarkClient, store: ResultStore, baseline: BaselineResult,
                          optimization_stack: StackResult) -> dg.Output[SweepResult]:
        name = context.partition_key
        target = catalog.run_target(name, context.run.run_id, store)
        host = hosts.for_target(target)
        ladder = target.sweep_ladder()
        rows = swept_in_validation(optimization_stack, context.run.run_id, ladder)
        reused = rows is not None
        if reused:
            context.log.info("sweep: measured on the validation's last base/stack pair, no launch of its own")
        else:
            with recorded_stops(context, store, "concurrency_sweep"):
                rows = launch_sweep(context, target, host, bench, store, baseline, optimization_stack, ladder)
        plots = plot_sweep(rows, step_dir(host, name, context.run.run_id, "sweep-plots"))
        return dg.Output(SweepResult(rows=rows, plots=[str(p) for p in plots]), metadata={
            "rungs": dg.MetadataValue.json(ladder), "table": table_value(sweep_table(rows)),
            "measured_on": "the validation's last base/stack pair" if reused else "launches of its own",
            "plot_concurrency": dg.MetadataValue.path(str(plots[0])),
            "plot_interactivity": dg.MetadataValue.path(str(plots[1])),
            "plots": plots_value(plots),
        })

    return concurrency_sweep
