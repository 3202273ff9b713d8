"""The fleet: every host of the hosts file as a serving host, and the run's lease on one.

Assets ask `hosts.for_target(target)` for the host a target names. While a run
executes, this resource holds that host's lease (resources/store/leases.py): taken
when the run's resources are set up, before any step, heartbeated, and released when
the run ends whichever way it ends. While it holds the lease, this machine watches the
run (LocalHost.watching_run: its worker recorded, dead runs released, Terminate heard).
A host held by a live run refuses the run here, before any launch, naming the holder and
since when; the refusal is the run's stop reason `environment_unavailable` in the store.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack, contextmanager
from typing import Iterator

import dagster as dg

from hyperloom_assets.core.config.hosts import LOCAL, HostsError, load_hosts
from hyperloom_assets.core.config.targets import Target, TargetProblem
from hyperloom_assets.core.decisions.stop_reasons import StopReason
from hyperloom_assets.core.fleet.leases import DEFAULT_TTL_S
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.owner_scope import this_holder
from hyperloom_assets.resources.hosts.ssh import SshHost
from hyperloom_assets.resources.store.leases import HostLeased, HostLeases
from hyperloom_assets.resources.store.results import ResultStore

log = logging.getLogger(__name__)
PARTITION_TAG = "dagster/partition"
ENVIRONMENT_UNAVAILABLE = StopReason.ENVIRONMENT_UNAVAILABLE.value


class HostFleet(dg.ConfigurableResource):
    """`local`: this machine (its state folder is every host's control-node state);
    `catalog`: where targets and the hosts file are; `store`: where leases are kept."""

    local: LocalHost
    catalog: TargetCatalog
    store: ResultStore
    lease_ttl_s: float = DEFAULT_TTL_S

    def host(self, name: str) -> Host:
        """The host resource for a name of the hosts file; HostsError naming what is wrong."""
        file = self.catalog.hosts_path()
        hosts, problems = load_hosts(file)
        if name not in hosts:
            mine = [p for p in problems if p.field.split(".")[0] == name]
            raise HostsError(mine or [TargetProblem(file=str(file), field=name, expected=(
                f"a host of the hosts file ({', '.join(sorted(hosts))})"))])
        config = hosts[name]
        if name == LOCAL:
            return self.local.model_copy(update={"client_cpus": config.client_cpus,
                                                 **({"python": str(config.python)} if config.python else {})})
        if config.kind == "local":
            return self.local.model_copy(update={"name": name, "python": str(config.python) if config.python else None,
                                                 "client_cpus": config.client_cpus})
        return SshHost(name=name, config=config.model_dump(mode="json"), state_dir=str(self.local.state_path()),
                       check_foreign_processes=self.local.check_foreign_processes,
                       teardown_term_wait_s=self.local.teardown_term_wait_s)

    def for_target(self, target: Target) -> Host:
        return self.host(target.host)

    def run_host(self, run: dg.DagsterRun | None) -> str | None:
        """The host a run serves on: its target's, from the run's snapshot of the target file."""
        if run is None or PARTITION_TAG not in run.tags:
            return None
        return self.catalog.run_target(run.tags[PARTITION_TAG], run.run_id, self.store).host

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator["HostFleet"]:
        run = context.run
        name = self.run_host(run)
        if name is None:  # a sensor, or a run that is not of one target
            yield self
            return
        self.host(name)  # a bad hosts entry fails here, before the lease and any launch
        holder = this_holder(run.run_id)
        with ExitStack() as held:
            try:
                held.enter_context(HostLeases(self.store).hold(name, holder, self.lease_ttl_s,
                                                               on_warning=context.log.warning))
            except HostLeased as exc:
                # Before any step, so no step's recorded_stops sees it: the stop is kept here.
                context.log.warning(f"stop reason: {ENVIRONMENT_UNAVAILABLE}: {exc}")
                self.store.record_stop(target=run.tags[PARTITION_TAG], stop_reason=ENVIRONMENT_UNAVAILABLE,
                                       detail=str(exc).splitlines()[0][:500], run_id=run.run_id)
                raise dg.Failure(description=str(exc), metadata={"stop_reason": ENVIRONMENT_UNAVAILABLE,
                                                                  "host": name}) from exc
            context.log.info(f"host {name!r} leased by {holder.describe()}")
            if context.instance is not None:
                held.enter_context(self.local.watching_run(context.instance, run.run_id))
            yield self
