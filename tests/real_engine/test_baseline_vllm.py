"""The baseline asset on real vLLM CPU, through `dagster.materialize`, with its guards.

An agentic replay served with the prefix cache off is refused and never materialized;
with the cache on it is measured and reports its prefix hit; an argv vLLM rejects stops
at once with `baseline_arg_error`. Nothing of any server is left running.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.assets.baseline import build_baseline_asset
from hyperloom_assets.assets.observations import build_observations
from hyperloom_assets.assets.partitions import target_partitions
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.releases.envs import ReleaseEnvironments
from tests.conftest import REPO, VLLM_CPU_ENV

pytestmark = pytest.mark.real_engine

TRACE = REPO / "examples" / "agentic_small.jsonl"
ENV = VLLM_CPU_ENV


def materialize_baseline(folder: Path, name: str, host, store, instance):
    partitions = target_partitions(folder)
    assets = [*build_observations(partitions), build_baseline_asset(partitions)]
    catalog = TargetCatalog(folder=str(folder))
    resources = {"catalog": catalog, "hosts": HostFleet(local=host, catalog=catalog, store=store),
                 "bench": BenchmarkClient(), "store": store, "envs": ReleaseEnvironments()}
    return dg.materialize(assets, selection=["baseline"], partition_key=name, resources=resources,
                          instance=instance, raise_on_error=False)


def write(folder: Path, name: str, model: Path, server_args: list[str], workload: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": str(model), "server_args": server_args, "env": ENV, "workload": workload,
        "repeats": 2}))


def failure(result) -> str:
    return str(next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)


def nothing_running(host) -> None:
    assert read_pidfiles(Path(host.state_path()) / "pids") == []


AGENTIC = {"kind": "agentic", "trace": str(TRACE), "concurrency": 4}
ARGS = ["--max-num-seqs", "4", "--enforce-eager", "--max-model-len", "2048"]


def test_agentic_baseline_with_the_cache_off_is_refused(tmp_path, tiny_model, host, store) -> None:
    write(tmp_path / "t", "agent", tiny_model, ARGS + ["--no-enable-prefix-caching"], AGENTIC)
    with dg.instance_for_test() as instance:
        result = materialize_baseline(tmp_path / "t", "agent", host, store, instance)
        assert not result.success
        assert not instance.fetch_materializations(dg.AssetKey("baseline"), limit=1).records, "never materialized"
    text = failure(result)
    assert "baseline_failed" in text and "agentx_baseline_prefix_cache_off" in text
    assert "vllm" in text and "enable_prefix_caching: False" in text
    assert [row["outcome"] for row in store.baseline_attempts("agent")] == ["prefix_cache_off"]
    nothing_running(host)


def test_agentic_baseline_with_the_cache_on_reports_its_prefix_hit(tmp_path, tiny_model, host, store) -> None:
    write(tmp_path / "t", "agent", tiny_model, ARGS, AGENTIC)
    with dg.instance_for_test() as instance:
        result = materialize_baseline(tmp_path / "t", "agent", host, store, instance)
        assert result.success, failure(result)
        record = instance.fetch_materializations(dg.AssetKey("baseline"), limit=1).records[0]
    metadata = {k: getattr(v, "value", v) for k, v in record.asset_materialization.metadata.items()}
    assert metadata["launch_evidence"]["max_num_seqs"] == 4, "the evidence shows the args that were passed"
    assert "--max-num-seqs 4" in metadata["argv"]
    assert metadata["env"] == ENV
    assert 40 < metadata["theoretical_prefix_hit_pct"] < 100
    assert metadata["output_throughput_ci_low"] <= metadata["output_throughput"] <= metadata["output_throughput_ci_high"]
    assert metadata["repeats"] == 2
    nothing_running(host)


def test_an_argv_error_stops_at_the_first_occurrence(tmp_path, tiny_model, host, store) -> None:
    write(tmp_path / "t", "bad", tiny_model, ARGS + ["--no-such-flag"], {"kind": "random", "isl": 32, "osl": 8,
                                                                         "concurrency": 2})
    with dg.instance_for_test() as instance:
        first = materialize_baseline(tmp_path / "t", "bad", host, store, instance)
        text = failure(first)
        assert "baseline_arg_error" in text and "unrecognized arguments" in text
        again = materialize_baseline(tmp_path / "t", "bad", host, store, instance)
        assert "dropped as a duplicate" in failure(again)
    assert len(store.baseline_attempts("bad")) == 1, "the identical retry never launched"
    nothing_running(host)
