"""vLLM CPU profiled by its own torch profiler on the baseline's server: the baseline is
launched with --profiler-config, measured with the profiler idle, then one short round
runs between /start_profile and /stop_profile and the worker's trace is reduced. One launch."""

from __future__ import annotations

import shlex
from pathlib import Path

import dagster as dg
import pytest

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from tests.conftest import write_tiny_target
from tests.graph_runs import latest_metadata

pytestmark = pytest.mark.real_engine

PROFILED = dg.AssetSelection.assets("framework_tree", "server_config", "baseline", "roofline", "profile")


def test_vllm_cpu_profiles_its_gemms_attention_and_python_on_the_baseline_server(tmp_path, host, store,
                                                                                  tiny_model) -> None:
    targets = write_tiny_target(tmp_path / "targets", tiny_model, repeats=1,
                                workload={"kind": "random", "isl": 64, "osl": 32, "concurrency": 4, "num_prompts": 16})
    defs = build_defs(targets, host=host, store=store)
    job = dg.define_asset_job("profiled", selection=PROFILED, executor_def=dg.in_process_executor)
    defs = dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
    with dg.instance_for_test() as instance:
        run = defs.resolve_job_def("profiled").execute_in_process(partition_key="tiny", instance=instance)
        assert run.success
        baseline = latest_metadata(instance, "baseline", "tiny")
    result = run.asset_value("profile")
    assert result.taken, result.reason
    assert "--profiler-config" in result.argv and shlex.join(result.argv) == baseline["argv"], "the baseline's server"
    runs = Path(host.state_path()) / "runs"
    assert [p.parent.name for p in runs.rglob("teardown.json")] == ["baseline"], "one launch"
    trace = Path(result.trace_path)
    assert trace.parent.name == "trace" and trace.parent.parent.name == "baseline"
    assert trace.name.endswith(".pt.trace.json.gz")
    s = result.summary
    assert s.time_base == "host" and s.events > 1000
    categories = {o.name: o.category for o in s.top_ops}
    # vLLM 0.32's dispatch_cpu_unquantized_gemm gives weights up to 1 MiB to sgl-kernel's
    # weight_packed_linear on an AMX CPU and the rest to oneDNN; where oneDNN cannot build its
    # matmul primitive (an AVX2-only AMD EPYC, the machine CI runs on: "Failed to create oneDNN
    # linear, fallback to torch linear") it uses torch.nn.functional.linear, traced as aten::mm,
    # aten::addmm or aten::linear: which one runs is the machine's.
    matmuls = {name for name in categories
               if name in ("_C::onednn_mm", "_C::weight_packed_linear", "aten::mm", "aten::addmm", "aten::linear")}
    assert matmuls and all(categories[name] == "gemm" for name in matmuls), f"vLLM CPU's matmuls are gemm: {categories}"
    assert "attention" in categories.values() and s.shares_pct["attention"] > 0
    assert s.shares_pct["gemm"] > 0 and s.shares_pct["sampling"] > 0 and s.shares_pct["overhead"] > 0
    assert sum(s.shares_pct.values()) == pytest.approx(100.0, abs=0.5)
    assert result.profiled_tok_s and result.profiled_tok_s > 0
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "the baseline's server is torn down"
    print(f"\nvLLM CPU profile: {s.window_ms:.0f} ms window, "
          + ", ".join(f"{k} {v:.1f}%" for k, v in s.shares_pct.items()) + f"; trace {trace.stat().st_size} bytes")
