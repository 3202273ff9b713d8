"""Release attempts per (target, package, version), in the result store's database.

The sensor records `requested` (a run was asked for) and `deferred_busy` (the host was
busy); the release run records its own outcome (`succeeded`, `failed`,
`environment_unavailable`) over the attempt it belongs to. Outcomes and times are kept
as text so that a corrupt row is read as "no attempt" by hyperloom_assets.core.releases.policy
instead of failing the read.
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from hyperloom_assets.core.releases.policy import (
    DEFERRED_BUSY,
    OUTCOMES,
    REQUESTED,
    SUCCEEDED,
    AttemptRow,
    read_attempt,
    timestamp,
)
from hyperloom_assets.resources.store.database import ExtraTables

METADATA = sa.MetaData()

RELEASE_ATTEMPTS = sa.Table(
    "release_attempts", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("target", sa.String, nullable=False),
    sa.Column("package", sa.String, nullable=False),
    sa.Column("version", sa.String, nullable=False),
    sa.Column("outcome", sa.String),  # one of release_policy.OUTCOMES
    sa.Column("detail", sa.Text),
    sa.Column("run_key", sa.String),
    sa.Column("run_id", sa.String),
    sa.Column("recorded_at", sa.String),  # ISO 8601, UTC
    sa.Index("release_attempts_by_release", "target", "package", "version"),
)


def _now() -> datetime:
    return datetime.now(timezone.utc)


class ReleaseLedger(ExtraTables):
    """Release attempts over a ResultStore's database; the table is created on first use."""

    metadata = METADATA

    def _where(self, target: str, package: str, version: str):
        table = RELEASE_ATTEMPTS.c
        return sa.and_(table.target == target, table.package == package, table.version == version)

    def rows(self, target: str, package: str, version: str) -> list[dict]:
        query = sa.select(RELEASE_ATTEMPTS).where(self._where(target, package, version)).order_by(RELEASE_ATTEMPTS.c.id)
        with self.engine().connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def attempts(self, target: str, package: str, version: str) -> list[AttemptRow]:
        """The attempt rows the cooldown policy reads, oldest first."""
        return [AttemptRow(row["outcome"], row["recorded_at"]) for row in self.rows(target, package, version)]

    def attempt_number(self, target: str, package: str, version: str) -> int:
        """1 + the attempts that asked for a run; makes a retry's run key differ from the last one."""
        return 1 + sum(1 for row in self.rows(target, package, version) if row["outcome"] != DEFERRED_BUSY)

    def request(self, target: str, package: str, version: str, run_key: str, now: datetime | None = None) -> None:
        self._insert(target, package, version, REQUESTED, "", run_key=run_key, now=now)

    def defer(self, target: str, package: str, version: str, detail: str, now: datetime | None = None) -> None:
        """Record `deferred_busy`, refreshing the latest row if it already says so (one row per busy spell)."""
        latest = (self.rows(target, package, version) or [None])[-1]
        if latest is not None and latest["outcome"] == DEFERRED_BUSY:
            self._update(latest["id"], DEFERRED_BUSY, detail, run_id=None, now=now)
        else:
            self._insert(target, package, version, DEFERRED_BUSY, detail, now=now)

    def record(self, target: str, package: str, version: str, outcome: str, detail: str = "",
               run_id: str | None = None, now: datetime | None = None) -> None:
        """The release run's outcome, over its `requested` attempt (a new row if there is none)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown release outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
        pending = [row for row in self.rows(target, package, version) if row["outcome"] == REQUESTED]
        if pending:
            self._update(pending[-1]["id"], outcome, detail, run_id=run_id, now=now)
        else:
            self._insert(target, package, version, outcome, detail, run_id=run_id, now=now)

    def succeeded(self, target: str, package: str, version: str, now: datetime | None = None) -> bool:
        """Whether a readable attempt of this release succeeded for the target."""
        moment = now or _now()
        return any((attempt := read_attempt(row, moment)) is not None and attempt.outcome == SUCCEEDED
                   for row in self.attempts(target, package, version))

    def _insert(self, target: str, package: str, version: str, outcome: str, detail: str, *,
                run_key: str | None = None, run_id: str | None = None, now: datetime | None = None) -> None:
        row = dict(target=target, package=package, version=version, outcome=outcome, detail=detail,
                   run_key=run_key, run_id=run_id, recorded_at=timestamp(now or _now()))
        with self.writing(f"release {package} {version} of {target} ({outcome})") as conn:
            conn.execute(RELEASE_ATTEMPTS.insert().values(**row))

    def _update(self, row_id: int, outcome: str, detail: str, *, run_id: str | None, now: datetime | None) -> None:
        values = dict(outcome=outcome, detail=detail, recorded_at=timestamp(now or _now()))
        if run_id is not None:
            values["run_id"] = run_id
        with self.writing(f"release attempt {row_id} ({outcome})") as conn:
            conn.execute(RELEASE_ATTEMPTS.update().where(RELEASE_ATTEMPTS.c.id == row_id).values(**values))
