"""Fixtures of the fleet tiers: one PostgreSQL server and one Redis per session."""

from __future__ import annotations

from typing import Iterator

import uuid

import dagster as dg
import pytest
import sqlalchemy as sa

from hyperloom_assets.resources.store.results import ResultStore
from benchmarks.support.fleet_services import Postgres, Redis, Sshd, start_postgres, start_redis, start_sshd


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Redis]:
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A fresh database for this test on the shared server."""
    return postgres_server.create_database()


@pytest.fixture
def store(postgres_url) -> ResultStore:
    return ResultStore(url=postgres_url)


@pytest.fixture
def read_only_store(postgres_url, store) -> ResultStore:
    """`store`'s database through a login role granted SELECT only (on the tables there now)."""
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with sa.create_engine(store.resolved_url(), isolation_level="AUTOCOMMIT").connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(sa.text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"))
    return ResultStore(url=postgres_url.replace("postgresql://postgres@", f"postgresql://{role}@"))


@pytest.fixture
def instance(postgres_url) -> Iterator[dg.DagsterInstance]:
    """A Dagster instance whose runs, event logs and schedules are in the same Postgres database."""
    url = postgres_url.replace("postgresql://", "postgresql+psycopg2://")
    with dg.instance_for_test(overrides={"storage": {"postgres": {"postgres_url": url}}}) as instance:
        yield instance


@pytest.fixture(scope="session")
def sshd() -> Iterator[Sshd]:
    """A real sshd on loopback with a throwaway host key, client key and known_hosts."""
    server = start_sshd()
    try:
        yield server
    finally:
        server.stop()
