"""The result store's schema version: a database is the store's own, at a version it knows, or refused.

The version lives in a one-row table, `hyperloom_schema` (a table, not SQLite's user_version,
so PostgreSQL keeps it the same way). A database the store opens is one of:

- fresh (none of the store's tables): its tables are created and it is stamped SCHEMA_VERSION;
- the store's own, stamped: migrated step by step (MIGRATIONS) up to SCHEMA_VERSION, each step
  with its stamp in one transaction, so a step that fails leaves the version it came from;
- the store's own from before the version table (every table of its name has the store's
  columns): that schema is version 1, stamped so, then migrated like any other;
- anything else, refused with one StoreSchemaError naming the database (password hidden): a
  table of the store's name without its columns (another application's `measurements`), or a
  version newer than this code knows. Nothing is created in a refused database.

Other applications' tables beside the store's are left alone: a fleet keeps Dagster's
storage and the store in one PostgreSQL database (docs/fleet.md).

The next schema change raises SCHEMA_VERSION to 2 and adds `MIGRATIONS[1]`, a function that
takes a version-1 database to version 2 on the connection it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

import sqlalchemy as sa

from hyperloom_assets.resources.store.database import shown

SCHEMA_VERSION = 1
UNVERSIONED = 1  # the schema as it was before it carried a version

SCHEMA = sa.MetaData()
VERSION_TABLE = sa.Table(
    "hyperloom_schema", SCHEMA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # always 1: the one row
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("stamped_at", sa.DateTime(timezone=True), nullable=False),
)

# version -> the step that takes a database of that version to the next, on one connection.
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {}

CreateFn = Callable[[sa.MetaData], None]


class StoreSchemaError(RuntimeError):
    """A database that is not the store's own, or is of a schema this code does not know; the message names it."""


def _reason(error: sa.exc.SQLAlchemyError) -> str:
    return (str(getattr(error, "orig", None) or error).strip().splitlines() or ["unknown"])[0]


def mismatched_tables(engine: sa.Engine, metadata: sa.MetaData) -> list[str]:
    """The tables of `metadata` the database has under the same name but without all their columns."""
    inspector = sa.inspect(engine)
    existing = set(inspector.get_table_names())
    problems = []
    for table in metadata.sorted_tables:
        if table.name not in existing:
            continue
        have = {column["name"] for column in inspector.get_columns(table.name)}
        missing = [column.name for column in table.columns if column.name not in have]
        if missing:
            problems.append(f"its table {table.name!r} has no column {', '.join(missing)}")
    return problems


def refuse_foreign(engine: sa.Engine, url: str, metadata: sa.MetaData) -> None:
    """StoreSchemaError when a table of `metadata`'s names in the database is another's (not our columns)."""
    problems = mismatched_tables(engine, metadata)
    if problems:
        raise StoreSchemaError(
            f"result store {shown(url)} is not a hyperloom result store: {'; '.join(problems)}. "
            f"Point the store at a database of its own (ResultStore.url, HYPERLOOM_POSTGRES_URL) "
            f"or move that one aside; nothing was written to it")


def stored_version(engine: sa.Engine, url: str) -> int | None:
    """The database's stamped version; None when it has no version table."""
    if VERSION_TABLE.name not in sa.inspect(engine).get_table_names():
        return None
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.select(VERSION_TABLE.c.version).where(VERSION_TABLE.c.id == 1)).scalar()
    except sa.exc.SQLAlchemyError as error:  # a table of that name that is not ours
        raise StoreSchemaError(f"result store {shown(url)} is not a hyperloom result store: its table "
                               f"{VERSION_TABLE.name!r} does not read as the store's ({_reason(error)})") from error
    return version


def prepare_schema(engine: sa.Engine, url: str, metadata: sa.MetaData, create: CreateFn) -> int:
    """Adopt (or refuse) the database, stamp and migrate it, then `create` the tables it lacks; its version."""
    version = stored_version(engine, url)
    if version is None:
        refuse_foreign(engine, url, metadata)
        fresh = not set(sa.inspect(engine).get_table_names()) & set(metadata.tables)
        create(SCHEMA)
        _stamp(engine, url, SCHEMA_VERSION if fresh else UNVERSIONED)
        version = stored_version(engine, url)  # another process opening it at once may have stamped it first
    if version > SCHEMA_VERSION:
        raise StoreSchemaError(f"result store {shown(url)} has schema version {version}, newer than this "
                               f"hyperloom knows ({SCHEMA_VERSION}); upgrade hyperloom to use it")
    for step in range(version, SCHEMA_VERSION):
        _migrate(engine, url, step)
    create(metadata)
    return SCHEMA_VERSION


def _stamp(engine: sa.Engine, url: str, version: int) -> None:
    """The one row, at `version`, where there is none yet."""
    try:
        with engine.begin() as conn:
            if conn.execute(sa.select(VERSION_TABLE.c.id).where(VERSION_TABLE.c.id == 1)).first() is None:
                conn.execute(VERSION_TABLE.insert().values(id=1, version=version, stamped_at=datetime.now(timezone.utc)))
    except sa.exc.IntegrityError:
        return  # another process stamped it at the same moment
    except sa.exc.SQLAlchemyError as error:
        raise StoreSchemaError(f"result store {shown(url)}: could not record its schema version: "
                               f"{_reason(error)}") from error


def _migrate(engine: sa.Engine, url: str, version: int) -> None:
    """One step, from `version` to the next, with its stamp in one transaction. The stamp goes first:
    it takes the write lock, and a process that finds the step already taken leaves it."""
    try:
        with engine.begin() as conn:
            step = VERSION_TABLE.update().where(VERSION_TABLE.c.id == 1, VERSION_TABLE.c.version == version)
            taken = conn.execute(step.values(version=version + 1, stamped_at=datetime.now(timezone.utc))).rowcount
            if taken == 1:
                MIGRATIONS[version](conn)
    except sa.exc.SQLAlchemyError as error:
        raise StoreSchemaError(f"result store {shown(url)}: migrating its schema from version {version} to "
                               f"{version + 1} failed and was rolled back: {_reason(error)}") from error
