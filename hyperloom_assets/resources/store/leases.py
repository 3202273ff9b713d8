"""Host leases in the result store's database: take, heartbeat, release, recover.

One row per leased host (the host is the primary key, so two runs can never both
insert one); every change is also an event row (taken, released, reclaimed, recovered)
saying who did it. Times are epoch seconds of the writer's clock.
"""

from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

import sqlalchemy as sa

from hyperloom_assets.core.fleet.leases import (
    DEFAULT_TTL_S,
    HEARTBEATS_PER_TTL,
    Holder,
    Lease,
    Verdict,
    blocked_message,
    decide,
)
from hyperloom_assets.resources.hosts.owner_scope import pid_alive
from hyperloom_assets.resources.store.database import ExtraTables
from hyperloom_assets.resources.store.results import ResultStore, StoreWriteError

log = logging.getLogger(__name__)
METADATA = sa.MetaData()

HOST_LEASES = sa.Table(
    "host_leases", METADATA,
    sa.Column("host", sa.String, primary_key=True),
    sa.Column("holder", sa.Text, nullable=False),  # JSON Holder
    sa.Column("scope", sa.String, nullable=False, index=True),
    sa.Column("run_id", sa.String, nullable=False),
    sa.Column("acquired_at", sa.Float, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),
    sa.Column("ttl_s", sa.Float, nullable=False),
)

LEASE_EVENTS = sa.Table(
    "host_lease_events", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("host", sa.String, nullable=False, index=True),
    sa.Column("action", sa.String, nullable=False),  # taken | released | reclaimed | recovered | lost
    sa.Column("holder", sa.Text, nullable=False),  # JSON Holder the action was about
    sa.Column("by", sa.Text),  # JSON: who acted, when not the holder itself
    sa.Column("detail", sa.Text),
    sa.Column("at", sa.Float, nullable=False),
)


class HostLeased(RuntimeError):
    """The host is held by someone else; the message says who and since when."""

    def __init__(self, message: str, verdict: Verdict):
        self.verdict = verdict
        super().__init__(message)


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _lease(row) -> Lease:
    return Lease(host=row.host, holder=Holder.model_validate_json(row.holder), acquired_at=_dt(row.acquired_at),
                 heartbeat_at=_dt(row.heartbeat_at), ttl_s=row.ttl_s)


class HostLeases(ExtraTables):
    """Leases over a ResultStore's database; the tables are created on first use."""

    metadata = METADATA

    def __init__(self, store: ResultStore, clock: Callable[[], float] | None = None):
        super().__init__(store)
        self._clock = clock or (lambda: datetime.now(timezone.utc).timestamp())

    def read(self, host: str) -> Lease | None:
        with self.engine().connect() as conn:
            row = conn.execute(sa.select(HOST_LEASES).where(HOST_LEASES.c.host == host)).first()
        return _lease(row) if row else None

    def held(self) -> list[Lease]:
        with self.engine().connect() as conn:
            return [_lease(row) for row in conn.execute(sa.select(HOST_LEASES).order_by(HOST_LEASES.c.host))]

    def of_host(self, host: str) -> list[Lease]:
        """The host's own lease, or the leases of its devices (core/fleet/leases.device_lease_key)."""
        return [lease for lease in self.held() if lease.host == host or lease.host.startswith(f"{host}/")]

    def events(self, host: str) -> list[dict]:
        query = sa.select(LEASE_EVENTS).where(LEASE_EVENTS.c.host == host).order_by(LEASE_EVENTS.c.id)
        with self.engine().connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def _event(self, conn, host: str, action: str, holder: Holder, by: dict | None = None, detail: str = "") -> None:
        conn.execute(LEASE_EVENTS.insert().values(host=host, action=action, holder=holder.model_dump_json(),
                                                  by=json.dumps(by) if by else None, detail=detail, at=self._clock()))

    def acquire(self, host: str, me: Holder, ttl_s: float = DEFAULT_TTL_S) -> str | None:
        """Take the host's lease; the warning naming a reclaimed dead run, if one was.

        Raises HostLeased when a live holder (or another scope's) has it.
        """
        now = self._clock()
        values = dict(host=host, holder=me.model_dump_json(), scope=me.scope, run_id=me.run_id,
                      acquired_at=now, heartbeat_at=now, ttl_s=ttl_s)
        try:
            with self.writing(f"the lease of host {host!r} for {me.describe()}") as conn:
                conn.execute(HOST_LEASES.insert().values(**values))
                self._event(conn, host, "taken", me)
            return None
        except StoreWriteError as error:
            if not isinstance(error.__cause__, sa.exc.IntegrityError):
                raise  # an integrity error is the lease already held: read whose it is below
        lease = self.read(host)
        if lease is None:  # released between our insert and our read: try once more
            return self.acquire(host, me, ttl_s)
        same_scope = lease.holder.scope == me.scope
        alive = pid_alive(lease.holder.pid, lease.holder.pid_start) if same_scope else None
        verdict = decide(lease, me, alive, _dt(now))
        if verdict is Verdict.REENTER:
            return None
        if verdict is not Verdict.RECLAIM:
            raise HostLeased(blocked_message(lease, verdict, _dt(now)), verdict)
        with self.writing(f"the reclaimed lease of host {host!r}") as conn:
            taken = conn.execute(HOST_LEASES.update().where(
                HOST_LEASES.c.host == host, HOST_LEASES.c.holder == lease.holder.model_dump_json(),
            ).values(**values)).rowcount
            if taken != 1:
                raise HostLeased(f"host {host!r}: another run reclaimed the lease of {lease.holder.describe()} first",
                                 Verdict.BLOCKED)
            self._event(conn, host, "reclaimed", lease.holder, by=me.model_dump(), detail="holder pid gone")
        return (f"host {host!r}: reclaimed the lease of dead {lease.holder.describe()}, held since {lease.since()} "
                f"(its pid is gone)")

    def heartbeat(self, host: str, me: Holder) -> bool:
        """Renew the lease; False when it is no longer ours (recovered by an operator)."""
        with self.writing(f"a heartbeat of the lease of host {host!r}") as conn:
            return conn.execute(HOST_LEASES.update().where(
                HOST_LEASES.c.host == host, HOST_LEASES.c.holder == me.model_dump_json(),
            ).values(heartbeat_at=self._clock())).rowcount == 1

    def release(self, host: str, me: Holder) -> None:
        with self.writing(f"the release of the lease of host {host!r}") as conn:
            gone = conn.execute(HOST_LEASES.delete().where(
                HOST_LEASES.c.host == host, HOST_LEASES.c.holder == me.model_dump_json())).rowcount
            if gone:
                self._event(conn, host, "released", me)

    def lost(self, host: str, me: Holder) -> str:
        """Record that a holder's heartbeat found its lease gone (an operator recovered it, or
        another run reclaimed it); returns the warning that says so and who holds it now."""
        now_held = self.read(host)
        detail = f"now held by {now_held.holder.describe()}" if now_held else "now free"
        with self.writing(f"the lost lease of host {host!r}") as conn:
            self._event(conn, host, "lost", me, detail=detail)
        return f"host {host!r}: the lease of {me.describe()} is no longer held ({detail}; recovered by an operator?)"

    def recover_scope(self, scope: str, by: dict, detail: str) -> list[str]:
        """Release every lease of a scope an operator confirmed gone, in one transaction."""
        with self.writing(f"the recovery of the leases of scope {scope!r}") as conn:
            rows = conn.execute(sa.select(HOST_LEASES).where(HOST_LEASES.c.scope == scope)).all()
            for row in rows:
                self._event(conn, row.host, "recovered", Holder.model_validate_json(row.holder), by=by, detail=detail)
            conn.execute(HOST_LEASES.delete().where(HOST_LEASES.c.scope == scope))
        return [row.host for row in rows]

    def acquire_all(self, keys: list[str], me: Holder, ttl_s: float = DEFAULT_TTL_S) -> list[str]:
        """Take every lease of `keys` (a slot's devices), or none: in sorted order, so two runs
        asking for overlapping sets never hold parts of each other's; the warnings of acquire.

        Raises HostLeased (naming the holder) after releasing what it took."""
        taken, warnings = [], []
        try:
            for key in sorted(keys):
                warning = self.acquire(key, me, ttl_s)
                taken.append(key)
                warnings += [warning] if warning else []
        except BaseException:
            for key in taken:
                self.release(key, me)
            raise
        return warnings

    @contextmanager
    def hold(self, host: str | list[str], me: Holder, ttl_s: float = DEFAULT_TTL_S,
             on_warning: Callable[[str], None] = log.warning) -> Iterator[None]:
        """Hold the lease of a host (or of every key of a slot) for the block, heartbeating;
        released on every exit path."""
        keys = [host] if isinstance(host, str) else list(host)
        for warning in self.acquire_all(keys, me, ttl_s):
            on_warning(warning)
        stop = threading.Event()
        beats = threading.Thread(target=self._beat, args=(keys, me, ttl_s / HEARTBEATS_PER_TTL, stop, on_warning),
                                 name=f"lease-heartbeat-{keys[0]}", daemon=True)
        beats.start()
        try:
            yield
        finally:
            stop.set()
            beats.join(timeout=5)
            for key in keys:
                self.release(key, me)

    def _beat(self, keys: list[str], me: Holder, every_s: float, stop: threading.Event,
              on_warning: Callable[[str], None]) -> None:
        live = list(keys)
        while live and not stop.wait(every_s):
            for key in list(live):
                try:
                    if not self.heartbeat(key, me):
                        on_warning(self.lost(key, me))
                        live.remove(key)
                except (StoreWriteError, sa.exc.SQLAlchemyError) as error:  # a blip: the next beat tries again
                    log.warning("host %r: lease heartbeat failed: %s", key, error)
