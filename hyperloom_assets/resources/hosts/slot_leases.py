"""A run's slot on a host that declares its GPUs: planned, leased device by device, held.

The fleet resource (fleet.py) calls `hold_slot` where a whole host would be leased: the
host's own facts (GPU tool, topology, CPUs: host_side.slot_facts) plan a slot among the
devices no live run holds (core/fleet/slots.py), and the slot's devices are leased
together (HostLeases.acquire_all, all or none). When every fitting set is held by live
runs, the run waits for one to end, up to `wait_s`, then is refused like a held host.
A device held in another owner scope with an expired heartbeat is not waited for: it
needs `hyperloom recover`, which the refusal names.
"""

from __future__ import annotations

import time
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

from hyperloom_assets.core.fleet.leases import (DEFAULT_TTL_S, Holder, Lease, Verdict, blocked_message, decide,
                                                device_lease_key, lease_key_parts)
from hyperloom_assets.core.fleet.slots import Slot, parse_nvidia_topo, plan_slot, vendor_of
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.owner_scope import pid_alive
from hyperloom_assets.resources.store.leases import HostLeased, HostLeases

POLL_S = 2.0


def blocking_leases(leases: HostLeases, host: str, me: Holder) -> dict[int | None, Lease]:
    """Device -> the lease that keeps it from `me` (None: a whole-host lease, every device)."""
    now = datetime.now(timezone.utc)
    blocking: dict[int | None, Lease] = {}
    for lease in leases.of_host(host):
        same_scope = lease.holder.scope == me.scope
        alive = pid_alive(lease.holder.pid, lease.holder.pid_start) if same_scope else None
        if decide(lease, me, alive, now) in (Verdict.BLOCKED, Verdict.NEEDS_RECOVERY):
            blocking[lease_key_parts(lease.host)[1]] = lease
    return blocking


def _needs_recovery(lease: Lease, me: Holder) -> bool:
    return lease.holder.scope != me.scope and lease.expired(datetime.now(timezone.utc))


def _refusal(blocking: dict[int | None, Lease], host: str, count: int, me: Holder) -> HostLeased:
    lease = next(iter(blocking.values()))
    verdict = Verdict.NEEDS_RECOVERY if _needs_recovery(lease, me) else Verdict.BLOCKED
    now = datetime.now(timezone.utc)
    return HostLeased(f"no free slot of {count} device(s) on host {host!r}: " + blocked_message(lease, verdict, now),
                      verdict)


@contextmanager
def hold_slot(leases: HostLeases, host: Host, gpus: list[int], count: int, me: Holder,
              ttl_s: float = DEFAULT_TTL_S, wait_s: float = 0.0,
              on_warning: Callable[[str], None] = print, on_wait: Callable[[str], None] = print,
              mine: frozenset[int] = frozenset()) -> Iterator[Slot]:
    """The run's slot of `count` devices on `host`, its devices leased for the block; `mine`: the
    devices of the run's other slots, never shared with this one.

    Raises SlotError (the host declares too few devices) or HostLeased (none free in time)."""
    facts = host.slot_facts()
    links, vendor = parse_nvidia_topo(facts.get("topology") or ""), vendor_of(facts.get("gpu_tool"))
    deadline, waited = time.monotonic() + wait_s, False
    while True:
        blocking = blocking_leases(leases, host.name, me)
        busy = set(gpus) if None in blocking else {device for device in blocking if device is not None} | mine
        slot = plan_slot(host.name, gpus, busy, count, facts["allowed_cpus"], links, vendor)
        if slot is not None:
            with ExitStack() as held:
                try:
                    held.enter_context(leases.hold([device_lease_key(host.name, d) for d in slot.devices], me,
                                                   ttl_s, on_warning))
                except HostLeased:
                    if time.monotonic() >= deadline:  # another run took a device between the read and the insert
                        raise
                    time.sleep(POLL_S)
                    continue
                yield slot
                return
        if not blocking:  # only the run's own other slots stand in the way: waiting cannot help
            raise HostLeased(f"no free slot of {count} device(s) on host {host.name!r}: the run's other slots hold "
                             f"{sorted(mine)} of {gpus}", Verdict.BLOCKED)
        if all(_needs_recovery(lease, me) for lease in blocking.values()) or time.monotonic() >= deadline:
            raise _refusal(blocking, host.name, count, me)
        if not waited:
            on_wait(f"waiting up to {wait_s:.0f} s for {count} free device(s) of host {host.name!r} "
                    f"(declared {gpus}, held {sorted(busy)})")
            waited = True
        time.sleep(POLL_S)
