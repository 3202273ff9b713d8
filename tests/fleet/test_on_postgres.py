"""The sim optimize run, the ledger replay and the sensors, on PostgreSQL.

The same tests as the SQLite tiers, collected here again with this folder's `store` and
`instance` fixtures: the result store and Dagster's storage in one Postgres database.
"""

from __future__ import annotations

import sqlalchemy as sa

from hyperloom_assets.resources.store import schema
from hyperloom_assets.resources.store.results import ResultStore

from tests.assets.test_optimize_sim import (  # noqa: F401 - collected here on Postgres
    test_optimize_job_on_sim_climbs_validates_and_reports,
    test_re_execution_measures_no_trial_twice,
)
from tests.sensors.conftest import index  # noqa: F401 - the loopback package index fixture
from tests.sensors.test_release_sensor import *  # noqa: F401,F403
from tests.sensors.test_target_change import *  # noqa: F401,F403


def test_store_and_instance_share_one_postgres_database(store, instance, postgres_url) -> None:
    store.record_baseline_attempt(target="t", fingerprint="f", outcome="ok")
    tables = set(sa.inspect(store.engine()).get_table_names())
    assert {"measurements", "trials", "runs", "event_logs"} <= tables, tables
    assert store.engine().dialect.name == "postgresql"
    # The store's schema version beside Dagster's tables: a shared database is adopted, not refused.
    assert schema.stored_version(store.engine(), postgres_url) == schema.SCHEMA_VERSION
    assert ResultStore(url=postgres_url).baseline_attempts("t")[0]["outcome"] == "ok", "a second process adopts it"
