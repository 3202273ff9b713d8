"""The result store's schema version (resources/store/schema.py): a foreign database is refused
naming it, the store's own unversioned one adopted and stamped, a fresh one created at the
current version, an older one migrated step by step, a newer one refused."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from hyperloom_assets.resources.store import schema
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.llm_calls import LlmCallLog
from hyperloom_assets.resources.store.results import METADATA, ResultStore


def version_of(path: Path) -> int | None:
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        return schema.stored_version(engine, str(path))
    finally:
        engine.dispose()


def a_measurement(store: ResultStore) -> int:
    return store.record_measurement(target="t", kind="baseline", argv=["serve"], env={},
                                    started_at=datetime.now(timezone.utc), measurement={"output_throughput": 1.0})


def test_a_foreign_database_with_a_measurements_table_is_refused_naming_the_file(tmp_path) -> None:
    path = tmp_path / "theirs.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE measurements (id INTEGER PRIMARY KEY, sensor TEXT, value REAL)"))
        conn.execute(sa.text("INSERT INTO measurements (sensor, value) VALUES ('t1', 20.5)"))
    engine.dispose()
    with pytest.raises(schema.StoreSchemaError) as refused:
        ResultStore(url=f"sqlite:///{path}").measurements("t")
    message = str(refused.value)
    assert message.startswith(f"result store sqlite:///{path} is not a hyperloom result store: ")
    assert "its table 'measurements' has no column target, kind" in message
    tables = sa.inspect(sa.create_engine(f"sqlite:///{path}")).get_table_names()
    assert tables == ["measurements"], "nothing was created in a database that is not the store's"


def test_the_stores_own_database_from_before_the_version_is_adopted_and_stamped(tmp_path) -> None:
    # Today's schema as the store created it before it carried a version: its tables, no version table.
    path = tmp_path / "results.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    METADATA.create_all(engine)
    engine.dispose()
    row = a_measurement(ResultStore(url=f"sqlite:///{path}"))
    assert version_of(path) == schema.SCHEMA_VERSION
    assert [r["id"] for r in ResultStore(url=f"sqlite:///{path}").measurements("t")] == [row]


def test_an_unversioned_database_with_rows_keeps_them_when_stamped(tmp_path) -> None:
    path = tmp_path / "results.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    METADATA.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO stops (target, stop_reason, detail, created_at) "
                             "VALUES ('t', 'budget_exhausted', '', '2025-01-01 00:00:00')"))
    engine.dispose()
    assert [row["stop_reason"] for row in ResultStore(url=f"sqlite:///{path}").stops("t")] == ["budget_exhausted"]
    assert version_of(path) == schema.UNVERSIONED == 1


def test_a_fresh_database_gets_the_current_version_and_every_table(tmp_path) -> None:
    path = tmp_path / "fresh.db"
    a_measurement(ResultStore(url=f"sqlite:///{path}"))
    assert version_of(path) == schema.SCHEMA_VERSION
    assert set(METADATA.tables) <= set(sa.inspect(sa.create_engine(f"sqlite:///{path}")).get_table_names())


def test_an_older_version_is_migrated_step_by_step_and_a_newer_one_refused(tmp_path, monkeypatch) -> None:
    path = tmp_path / "results.db"
    a_measurement(ResultStore(url=f"sqlite:///{path}"))  # version 1
    steps: list[int] = []

    def to_v2(conn: sa.Connection) -> None:
        steps.append(2)
        conn.execute(sa.text("ALTER TABLE measurements ADD COLUMN host TEXT"))

    monkeypatch.setattr(schema, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(schema, "MIGRATIONS", {1: to_v2})
    store = ResultStore(url=f"sqlite:///{path}")
    assert len(store.measurements("t")) == 1 and steps == [2] and version_of(path) == 2
    assert "host" in {c["name"] for c in sa.inspect(store.engine()).get_columns("measurements")}
    ResultStore(url=f"sqlite:///{path}").measurements("t")
    assert steps == [2], "a step is taken once"
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 1)
    with pytest.raises(schema.StoreSchemaError, match=r"has schema version 2, newer than this hyperloom knows \(1\)"):
        ResultStore(url=f"sqlite:///{path}").measurements("t")


def test_a_foreign_table_of_an_extra_tables_name_is_refused_too(tmp_path) -> None:
    path = tmp_path / "results.db"
    store = ResultStore(url=f"sqlite:///{path}")
    a_measurement(store)
    with store.engine().begin() as conn:
        conn.execute(sa.text("CREATE TABLE host_leases (id INTEGER PRIMARY KEY, owner TEXT)"))
    with pytest.raises(schema.StoreSchemaError, match="its table 'host_leases' has no column host"):
        HostLeases(store).engine()
    LlmCallLog(store).engine()  # an extra module whose tables are not taken is created as before
