"""Host leases (docs/design.md, invariant 9): who may take a host, decided from the holder on record. Pure code.

A holder names its owner scope (boot id, PID-namespace inode, start time of the
namespace's PID 1: one container on one boot), the run, the pid with its start time
(so a reused pid is not mistaken for the holder) and the worker's hostname. The store
(resources/store/leases.py) reads the lease and the liveness of a same-scope holder's
pid; this module says what follows.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum

from hyperloom_assets.core.models import Frozen

DEFAULT_TTL_S = 120.0
# Heartbeats come this many times per TTL, so one late beat never expires a live lease.
HEARTBEATS_PER_TTL = 4


class Holder(Frozen):
    scope: str
    run_id: str
    pid: int
    pid_start: float  # the process's start, in seconds since boot (exact), against pid reuse
    worker: str  # hostname of the machine the run worker runs on

    def describe(self) -> str:
        return f"run {self.run_id} (pid {self.pid} on {self.worker}, scope {self.scope})"


class Lease(Frozen):
    host: str
    holder: Holder
    acquired_at: datetime
    heartbeat_at: datetime
    ttl_s: float

    def expired(self, now: datetime) -> bool:
        return now - self.heartbeat_at > timedelta(seconds=self.ttl_s)

    def since(self) -> str:
        return self.acquired_at.isoformat(timespec="seconds")


class Verdict(str, Enum):
    TAKE = "take"  # no lease on record
    REENTER = "reenter"  # the same run and process already hold it
    RECLAIM = "reclaim"  # a dead holder of this scope: provably gone
    BLOCKED = "blocked"  # a live holder, or one in another scope whose heartbeat is fresh
    NEEDS_RECOVERY = "needs_recovery"  # another scope, heartbeat expired: an operator must confirm


def decide(lease: Lease | None, me: Holder, holder_alive: bool | None, now: datetime) -> Verdict:
    """What `me` may do about a host's lease.

    `holder_alive`: whether the holder's pid still runs with its start time, known only
    when the holder is in my scope (None otherwise: another container's pids are not
    visible from here).
    """
    if lease is None:
        return Verdict.TAKE
    holder = lease.holder
    if holder.scope == me.scope:
        if holder.run_id == me.run_id and holder.pid == me.pid and holder.pid_start == me.pid_start:
            return Verdict.REENTER
        return Verdict.BLOCKED if holder_alive else Verdict.RECLAIM
    return Verdict.NEEDS_RECOVERY if lease.expired(now) else Verdict.BLOCKED


def device_lease_key(host: str, device: int) -> str:
    """A device's row in the lease table (a slot's: core/fleet/slots.py); '/' never occurs in a host name,
    so no host's own row clashes."""
    return f"{host}/gpu{device}"


def lease_key_parts(key: str) -> tuple[str, int | None]:
    """(host, device) of a lease row's key; device None for a host's own row."""
    host, _, device = key.partition("/")
    return host, int(device.removeprefix("gpu")) if device else None


def lease_subject(key: str) -> str:
    """A lease row's key in words: a host's own row, or one device of it."""
    host, device = lease_key_parts(key)
    return f"device gpu{device} of host {host!r}" if device is not None else f"host {host!r}"


def blocked_message(lease: Lease, verdict: Verdict, now: datetime) -> str:
    """Who holds the host and since when, and what the operator can do."""
    age = (now - lease.heartbeat_at).total_seconds()
    host = lease_key_parts(lease.host)[0]
    text = (f"{lease_subject(lease.host)} is leased by {lease.holder.describe()} since {lease.since()}; "
            f"last heartbeat {age:.0f} s ago (TTL {lease.ttl_s:.0f} s)")
    if verdict is Verdict.NEEDS_RECOVERY:
        text += (f". The holder is in another owner scope and its heartbeat expired; once you have confirmed "
                 f"that scope is gone, run `hyperloom recover {host} --confirm-scope-gone`")
    return text
