"""The result store's faults on a real PostgreSQL server: a role without write grants
fails a write with an error naming the store and the record, losing nothing; two runs
writing one fresh database at once collide on nothing."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from benchmarks.support.store_writers import damage, run_writers_at_once
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
