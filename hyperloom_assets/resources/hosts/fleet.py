"""The fleet: every host of the hosts file as a serving host, and the run's lease on one.

Assets ask `hosts.for_target(target)` for the host a target names. While a run
executes, this resource holds that host's lease (resources/store/leases.py): taken
when the run's resources are set up, before any step, heartbeated, and released when
the run ends whichever way it ends. While it holds the lease, this machine watches the
run (LocalHost.watching_run: its worker recorded, dead runs released, Terminate heard).
A host held by a live run refuses the run here, before any launch, naming the holder and
since when; the refusal is the run's stop reason `environment_unavailable` in the store.

A host that declares its GPUs (`gpus:` in the hosts file) is not leased whole: the run
leases a slot, the devices one launch of its target takes (slot_leases.py), and every
host this resource hands out for that host carries the slot, so each launch sees only
the slot's devices and CPUs. Runs on other slots of the host go on beside it. How many
slots a run takes, and how many it waits for, is decided as `targets check` decides it
(core/fleet/run_slots.py); this resource only leases them.

A target may name a pool (`kind: pool`): its members are checked to serve alike, and the
run's slots are taken across them (host_pool.py). Each slot's host is its member's; the
run's one-launch steps take its first slot, the parallel climb every slot (slot_hosts).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack, contextmanager
from typing import Iterator

import dagster as dg
from pydantic import PrivateAttr

from hyperloom_assets.core.config.hosts import LOCAL, HostConfig, HostsError, PoolConfig, load_hosts, member_configs
from hyperloom_assets.core.config.problems import TargetProblem
from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.decisions.stop_reasons import StopReason
from hyperloom_assets.core.fleet.leases import DEFAULT_TTL_S
from hyperloom_assets.core.fleet.run_slots import HostDevices, RunSlots, SlotRefusal, target_slots
from hyperloom_assets.core.fleet.slots import Slot, SlotError
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.host_pool import PoolMismatch, PoolRequest, check_members_agree, hold_pool_slots
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.owner_scope import this_holder
from hyperloom_assets.resources.hosts.slot_leases import hold_slot
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
    # How long a run waits for a slot on a host that declares its GPUs while live runs hold them.
    slot_wait_s: float = 1800.0
    _slots: list[Slot] = PrivateAttr(default_factory=list)  # the run's, the first for its one-launch steps

    def host_config(self, name: str) -> HostConfig:
        """A host's entry of the hosts file; HostsError naming what is wrong."""
        return self._host_configs(name)[name]

    def _host_configs(self, name: str) -> dict[str, HostConfig]:
        """Every good entry of the hosts file, `name` among them; HostsError naming what is wrong with it."""
        file = self.catalog.hosts_path()
        hosts, problems = load_hosts(file)
        if name not in hosts:
            # A hosts file that could not be read at all says so, rather than "no such host".
            mine = [p for p in problems if p.field.split(".")[0] == name or p.field == "(file)"]
            raise HostsError(mine or [TargetProblem(file=str(file), field=name, expected=(
                f"a host of the hosts file ({', '.join(sorted(hosts))})"))])
        return hosts

    def members(self, name: str) -> list[tuple[str, HostConfig]]:
        """(name, entry) of each host a target naming `name` serves on: a pool's members, else the host."""
        return member_configs(name, self._host_configs(name))

    def host(self, name: str, slot: Slot | None = None, config: HostConfig | None = None) -> Host:
        """The host resource for a name of the hosts file (`config`: its entry, when already read); for a
        pool, the member of the run's first slot there (its first member outside a run)."""
        config = config or self.host_config(name)
        if isinstance(config, PoolConfig):
            held = next((held for held in self._slots if held.host in config.hosts), None)
            return self.host(held.host, held) if held else self.host(config.hosts[0])
        # The run's slot goes with its host: every launch of the run sees only the slot's devices.
        slot = slot or next((held for held in self._slots if held.host == name), None)
        slot = {"slot": slot.model_dump(mode="json")} if slot else {}
        if name == LOCAL:
            return self.local.model_copy(update={"client_cpus": config.client_cpus, **slot,
                                                 **({"python": str(config.python)} if config.python else {})})
        if config.kind == "local":
            return self.local.model_copy(update={"name": name, "python": str(config.python) if config.python else None,
                                                 "client_cpus": config.client_cpus, **slot})
        return SshHost(name=name, config=config.model_dump(mode="json"), state_dir=str(self.local.state_path()),
                       check_foreign_processes=self.local.check_foreign_processes,
                       teardown_term_wait_s=self.local.teardown_term_wait_s, **slot)

    def for_target(self, target: Target) -> Host:
        return self.host(target.host)

    def slot_hosts(self, target: Target) -> list[Host]:
        """One host per slot the run holds on the target's host or pool (parallel trials), else the host alone."""
        names = {name for name, _ in self.members(target.host)}
        held = [slot for slot in self._slots if slot.host in names]
        return [self.host(slot.host, slot) for slot in held] or [self.host(target.host)]

    def run_target(self, run: dg.DagsterRun | None) -> Target | None:
        """The target a run serves, from the run's snapshot of the target file."""
        if run is None or PARTITION_TAG not in run.tags:
            return None
        return self.catalog.run_target(run.tags[PARTITION_TAG], run.run_id, self.store)

    def run_host(self, run: dg.DagsterRun | None) -> str | None:
        """The host a run serves on: its target's."""
        target = self.run_target(run)
        return target.host if target else None

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator["HostFleet"]:
        run = context.run
        target = self.run_target(run)
        if target is None:  # a sensor, or a run that is not of one target
            yield self
            return
        name = target.host
        members = self.members(name)  # a bad hosts entry fails here, before the lease and any launch
        hosts = [(self.host(member, config=config), config.gpus) for member, config in members]
        holder = this_holder(run.run_id)
        with ExitStack() as held:
            try:
                slots = self._run_slots(target, hosts)
                if len(hosts) > 1:
                    check_members_agree(name, [host for host, _ in hosts], target_spec(target))
                    request = PoolRequest(name, hosts, slots)
                    self._slots = hold_pool_slots(held, HostLeases(self.store), request, holder, self.lease_ttl_s,
                                                  self.slot_wait_s, on_warning=context.log.warning,
                                                  on_wait=context.log.info)
                elif slots.per_launch is None:  # no gpus declared: the host is leased whole
                    held.enter_context(HostLeases(self.store).hold(name, holder, self.lease_ttl_s,
                                                                   on_warning=context.log.warning))
                else:
                    self._slots = self._hold_slots(held, *hosts[0], slots, holder, context)
            except (SlotError, PoolMismatch) as exc:  # the target's or the pool's config, not the host's state
                raise dg.Failure(description=str(exc), metadata={"host": name}) from exc
            except (HostLeased, ServerError) as exc:  # held by another run, or a pool member unreachable
                # Before any step, so no step's recorded_stops sees it: the stop is kept here.
                context.log.warning(f"stop reason: {ENVIRONMENT_UNAVAILABLE}: {exc}")
                self.store.record_stop(target=run.tags[PARTITION_TAG], stop_reason=ENVIRONMENT_UNAVAILABLE,
                                       detail=str(exc).splitlines()[0][:500], run_id=run.run_id)
                raise dg.Failure(description=str(exc), metadata={"stop_reason": ENVIRONMENT_UNAVAILABLE,
                                                                  "host": name}) from exc
            what = "; ".join(slot.describe() for slot in self._slots) or f"host {name!r}"
            context.log.info(f"{what} leased by {holder.describe()}")
            if context.instance is not None:
                held.enter_context(self.local.watching_run(context.instance, run.run_id))
            yield self

    def _run_slots(self, target: Target, hosts: list[tuple[Host, list[int] | None]]) -> RunSlots:
        """The run's slots as `targets check` decides them (core/fleet/run_slots.py); SlotError if none can be."""
        declared = None if any(gpus is None for _, gpus in hosts) else tuple(len(gpus) for _, gpus in hosts)
        decided = target_slots(target, HostDevices(name=target.host, file=str(self.catalog.hosts_path()),
                                                   members=declared))
        if isinstance(decided, SlotRefusal):
            raise SlotError(f"{decided.field}: {decided.expected}")
        return decided

    def _hold_slots(self, held: ExitStack, host: Host, gpus: list[int], slots: RunSlots, holder,
                    context: dg.InitResourceContext) -> list[Slot]:
        """The run's slots on one host, each of `slots.per_launch` devices (slot_leases.py): those it must
        wait for, waited for; the others (of `auto`) taken while free, the first held one ending the taking."""
        leases, taken = HostLeases(self.store), []
        for _ in range(slots.wanted):
            must_wait = slots.must_wait(len(taken))
            try:
                mine = frozenset(device for slot in taken for device in slot.devices)
                taken.append(held.enter_context(hold_slot(leases, host, gpus, slots.per_launch, holder,
                                                          self.lease_ttl_s, self.slot_wait_s if must_wait else 0.0,
                                                          on_warning=context.log.warning, on_wait=context.log.info,
                                                          mine=mine)))
            except HostLeased:
                if must_wait:
                    raise
                break  # the slots free now are the run's
        return taken


def target_spec(target: Target) -> ServerSpec:
    """The target's own launch, as the members of a pool are asked what they would serve it with."""
    return ServerSpec(engine=target.engine, model=target.model, server_args=target.server_args, env=target.env)
