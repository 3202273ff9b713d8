"""vLLM CPU profiled by its own torch profiler: one launch of the tiny Llama with --profiler-config,
a short round between /start_profile and /stop_profile, the worker's trace reduced."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.profiling import run_profile

pytestmark = pytest.mark.real_engine


def test_vllm_cpu_profiles_its_gemms_attention_and_python(tmp_path, host, tiny_model) -> None:
    spec = ServerSpec(engine="vllm", model=tiny_model, env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                      server_args=["--max-num-seqs", "4", "--enforce-eager", "--max-model-len", "512"])
    contract = WorkloadContract(workload=Workload(kind="random", isl=64, osl=32, concurrency=4),
                                vocab_size=load_shape(tiny_model).vocab, max_model_len=512, num_prompts=16,
                                warmups=2, repeats=1)
    result = run_profile(host=host, bench=BenchmarkClient(), spec=spec, contract=contract, run_dir=tmp_path / "profile")
    assert result.taken, result.reason
    assert "--profiler-config" in result.argv
    trace = Path(result.trace_path)
    assert trace.parent == (tmp_path / "profile" / "trace").resolve() and trace.name.endswith(".pt.trace.json.gz")
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
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "the profiled server is torn down"
    print(f"\nvLLM CPU profile: {s.window_ms:.0f} ms window, "
          + ", ".join(f"{k} {v:.1f}%" for k, v in s.shares_pct.items()) + f"; trace {trace.stat().st_size} bytes")
