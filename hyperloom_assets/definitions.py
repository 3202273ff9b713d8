"""The only place that builds Definitions: `defs`, one partition per target file."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from hyperloom_assets.baseline_assets import build_baseline_asset
from hyperloom_assets.exploit_assets import build_exploit_assets
from hyperloom_assets.explore_assets import build_explore_assets
from hyperloom_assets.observations import build_observations
from hyperloom_assets.partitions import target_partitions
from hyperloom_assets.targets import targets_dir
from jobs import build_jobs
from resources.bench_client import BenchmarkClient
from resources.catalog import TargetCatalog
from resources.gpu_host import LocalHost
from resources.release_envs import ReleaseEnvironments
from resources.store import ResultStore
from sensors import build_sensors


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
        *build_explore_assets(partitions, pool),
        *build_exploit_assets(partitions, pool),
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
