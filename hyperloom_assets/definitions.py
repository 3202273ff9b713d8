"""The only place that builds Definitions: `defs`, one partition per target file."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from hyperloom_assets.assets.accepted_patches import build_accepted_patches_asset
from hyperloom_assets.assets.baseline import build_baseline_asset
from hyperloom_assets.assets.candidates import build_candidates_asset
from hyperloom_assets.assets.concurrency_sweep import build_sweep_asset
from hyperloom_assets.assets.final_report import build_report_asset
from hyperloom_assets.assets.observations import build_observations
from hyperloom_assets.assets.optimization_stack import build_stack_asset
from hyperloom_assets.assets.partitions import target_partitions
from hyperloom_assets.assets.roofline import build_roofline_asset
from hyperloom_assets.assets.trials import build_trials_asset
from hyperloom_assets.core.config.targets import targets_dir
from hyperloom_assets.jobs import build_jobs
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.releases.envs import ReleaseEnvironments
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.sensors import build_sensors


def check_foreign_servers() -> bool:
    """HYPERLOOM_CHECK_FOREIGN_SERVERS=0 skips the foreign-server preflight (for a machine
    shared with other test sessions; never on a real GPU host)."""
    return os.environ.get("HYPERLOOM_CHECK_FOREIGN_SERVERS", "1") != "0"


def default_host() -> LocalHost:
    return LocalHost(check_foreign_processes=check_foreign_servers())


def build_defs(folder: Path | None = None, host: LocalHost | None = None, store: ResultStore | None = None,
               envs: ReleaseEnvironments | None = None) -> dg.Definitions:
    """The graph for a targets folder; tests pass their own folder, host and store."""
    folder = (folder or targets_dir()).resolve()
    partitions = target_partitions(folder)
    host = host or default_host()
    pool = host.pool()
    assets = [
        *build_observations(partitions),
        build_baseline_asset(partitions, pool),
        build_roofline_asset(partitions),
        build_candidates_asset(partitions),
        build_trials_asset(partitions, pool),
        build_accepted_patches_asset(partitions),
        build_stack_asset(partitions, pool),
        build_sweep_asset(partitions, pool),
        build_report_asset(partitions),
    ]
    jobs = build_jobs(partitions)
    return dg.Definitions(
        assets=assets,
        jobs=jobs,
        sensors=build_sensors(partitions, {job.name: job for job in jobs}),
        resources={"catalog": TargetCatalog(folder=str(folder)), "host": host,
                   "bench": BenchmarkClient(), "store": store or ResultStore(), "envs": envs or ReleaseEnvironments()},
    )


defs = build_defs()
