"""Asset jobs, selected by group name so they grow as assets land (no import cycles)."""

from __future__ import annotations

import dagster as dg

BASELINE_GROUPS = ("observed", "baseline")
SWEEP_GROUPS = ("sweep",)


def build_jobs(partitions: dg.PartitionsDefinition, present_groups: set[str]) -> list:
    """`baseline_job`, `optimize_job` (the whole graph) and `sweep_job`, all by target."""
    def job(name: str, groups: tuple[str, ...] | None, description: str):
        selection = dg.AssetSelection.all(include_sources=True) if groups is None else dg.AssetSelection.groups(*groups)
        return dg.define_asset_job(name, selection=selection, partitions_def=partitions,
                                   executor_def=dg.in_process_executor, description=description)

    jobs = [
        job("baseline_job", BASELINE_GROUPS, "Observe, measure the baseline, compute the roofline."),
        job("optimize_job", None, "The whole graph: baseline to final report."),
    ]
    if present_groups.issuperset(SWEEP_GROUPS):
        jobs.append(job("sweep_job", SWEEP_GROUPS, "The concurrency sweep and the final report."))
    return jobs
