"""What the CLI tier shares: a temporary DAGSTER_HOME, a fast sim target, stored metadata."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import dagster as dg
import pytest
import yaml
from dagster._core.event_api import PartitionKeyFilter

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from tests.conftest import SIM_MODEL

# A sim target whose baseline measures in about 3 s (time scale 50, 48 prompts, 2 repeats).
FAST_SIM_TARGET = {
    "engine": "sim", "model": str(SIM_MODEL),
    "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"],
    "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
    "repeats": 2,
}


def write_target(folder: Path, name: str, body: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


@contextmanager
def instance_at(home: Path) -> Iterator[dg.DagsterInstance]:
    """The instance a `dagster` subprocess with this DAGSTER_HOME wrote to."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        instance = dg.DagsterInstance.get()
    with instance:
        yield instance


def stored_materialization(home: Path, asset: str, partition: str) -> tuple[str, dict]:
    """The latest materialization of a partition: its run id and metadata."""
    with instance_at(home) as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
        assert records, f"no stored materialization of {asset} for {partition}"
        metadata = records[0].asset_materialization.metadata
        return records[0].run_id, {k: getattr(v, "value", v) for k, v in metadata.items()}


def stored_metadata(home: Path, asset: str, partition: str) -> dict:
    return stored_materialization(home, asset, partition)[1]


def stored_check_executions(home: Path, keys: list[dg.AssetCheckKey], partition: str) -> dict:
    """Each check's latest execution filed under the partition, by check key."""
    with instance_at(home) as instance:
        return dict(instance.event_log_storage.get_latest_asset_check_execution_by_key(
            keys, partition_filter=PartitionKeyFilter(key=partition)))


@pytest.fixture
def home(tmp_path) -> Path:
    """A DAGSTER_HOME with the instance config `make setup` writes; no server may outlive the test."""
    folder = tmp_path / "dagster_home"
    write_instance_config(folder)
    yield folder
    assert read_pidfiles(folder / "hyperloom" / "pids") == [], "a server outlived the run"
