"""ATOM's contract: the flags we pass and the log lines we read, pinned to its source.

Upstream: ROCm/ATOM at commit ffdf3bb5ddf8a15a64d521a2eeb3bc7438f9ac21 (2026-08-22,
after v0.1.6-rc0), read by hand: ATOM needs ROCm, so nothing here imports it. Files:
atom/model_engine/arg_utils.py (EngineArgs.add_cli_args), atom/entrypoints/openai/
api_server.py (what `python -m atom.entrypoints.openai_server` runs),
atom/utils/arg_parser.py (FlexibleArgumentParser, since 6a12488b4, 2026-07-23).
Where the issue said "prefix caching off by default", the source says otherwise since
v0.1.3 (73d039d66): these tests follow the source.
"""

from __future__ import annotations

import argparse

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.atom import PREFIX_CACHE_DEFAULT_ON_SINCE
from hyperloom_assets.core.engines.spec import no_evidence
from hyperloom_assets.core.planning.variants import setting_key
from hyperloom_assets.sim.engine_args import engine_parser
from tests.contract.project_flags import project_flags

ATOM_COMMIT = "ffdf3bb5ddf8a15a64d521a2eeb3bc7438f9ac21"
ARG_UTILS = "atom/model_engine/arg_utils.py"
API_SERVER = "atom/entrypoints/openai/api_server.py"

# flag as ATOM registers it -> (file, the quoted line or lines, its default when the sim relies on it).
FLAGS = {
    "--model": (ARG_UTILS, '"--model", type=str, default="Qwen/Qwen3-0.6B", help="Model name or path."', None),
    "--served-model-name": (ARG_UTILS, '"--served-model-name",', None),
    "--trust-remote-code": (ARG_UTILS, '"--trust-remote-code",', False),
    "--tensor-parallel-size": (ARG_UTILS, '"--tensor-parallel-size",\n            "-tp",', None),
    "-tp": (ARG_UTILS, '"-tp",', None),
    "--data-parallel-size": (ARG_UTILS, '"--data-parallel-size",\n            "-dp",', None),
    "-dp": (ARG_UTILS, '"-dp",', None),
    "--enforce-eager": (ARG_UTILS, '"--enforce-eager",', False),
    "--enable_prefix_caching": (ARG_UTILS, '"--enable_prefix_caching",\n            action=argparse.BooleanOptionalAction,\n'
                                           "            default=True,", True),
    "--port": (ARG_UTILS, 'help="Engine internal port",', 8006),
    "--kv_cache_dtype": (ARG_UTILS, '"--kv_cache_dtype",\n            choices=["bf16", "fp8"],', "bf16"),
    "--index-cache-dtype": (ARG_UTILS, '"--index-cache-dtype",\n            "--index_cache_dtype",', None),
    "--block-size": (ARG_UTILS, '"--block-size", type=int, default=16, help="KV cache block size."', 16),
    "--max-model-len": (ARG_UTILS, '"--max-model-len",', None),
    "--cudagraph-capture-sizes": (ARG_UTILS, 'default="[1,2,4,8,16,32,48,64,128,256,512]",', [1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 512]),
    "--level": (ARG_UTILS, '"--level", type=int, default=3, help="The level of compilation (0-3)."', 3),
    "--cudagraph-mode": (ARG_UTILS, 'choices=["NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE", "AF_PIECEWISE"],', "FULL"),
    "--load_dummy": (ARG_UTILS, '"--load_dummy",', None),
    "--enable-expert-parallel": (ARG_UTILS, '"--enable-expert-parallel",', None),
    "--fake-eplb": (ARG_UTILS, '"--fake-eplb",', None),
    "--enable-dp-attention": (ARG_UTILS, '"--enable-dp-attention",', None),
    "--method": (ARG_UTILS, 'choices=["mtp", "eagle3", "dspark"],', None),
    "--num-speculative-tokens": (ARG_UTILS, '"--num-speculative-tokens",', None),
    "--max-num-batched-tokens": (ARG_UTILS, '"--max-num-batched-tokens",\n            type=int,\n            default=16384,', 16384),
    "--enable_chunked_prefill": (ARG_UTILS, '"--enable_chunked_prefill",\n            action=argparse.BooleanOptionalAction,\n'
                                            "            default=True,", True),
    "--max-num-seqs": (ARG_UTILS, '"--max-num-seqs",\n            type=int,\n            default=512,', 512),
    "--gpu-memory-utilization": (ARG_UTILS, '"--gpu-memory-utilization",\n            type=float,\n            default=0.9,', 0.9),
    "--mark-trace": (ARG_UTILS, '"--mark-trace",', None),
    "--enable-rapidserve": (ARG_UTILS, '"--enable-rapidserve",', None),
    "--disagg-constrained": (ARG_UTILS, '"--disagg-constrained",', None),
    "--online_quant_config": (ARG_UTILS, '"--online_quant_config",', None),
    "--eplb-enable": (ARG_UTILS, '"--eplb-enable",\n            "--enable-eplb",', None),
    "--host": (API_SERVER, 'parser.add_argument("--host", type=str, default=DEFAULT_HOST, help="Server host")', None),
    "--server-port": (API_SERVER, '"--server-port",\n        type=int,\n        default=DEFAULT_PORT,\n'
                                  '        help="Server port (note: --port is used for internal engine communication)",', None),
    "--torch-profiler-dir": (ARG_UTILS, '"--torch-profiler-dir",\n            type=str,\n            default=None,\n'
                                        '            help="Directory to save torch profiler traces",', None),
    "--timeout-keep-alive": (API_SERVER, '"--timeout-keep-alive",', 5),
    "--disable-uvicorn-access-log": (API_SERVER, '"--disable-uvicorn-access-log",', False),
}
SIM_DESTS = {"--port": "engine_port"}  # the sim's HTTP port is --server-port; ATOM's internal one is kept apart
# atom/utils/arg_parser.py, FlexibleArgumentParser.add_argument, for every long option:
#     for alt in (
#         "--" + stem.replace("_", "-"),
#         "--" + stem.replace("-", "_"),
#     ):
# and argparse's BooleanOptionalAction adds `--no-` before each spelling.
LOG_QUOTES = {
    "health": (API_SERVER, '@app.get("/health")'),
    "ready": (API_SERVER, 'logger.info("Server started successfully and ready to accept requests")'),
    # The one args line it logs holds CompilationConfig and enum reprs, not literals: no record.
    "kwargs": (ARG_UTILS, 'logger.info(f"Engine kwargs: {kwargs}")'),
    "Failed to start all EngineCore processes": ("atom/model_engine/engine_core_mgr.py",
                                                 'raise RuntimeError("Failed to start all EngineCore processes")'),
    "Failed to initialize all EngineCores": ("atom/model_engine/engine_core_mgr.py",
                                             'f"{self.label}: Failed to initialize all EngineCores, cleaning up: {e}"'),
}
# v0.1.2 (2026-03-29), before the default changed, arg_utils.py registered
#     "--enable_prefix_caching",
#     action="store_true",
ROCM_MARKERS = {"torch.OutOfMemoryError", "HIP out of memory"}  # torch's (ROCm builds say HIP where CUDA builds say CUDA)


def counterparts(flag: str) -> set[str]:
    if not flag.startswith("--"):
        return {flag}
    return {flag, "--" + flag[2:].replace("_", "-"), "--" + flag[2:].replace("-", "_")}


def test_every_flag_we_pass_is_registered_upstream() -> None:
    accepted = {setting_key(f) for flag in FLAGS for f in counterparts(flag)}
    assert sorted(f for f in project_flags("atom") if setting_key(f) not in accepted) == []


def test_the_sim_flavor_takes_both_spellings_and_both_no_forms() -> None:
    parser = engine_parser("atom", "test")
    registered = set(parser._option_string_actions)
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        first = action.option_strings[0]
        assert first in FLAGS, f"the sim's ATOM flavor registers {first}, which ATOM does not"
        expected = counterparts(first)
        if isinstance(action, argparse.BooleanOptionalAction):
            expected |= {"--no-" + f[2:] for f in counterparts(first)}
        assert expected <= registered, first


def test_the_sim_flavor_keeps_atoms_defaults() -> None:
    parser = engine_parser("atom", "test")
    defaults = vars(parser.parse_args(["--model", "m"]))
    for flag, (_, _, default) in FLAGS.items():
        dest = SIM_DESTS.get(flag, flag.lstrip("-").replace("-", "_"))
        if default is not None and dest in defaults:
            assert defaults[dest] == default, flag


@pytest.mark.parametrize("argv, expected", [
    (["--enable_prefix_caching"], True), (["--enable-prefix-caching"], True),
    (["--no-enable_prefix_caching"], False), (["--no-enable-prefix-caching"], False), ([], True),
    (["--no-enable-prefix-caching", "--enable_prefix_caching"], True),
])
def test_every_spelling_of_the_prefix_switch_parses_as_atom_parses_it(argv: list[str], expected: bool) -> None:
    assert engine_parser("atom", "test").parse_args(["--model", "m", *argv]).enable_prefix_caching is expected
    from hyperloom_assets.core.engines.atom import requested_prefix_caching
    assert requested_prefix_caching(argv) is (None if not argv else expected)


def test_launch_markers_and_no_record() -> None:
    spec = engine_for("atom")
    assert spec.port_flag == "--server-port" and spec.model_flag == "--model"
    assert spec.entry.module == "atom.entrypoints.openai_server"
    assert spec.health_path == "/health"
    assert spec.parse_evidence is no_evidence
    assert set(spec.fatal_markers) == {"Failed to start all EngineCore processes",
                                       "Failed to initialize all EngineCores"} | ROCM_MARKERS
    assert spec.release_distribution is None  # PyPI's `atom` is nucleic's
    assert spec.distributions[0].ships == "atom/entrypoints/openai_server.py"
    assert str(PREFIX_CACHE_DEFAULT_ON_SINCE) == "0.1.3"
    # pyproject.toml: [tool.setuptools.packages.find] where = ["."] include = ["atom*"]
    assert spec.source_import_root == "."


# How the profile asset drives ATOM's profiler: the flag above, these routes, and where each rank's trace lands.
PROFILER_QUOTES = {
    "start": (API_SERVER, '@app.post("/start_profile")'),
    "stop": (API_SERVER, '@app.post("/stop_profile")'),
    # model_engine/model_runner.py: a folder per rank under the profiler dir, one gzipped Chrome trace per session.
    "rank folder": ("atom/model_engine/model_runner.py", "self.profiler_dir = os.path.join(config.torch_profiler_dir, rank_name)"),
    "trace": ("atom/model_engine/model_runner.py", 'output_path = f"{output_prefix}_ts_{ts}_{ms:03d}.pt.trace.json.gz"'),
}


def test_the_profiler_we_drive_is_the_quoted_one(tmp_path) -> None:
    profiler = engine_for("atom").profiler
    assert profiler.server_args("/t") == ["--torch-profiler-dir", "/t"] and profiler.env("/t") == {}
    assert (profiler.start_path, profiler.stop_path) == ("/start_profile", "/stop_profile")
    assert PROFILER_QUOTES["start"][1] == f'@app.post("{profiler.start_path}")'
    assert PROFILER_QUOTES["stop"][1] == f'@app.post("{profiler.stop_path}")'
    trace = tmp_path / "rank_0" / "Llama-3-8B_ts_20260822_101500_042.pt.trace.json.gz"
    trace.parent.mkdir()
    trace.write_bytes(b"x")
    assert list(tmp_path.glob(profiler.trace_glob)) == [trace], "the glob finds a rank's trace"
