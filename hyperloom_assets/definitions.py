"""The only place that builds Definitions: `defs`, one partition per target file."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from hyperloom_assets.baseline_assets import build_baseline_asset
from hyperloom_assets.observations import build_observations
from hyperloom_assets.partitions import target_partitions
from hyperloom_assets.targets import targets_dir
from jobs import build_jobs
from resources.bench_client import BenchmarkClient
from resources.catalog import TargetCatalog
from resources.gpu_host import LocalHost, pool_name
from resources.store import ResultStore


def build_defs(folder: Path | None = None) -> dg.Definitions:
    folder = (folder or targets_dir()).resolve()
    partitions = target_partitions(folder)
    host = LocalHost()
    pool = pool_name(host.name)
    assets = [*build_observations(partitions), build_baseline_asset(partitions, pool)]
    groups = {group for a in assets for group in _groups(a)}
    return dg.Definitions(
        assets=assets,
        jobs=build_jobs(partitions, groups),
        resources={"catalog": TargetCatalog(folder=str(folder)), "host": host,
                   "bench": BenchmarkClient(), "store": ResultStore()},
    )


def _groups(asset) -> set[str]:
    return set(asset.group_names_by_key.values()) if hasattr(asset, "group_names_by_key") else set()


defs = build_defs()
