"""Real vLLM CPU through an SSH host (a real sshd on loopback): a whole optimize run, the
benchmark client on the host, vLLM's own telemetry in the trials table, and nothing left
behind there."""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.store.leases import HostLeases

pytestmark = pytest.mark.real_engine


def vllm_servers(model: Path) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if "vllm.entrypoints.openai.api_server" in (p.info["cmdline"] or []) and str(model) in (p.info["cmdline"] or [])]


def _assert_vllms_telemetry_reached_the_tables(trials: dict, baseline: dict) -> None:
    """vLLM's /metrics, scraped by the client on the host, in the columns the planner and a user read."""
    table = trials["trials"].value
    row = table.records[0].data
    assert row["running_mean"] is not None and row["running_mean"] > 0, row
    assert None not in (row["prefix_hit_pct"], row["prefill_share_pct"], row["preemptions"]), row
    assert {c.name for c in table.schema.columns} >= {"kv_usage_max_pct", "waiting_mean", "prefix_hit_pct"}
    assert baseline["telemetry"].value["engine"] == "vllm"


def test_optimize_on_vllm_cpu_through_ssh_leaves_nothing_on_the_host(sshd, tmp_path, tiny_model, host, store) -> None:
    workdir = tmp_path / "remote"
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"gpu-ssh": sshd.host_entry(workdir, sys.executable)}))
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "tiny-ssh.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": str(tiny_model), "host": "gpu-ssh", "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        "server_args": ["--max-num-seqs", "2", "--enforce-eager", "--max-model-len", "512"],
        "workload": {"kind": "random", "isl": 64, "osl": 32, "concurrency": 8, "num_prompts": 16},
        "repeats": 2, "max_trials": 1, "target_gain_pct": 1000, "sweep_concurrencies": [8]}))
    defs = build_defs(targets, host=host, store=store)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="tiny-ssh", instance=instance,
                                                                         raise_on_error=False)
        assert result.success, [str(e.event_specific_data.error) for e in result.all_events
                                if e.event_type_value == "STEP_FAILURE"]
        trials = instance.fetch_materializations(dg.AssetKey("trials"), limit=1).records[0]
        base = instance.fetch_materializations(dg.AssetKey("baseline"), limit=1).records[0]
    _assert_vllms_telemetry_reached_the_tables(trials.asset_materialization.metadata,
                                               base.asset_materialization.metadata)
    baseline = store.measurements("tiny-ssh", "baseline")[0]
    assert baseline["measurement"]["output_throughput"] > 0
    assert baseline["evidence"]["max_num_seqs"] == 2, "the launch evidence read from the log fetched back"
    run_dir = Path(baseline["log_path"]).parent
    assert "non-default args" in (run_dir / "server.log").read_text() and list(run_dir.glob("*.jsonl"))
    kinds = {row["kind"] for row in store.measurements("tiny-ssh")}
    assert {"baseline", "trial", "sweep"} <= kinds, kinds
    assert read_pidfiles(workdir / "pids") == [], "no pidfile left on the host"
    assert not any((workdir / "runs").iterdir()), "no run files left on the host"
    assert vllm_servers(tiny_model) == [], "no server left running on the host"
    assert HostLeases(store).held() == []
