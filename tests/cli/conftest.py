"""The CLI tier's shared fixture: a temporary DAGSTER_HOME with the instance config `make setup` writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.resources.hosts.process_group import read_pidfiles


@pytest.fixture
def home(tmp_path) -> Path:
    folder = tmp_path / "dagster_home"
    write_instance_config(folder)
    yield folder
    assert read_pidfiles(folder / "hyperloom" / "pids") == [], "a server outlived the run"
