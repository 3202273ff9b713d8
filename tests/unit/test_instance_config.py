"""The instance config `make setup` writes: what Dagster reads from it."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from hyperloom_assets.cli import instance_config
from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.resources.store.database import DatabaseUnavailable, check_connects, shown
from hyperloom_assets.resources.store.results import ResultStore


def test_a_fresh_instance_shows_no_community_dialog_and_sends_no_telemetry(tmp_path) -> None:
    write_instance_config(tmp_path)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        # The UI opens its "Join the Dagster community" newsletter dialog on localhost
        # whenever the instance says NUX is enabled and DAGSTER_HOME/.nux has no record.
        assert instance.nux_enabled is False
        assert instance.telemetry_enabled is False



# A password in the URL's query (libpq accepts `?password=`) goes the userinfo's way: dagster.yaml
# reads it from the environment; any other secret there is refused; errors show neither.
QUERY_PASSWORD = "qpw-7d1c9e4b2a"
USERINFO_PASSWORD = "upw-3f6a8c0e5b"


@pytest.fixture
def no_connect(monkeypatch) -> None:
    monkeypatch.setattr(instance_config, "check_connects", lambda url: None)
    monkeypatch.setattr(instance_config, "require", lambda module, asked_by: None)


def test_a_password_in_the_query_is_read_from_the_environment_not_written(no_connect) -> None:
    url = f"postgresql://dagster@db.internal:5432/runs?password={QUERY_PASSWORD}&sslmode=require"
    written = instance_config.instance_yaml({"HYPERLOOM_POSTGRES_URL": url}, devices={})
    assert QUERY_PASSWORD not in written
    db = yaml.safe_load(written)["storage"]["postgres"]["postgres_db"]
    assert db["password"] == {"env": "HYPERLOOM_POSTGRES_PASSWORD"} and db["params"] == {"sslmode": "require"}


def test_two_passwords_that_differ_or_another_secret_in_the_query_are_refused_naming_it(no_connect) -> None:
    with pytest.raises(instance_config.SecretInUrl, match=r"'sslpassword'"):
        instance_config.instance_yaml({"HYPERLOOM_POSTGRES_URL": "postgresql://u@db/x?sslpassword=keypass1"}, devices={})
    with pytest.raises(instance_config.SecretInUrl, match="give different passwords"):
        instance_config.instance_yaml({"HYPERLOOM_POSTGRES_URL": f"postgresql://u:{USERINFO_PASSWORD}@db/x"
                                                                 f"?password={QUERY_PASSWORD}"}, devices={})


def test_the_command_refuses_it_and_writes_nothing(tmp_path, monkeypatch, capsys, no_connect) -> None:
    monkeypatch.setenv("HYPERLOOM_POSTGRES_URL", "postgresql://u@db/x?sslpassword=keypass1")
    assert instance_config.main([str(tmp_path)]) == 1
    assert "HYPERLOOM_POSTGRES_URL: the query parameter 'sslpassword'" in capsys.readouterr().err
    assert not (tmp_path / "dagster.yaml").exists()


def test_an_error_about_the_database_shows_no_password_of_its_url() -> None:
    url = f"postgresql+psycopg2://u:{USERINFO_PASSWORD}@127.0.0.1:1/x?password={QUERY_PASSWORD}&connect_timeout=2"
    with pytest.raises(DatabaseUnavailable) as refused:
        check_connects(url)
    with pytest.raises(DatabaseUnavailable) as refused_store:
        ResultStore(url=url).engine()
    for said in (str(refused.value), str(refused_store.value), shown(url)):
        assert USERINFO_PASSWORD not in said and QUERY_PASSWORD not in said, said
        assert "password=<redacted>" in said and "127.0.0.1:1/x" in said
