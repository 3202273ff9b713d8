"""ROCm's ATOM: what the project knows of it. Pure code.

Checked against ROCm/ATOM at commit ffdf3bb5d (2026-08-22; tests/contract/
test_atom_contract.py quotes it). `python -m atom.entrypoints.openai_server --model M
--server-port P`: `--port` is its internal engine port. Its FlexibleArgumentParser
(atom/utils/arg_parser.py, since 6a12488b4) accepts both `--kebab-case` and
`--snake_case` of every long flag, and BooleanOptionalAction adds `--no-` to each.
It logs no record of its resolved args that reads as a literal, so its evidence is
None and invariant 6 (docs/design.md) reads the requested args. Prefix caching is on by default since
v0.1.3 (73d039d66) and was off before. The distribution is named `atom`, like an
unrelated package on PyPI (nucleic's atom, which also installs an `atom` package), so
the engine is recognised by what it ships, and its releases are not polled there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from packaging.version import InvalidVersion, Version

from hyperloom_assets.core.engines.spec import (
    AccuracyRisk,
    CliParser,
    DeviceFlags,
    Distribution,
    EngineSpec,
    Entry,
    Profiler,
    Startup,
    home_of,
)

OPENAI_SERVER = "atom.entrypoints.openai_server"
PREFIX_CACHE_DEFAULT_ON_SINCE = Version("0.1.3")
# Every spelling of the one switch, and what it asks for; the last one given wins.
PREFIX_CACHE_SPELLINGS: dict[str, bool] = {
    "--enable_prefix_caching": True, "--enable-prefix-caching": True,
    "--no-enable_prefix_caching": False, "--no-enable-prefix-caching": False,
}


def requested_prefix_caching(server_args: list[str]) -> bool | None:
    """What the args ask of the prefix cache; None when they do not say."""
    asked = None
    for token in server_args:
        asked = PREFIX_CACHE_SPELLINGS.get(token, asked)
    return asked


def default_prefix_caching(version: str | None) -> bool:
    """On since v0.1.3; an unknown or unreadable version is taken as a current one."""
    try:
        return version is None or Version(version) >= PREFIX_CACHE_DEFAULT_ON_SINCE
    except InvalidVersion:
        return True


def prefix_cache_off(server_args: list[str], evidence: dict[str, Any] | None, version: str | None) -> str | None:
    asked = requested_prefix_caching(server_args)
    if asked is False:
        return "the requested args turn it off (--no-enable-prefix-caching)"
    if asked is None and not default_prefix_caching(version):
        return f"ATOM {version} keeps the prefix cache off by default and the args lack --enable-prefix-caching"
    return None


def compile_cache_dirs(env: Mapping[str, str]) -> list[Path]:
    """atom/utils/backends.py keeps torch.compile, Inductor and Triton caches under ~/.cache/atom."""
    return [home_of(env) / ".cache" / "atom"]


def profiler_args(trace_dir: str) -> list[str]:
    """atom/model_engine/arg_utils.py: `--torch-profiler-dir`; POST /start_profile and /stop_profile
    (atom/entrypoints/openai/api_server.py). Each rank writes
    `<dir>/<rank>/<model>_ts_<time>.pt.trace.json.gz` (model_engine/model_runner.py)."""
    return ["--torch-profiler-dir", trace_dir]


ENGINE = EngineSpec(
    name="atom",
    listed_at=2,
    entry=Entry(module=OPENAI_SERVER),
    model_flag="--model",
    port_flag="--server-port",
    distributions=(Distribution(name="atom", ships="atom/entrypoints/openai_server.py"),),
    release_distribution=None,
    source_import_root=".",
    package="atom",
    prefix_cache_off=prefix_cache_off,
    fatal_markers=("torch.OutOfMemoryError", "HIP out of memory", "Failed to start all EngineCore processes",
                   "Failed to initialize all EngineCores"),
    # The first launch compiles (its README: "approximately 10 minutes"; aiter's JIT
    # kernels on ROCm can take over an hour); the reference allows 9000 s.
    startup=Startup(cold_s=9000.0, warm_s=900.0, cache_dirs=compile_cache_dirs),
    accuracy_risks=(
        AccuracyRisk(knob="--kv_cache_dtype", why="an fp8 KV cache", safe_values=("bf16",)),
        AccuracyRisk(knob="--index-cache-dtype", why="a narrower sparse-attention index cache"),
        AccuracyRisk(knob="--online_quant_config", why="weights quantized at load"),
        AccuracyRisk(knob="--method", why="speculative decoding"),
        AccuracyRisk(knob="--level", why="another torch.compile level (its fusion passes)", safe_values=("3",)),
    ),
    env_prefixes=("ATOM_", "AITER_", "USE_ATOMESH_"),
    boolean_flags=frozenset({
        "--enable_prefix_caching", "--enable_chunked_prefill", "--enforce-eager", "--trust-remote-code",
        "--enable-expert-parallel", "--enable-dp-attention", "--fake-eplb", "--mark-trace",
        "--enable-rapidserve", "--disagg-constrained", "--eplb-enable", "--disable-uvicorn-access-log",
        "--load_dummy",
    }),
    grid="atom.yaml",
    cli_parser=CliParser(parser_class="atom.utils.arg_parser:FlexibleArgumentParser",
                         builder="atom.model_engine.arg_utils:EngineArgs.add_cli_args"),
    profiler=Profiler(server_args=profiler_args),
    devices=DeviceFlags(tensor=("--tensor-parallel-size", "-tp"), data=("--data-parallel-size", "-dp")),
)
