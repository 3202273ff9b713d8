"""The `concurrency_sweep` asset: baseline and stack over the concurrency ladder."""

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.assets.metadata import table_value
from hyperloom_assets.assets.stops import recorded_stops
from hyperloom_assets.core.planning.stack import stack_spec
from hyperloom_assets.core.report.plots import plot_sweep
from hyperloom_assets.core.report.tables import sweep_table
from hyperloom_assets.core.results import BaselineResult, StackResult, SweepResult
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.measure import run_sweep
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.resources.trees.workspace import served_at


def sweep_rows(config: str, results) -> list[dict]:
    return [{"config": config, "concurrency": rung, "output_throughput": m.output_throughput,
             "request_throughput": m.request_throughput, "tpot_p50_ms": m.tpot_p50_ms,
             "interactivity": m.interactivity, "ttft_p50_ms": m.ttft_p50_ms, "completed": m.completed}
            for rung, m in results]


def build_sweep_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="sweep",
              description="Baseline and stack over the concurrency ladder, one launch per configuration.")
    def concurrency_sweep(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet,
                          bench: BenchmarkClient, store: ResultStore, baseline: BaselineResult,
                          optimization_stack: StackResult) -> dg.Output[SweepResult]:
        name = context.partition_key
        target = catalog.run_target(name, context.run.run_id, store)
        host = hosts.for_target(target)
        ladder = target.sweep_ladder()
        run_tree = baseline.run_tree
        base_commit = run_tree.base_commit if run_tree else None
        configs = [("baseline", baseline.spec, base_commit)]
        if optimization_stack.keepers:
            configs.append(("stack", stack_spec(target, optimization_stack.keepers, baseline.spec),
                            optimization_stack.tree_commit or base_commit))
        rows: list[dict] = []
        with recorded_stops(context, store, "concurrency_sweep"):
            for label, spec, commit in configs:
                spec = spec.model_copy(update={"framework_tree": served_at(run_tree, commit)})
                folder = step_dir(host, name, context.run.run_id, f"sweep-{label}")
                results = run_sweep(host=host, bench=bench, store=store, target=name, spec=spec,
                                    contract=baseline.contract, rungs=ladder, run_dir=folder,
                                    run_id=context.run.run_id, context_key=baseline.context_key)
                rows += sweep_rows(label, results)
        if not optimization_stack.keepers:  # the stack is the baseline: same server, same numbers
            rows += [{**row, "config": "stack"} for row in rows]
        plots = plot_sweep(rows, step_dir(host, name, context.run.run_id, "sweep-plots"))
        return dg.Output(SweepResult(rows=rows, plots=[str(p) for p in plots]), metadata={
            "rungs": dg.MetadataValue.json(ladder), "table": table_value(sweep_table(rows)),
            "plot_concurrency": dg.MetadataValue.path(str(plots[0])),
            "plot_interactivity": dg.MetadataValue.path(str(plots[1])),
        })

    return concurrency_sweep
