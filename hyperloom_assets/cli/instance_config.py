"""`hyperloom instance-config [DAGSTER_HOME]`: the Dagster instance config for this environment.

Always: one run in progress per host (every run carries its target's `hyperloom/host`
tag, and the run queue limits each unique value to 1). With `HYPERLOOM_POSTGRES_URL`,
runs, event logs and schedules live in that PostgreSQL database (dagster-postgres),
checked to connect first. With `HYPERLOOM_CELERY_BROKER`, runs are launched as Celery
tasks on their host's queue (dagster-celery's run launcher), and `celery.yaml` beside
`dagster.yaml` is the config its workers start with.

No secret is written: the database's password (from the URL's userinfo, from its query
`?password=`, which libpq accepts, or from `HYPERLOOM_POSTGRES_PASSWORD`) and the broker and
backend URLs, which may hold one, are read by Dagster from the environment (`{env: VAR}`);
any other secret-named query parameter (`sslpassword`) is refused, naming it, since it could
only be written in the clear: every process that loads the
instance (webserver, daemon, run and Celery workers) needs the variables this command
saw, `HYPERLOOM_POSTGRES_PASSWORD` included when the database has a password. No telemetry,
and no NUX: without `nux` the UI greets every fresh instance on localhost with a "Join
the Dagster community" newsletter dialog over the page.

Run monitoring (it runs in the daemon: `dagster dev` or `dagster-daemon run`): a run
whose worker never started is failed after start_timeout_seconds; a run being
terminated whose worker is gone (so nothing answers the cancel) is marked canceled
after cancel_timeout_seconds, longer than a teardown's worst case (15 s TERM wait plus
5 s KILL wait per server); and the concurrency slots of a run that ended without
releasing them are freed free_slots_after_run_end_seconds after it ended. Dagster's
default run launcher has no worker health check, so without Celery the instance uses
WorkerCheckingRunLauncher (resources/hosts/run_launcher.py), which answers it from the
worker records every run writes; a run whose worker died is marked failed within a
poll interval, and frees its host. Without the daemon, the next run on this machine
does the same (resources/hosts/run_workers.py). No max_runtime_seconds: a GPU run may legitimately take many hours.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Mapping

import sqlalchemy as sa
import yaml

from hyperloom_assets.core.config.hosts import declared_devices, hosts_file, load_hosts
from hyperloom_assets.core.fleet.tags import slotted_host_limits
from hyperloom_assets.core.secrets import is_secret_name
from hyperloom_assets.resources.store.database import (
    POSTGRES_PASSWORD_ENV,
    POSTGRES_URL_ENV,
    DatabaseUnavailable,
    check_connects,
    postgres_url,
)

HOST_LIMIT_YAML = """\
      - key: hyperloom/host
        value: {applyLimitPerUniqueValue: true}
        limit: 1
"""
INSTANCE_YAML = """\
# Written by `make setup` (hyperloom instance-config); edits are overwritten.
concurrency:
  runs:
    max_concurrent_runs: 4
    # One run in progress per GPU host: every run carries its target's host tag. A host
    # that declares its GPUs takes a run per device (hyperloom/slotted-host, listed here).
    tag_concurrency_limits:
""" + HOST_LIMIT_YAML + """run_monitoring:
  enabled: true
  start_timeout_seconds: 300
  cancel_timeout_seconds: 120
  free_slots_after_run_end_seconds: 30
  poll_interval_seconds: 15
telemetry:
  enabled: false
nux:
  enabled: false
"""

CELERY_BROKER_ENV = "HYPERLOOM_CELERY_BROKER"
CELERY_BACKEND_ENV = "HYPERLOOM_CELERY_BACKEND"  # default: the broker
# Runs without a host tag (none of this project's jobs) would wait here for a worker.
CELERY_DEFAULT_QUEUE = "hyperloom-untagged"
CELERY_WORKER_CONFIG = "celery.yaml"
# libpq parameters whose names read as secrets but whose values are file paths.
LIBPQ_PATH_PARAMS = frozenset({"sslkey"})


def _celery(environ: Mapping[str, str]) -> dict | None:
    """The broker and backend as Dagster reads them from the environment: a Redis URL may hold a password."""
    if not environ.get(CELERY_BROKER_ENV):
        return None
    backend = CELERY_BACKEND_ENV if environ.get(CELERY_BACKEND_ENV) else CELERY_BROKER_ENV
    return {"broker": {"env": CELERY_BROKER_ENV}, "backend": {"env": backend}}


class SecretInUrl(ValueError):
    """The URL carries a secret that dagster.yaml could only hold in the clear; the message names the parameter."""


class MissingExtra(RuntimeError):
    """The environment asks for a fleet tier whose packages (the `fleet` extra) are not installed."""


def require(module: str, asked_by: str) -> None:
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:  # a finder that refuses it outright
        found = False
    if not found:
        raise MissingExtra(f"{asked_by} is set, but {module} is not installed: install the fleet extra "
                           "(pip install -e '.[fleet]')")


def postgres_storage(environ: Mapping[str, str]) -> dict | None:
    """dagster-postgres's `postgres_db` for the URL: its parts, the password only as `{env: ...}`.

    The scheme names psycopg2: SQLAlchemy 2.1 reads a bare `postgresql` as psycopg 3.
    """
    url = postgres_url(environ)
    if not url:
        return None
    require("dagster_postgres", POSTGRES_URL_ENV)
    given = environ.get(POSTGRES_PASSWORD_ENV)
    parsed = sa.make_url(url)  # postgres_url gave the password from the environment when the URL has none
    params = {key: value if isinstance(value, str) else value[-1] for key, value in parsed.query.items()}
    _refuse_query_secrets(params)
    password = _url_password(parsed.password, params.pop("password", None))
    if given and password is not None and password != given:
        raise DatabaseUnavailable(f"{POSTGRES_URL_ENV} and {POSTGRES_PASSWORD_ENV} give different passwords")
    check_connects(url)
    db = {"username": parsed.username or "", "hostname": parsed.host or "", "db_name": parsed.database or "",
          "port": parsed.port or 5432, "scheme": "postgresql+psycopg2"}
    if password is not None:
        db["password"] = {"env": POSTGRES_PASSWORD_ENV}
    if params:
        db["params"] = params
    return {"postgres": {"postgres_db": db}}


def _url_password(userinfo: str | None, query: str | None) -> str | None:
    """The URL's one password: the userinfo's or the query's (libpq takes either), routed to
    `{env: HYPERLOOM_POSTGRES_PASSWORD}`; two that differ are refused, as is any other secret."""
    if userinfo is not None and query is not None and userinfo != query:
        raise SecretInUrl(f"{POSTGRES_URL_ENV}: its userinfo (or {POSTGRES_PASSWORD_ENV}) and its query "
                          "(password=) give different passwords")
    return userinfo if userinfo is not None else query


def _refuse_query_secrets(params: Mapping[str, str]) -> None:
    for name in params:
        if name != "password" and name not in LIBPQ_PATH_PARAMS and is_secret_name(name):
            raise SecretInUrl(f"{POSTGRES_URL_ENV}: the query parameter {name!r} holds a secret that dagster.yaml "
                              "would keep in the clear; take it out of the URL (the database password may stay, "
                              f"and is read from {POSTGRES_PASSWORD_ENV})")


def slotted_hosts() -> dict[str, int]:
    """Hosts of the hosts file that declare their GPUs, and pools, with how many (core/fleet/slots.py)."""
    hosts, _ = load_hosts(hosts_file(), check_files=False)
    return {name: sum(counts) for name, counts in declared_devices(hosts).items()}


def _with_slot_limits(text: str, devices: Mapping[str, int]) -> str:
    """The run queue's limit per slotted host, after the per-host limit of 1."""
    if not devices:
        return text
    listed = yaml.safe_dump(slotted_host_limits(devices), sort_keys=False)
    entries = "".join(f"      {line}\n" for line in listed.splitlines())
    return text.replace(HOST_LIMIT_YAML, HOST_LIMIT_YAML + entries, 1)


def instance_yaml(environ: Mapping[str, str], devices: Mapping[str, int] | None = None) -> str:
    """dagster.yaml for this environment; the database is checked to connect first. `devices`:
    the slotted hosts' device counts (default: read from the hosts file)."""
    sections: dict = {}
    storage = postgres_storage(environ)
    if storage:
        sections["storage"] = storage
    celery = _celery(environ)
    if celery:
        require("dagster_celery", CELERY_BROKER_ENV)
        sections["run_launcher"] = {"module": "dagster_celery.launcher", "class": "CeleryRunLauncher",
                                    "config": {**celery, "default_queue": CELERY_DEFAULT_QUEUE}}
    else:  # Celery checks its own workers' health; the default launcher cannot
        sections["run_launcher"] = {"module": "hyperloom_assets.resources.hosts.run_launcher",
                                    "class": "WorkerCheckingRunLauncher"}
    extra = yaml.safe_dump(sections, sort_keys=False) if sections else ""
    return _with_slot_limits(INSTANCE_YAML, slotted_hosts() if devices is None else devices) + extra


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_instance_config(home: Path, environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    _write_if_changed(path, instance_yaml(environ))
    celery = _celery(environ)
    worker_config = home / CELERY_WORKER_CONFIG
    if celery:
        _write_if_changed(worker_config, yaml.safe_dump({"execution": {"config": celery}}, sort_keys=False))
    else:
        worker_config.unlink(missing_ok=True)
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom instance-config", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("home", nargs="?", type=Path, metavar="DAGSTER_HOME",
                   help="the folder to write dagster.yaml into (default: $DAGSTER_HOME, else .dagster_home)")
    return p


def _password_note(environ: Mapping[str, str]) -> str | None:
    url = environ.get(POSTGRES_URL_ENV)
    if not url or environ.get(POSTGRES_PASSWORD_ENV):
        return None
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        return None
    has_password = parsed.password is not None or "password" in parsed.query
    return (f"note: dagster.yaml reads the database password from {POSTGRES_PASSWORD_ENV}; set it wherever "
            "Dagster loads this instance") if has_password else None


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    home = (args.home or Path(os.environ.get("DAGSTER_HOME") or ".dagster_home")).resolve()
    try:
        path = write_instance_config(home)
    except (DatabaseUnavailable, MissingExtra, SecretInUrl) as error:
        print(f"hyperloom instance-config: {error}", file=sys.stderr)
        return 1
    note = _password_note(os.environ)
    if note:
        print(note, file=sys.stderr)
    print(f"instance config: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
