"""A pool of hosts (`kind: pool` in the hosts file): its members checked alike, slots taken across them.

A target may name a pool of hosts with the same GPU model and engine install; the run's
slots are then taken across the members (fleet.py). Before any lease, the members are
asked what they serve with, and a pool whose members differ is refused, naming the
member: a trial measured on one member must be comparable with one measured on another.
Slots fill the first member's free devices first, then the next member's; each member's
devices are leased as a slot host's are (slot_leases.hold_slot), without waiting on a
member while another may have room: the pool is polled as a whole until the wait ends.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Callable

from hyperloom_assets.core.fleet.leases import DEFAULT_TTL_S, Holder, Verdict
from hyperloom_assets.core.fleet.run_slots import RunSlots
from hyperloom_assets.core.fleet.slots import Slot, SlotError
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.slot_leases import POLL_S, hold_slot
from hyperloom_assets.resources.store.leases import HostLeased, HostLeases


class PoolMismatch(ValueError):
    """Two members of a pool serve with different GPUs or engine installs; the message names them."""


def serving_with(host: Host, spec: ServerSpec) -> dict[str, object]:
    """What makes a member's measurements comparable with another's: its GPU model and engine install."""
    return {"GPUs": host.gpu_names(), f"{spec.engine} install": host.engine_identity(spec)}


def check_members_agree(pool: str, members: list[Host], spec: ServerSpec) -> None:
    """Raise PoolMismatch naming the first member whose GPUs or engine install differ from the first's."""
    first, reference = members[0], serving_with(members[0], spec)
    for member in members[1:]:
        found = serving_with(member, spec)
        differ = [f"{what} {found[what]!r} on {member.name!r}, {reference[what]!r} on {first.name!r}"
                  for what in reference if found[what] != reference[what]]
        if differ:
            raise PoolMismatch(f"pool {pool!r}: member {member.name!r} differs from {first.name!r}: "
                               f"{'; '.join(differ)} (a pool's hosts must have the same GPU model and engine install)")


class PoolRequest:
    """What a run asks of a pool: its slots as decided for the target (core/fleet/run_slots.py), on the
    members that can hold one."""

    def __init__(self, pool: str, members: list[tuple[Host, list[int]]], slots: RunSlots):
        self.pool, self.slots, self.count = pool, slots, slots.per_launch
        self.members = [(host, gpus) for host, gpus in members if len(gpus) >= self.count]
        if not self.members:
            raise SlotError(f"a launch needs {self.count} devices (its tensor x pipeline x data parallel sizes), "
                            f"but no member of pool {pool!r} declares that many: "
                            + ", ".join(f"{host.name!r} {gpus}" for host, gpus in members))


def _take_free(held: ExitStack, leases: HostLeases, request: PoolRequest, slots: list[Slot], me: Holder,
               ttl_s: float, on_warning: Callable[[str], None]) -> list[HostLeased]:
    """Lease every free slot it can, member by member, up to the wanted count; the members' refusals."""
    refusals = []
    for host, gpus in request.members:
        while len(slots) < request.slots.wanted:
            mine = frozenset(device for slot in slots if slot.host == host.name for device in slot.devices)
            try:
                slots.append(held.enter_context(hold_slot(leases, host, gpus, request.count, me, ttl_s, 0.0,
                                                          on_warning=on_warning, mine=mine)))
            except HostLeased as refusal:
                refusals.append(refusal)
                break
    return refusals


def hold_pool_slots(held: ExitStack, leases: HostLeases, request: PoolRequest, me: Holder,
                    ttl_s: float = DEFAULT_TTL_S, wait_s: float = 0.0,
                    on_warning: Callable[[str], None] = print, on_wait: Callable[[str], None] = print) -> list[Slot]:
    """The run's slots across the pool, each leased on `held`: the wanted ones free now, and those it must
    wait for (request.slots) waited for up to `wait_s`. Raises HostLeased naming each member's holder."""
    slots: list[Slot] = []
    deadline, waited = time.monotonic() + wait_s, False
    while True:
        refusals = _take_free(held, leases, request, slots, me, ttl_s, on_warning)
        if not request.slots.must_wait(len(slots)):
            return slots
        recovery = all(refusal.verdict == Verdict.NEEDS_RECOVERY for refusal in refusals)
        if recovery or time.monotonic() >= deadline:
            verdict = Verdict.NEEDS_RECOVERY if recovery else Verdict.BLOCKED
            raise HostLeased(f"pool {request.pool!r}: {len(slots)} of {request.slots.wanted} slot(s) free: "
                             + "; ".join(str(refusal) for refusal in refusals), verdict)
        if not waited:
            on_wait(f"waiting up to {wait_s:.0f} s for {request.slots.wanted - len(slots)} more slot(s) of "
                    f"{request.count} device(s) on pool {request.pool!r} ({len(slots)} held)")
            waited = True
        time.sleep(POLL_S)
