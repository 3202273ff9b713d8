"""SGLang's contract: the flags we pass and the log lines we read, pinned to its source.

Upstream: sglang 0.5.23, the wheel on PyPI (sglang-0.5.23-cp311-cp311-manylinux_2_34_
x86_64.whl, METADATA `Version: 0.5.23`), read by hand: SGLang does not run on this CPU,
so nothing here imports it. Paths are inside the wheel; each quote is a line as it
stands there. Older releases logged the record as `server_args=ServerArgs(...)`; that
form is pinned by tests/fixtures/logs/sglang_server_args.log (a release of 2026-03).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.evidence import parse_sglang_server_args
from hyperloom_assets.sim.engine_args import engine_parser
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.process_group import teardown
from tests.contract.project_flags import project_flags

SGLANG_VERSION = "0.5.23"
FIELDS = "sglang/srt/arg_groups/fields/"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "logs"

# How a ServerArgs field becomes a flag (sglang/srt/arg_groups/arg_utils.py, _field_to_cli_name):
#     return "--" + name.replace("_", "-")
ALIASES = {"--model": (FIELDS + "model.py", 'aliases=["--model"],'),
           "--tensor-parallel-size": (FIELDS + "parallel.py", 'aliases=["--tensor-parallel-size"],'),
           "--pipeline-parallel-size": (FIELDS + "parallel.py", 'aliases=["--pipeline-parallel-size"],')}
# Registered by hand in ServerArgs.add_cli_args (sglang/srt/server_args.py): deprecated, still accepted.
MANUAL = {"--disable-cuda-graph": ("sglang/srt/server_args.py", '"--disable-cuda-graph",'),
          "--enable-dp-attention": ("sglang/srt/server_args.py", '"--enable-dp-attention",')}
# field -> (file, its declaration line); its flag is the field name through _field_to_cli_name.
FIELD_DECLARATIONS = {
    "model_path": ("model.py", "model_path: A["),
    "dtype": ("model.py", "dtype: A["),
    "context_length": ("model.py", "context_length: A["),
    "kv_cache_dtype": ("model.py", "kv_cache_dtype: A["),
    "quantization": ("model.py", "quantization: A["),
    "revision": ("model.py", "revision: A["),
    "trust_remote_code": ("model.py", "trust_remote_code: A["),
    "tokenizer_path": ("serving.py", 'tokenizer_path: A[Optional[str], "The path of the tokenizer."] = None'),
    "served_model_name": ("serving.py", "served_model_name: A["),
    "chat_template": ("serving.py", "chat_template: A["),
    "stream_interval": ("serving.py", "stream_interval: A["),
    "skip_server_warmup": ("serving.py", 'skip_server_warmup: A[bool, "If set, skip warmup."] = False'),
    "host": ("serving.py", 'host: A[str, "The host of the HTTP server."] = "127.0.0.1"'),
    "port": ("serving.py", 'port: A[int, "The port of the HTTP server."] = 30000'),
    "mem_fraction_static": ("schedule.py", "mem_fraction_static: A["),
    "max_running_requests": ("schedule.py", "max_running_requests: A["),
    "max_total_tokens": ("schedule.py", "max_total_tokens: A["),
    "chunked_prefill_size": ("schedule.py", "chunked_prefill_size: A["),
    "max_prefill_tokens": ("schedule.py", "max_prefill_tokens: A["),
    "schedule_policy": ("schedule.py", "schedule_policy: A["),
    "schedule_conservativeness": ("schedule.py", "schedule_conservativeness: A["),
    "page_size": ("schedule.py", "page_size: A["),
    "disable_overlap_schedule": ("schedule.py", "disable_overlap_schedule: A["),
    "enable_mixed_chunk": ("schedule.py", "enable_mixed_chunk: A["),
    "disable_radix_cache": ("memory.py", "disable_radix_cache: A["),
    "tp_size": ("parallel.py", "tp_size: A["),
    "dp_size": ("parallel.py", "dp_size: A["),
    "pp_size": ("parallel.py", "pp_size: A["),
    "enable_dp_lm_head": ("parallel.py", "enable_dp_lm_head: A["),
    "attention_backend": ("exec_.py", "attention_backend: A["),
    "prefill_attention_backend": ("exec_.py", "prefill_attention_backend: A["),
    "decode_attention_backend": ("exec_.py", "decode_attention_backend: A["),
    "cuda_graph_max_bs_decode": ("exec_.py", "cuda_graph_max_bs_decode: A["),
    "disable_cuda_graph_padding": ("exec_.py", "disable_cuda_graph_padding: A["),
    "enable_torch_compile": ("exec_.py", "enable_torch_compile: A["),
    "speculative_algorithm": ("spec.py", "speculative_algorithm: A["),
    "log_level": ("observability.py", 'log_level: A[str, "The logging level of all loggers."] = "info"'),
    "enable_metrics": ("observability.py", 'enable_metrics: A[bool, "Enable log prometheus metrics."] = False'),
}
# Defaults the sim's SGLang flavor relies on, as the declarations end (`] = value`).
DEFAULTS = {"max_prefill_tokens": 16384, "schedule_conservativeness": 1.0, "schedule_policy": "fcfs",
            "disable_radix_cache": False, "kv_cache_dtype": "auto", "dtype": "auto"}
CHOICES = {"schedule_policy": ["lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn",
                               "shortest-prefill-first"],
           "kv_cache_dtype": ["auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"],
           "dtype": ["auto", "half", "float16", "bfloat16", "float", "float32"]}
LOG_QUOTES = {
    "record": ("sglang/srt/entrypoints/engine.py", 'logger.info(f"server_args={_server_args_for_logging(server_args)}")'),
    "health": ("sglang/srt/entrypoints/http_server.py", '@app.get("/health")'),
    "ready": ("sglang/srt/entrypoints/http_server.py", 'logger.info("The server is fired up and ready to roll!")'),
    "Scheduler hit an exception": ("sglang/srt/managers/scheduler.py",
                                   'logger.error(f"Scheduler hit an exception: {traceback}")'),
    "Not enough memory": ("sglang/srt/model_executor/pool_configurator.py",
                          'msg = "Not enough memory. Please try to increase --mem-fraction-static."'),
}
TORCH_MARKERS = {"torch.OutOfMemoryError", "CUDA out of memory"}  # torch's, as in tests/contract/test_vllm_contract.py


def upstream_flags() -> set[str]:
    derived = {"--" + field.replace("_", "-") for field in FIELD_DECLARATIONS}
    return derived | set(ALIASES) | set(MANUAL)


def test_every_flag_we_pass_is_registered_upstream() -> None:
    assert sorted(project_flags("sglang") - upstream_flags()) == []


def test_the_quoted_declarations_name_their_fields() -> None:
    for field, (_, quote) in FIELD_DECLARATIONS.items():
        assert quote.startswith(f"{field}: A["), field


def test_the_sim_flavor_keeps_sglangs_defaults_and_choices() -> None:
    parser = engine_parser("sglang", "test")
    actions = {action.dest: action for action in parser._actions}
    for field, default in DEFAULTS.items():
        assert actions[field].default == default, field
    for field, choices in CHOICES.items():
        assert set(actions[field].choices) <= set(choices), field


def test_markers_readiness_and_entry_are_the_quoted_ones() -> None:
    spec = engine_for("sglang")
    assert set(spec.fatal_markers) == {"Scheduler hit an exception", "Not enough memory"} | TORCH_MARKERS
    assert spec.health_path == "/health"
    assert spec.entry.module == "sglang.launch_server" and spec.model_flag == "--model-path"
    assert spec.source_import_root == "python"  # the repo keeps the package at python/sglang


@pytest.mark.parametrize("record", [
    # 0.5.23: the resolved dict, through an f-string (its repr).
    "[2026-11-02 10:00:00] INFO engine.py:1185: server_args=%r" % {
        "model_path": "/m", "disable_radix_cache": True, "max_running_requests": 8, "mem_fraction_static": 0.88,
        "cuda_graph_config": {"decode": {"backend": "full", "max_bs": 256}}, "tokenizer_path": None},
    # Older releases: the dataclass repr.
    "[2026-03-25 12:50:41] INFO engine.py:177: server_args=ServerArgs(model_path='/m', disable_radix_cache=True, "
    "max_running_requests=8, mem_fraction_static=0.88, tokenizer_path=None)",
])
def test_both_record_forms_read_the_same(record: str) -> None:
    evidence = parse_sglang_server_args(record)
    assert evidence is not None
    assert evidence["disable_radix_cache"] is True and evidence["max_running_requests"] == 8
    assert engine_for("sglang").prefix_cache_off([], evidence, SGLANG_VERSION)


def test_the_published_older_record_still_parses() -> None:
    evidence = parse_sglang_server_args((FIXTURES / "sglang_server_args.log").read_text())
    assert evidence is not None and evidence["disable_radix_cache"] is False


# sglang/srt/observability/metrics_collector.py in the 0.5.23 wheel, as it stands there:
# field of MetricNames -> the registration's name line, the sample suffix and the labels
# we pick. token_usage is a 0..1 share (pool_stats_observer.py logs it as
# `full token usage: {self.full_token_usage:.2f}`); cached tokens are counted per
# `cache_source`; forward time is counted only under SGLANG_ENABLE_METRICS_DEVICE_TIMER,
# with the ForwardMode's name as `category` (decode_cuda_graph_runner.py:
# `forward_batch.forward_mode.name.lower()`; ForwardMode has EXTEND, DECODE, MIXED, ...).
METRIC_REGISTRATIONS = {
    "kv_usage_pct": ('name="sglang:token_usage",', ""),
    "running": ('name="sglang:num_running_reqs",', ""),
    "waiting": ('name="sglang:num_queue_reqs",', ""),
    "preemptions": ('name="sglang:num_retracted_requests_total",', ""),
    "prefix_queries": ('name="sglang:prompt_tokens_total",', ""),
    "prefix_hits": ('name="sglang:cached_tokens_total",', ""),
    "prefill_s": ('name="sglang:forward_execution_seconds_total",', ""),
    "decode_s": ('name="sglang:forward_execution_seconds_total",', ""),
}


def test_the_metric_series_we_read_are_the_quoted_registrations() -> None:
    names = engine_for("sglang").metrics
    assert set(METRIC_REGISTRATIONS) == set(type(names).model_fields)
    for field, (quote, suffix) in METRIC_REGISTRATIONS.items():
        assert getattr(names, field).name == quote.split('"')[1] + suffix, field
    assert names.kv_usage_pct.scale == 100.0, "token_usage is a 0..1 share"
    assert dict(names.prefill_s.labels) == {"category": "extend"} and dict(names.decode_s.labels) == {"category": "decode"}


# How the profile asset drives SGLang's profiler. Read from sgl-project/sglang's source in the
# search index (not from the 0.5.23 wheel, which cannot be fetched here); the routes and the
# env var stand unchanged across the releases read there.
PROFILER_QUOTES = {
    # python/sglang/srt/entrypoints/http_server.py: both routes are always served.
    "start": ("sglang/srt/entrypoints/http_server.py", '@app.api_route("/start_profile", methods=["GET", "POST"])'),
    "stop": ("sglang/srt/entrypoints/http_server.py", '@app.api_route("/stop_profile", methods=["GET", "POST"])'),
    # Where traces go unless a request names output_dir (the profiler's setup; test/srt/test_start_profile.py
    # sets it with `envs.SGLANG_TORCH_PROFILER_DIR.set(OUTPUT_DIR)` before launching the server).
    "dir": ("sglang/srt/utils/profile_utils.py", 'else os.getenv("SGLANG_TORCH_PROFILER_DIR", "./logs")'),
    # srt/managers/scheduler.py, stop_profile: one gzipped Chrome trace per TP rank.
    "trace": ("sglang/srt/managers/scheduler.py", 'str(time.time()) + f"-TP-{self.tp_rank}" + ".trace.json.gz",'),
}


def test_the_profiler_we_drive_is_the_quoted_one(tmp_path) -> None:
    profiler = engine_for("sglang").profiler
    assert profiler.server_args("/t") == [] and profiler.env("/t") == {"SGLANG_TORCH_PROFILER_DIR": "/t"}
    assert "SGLANG_TORCH_PROFILER_DIR" in PROFILER_QUOTES["dir"][1]
    for route, path in (("start", profiler.start_path), ("stop", profiler.stop_path)):
        assert f'"{path}"' in PROFILER_QUOTES[route][1] and '"POST"' in PROFILER_QUOTES[route][1]
    trace = tmp_path / "1766500000.123-TP-0.trace.json.gz"
    trace.write_bytes(b"x")
    assert list(tmp_path.glob(profiler.trace_glob)) == [trace], "the glob finds a rank's trace"


# SGLang's own metrics test launches with the timer on beside --enable-metrics
# (test/srt/test_metrics.py: `envs.SGLANG_ENABLE_METRICS_DEVICE_TIMER.override(True)`), and
# forward_execution_seconds_total (prefill_s, decode_s) is only counted under it.
def env_seen_by_a_launch(tmp_path, engine: str, env: dict[str, str]) -> str:
    code = "import os; print('timer=' + str(os.environ.get('SGLANG_ENABLE_METRICS_DEVICE_TIMER')))"
    log = tmp_path / f"{engine}-{len(env)}.log"
    server = host_side.start([sys.executable, "-c", code], env, [], log, tmp_path / "pids", engine=engine)
    server.popen.wait(timeout=30)
    teardown(server, term_wait_s=1.0)  # the one teardown: pidfile and a vLLM launch's scratch folder go
    return log.read_text().strip()


def test_an_sglang_launch_has_the_device_timer_on_unless_the_operator_says_otherwise(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("SGLANG_ENABLE_METRICS_DEVICE_TIMER", raising=False)
    assert env_seen_by_a_launch(tmp_path, "sglang", {}) == "timer=1"
    assert env_seen_by_a_launch(tmp_path, "sglang", {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "0"}) == "timer=0"
    assert env_seen_by_a_launch(tmp_path, "vllm", {}) == "timer=None", "only SGLang's launches"
