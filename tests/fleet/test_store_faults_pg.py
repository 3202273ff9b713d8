"""The result store's faults on a real PostgreSQL server: a role without write grants
fails a write with an error naming the store and the record, losing nothing; two runs
writing one fresh database at once collide on nothing."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from benchmarks.support.store_writers import damage, run_writers_at_once
from hyperloom_assets.resources.store.results import ResultStore, StoreWriteError


def test_a_role_that_may_only_read_fails_a_write_by_name_and_loses_nothing(postgres_url, store) -> None:
    store.record_stop(target="sim", stop_reason="budget_exhausted", run_id="r1")
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with sa.create_engine(store.resolved_url(), isolation_level="AUTOCOMMIT").connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(sa.text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"))
    reader = ResultStore(url=postgres_url.replace("postgresql://postgres@", f"postgresql://{role}@"))
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
