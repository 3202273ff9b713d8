"""A profiler's trace reduced to where the time goes: synthetic traces for the arithmetic, a real
vLLM CPU trace for the format, and the sim's profiler against its own performance model."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from hyperloom_assets.core.profile.trace import (
    CATEGORIES,
    GAP_NAMES,
    TraceError,
    category_of,
    read_trace,
    reduce_events,
    reduce_trace,
)
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.sim.perf_model import PerfModel, StepShape
from hyperloom_assets.sim.profiler import SimProfiler
from tests.conftest import SIM_MODEL

VLLM_CPU_TRACE = Path(__file__).parents[1] / "fixtures" / "profiles" / "vllm_cpu_tiny.pt.trace.json.gz"


def op(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def by_name(summary) -> dict:
    return {o.name: o for o in summary.top_ops}


def test_self_time_is_duration_less_children_and_gaps_are_overhead() -> None:
    events = [op("step_3", 0, 100, cat="user_annotation"), op("aten::mm", 10, 20), op("aten::add", 15, 5),
              op("vllm::unified_attention", 40, 20), op("step_7", 150, 50, cat="user_annotation"),
              op("aten::argmax", 160, 10), {"ph": "M", "name": "process_name"}, op("elsewhere", 0, 1, tid=2)]
    s = reduce_events(events)
    ops = by_name(s)
    assert s.time_base == "host" and s.window_ms == pytest.approx(0.2)
    assert ops["aten::mm"].self_ms == pytest.approx(0.015) and ops["aten::add"].self_ms == pytest.approx(0.005)
    assert ops["step_N"].calls == 2 and ops["step_N"].self_ms == pytest.approx((100 - 20 - 20 + 50 - 10) / 1e3)
    assert ops[GAP_NAMES["host"]].self_ms == pytest.approx(0.05), "the 100-150 gap between steps"
    assert s.category_ms == pytest.approx({"attention": 0.02, "gemm": 0.015, "sampling": 0.01, "overhead": 0.15,
                                           "communication": 0.0, "idle": 0.0, "other": 0.005})
    assert sum(s.shares_pct.values()) == pytest.approx(100.0)
    assert [o.name for o in s.top_ops][:2] == ["step_N", GAP_NAMES["host"]], "largest self time first"


def test_an_op_starting_a_rounding_before_its_predecessor_ends_follows_it() -> None:
    s = reduce_events([op("aten::mm", 0.0, 10.001), op("aten::add", 10.0, 5.0)])
    assert by_name(s)["aten::mm"].self_ms == pytest.approx(0.010001), "not a parent of the next op"
    assert GAP_NAMES["host"] not in by_name(s) and s.category_ms["other"] == pytest.approx(0.005)


def test_device_kernels_win_over_host_ops_and_idle_device_time_is_overhead() -> None:
    events = [op("aten::mm", 0, 500), op("sm90_xmma_gemm_bf16", 100, 40, cat="kernel", tid=7),
              op("flash_fwd_kernel", 120, 30, cat="kernel", tid=8), op("ncclAllReduce_RING", 200, 50, cat="kernel", tid=7)]
    s = reduce_events(events)
    assert s.time_base == "device" and s.window_ms == pytest.approx(0.15)
    assert s.category_ms["gemm"] == pytest.approx(0.04) and s.category_ms["attention"] == pytest.approx(0.03)
    assert s.category_ms["communication"] == pytest.approx(0.05)
    assert by_name(s)[GAP_NAMES["device"]].self_ms == pytest.approx(0.05), "150-200: the device idle"


@pytest.mark.parametrize("name, category", [
    ("_C::onednn_mm", "gemm"), ("_C::weight_packed_linear", "gemm"), ("aten::mm", "gemm"), ("aten::addmm", "gemm"), ("aten::bmm", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", "gemm"), ("void cutlass::Kernel2<cutlass_80_tensorop>", "gemm"),
    ("vllm::unified_attention_with_output", "attention"), ("_C::cpu_attn_reshape_and_cache", "attention"),
    ("flash::flash_fwd_splitkv_kernel", "attention"), ("_C::rotary_embedding", "attention"),
    ("_C::greedy_argmax", "sampling"), ("aten::multinomial", "sampling"), ("top_k_top_p_sampling", "sampling"),
    ("cross_device_reduce_1stage", "other"), ("vllm::all_reduce", "communication"),
    ("aten::empty", "other"), ("aten::mean", "other"), ("aten::_local_scalar_dense", "other"),
    ("aten::sum", "other"), ("aten::copy_", "other"),
    ("sim::gemm", "gemm"), ("sim::paged_attention", "attention"), ("sim::sampler", "sampling"),
    ("sim::scheduler", "overhead"), ("sim::kernel_launch", "overhead"), ("sim::all_reduce", "communication"),
    ("sim::idle", "idle"),
])
def test_ops_fall_in_their_category_by_name(name: str, category: str) -> None:
    assert category_of(name, "cpu_op") == category
    assert set(CATEGORIES) >= {category}


def test_a_real_vllm_cpu_trace_reduces_to_its_gemms_attention_and_python() -> None:
    """Twenty steps of vLLM 0.32 CPU serving the tiny Llama (captured once, args dropped)."""
    s = reduce_trace(VLLM_CPU_TRACE)
    ops = by_name(s)
    assert s.time_base == "host" and s.events == 15960
    assert ops["_C::onednn_mm"].category == "gemm" and ops["_C::onednn_mm"].calls == 340
    assert ops["_C::onednn_mm"].self_ms == pytest.approx(29.13, abs=0.01)
    assert ops["execute_context_N(N)_generation_N(N)"].calls == 20, "one row for every step annotation"
    assert ops["vllm::unified_attention_with_output"].category == "attention"
    shares = s.shares_pct
    assert sum(shares.values()) == pytest.approx(100.0, abs=0.01)
    # A tiny model on a CPU: Python and the gaps between steps outweigh the matmuls.
    assert shares["overhead"] > shares["gemm"] > shares["attention"] > shares["sampling"] > 0
    assert shares["communication"] == 0.0


def test_plain_and_gzipped_traces_read_alike_and_bad_ones_say_why(tmp_path) -> None:
    events = [op("aten::mm", 0, 10)]
    plain, packed = tmp_path / "a.pt.trace.json", tmp_path / "b.pt.trace.json.gz"
    plain.write_text(json.dumps({"traceEvents": events}))
    with gzip.open(packed, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    assert read_trace(plain) == read_trace(packed) == events
    (tmp_path / "cut.json").write_text('{"traceEvents": [')
    with pytest.raises(TraceError, match="cut.json: not a readable Chrome trace"):
        reduce_trace(tmp_path / "cut.json")
    with pytest.raises(TraceError, match="no ops"):
        reduce_events([{"ph": "M", "name": "thread_name"}, op("PyTorch Profiler (0)", 0, 5, cat="Trace")])


def test_the_sim_profile_is_its_performance_models_breakdown(tmp_path) -> None:
    shape = load_shape(SIM_MODEL)
    model = PerfModel(shape=shape, gpu=gpu_spec("H100"), tp=1, kv_bytes_per_elem=2.0, block_size=16,
                      cuda_graphs=False, graph_max_tokens=512, graph_decode_only=False, cpu_overhead_hidden=False)
    decode = StepShape(decode_seqs=8, decode_context=8 * 600)
    step_s = model.step_time(decode)
    assert sum(model.step_breakdown(decode).values()) == pytest.approx(step_s)
    profiler = SimProfiler(model, tmp_path / "trace")
    profiler.record(decode, 0.0, step_s)  # before start: not recorded
    profiler.start(1.0)
    profiler.record(decode, 1.0, step_s)
    profiler.record(decode, 1.0 + 2 * step_s, step_s)  # a step's time idle in between
    path = profiler.stop()
    assert path.name == "sim.1.pt.trace.json" and profiler.stop() is None
    s = reduce_trace(path)
    parts = model.step_breakdown(decode)
    assert s.window_ms == pytest.approx(3 * step_s * 1e3, rel=1e-4)
    assert s.category_ms["gemm"] == pytest.approx(2 * parts["gemm"] * 1e3, rel=1e-3)
    assert s.category_ms["idle"] == pytest.approx(step_s * 1e3, rel=1e-3)
    assert s.category_ms["overhead"] == pytest.approx(2 * (parts["scheduling"] + parts["kernel_launch"]) * 1e3, rel=1e-3)
    assert s.shares_pct["idle"] == pytest.approx(100 / 3, rel=1e-3)
