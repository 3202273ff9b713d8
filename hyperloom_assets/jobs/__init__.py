"""Asset jobs, selected by group name so they grow as assets land (no import cycles)."""

from __future__ import annotations

import os
from typing import Mapping

import dagster as dg

from hyperloom_assets.core.fleet.tags import host_run_tags

# baseline_job: baseline and roofline. Their inputs framework_tree and server_config are
# external assets (target_change_sensor observes them), which no run can execute.
BASELINE_GROUPS = ("baseline",)
# sweep_job: concurrency_sweep and final_report.
SWEEP_GROUPS = ("sweep",)


def host_tagged(partitions: dg.PartitionsDefinition, host_of: Mapping[str, str],
                slotted: frozenset[str] = frozenset()) -> dg.PartitionedConfig:
    """Every run of a target is tagged with its host (the run queue's limit, the Celery queue)."""
    def tags(key: str) -> dict[str, str]:
        host = host_of.get(key, "local")
        return host_run_tags(host, os.environ, slotted=host in slotted)

    return dg.PartitionedConfig(partitions_def=partitions, run_config_for_partition_key_fn=lambda key: {},
                                tags_for_partition_key_fn=tags)


def _job(name: str, selection: dg.AssetSelection, config: dg.PartitionedConfig, description: str):
    # In-process: the steps run one after another anyway (one launch per host at a
    # time), and a process per step would cost seconds of imports each.
    return dg.define_asset_job(name, selection=selection, config=config,
                               executor_def=dg.in_process_executor, description=description)


def build_jobs(partitions: dg.PartitionsDefinition, host_of: Mapping[str, str] | None = None,
               slotted: frozenset[str] = frozenset()) -> list:
    """`baseline_job`, `optimize_job` (the whole graph) and `sweep_job`, all by target.

    `host_of`: each target's host (default `local`), for the runs' host tags; `slotted`: the
    hosts that declare their GPUs, whose runs share them slot by slot.
    """
    config = host_tagged(partitions, dict(host_of or {}), slotted)
    return [
        _job("baseline_job", dg.AssetSelection.groups(*BASELINE_GROUPS), config,
             "Measure the baseline, compute the roofline."),
        _job("optimize_job", dg.AssetSelection.all(), config,
             "The whole graph: baseline, roofline, candidates, trials, stack, sweep, report."),
        _job("sweep_job", dg.AssetSelection.groups(*SWEEP_GROUPS), config,
             "The concurrency sweep and the final report, from the stored stack."),
    ]
