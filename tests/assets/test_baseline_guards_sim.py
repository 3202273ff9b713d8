"""Baseline guards through the asset, on the sim: refused baselines are never materialized."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.definitions import build_defs
from tests.conftest import REPO, SIM_MODEL

TRACE = REPO / "examples" / "agentic_small.jsonl"


def target(folder: Path, name: str, server_args: list[str], workload: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "server_args": server_args, "workload": workload, "repeats": 1}))


def run_baseline(folder: Path, name: str, host, store, instance):
    defs = build_defs(folder, host=host, store=store)
    return defs.resolve_job_def("baseline_job").execute_in_process(
        partition_key=name, instance=instance, raise_on_error=False)


def failure_text(result) -> str:
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures, "the baseline step must fail"
    return str(failures[0].event_specific_data.error)


def materialized(instance, asset: str) -> bool:
    return bool(instance.fetch_materializations(dg.AssetKey(asset), limit=1).records)


AGENTIC = {"kind": "agentic", "trace": str(TRACE), "concurrency": 4}
FAST = ["--gpu", "H100", "--time-scale", "50"]


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


@pytest.mark.stop_reason("baseline_failed", case="guard")
@pytest.mark.parametrize("flavor_args, cache_off", [
    ([], ["--no-enable-prefix-caching"]),
    (["--flavor", "sglang"], ["--disable-radix-cache"]),
    (["--flavor", "atom"], ["--no-enable_prefix_caching"]),  # no record: judged by the requested args
])
def test_agentic_baseline_with_cache_off_is_refused(tmp_path, host, store, instance, flavor_args, cache_off) -> None:
    target(tmp_path / "t", "agent", FAST + flavor_args + cache_off, AGENTIC)
    result = run_baseline(tmp_path / "t", "agent", host, store, instance)
    assert not result.success
    text = failure_text(result)
    assert "baseline_failed" in text and "agentx_baseline_prefix_cache_off" in text
    assert "sim" in text
    assert not materialized(instance, "baseline"), "a refused baseline is never materialized"
    assert not materialized(instance, "roofline")
    assert len(store.baseline_attempts("agent")) == 1, "a refusal stops at once: no retry on a fresh server"


def test_agentic_baseline_with_cache_on_reports_its_prefix_hit(tmp_path, host, store, instance) -> None:
    target(tmp_path / "t", "agent", FAST, AGENTIC)
    result = run_baseline(tmp_path / "t", "agent", host, store, instance)
    assert result.success
    metadata = instance.fetch_materializations(dg.AssetKey("baseline"), limit=1).records[0].asset_materialization.metadata
    assert 40 < metadata["theoretical_prefix_hit_pct"].value < 100
    latency = metadata["latency"].value  # the sim reports per-request percentiles like any engine
    assert set(latency) >= {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"} and latency["ttft_ms"]["count"] > 0
    assert latency["ttft_ms"]["p50"] <= latency["ttft_ms"]["p99"] and metadata["latency_warnings"].value == []


@pytest.mark.stop_reason("baseline_arg_error", case="argv")
def test_argv_error_stops_at_once_and_an_identical_retry_is_dropped(tmp_path, host, store, instance) -> None:
    target(tmp_path / "t", "bad", FAST + ["--no-such-flag", "1"], {"kind": "random", "isl": 64, "osl": 16, "concurrency": 2})
    first = run_baseline(tmp_path / "t", "bad", host, store, instance)
    text = failure_text(first)
    assert "baseline_arg_error" in text and "unrecognized arguments" in text
    second = run_baseline(tmp_path / "t", "bad", host, store, instance)
    assert "dropped as a duplicate" in failure_text(second)
    assert len(store.baseline_attempts("bad")) == 1, "stopped at once, and the duplicate was not launched"


def test_a_prompt_longer_than_the_context_fails_before_any_launch(tmp_path, host, store, instance) -> None:
    target(tmp_path / "t", "long", FAST + ["--max-model-len", "128"], {"kind": "random", "isl": 200, "osl": 16, "concurrency": 2})
    result = run_baseline(tmp_path / "t", "long", host, store, instance)
    assert "max model length 128" in failure_text(result)
    assert store.measurements("long") == [], "nothing was launched"
