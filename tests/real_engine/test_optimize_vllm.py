"""optimize_job on real vLLM CPU: a real keeper, a validated gain, and an independent re-measure.

One run from a capped config (the sequence cap far under the concurrency). The gain is
then checked with vLLM's own benchmark client on fresh servers of the baseline and the
final configuration, so the claim does not rest on our client alone.
"""

from __future__ import annotations

import shlex
import statistics
import subprocess
from pathlib import Path

import dagster as dg
import pytest
import yaml

from benchmarks.support.peer_results import read_vllm_result
from benchmarks.support.peers import vllm_bench_serve_argv
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.process_group import read_pidfiles

pytestmark = pytest.mark.real_engine

CONCURRENCY = 16
ISL, OSL = 64, 64
# Two full waves: vLLM CPU without --enforce-eager runs a batch of 16 slowly the first times
# it meets one. On a fresh server of the final stack `vllm bench serve` gave 658 tok/s after
# 8 warm-ups and 2261 after 32 (ours 1551-3690 on the same servers), and 8 once made its
# gain +62.6% against our validated +512.7%. Even 32 were not always enough (CI, stop 21:
# 1390 tok/s on the final stack against our 2839, so +183% against +379%), and one pass of 64
# prompts lasts 2-3 s on this shared 2-core machine: passes on one server read 1870 then 1418.
# So the client runs a whole first pass as warm-up and the median of the next three counts.
WARMUPS = 2 * CONCURRENCY
PASSES = 4


def metadata(instance: dg.DagsterInstance, asset: str, partition: str) -> dict:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
    assert records, f"no materialization of {asset}"
    return {k: getattr(v, "value", v) for k, v in records[0].asset_materialization.metadata.items()}


def vllm_client_throughput(host, model: Path, server_args: list[str], env: dict[str, str], folder: Path) -> float:
    """Serve a config fresh and measure it with `vllm bench serve` (its own client): the median
    of its passes after the first."""
    spec = ServerSpec(engine="vllm", model=model, server_args=server_args, env=env)
    passes = []
    with host.serve(spec, folder) as launch:
        for index in range(PASSES):
            name = f"vllm-{index}.json"
            argv = vllm_bench_serve_argv(launch.base_url, launch.served_model, model, ISL, OSL, num_prompts=64,
                                         concurrency=CONCURRENCY, result_dir=folder, result_filename=name,
                                         warmups=WARMUPS)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
            passes.append(read_vllm_result(folder / name).output_throughput)
    print(f"vllm bench serve passes {[round(p, 1) for p in passes]} tok/s on {server_args}")
    return statistics.median(passes[1:])


def server_args_of(final_argv: str) -> list[str]:
    """The engine args of a full command: everything after `--host 127.0.0.1`, minus the port."""
    tokens = shlex.split(final_argv)
    start = tokens.index("--host") + 2
    return tokens[start:]


def test_capped_config_gets_a_validated_gain_that_vllms_client_confirms(tmp_path, tiny_model, host, store) -> None:
    targets = tmp_path / "targets"
    targets.mkdir()
    operator_args = ["--max-num-seqs", "2", "--enforce-eager", "--max-model-len", "512"]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    (targets / "tiny.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": str(tiny_model), "server_args": operator_args, "env": env,
        "workload": {"kind": "random", "isl": ISL, "osl": OSL, "concurrency": CONCURRENCY, "num_prompts": 48},
        "repeats": 3, "max_trials": 2, "target_gain_pct": 30, "sweep_concurrencies": [CONCURRENCY]}))
    defs = build_defs(targets, host=host, store=store)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="tiny", instance=instance)
        assert result.success
        trials = metadata(instance, "trials", "tiny")
        stack = metadata(instance, "optimization_stack", "tiny")
        report = metadata(instance, "final_report", "tiny")
    assert trials["kept"] >= 1, "a real keeper"
    assert stack["validated_gain_pct"] > 0 and stack["validated_gain_ci_low"] > 0, stack
    assert Path(report["report_path"]).is_file()
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "nothing left running"

    final_args = server_args_of(stack["final_argv"])
    assert final_args != operator_args
    base = vllm_client_throughput(host, tiny_model, operator_args, env, tmp_path / "peer-base")
    final = vllm_client_throughput(host, tiny_model, final_args, stack["final_env"], tmp_path / "peer-final")
    peer_gain = 100 * (final - base) / base
    ours = stack["validated_gain_pct"]
    print(f"validated gain {ours:+.1f}%, vLLM's client {peer_gain:+.1f}% ({base:.1f} -> {final:.1f} tok/s)")
    assert peer_gain > 0, "the same sign"
    assert 0.5 * ours <= peer_gain <= 2.0 * ours, "a similar size"
