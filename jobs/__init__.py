"""Asset jobs, selected by group name so they grow as assets land (no import cycles)."""

from __future__ import annotations

import dagster as dg

# baseline_job: framework_tree, server_config (group "observed"), baseline, roofline.
BASELINE_GROUPS = ("observed", "baseline")
# sweep_job: concurrency_sweep and final_report.
SWEEP_GROUPS = ("sweep",)


def _job(name: str, selection: dg.AssetSelection, partitions: dg.PartitionsDefinition, description: str):
    # In-process: the steps run one after another anyway (one launch per host at a
    # time), and a process per step would cost seconds of imports each.
    return dg.define_asset_job(name, selection=selection, partitions_def=partitions,
                               executor_def=dg.in_process_executor, description=description)


def build_jobs(partitions: dg.PartitionsDefinition) -> list:
    """`baseline_job`, `optimize_job` (the whole graph) and `sweep_job`, all by target."""
    return [
        _job("baseline_job", dg.AssetSelection.groups(*BASELINE_GROUPS), partitions,
             "Observe the inputs, measure the baseline, compute the roofline."),
        _job("optimize_job", dg.AssetSelection.all(include_sources=True), partitions,
             "The whole graph: baseline, roofline, candidates, trials, stack, sweep, report."),
        _job("sweep_job", dg.AssetSelection.groups(*SWEEP_GROUPS), partitions,
             "The concurrency sweep and the final report, from the stored stack."),
    ]
