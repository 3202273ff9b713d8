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
from hyperloom_assets.assets.profile import build_profile_asset
from hyperloom_assets.assets.partitions import partition_hosts
from hyperloom_assets.assets.roofline import build_roofline_asset
from hyperloom_assets.assets.trials import build_trials_asset
from hyperloom_assets.core.config.targets import targets_dir
from hyperloom_assets.jobs import build_jobs
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.proposer.providers import LlmProviders
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
               envs: ReleaseEnvironments | None = None, llm: LlmProviders | None = None) -> dg.Definitions:
    """The graph for a targets folder; tests pass their own folder, local host and store.

    `host` is this machine; the hosts file (beside the targets folder, or
    `HYPERLOOM_HOSTS_FILE`) adds the others, and each target serves on the one it names.
    """
    folder = (folder or targets_dir()).resolve()
    catalog = TargetCatalog(folder=str(folder))
    host_names = catalog.host_names()
    host_of = partition_hosts(folder, host_names)
    partitions = dg.StaticPartitionsDefinition(list(host_of))
    store = store or ResultStore()
    hosts = HostFleet(local=host or default_host(), catalog=catalog, store=store)
    assets = [
        *build_observations(partitions),
        build_baseline_asset(partitions),
        build_roofline_asset(partitions),
        build_profile_asset(partitions),
        build_candidates_asset(partitions),
        build_trials_asset(partitions),
        build_accepted_patches_asset(partitions),
        build_stack_asset(partitions),
        build_sweep_asset(partitions),
        build_report_asset(partitions),
    ]
    jobs = build_jobs(partitions, host_of, frozenset(name for name, _ in host_names.gpus))
    # Every run without an executor of its own (the UI's "Materialize" of selected assets)
    # runs in one process: the fleet resource takes the host's lease when a process sets
    # up its resources, so the multiprocess default would take and release it per step,
    # letting another run onto the host between two steps of this one.
    return dg.Definitions(
        assets=assets,
        jobs=jobs,
        executor=dg.in_process_executor,
        sensors=build_sensors(partitions, {job.name: job for job in jobs}),
        resources={"catalog": catalog, "hosts": hosts, "bench": BenchmarkClient(), "store": store,
                   "envs": envs or ReleaseEnvironments(), "llm": llm or LlmProviders()},
    )


defs = build_defs()
