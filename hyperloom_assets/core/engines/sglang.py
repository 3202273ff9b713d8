"""SGLang: what the project knows of it. Pure code.

Checked against sglang 0.5.23 (its PyPI wheel; tests/contract/test_sglang_contract.py
quotes it): `python -m sglang.launch_server --model-path M --port P`, flags derived
from ServerArgs fields (`tp_size` -> `--tp-size`), the resolved record logged as
`server_args={...}` (older releases: `server_args=ServerArgs(...)`), `GET /health`,
the radix (prefix) cache on unless the record says `disable_radix_cache=True`. The
source checkout keeps the package under `python/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from hyperloom_assets.core.engines.evidence import parse_sglang_server_args
from hyperloom_assets.core.engines.spec import (
    AccuracyRisk,
    CliParser,
    DeviceFlags,
    Distribution,
    EngineSpec,
    Entry,
    MetricNames,
    Series,
    Profiler,
    Startup,
    home_of,
)


def prefix_cache_off(server_args: list[str], evidence: dict[str, Any] | None, version: str | None) -> str | None:
    """The record is the whole resolved ServerArgs, so it says either way."""
    if evidence is not None and evidence.get("disable_radix_cache") is True:
        return "server_args: disable_radix_cache=True"
    return None


# sglang/srt/observability/metrics_collector.py (SchedulerMetricsCollector,
# TokenizerMetricsCollector) in 0.5.23, served with `--enable-metrics`. Cached tokens are
# counted under `cache_source` device/host/storage, or `total` without the breakdown, so
# every label is summed. Forward time by batch kind (`category` is the ForwardMode's
# name) is only counted with SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 in the server's env.
METRICS = MetricNames(
    kv_usage_pct=Series(name="sglang:token_usage", scale=100.0, combine="max"),
    preemptions=Series(name="sglang:num_retracted_requests_total"),
    running=Series(name="sglang:num_running_reqs"),
    waiting=Series(name="sglang:num_queue_reqs"),
    prefix_queries=Series(name="sglang:prompt_tokens_total"),
    prefix_hits=Series(name="sglang:cached_tokens_total"),
    prefill_s=Series(name="sglang:forward_execution_seconds_total", labels=(("category", "extend"),)),
    decode_s=Series(name="sglang:forward_execution_seconds_total", labels=(("category", "decode"),)),
)


def jit_cache_dirs(env: Mapping[str, str]) -> list[Path]:
    """sglang/srt/environ.py: SGLANG_CACHE_DIR, default ~/.cache/sglang (JIT kernels, autotune results)."""
    return [Path(env["SGLANG_CACHE_DIR"]) if env.get("SGLANG_CACHE_DIR") else home_of(env) / ".cache" / "sglang"]


def profiler_env(trace_dir: str) -> dict[str, str]:
    """SGLang reads its trace folder from SGLANG_TORCH_PROFILER_DIR (default ./logs); its
    /start_profile and /stop_profile routes are always there (srt/entrypoints/http_server.py),
    and each TP rank writes `<dir>/<time>-TP-<rank>.trace.json.gz`."""
    return {"SGLANG_TORCH_PROFILER_DIR": trace_dir}


def no_profiler_args(trace_dir: str) -> list[str]:
    return []


ENGINE = EngineSpec(
    name="sglang",
    listed_at=1,
    entry=Entry(module="sglang.launch_server"),
    model_flag="--model-path",
    launcher_aliases=("--model",),
    port_flag="--port",
    # SGLang serves /metrics only when asked: the measurement protocol scrapes it (step 7).
    serve_flags=("--host", "127.0.0.1", "--enable-metrics"),
    serve_env=(("SGLANG_ENABLE_METRICS_DEVICE_TIMER", "1"),),  # prefill_s/decode_s are counted only with it
    console_commands=(("sglang", "serve"),),  # 0.5.23's recommended entry; `-m sglang.launch_server` still works
    distributions=(Distribution(name="sglang", ships="sglang/launch_server.py"),),
    release_distribution="sglang",
    source_import_root="python",
    package="sglang",
    parse_evidence=parse_sglang_server_args,
    prefix_cache_off=prefix_cache_off,
    fatal_markers=("Scheduler hit an exception", "torch.OutOfMemoryError", "CUDA out of memory", "Not enough memory"),
    # Cold JIT builds (ROCm's aiter kernels, deep_gemm, flashinfer) can take over an
    # hour; the reference allows 9000 s. With the cache warm 900 s is plenty.
    startup=Startup(cold_s=9000.0, warm_s=900.0, cache_dirs=jit_cache_dirs),
    accuracy_risks=(
        AccuracyRisk(knob="--kv-cache-dtype", why="a KV cache narrower than the model's dtype",
                     safe_values=("auto", "bf16", "bfloat16")),
        AccuracyRisk(knob="--quantization", why="quantized weights"),
        AccuracyRisk(knob="--dtype", why="another compute dtype", safe_values=("auto",)),
        AccuracyRisk(knob="--attention-backend", why="another attention kernel"),
        AccuracyRisk(knob="--prefill-attention-backend", why="another attention kernel"),
        AccuracyRisk(knob="--decode-attention-backend", why="another attention kernel"),
        AccuracyRisk(knob="--speculative-algorithm", why="speculative decoding"),
        AccuracyRisk(knob="--enable-torch-compile", why="compiler passes that fuse or reorder kernels"),
    ),
    env_prefixes=("SGLANG_", "SGL_"),
    boolean_flags=frozenset({
        "--disable-radix-cache", "--disable-cuda-graph", "--disable-cuda-graph-padding", "--enable-torch-compile",
        "--enable-dp-attention", "--enable-mixed-chunk", "--disable-overlap-schedule", "--enable-metrics",
        "--skip-server-warmup", "--enable-dp-lm-head", "--trust-remote-code",
    }),
    # 0.5.23 takes per-phase lists; `--cuda-graph-bs` is the older releases' spelling.
    multi_value_flags=frozenset({"--cuda-graph-bs", "--cuda-graph-bs-decode", "--cuda-graph-bs-prefill"}),
    sequence_cap_key="max_running_requests",
    grid="sglang.yaml",
    cli_parser=CliParser(builder="sglang.srt.server_args:ServerArgs.add_cli_args"),
    source_context=("srt/managers/scheduler.py",),
    metrics=METRICS,
    profiler=Profiler(server_args=no_profiler_args, env=profiler_env, trace_glob="**/*.trace.json*"),
    # Under DP attention the data-parallel ranks share the tensor-parallel group's GPUs.
    devices=DeviceFlags(tensor=("--tp-size", "--tensor-parallel-size"), pipeline=("--pp-size", "--pipeline-parallel-size"),
                        data=("--dp-size",), data_within_tensor="--enable-dp-attention"),
)
