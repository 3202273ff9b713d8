"""`hyperloom instance-config`: SQLite by default, Postgres and Celery from the environment,
a URL that does not connect refused before anything runs, and the Kubernetes example valid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
import yaml
from dagster._config import validate_config
from dagster._core.instance.config import dagster_instance_config
from dagster._core.instance.ref import InstanceRef
from dagster_k8s import K8sRunLauncher
from dagster_k8s.job import get_user_defined_k8s_config

from hyperloom_assets.cli.instance_config import instance_yaml
from hyperloom_assets.core.fleet.tags import host_run_tags
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.store.database import DatabaseUnavailable, check_connects, with_psycopg2
from hyperloom_assets.resources.store.database import postgres_url as postgres_url_from
from hyperloom_assets.resources.store.results import ResultStore
from tests.conftest import REPO
from tests.fleet.test_leases import write_sim_target

NOWHERE = "postgresql://postgres@127.0.0.1:1/nothing"


def instance_config(home: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HYPERLOOM_")}
    return subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "instance-config", str(home)],
                          env={**environ, **env}, capture_output=True, text=True, timeout=120)


def load(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))


def test_default_is_sqlite_with_one_run_per_host(tmp_path) -> None:
    done = instance_config(tmp_path)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((tmp_path / "dagster.yaml").read_text())
    assert "storage" not in config
    assert config["run_launcher"]["class"] == "WorkerCheckingRunLauncher", "run monitoring needs a worker health check"
    limits = config["concurrency"]["runs"]["tag_concurrency_limits"]
    assert limits == [{"key": "hyperloom/host", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}]
    with load(tmp_path) as instance:
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        assert instance.get_concurrency_config().run_queue_config.tag_concurrency_limits == limits


def test_postgres_url_gives_postgres_storage_spelled_for_psycopg2(tmp_path, postgres_url) -> None:
    done = instance_config(tmp_path, HYPERLOOM_POSTGRES_URL=postgres_url)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((tmp_path / "dagster.yaml").read_text())
    db = config["storage"]["postgres"]["postgres_db"]
    assert db["scheme"] == "postgresql+psycopg2", "a bare postgresql means psycopg 3 to SQLAlchemy 2.1"
    assert "password" not in db
    with load(tmp_path) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"


def _password_role(postgres_url: str) -> tuple[str, str]:
    """A login role whose loopback connections must give its password (the server trusts every other)."""
    role, password = f"secret_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    admin = sa.create_engine(with_psycopg2(postgres_url), isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'"))
        conn.execute(sa.text(f"GRANT ALL ON SCHEMA public TO {role}"))
        hba = Path(conn.execute(sa.text("SHOW hba_file")).scalar_one())
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        conn.execute(sa.text("SELECT pg_reload_conf()"))
    return role, password


def test_a_password_reaches_the_instance_from_the_environment_only(tmp_path, postgres_url, monkeypatch) -> None:
    role, password = _password_role(postgres_url)
    with_password = postgres_url.replace("postgresql://postgres@", f"postgresql://{role}:{password}@")
    with pytest.raises(DatabaseUnavailable, match="password authentication failed"):
        check_connects(with_psycopg2(with_password.replace(password, "wrong")))  # the server asks for it
    done = instance_config(tmp_path, HYPERLOOM_POSTGRES_URL=with_password)
    assert done.returncode == 0, done.stderr
    assert "HYPERLOOM_POSTGRES_PASSWORD" in done.stderr, "the operator is told where Dagster reads it"
    written = (tmp_path / "dagster.yaml").read_text()
    assert password not in written
    db = yaml.safe_load(written)["storage"]["postgres"]["postgres_db"]
    assert db["password"] == {"env": "HYPERLOOM_POSTGRES_PASSWORD"} and db["username"] == role
    monkeypatch.setenv("HYPERLOOM_POSTGRES_PASSWORD", password)
    with load(tmp_path) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert instance.get_runs() == []  # it connected as the role, with the password


def test_a_password_in_the_query_reaches_the_instance_from_the_environment_only(tmp_path, postgres_url,
                                                                               monkeypatch) -> None:
    """libpq takes `?password=` as well as the userinfo's: it is routed the same way, never written."""
    role, password = _password_role(postgres_url)
    in_query = postgres_url.replace("postgresql://postgres@", f"postgresql://{role}@") + f"?password={password}"
    done = instance_config(tmp_path, HYPERLOOM_POSTGRES_URL=in_query)
    assert done.returncode == 0, done.stderr
    assert "HYPERLOOM_POSTGRES_PASSWORD" in done.stderr, "the operator is told where Dagster reads it"
    written = (tmp_path / "dagster.yaml").read_text()
    assert password not in written
    assert yaml.safe_load(written)["storage"]["postgres"]["postgres_db"]["password"] == {"env": "HYPERLOOM_POSTGRES_PASSWORD"}
    monkeypatch.setenv("HYPERLOOM_POSTGRES_PASSWORD", password)
    with load(tmp_path) as instance:
        assert instance.get_runs() == []  # it connected as the role, with the password
    refused = instance_config(tmp_path / "other", HYPERLOOM_POSTGRES_URL=in_query.replace(password, "wrong-one"))
    assert refused.returncode == 1 and "password authentication failed" in refused.stderr
    assert "wrong-one" not in refused.stderr and "password=<redacted>" in refused.stderr, "the error masks it"


def test_the_password_may_stay_out_of_the_url_for_the_store_too(tmp_path, postgres_url) -> None:
    role, password = _password_role(postgres_url)
    without = postgres_url.replace("postgresql://postgres@", f"postgresql://{role}@")
    done = instance_config(tmp_path, HYPERLOOM_POSTGRES_URL=without, HYPERLOOM_POSTGRES_PASSWORD=password)
    assert done.returncode == 0, done.stderr
    assert password not in (tmp_path / "dagster.yaml").read_text()
    url = postgres_url_from({"HYPERLOOM_POSTGRES_URL": without, "HYPERLOOM_POSTGRES_PASSWORD": password})
    ResultStore(url=url).engine()  # the store connects with it


def test_a_postgres_url_that_does_not_connect_is_an_error_naming_it(tmp_path) -> None:
    done = instance_config(tmp_path, HYPERLOOM_POSTGRES_URL=NOWHERE)
    assert done.returncode == 1
    assert "HYPERLOOM_POSTGRES_URL: postgresql+psycopg2://postgres@127.0.0.1:1/nothing does not connect" in done.stderr
    assert not (tmp_path / "dagster.yaml").exists(), "nothing written"
    with pytest.raises(DatabaseUnavailable, match="result store: .* does not connect"):
        ResultStore(url=NOWHERE).engine()


def test_a_store_that_does_not_connect_fails_the_run_before_any_launch(tmp_path, host) -> None:
    write_sim_target(tmp_path / "targets")
    defs = build_defs(tmp_path / "targets", host=host, store=ResultStore(url=NOWHERE))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("baseline_job").execute_in_process(
            partition_key="sim-a", instance=instance, raise_on_error=False)
        text = " ".join(str(e.dagster_event.event_specific_data) for e in instance.all_logs(result.run_id)
                        if e.dagster_event)
    assert not result.success
    assert "does not connect" in text
    assert not list((Path(host.state_path()) / "runs").glob("*/*/baseline/server.log")), "no server was launched"


def test_celery_broker_gives_the_celery_run_launcher_and_a_worker_config(tmp_path, redis_server, monkeypatch) -> None:
    done = instance_config(tmp_path, HYPERLOOM_CELERY_BROKER=redis_server.url)
    assert done.returncode == 0, done.stderr
    worker = yaml.safe_load((tmp_path / "celery.yaml").read_text())
    from_env = {"env": "HYPERLOOM_CELERY_BROKER"}
    assert worker == {"execution": {"config": {"broker": from_env, "backend": from_env}}}, "a broker URL may hold a password"
    assert redis_server.url not in (tmp_path / "dagster.yaml").read_text()
    monkeypatch.setenv("HYPERLOOM_CELERY_BROKER", redis_server.url)
    with load(tmp_path) as instance:
        assert type(instance.run_launcher).__name__ == "CeleryRunLauncher"
        assert instance.run_launcher.broker == redis_server.url


def test_the_kubernetes_example_passes_dagsters_config_validation(tmp_path) -> None:
    example = REPO / "examples" / "fleet" / "dagster-k8s.yaml"
    (tmp_path / "dagster.yaml").write_text(example.read_text())
    config, _ = dagster_instance_config(str(tmp_path))  # the instance schema: raises on any error
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    checked = validate_config(K8sRunLauncher.config_type(), launcher["config"])
    assert checked.success, [error.message for error in checked.errors]
    tags = host_run_tags("gpu-a", {"HYPERLOOM_K8S_NODE_LABEL": "hyperloom/host"})
    assert get_user_defined_k8s_config(tags).pod_spec_config == {"node_selector": {"hyperloom/host": "gpu-a"}}
    assert json.loads(tags["dagster-k8s/config"])  # a run tag is a string


def test_instance_yaml_is_the_setup_default_without_the_environment() -> None:
    assert "storage" not in instance_yaml({}) and "tag_concurrency_limits" in instance_yaml({})


def test_a_host_that_declares_its_gpus_takes_a_run_per_device_in_the_queue(tmp_path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(yaml.safe_dump({"gpu-a": {"kind": "local", "gpus": [0, 1, 2, 3]}, "cpu-b": {"kind": "local"}}))
    done = instance_config(tmp_path, HYPERLOOM_HOSTS_FILE=str(hosts))
    assert done.returncode == 0, done.stderr
    limits = yaml.safe_load((tmp_path / "dagster.yaml").read_text())["concurrency"]["runs"]["tag_concurrency_limits"]
    assert limits == [{"key": "hyperloom/host", "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
                      {"key": "hyperloom/slotted-host", "value": "gpu-a", "limit": 4}]
    with load(tmp_path) as instance:
        assert instance.get_concurrency_config().run_queue_config.tag_concurrency_limits == limits
    assert host_run_tags("gpu-a", {}, slotted=True) == {"hyperloom/slotted-host": "gpu-a",
                                                        "dagster-celery/queue": "hyperloom-gpu-a"}
    assert "hyperloom/host" in host_run_tags("cpu-b", {}), "a host without declared GPUs keeps its limit of one"
