"""The result store's faults on a real PostgreSQL server: a role without write grants
fails a write with an error naming the store and the record, losing nothing; two runs
writing one fresh database at once collide on nothing, the store's tables or a module's."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from benchmarks.support.store_writers import damage, run_writers_at_once
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.results import StoreWriteError


def test_a_role_that_may_only_read_fails_a_write_by_name_and_loses_nothing(store, request) -> None:
    store.record_stop(target="sim", stop_reason="budget_exhausted", run_id="r1")
    reader = request.getfixturevalue("read_only_store")  # granted after the tables exist
    role = reader.resolved_url().split("://", 1)[1].split("@", 1)[0]
    with pytest.raises(StoreWriteError) as caught:
        reader.record_measurement(target="sim", kind="trial", argv=["serve"], env={},
                                  started_at=datetime.now(timezone.utc))
    message = str(caught.value)
    assert message.startswith(f"result store postgresql+psycopg2://{role}@")
    assert "could not record a trial measurement of sim" in message and "permission denied" in message
    assert [row["stop_reason"] for row in reader.stops("sim")] == ["budget_exhausted"], "reads still work"


def test_two_runs_writing_one_fresh_postgres_database_at_once_collide_on_nothing(postgres_url) -> None:
    _, errors = run_writers_at_once(postgres_url, ["target-a", "target-b"])
    assert errors == [], errors
    assert set(damage(postgres_url, ["target-a", "target-b"]).values()) == {0}


def test_a_module_table_another_process_creates_at_the_same_moment_is_no_error(store) -> None:
    # What two run workers do on a fresh database (both taking their host's lease at
    # once; the loser's CREATE TABLE failed): here the other process wins deterministically,
    # creating the table after this one checked for it and before it creates it.
    leases = HostLeases(store)
    table = leases.metadata.sorted_tables[0]
    other = sa.create_engine(store.resolved_url())
    won = []

    def the_other_process_first(target, connection, **_) -> None:
        if not won:
            won.append(target.name)
            target.create(other)

    sa.event.listen(table, "before_create", the_other_process_first)
    try:
        assert leases.read("gpu-a") is None
    finally:
        sa.event.remove(table, "before_create", the_other_process_first)
        other.dispose()
    assert won == [table.name], "the race was run"
