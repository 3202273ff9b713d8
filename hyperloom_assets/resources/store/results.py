"""The result store: every measurement and every trial, in SQL (SQLite by default).

SQLAlchemy Core over any URL; the default is a SQLite file under `DAGSTER_HOME`, so the
store lives beside Dagster's own state and survives re-execution. The trial ledger is
keyed by (context, fingerprint): within a context nothing is measured twice. The looks
table holds each finished launch of a trial still in progress, so a run killed
mid-trial resumes it; recording the finished trial drops them in the same transaction.
Every run's stop reason lands in `stops`, whichever way it stopped. A run's target file
is kept in `target_snapshots` as its first step read it, and every later step of the run
reads that copy, so an edit mid-run waits for the next run.

Every write is one transaction: a write that fails (a full disk, a read-only database)
rolls back whole and raises StoreWriteError naming the store and what it was recording,
so nothing already recorded is lost. Several runs may write one store at once: SQLite
waits for another writer's lock instead of failing, and two processes creating the
tables at once do not trip over each other.

The store opens only its own database: it carries a schema version (schema.py), and one
that is another application's is refused with one error naming it, before anything is
created in it; its own older schema is migrated.

No secret is stored (core/secrets.py): each record is redacted as it is written, of the
secrets it names itself (a launch's argv and env, an upper-case env name in a record)
and of those of this process's environment, so `<redacted>` stands where they were.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa
from pydantic import PrivateAttr

from hyperloom_assets.core.secrets import Redactor
from hyperloom_assets.resources.store.database import check_connects, postgres_url, shown, with_psycopg2, without_secrets
from hyperloom_assets.resources.store.schema import prepare_schema, refuse_foreign

METADATA = sa.MetaData()

MEASUREMENTS = sa.Table(
    "measurements", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("target", sa.String, nullable=False, index=True),
    # baseline | trial | best_relaunch (the running best again, or a keeper's stack rebench) | validation | sweep | ...
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("context_key", sa.String, index=True),
    sa.Column("fingerprint", sa.String),
    sa.Column("run_id", sa.String),
    sa.Column("argv", sa.Text, nullable=False),  # JSON list
    sa.Column("env", sa.Text, nullable=False),  # JSON object
    sa.Column("evidence", sa.Text),  # JSON object or null
    sa.Column("log_path", sa.String),
    sa.Column("measurement", sa.Text),  # JSON Measurement, null when the launch failed
    sa.Column("error", sa.Text),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
)

TRIALS = sa.Table(
    "trials", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("context_key", sa.String, nullable=False, index=True),
    sa.Column("target", sa.String, nullable=False),
    sa.Column("fingerprint", sa.String, nullable=False),
    sa.Column("run_id", sa.String),
    sa.Column("variant", sa.Text, nullable=False),  # JSON Variant
    sa.Column("outcome", sa.String, nullable=False),
    sa.Column("record", sa.Text, nullable=False),  # JSON trial record (decision, gain, ...)
    sa.Column("measurement_id", sa.Integer),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("context_key", "fingerprint", name="one_trial_per_context"),
)

LOOKS = sa.Table(
    "looks", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("context_key", sa.String, nullable=False, index=True),
    sa.Column("fingerprint", sa.String, nullable=False),  # the trial's
    sa.Column("look", sa.Integer, nullable=False),  # 1, 2, ... within the trial
    sa.Column("run_id", sa.String),
    sa.Column("record", sa.Text, nullable=False),  # JSON Look
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("context_key", "fingerprint", "look", name="one_look_per_index"),
)

STOPS = sa.Table(
    "stops", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("target", sa.String, nullable=False, index=True),
    sa.Column("run_id", sa.String),
    sa.Column("stop_reason", sa.String, nullable=False),  # a StopReason value
    sa.Column("detail", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

BASELINE_ATTEMPTS = sa.Table(
    "baseline_attempts", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("target", sa.String, nullable=False, index=True),
    sa.Column("fingerprint", sa.String, nullable=False),  # of args, env and engine script
    sa.Column("run_id", sa.String),
    sa.Column("outcome", sa.String, nullable=False),  # ok | failed error class
    sa.Column("detail", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

STACKS = sa.Table(
    "stacks", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("target", sa.String, nullable=False, index=True),
    sa.Column("context_key", sa.String, nullable=False),
    sa.Column("run_id", sa.String),
    sa.Column("keepers", sa.Text, nullable=False),  # JSON list of Variants, in joining order
    sa.Column("result", sa.Text, nullable=False),  # JSON: argv, env, validated gain and interval
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

TARGET_SNAPSHOTS = sa.Table(
    "target_snapshots", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String, nullable=False),
    sa.Column("target", sa.String, nullable=False),
    sa.Column("text", sa.Text, nullable=False),  # the target file as the run's first step read it
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("run_id", "target", name="one_snapshot_per_run"),
)

SQLITE_LOCK_WAIT_S = 60  # another run's write transaction is waited for this long, not failed at once


class StoreWriteError(RuntimeError):
    """A write to the result store failed and was rolled back; the message names the store and the record."""


def _reason(error: sa.exc.SQLAlchemyError) -> str:
    return (str(getattr(error, "orig", None) or error).strip().splitlines() or ["unknown"])[0]


# The launch means of every config a run launched more than once, by the host, engine and
# model that served them: later runs pool them into their launch-noise estimate.
LAUNCH_NOISE = sa.Table(
    "launch_noise", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("noise_key", sa.String, nullable=False, index=True),  # host, engine identity, model
    sa.Column("target", sa.String, nullable=False),
    sa.Column("run_id", sa.String),
    sa.Column("config", sa.String, nullable=False),  # the climb's evidence key (a fingerprint or "baseline")
    sa.Column("launch_means", sa.Text, nullable=False),  # JSON list of output tok/s, one per launch
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)


def default_store_url() -> str:
    """The fleet's Postgres database when `HYPERLOOM_POSTGRES_URL` is set, else SQLite under DAGSTER_HOME."""
    shared = postgres_url()
    if shared:
        return shared
    home = Path(os.environ.get("DAGSTER_HOME") or ".cache").resolve()
    return f"sqlite:///{home / 'hyperloom' / 'results.db'}"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class ResultStore(dg.ConfigurableResource):
    """Measurements, the trial ledger and baseline attempts. `url`: any SQLAlchemy URL."""

    url: str | None = None
    _engine: sa.Engine | None = PrivateAttr(default=None)

    def resolved_url(self) -> str:
        return with_psycopg2(self.url) if self.url else default_store_url()

    def engine(self) -> sa.Engine:
        if self._engine is None:
            url = self.resolved_url()
            if url.startswith("sqlite:"):
                path = url.removeprefix("sqlite:///").split("?")[0].removeprefix("file:")
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                engine = sa.create_engine(url, connect_args={"timeout": SQLITE_LOCK_WAIT_S})
            else:
                check_connects(url, "result store")
                engine = sa.create_engine(url)
            # Its own database or none: refused, adopted, migrated and stamped (schema.py) before anything is created.
            prepare_schema(engine, url, METADATA, lambda metadata: _create_tables(engine, url, metadata))
            self._engine = engine
        return self._engine

    def create_tables(self, metadata: sa.MetaData) -> None:
        """Another module's tables in this database (database.ExtraTables), created as the store's are,
        and refused as they are where a table of their name is another application's."""
        refuse_foreign(self.engine(), self.resolved_url(), metadata)
        _create_tables(self.engine(), self.resolved_url(), metadata)

    @contextmanager
    def writing(self, what: str) -> Iterator[sa.Connection]:
        """One transaction recording `what`; StoreWriteError (after the rollback) when it fails."""
        try:
            with self.engine().begin() as conn:
                yield conn
        except sa.exc.SQLAlchemyError as error:
            raise StoreWriteError(f"result store {shown(self.resolved_url())}: could not record {what}; "
                                  f"this transaction was rolled back and earlier records are intact: "
                                  f"{without_secrets(_reason(error), self.resolved_url())}") from error

    def record_measurement(self, *, target: str, kind: str, argv: list[str], env: dict[str, str],
                           started_at: datetime, measurement: dict | None = None, evidence: dict | None = None,
                           log_path: str | None = None, error: str | None = None, context_key: str | None = None,
                           fingerprint: str | None = None, run_id: str | None = None) -> int:
        secrets = Redactor.of(env=env, argv=argv, environ=os.environ)
        row = dict(target=target, kind=kind, context_key=context_key, fingerprint=fingerprint, run_id=run_id,
                   argv=json.dumps(secrets.argv(argv)), env=json.dumps(secrets.env(env)),
                   evidence=json.dumps(secrets.value(evidence)),
                   log_path=log_path, measurement=json.dumps(measurement) if measurement else None,
                   error=secrets.maybe_text(error), started_at=started_at, finished_at=_now())
        with self.writing(f"a {kind} measurement of {target}") as conn:
            return int(conn.execute(MEASUREMENTS.insert().values(**row)).inserted_primary_key[0])

    def measurements(self, target: str, kind: str | None = None) -> list[dict[str, Any]]:
        query = sa.select(MEASUREMENTS).where(MEASUREMENTS.c.target == target).order_by(MEASUREMENTS.c.id)
        if kind:
            query = query.where(MEASUREMENTS.c.kind == kind)
        with self.engine().connect() as conn:
            return [_decode(dict(row._mapping), ("argv", "env", "evidence", "measurement")) for row in conn.execute(query)]

    def record_trial(self, *, context_key: str, target: str, fingerprint: str, variant: dict, outcome: str,
                     record: dict, measurement_id: int | None, run_id: str | None) -> None:
        variant, record = _redacted(variant, record)
        row = dict(context_key=context_key, target=target, fingerprint=fingerprint, run_id=run_id,
                   variant=json.dumps(variant), outcome=outcome, record=json.dumps(record),
                   measurement_id=measurement_id, created_at=_now())
        with self.writing(f"trial {fingerprint} of {target} ({outcome})") as conn:
            conn.execute(TRIALS.delete().where(TRIALS.c.context_key == context_key, TRIALS.c.fingerprint == fingerprint))
            conn.execute(TRIALS.insert().values(**row))
            conn.execute(LOOKS.delete().where(LOOKS.c.context_key == context_key, LOOKS.c.fingerprint == fingerprint))

    def trials(self, context_key: str) -> list[dict[str, Any]]:
        query = sa.select(TRIALS).where(TRIALS.c.context_key == context_key).order_by(TRIALS.c.id)
        with self.engine().connect() as conn:
            return [_decode(dict(row._mapping), ("variant", "record")) for row in conn.execute(query)]

    def record_look(self, *, context_key: str, fingerprint: str, look: int, record: dict,
                    run_id: str | None) -> None:
        (record,) = _redacted(record)
        row = dict(context_key=context_key, fingerprint=fingerprint, look=look, run_id=run_id,
                   record=json.dumps(record), created_at=_now())
        where = (LOOKS.c.context_key == context_key, LOOKS.c.fingerprint == fingerprint, LOOKS.c.look == look)
        with self.writing(f"launch {look} of trial {fingerprint}") as conn:
            conn.execute(LOOKS.delete().where(*where))
            conn.execute(LOOKS.insert().values(**row))

    def looks(self, context_key: str, fingerprint: str | None = None) -> list[dict[str, Any]]:
        """Recorded launches of unfinished trials, in order; of one trial when `fingerprint` is given."""
        query = sa.select(LOOKS).where(LOOKS.c.context_key == context_key).order_by(LOOKS.c.fingerprint, LOOKS.c.look)
        if fingerprint is not None:
            query = query.where(LOOKS.c.fingerprint == fingerprint)
        with self.engine().connect() as conn:
            return [_decode(dict(row._mapping), ("record",)) for row in conn.execute(query)]

    def record_stop(self, *, target: str, stop_reason: str, detail: str = "", run_id: str | None = None) -> None:
        (detail,) = _redacted(detail)
        row = dict(target=target, run_id=run_id, stop_reason=stop_reason, detail=detail, created_at=_now())
        with self.writing(f"stop reason {stop_reason} of {target}") as conn:
            conn.execute(STOPS.insert().values(**row))

    def stops(self, target: str | None = None) -> list[dict[str, Any]]:
        query = sa.select(STOPS).order_by(STOPS.c.id)
        if target is not None:
            query = query.where(STOPS.c.target == target)
        with self.engine().connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def record_baseline_attempt(self, *, target: str, fingerprint: str, outcome: str, detail: str = "",
                                run_id: str | None = None) -> None:
        (detail,) = _redacted(detail)
        row = dict(target=target, fingerprint=fingerprint, outcome=outcome, detail=detail, run_id=run_id, created_at=_now())
        with self.writing(f"a baseline attempt of {target} ({outcome})") as conn:
            conn.execute(BASELINE_ATTEMPTS.insert().values(**row))

    def baseline_attempts(self, target: str) -> list[dict[str, Any]]:
        query = sa.select(BASELINE_ATTEMPTS).where(BASELINE_ATTEMPTS.c.target == target).order_by(BASELINE_ATTEMPTS.c.id)
        with self.engine().connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def record_stack(self, *, target: str, context_key: str, keepers: list[dict], result: dict,
                     run_id: str | None = None) -> None:
        keepers, result = _redacted(keepers, result)
        row = dict(target=target, context_key=context_key, run_id=run_id, keepers=json.dumps(keepers),
                   result=json.dumps(result), created_at=_now())
        with self.writing(f"the validated stack of {target}") as conn:
            conn.execute(STACKS.insert().values(**row))

    def record_launch_noise(self, *, noise_key: str, target: str, run_id: str | None,
                            launch_means: dict[str, list[float]]) -> None:
        """Keep each config's launch means (configs launched at least twice) for later runs to pool."""
        rows = [dict(noise_key=noise_key, target=target, run_id=run_id, config=config, launch_means=json.dumps(means),
                     created_at=_now()) for config, means in launch_means.items() if len(means) >= 2]
        if rows:
            with self.writing(f"the launch noise of run {run_id}") as conn:
                conn.execute(LAUNCH_NOISE.insert(), rows)

    def launch_noise_history(self, noise_key: str, max_age: timedelta) -> list[list[float]]:
        """The launch means of each config of each earlier run under this key, no older than `max_age`."""
        since = _now() - max_age
        query = sa.select(LAUNCH_NOISE.c.launch_means, LAUNCH_NOISE.c.created_at).where(
            LAUNCH_NOISE.c.noise_key == noise_key).order_by(LAUNCH_NOISE.c.id)
        with self.engine().connect() as conn:
            rows = conn.execute(query).all()
        # SQLite hands timestamps back without their zone; every one was written in UTC.
        return [json.loads(means) for means, created in rows if _utc(created) >= since]

    def latest_stack(self, target: str) -> dict[str, Any] | None:
        """The newest validated stack of a target, whatever its context (for release checks)."""
        query = sa.select(STACKS).where(STACKS.c.target == target).order_by(STACKS.c.id.desc()).limit(1)
        with self.engine().connect() as conn:
            row = conn.execute(query).first()
        return _decode(dict(row._mapping), ("keepers", "result")) if row else None

    def run_target(self, run_id: str, target: str, read: Callable[[], str]) -> str:
        """The run's copy of its target file: the one stored, else `read()` stored now (first writer wins)."""
        query = sa.select(TARGET_SNAPSHOTS.c.text).where(TARGET_SNAPSHOTS.c.run_id == run_id,
                                                          TARGET_SNAPSHOTS.c.target == target)
        with self.engine().connect() as conn:
            stored = conn.execute(query).scalar()
        if stored is not None:
            return stored
        text = read()
        try:
            with self.writing(f"the target file snapshot of {target} for run {run_id}") as conn:
                conn.execute(TARGET_SNAPSHOTS.insert().values(run_id=run_id, target=target, text=text,
                                                              created_at=_now()))
        except StoreWriteError as error:
            if not isinstance(error.__cause__, sa.exc.IntegrityError):
                raise
        with self.engine().connect() as conn:  # another step of the run may have stored its copy first
            return conn.execute(query).scalar_one()


def _create_tables(engine: sa.Engine, url: str, metadata: sa.MetaData) -> None:
    """Create missing tables; another process creating them at the same moment is not an error
    (on PostgreSQL the loser of a CREATE TABLE race gets a duplicate key in pg_type)."""
    for attempt in range(3):
        try:
            metadata.create_all(engine)
            return
        except (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError) as error:
            racing = "already exists" in str(error) or "duplicate key" in str(error)
            if attempt == 2 or not racing:
                raise StoreWriteError(f"result store {shown(url)}: could not create its tables: "
                                      f"{without_secrets(_reason(error), url)}") from error


def _redacted(*values: Any) -> list[Any]:
    """JSON values as the store keeps them: without the secrets they name, or this process's environment holds."""
    secrets = Redactor.within(list(values), os.environ)
    return [secrets.value(value) for value in values]


def _decode(row: dict[str, Any], json_columns: tuple[str, ...]) -> dict[str, Any]:
    for column in json_columns:
        if row.get(column) is not None:
            row[column] = json.loads(row[column])
    return row
