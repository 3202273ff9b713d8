"""Which database the result store (and, for a fleet, Dagster) uses, and whether it answers.

`HYPERLOOM_POSTGRES_URL` names a shared PostgreSQL database for a fleet; without it each
machine keeps SQLite under `DAGSTER_HOME`. Dagster's Postgres storage drives psycopg2,
and SQLAlchemy 2.1 reads a bare `postgresql://` as psycopg 3, so the URL is spelled
with its driver (`postgresql+psycopg2://`) for both. The password may stay out of the URL,
in `HYPERLOOM_POSTGRES_PASSWORD`, which is where dagster.yaml reads it from. An error shows
the URL without its password, in the userinfo or in the query (`?password=`, which libpq
accepts, and any other secret-named parameter), and its reason without either.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from hyperloom_assets.core.secrets import Redactor, mask_urls, url_secrets

POSTGRES_URL_ENV = "HYPERLOOM_POSTGRES_URL"
POSTGRES_PASSWORD_ENV = "HYPERLOOM_POSTGRES_PASSWORD"
_BARE_SCHEMES = ("postgresql://", "postgres://")


class DatabaseUnavailable(RuntimeError):
    """The configured database does not connect; the message names it (password hidden)."""


def postgres_url(environ=os.environ) -> str | None:
    """The URL, spelled for psycopg2, with `HYPERLOOM_POSTGRES_PASSWORD` as its password when it has none."""
    url = environ.get(POSTGRES_URL_ENV)
    if not url:
        return None
    url, password = with_psycopg2(url), environ.get(POSTGRES_PASSWORD_ENV)
    if not password:
        return url
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:  # check_connects says so, naming the variable
        return url
    return url if parsed.password is not None else parsed.set(password=password).render_as_string(hide_password=False)


def with_psycopg2(url: str) -> str:
    for scheme in _BARE_SCHEMES:
        if url.startswith(scheme):
            return "postgresql+psycopg2://" + url[len(scheme):]
    return url


def shown(url: str) -> str:
    """The URL as an error may print it: its passwords (userinfo, secret query parameters) `<redacted>`.
    SQLAlchemy's `render_as_string(hide_password=True)` hides the userinfo's only."""
    return mask_urls(url)


def without_secrets(text: str, url: str) -> str:
    """An error's text about `url` without the URL's passwords, wherever the driver echoed them."""
    return Redactor.of(values=url_secrets(url)).text(text)


def check_connects(url: str, source: str = POSTGRES_URL_ENV, timeout_s: int = 10) -> None:
    """Connect once; DatabaseUnavailable saying which database and why, before anything runs."""
    try:
        args = {"connect_timeout": timeout_s} if url.startswith("postgresql") else {}
        engine = sa.create_engine(url, connect_args=args, poolclass=sa.pool.NullPool)
        with engine.connect():
            pass
    except (sa.exc.SQLAlchemyError, ImportError, ValueError) as error:
        reason = without_secrets(str(getattr(error, "orig", None) or error).strip().splitlines()[0], url)
        raise DatabaseUnavailable(f"{source}: {shown(url)} does not connect: {reason}") from error


class ExtraTables:
    """Tables of a module's own (its `metadata`) in a ResultStore's database, created on first use."""

    metadata: sa.MetaData

    def __init__(self, store):
        self._store = store
        self._ready = False

    def engine(self) -> sa.Engine:
        if not self._ready:  # as the store creates its own: a process creating them at once is no error
            self._store.create_tables(self.metadata)
            self._ready = True
        return self._store.engine()

    @contextmanager
    def writing(self, what: str) -> Iterator[sa.Connection]:
        """The store's own transaction (`ResultStore.writing`): a failed write is a StoreWriteError
        naming the store and `what`, rolled back whole, as for the store's own tables."""
        self.engine()
        with self._store.writing(what) as conn:
            yield conn
