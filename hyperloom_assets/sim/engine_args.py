"""The sim's command line: harness flags, each flavor's engine args and their defaults.

Pure code. Engine args mimic the real engines' flags and defaults (vLLM V1 online
serving; SGLang 0.5.23's `launch_server`; ATOM's `openai_server`, both spellings of every long
flag as its FlexibleArgumentParser registers them); an unknown flag fails with
argparse's `unrecognized arguments` (exit code 2), and a bad choice with `invalid
choice`, as the real engines do. Harness flags drive the simulation and are not engine
args: they never appear in the launch record and never become optimization candidates.
"""

from __future__ import annotations

import argparse
import ast
from typing import Any

from hyperloom_assets.core.models import Frozen

FLAVORS = ("vllm", "sglang", "atom")

# flag -> takes a value
_HARNESS_FLAGS: dict[str, bool] = {
    "--gpu": True, "--time-scale": True, "--noise-pct": True, "--seed": True, "--flavor": True,
    "--tp": True, "--port": True, "--host": True, "--stream-interval-ms": True, "--alter-outputs-with": True,
    "--fault": True, "--fault-after-requests": True, "--profile-dir": True, "--calibration": True,
    "--engine-version": True,
}
# A server that misbehaves once it has served --fault-after-requests requests (sim/faults.py).
FAULTS = ("exit", "stall", "http-500", "malformed-chunk", "wrong-shape-chunk", "endless-line",
          "drop-connection")
# ATOM serves HTTP on --server-port; its --port is the engine's internal port, an engine arg.
HTTP_PORT_FLAGS = {"vllm": "--port", "sglang": "--port", "atom": "--server-port"}
ATOM_DEFAULT_CAPTURE_SIZES = "[1,2,4,8,16,32,48,64,128,256,512]"
ATOM_CUDAGRAPH_MODES = ["NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE", "AF_PIECEWISE"]

VLLM_DEFAULT_MAX_NUM_SEQS = 256
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # V1, OpenAI API server usage context
VLLM_DEFAULT_BLOCK_SIZE = 16
BLOCK_SIZES = (8, 16, 32, 64, 128)
SGLANG_DEFAULT_MAX_RUNNING = 4096
SGLANG_DEFAULT_MAX_PREFILL_TOKENS = 16384
SGLANG_NEW_TOKEN_RATIO = 0.7  # share of max_tokens SGLang reserves in KV for each running request


def harness_flags(flavor: str = "vllm") -> dict[str, bool]:
    """The sim's own flags (flag -> takes a value); everything else is an engine arg."""
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; expected one of {FLAVORS}")
    flags = {name: value for name, value in _HARNESS_FLAGS.items() if name != "--port"}
    return {**flags, http_port_flag(flavor): True}


def http_port_flag(flavor: str) -> str:
    """The flag the flavor's engine takes its HTTP port from."""
    return HTTP_PORT_FLAGS.get(flavor, "--port")


def output_salt(argv: list[str], flavor: str, altering: str) -> str:
    """Non-empty when an engine flag named in --alter-outputs-with is among the engine args."""
    named = {"--" + flag.strip().lstrip("-") for flag in altering.split(",") if flag.strip()}
    _, engine = split_harness_args(normalize_argv(argv, flavor), flavor)
    given = sorted({token.split("=", 1)[0] for token in engine if token.split("=", 1)[0] in named})
    return ",".join(given)


def split_harness_args(argv: list[str], flavor: str = "vllm") -> tuple[dict[str, str | bool], list[str]]:
    """(harness flags with their values, engine args) from a mixed argv such as a target's server_args."""
    flags = harness_flags(flavor)
    harness: dict[str, str | bool] = {}
    engine: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        name, has_inline, inline = token.partition("=")
        if name in flags:
            if not flags[name]:
                harness[name] = True
            elif has_inline:
                harness[name] = inline
            elif index + 1 < len(argv):
                harness[name] = argv[index + 1]
                index += 1
        else:
            engine.append(token)
        index += 1
    return harness, engine


class EngineConfig(Frozen):
    """Engine args resolved to what the scheduler and the perf model use."""
    flavor: str
    model: str
    served_names: list[str]
    tokenizer: str | None = None
    max_seqs: int
    token_budget: int
    chunked_prefill: bool
    memory_fraction: float
    prefix_caching: bool
    kv_cache_dtype: str
    block_size: int
    cuda_graphs: bool
    graph_max_batch: int | None  # SGLang's --cuda-graph-max-bs-decode, ATOM's largest capture size; None: the perf model's default
    max_model_len: int | None
    max_total_tokens: int | None
    mixed_batches: bool  # vLLM mixes prefill chunks into decode steps; SGLang alternates
    decode_reservation: float  # share of each running request's remaining output reserved in KV
    cpu_overhead_hidden: bool
    max_prefill_tokens: int


def _add_vllm_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"])
    parser.add_argument("--block-size", type=int, default=None, choices=list(BLOCK_SIZES))
    parser.add_argument("--enforce-eager", action="store_true", default=False)
    parser.add_argument("--async-scheduling", action="store_true", default=False)
    parser.add_argument("--scheduling-policy", default="fcfs", choices=["fcfs", "priority"])
    parser.add_argument("--trust-remote-code", action="store_true", default=False)
    parser.add_argument("--enable-log-requests", action="store_true", default=False)
    parser.add_argument("--disable-log-stats", action="store_true", default=False)
    parser.add_argument("--uvicorn-log-level", default="info")


def _add_sglang_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-path", "--model", dest="model_path", required=True)
    parser.add_argument("--tokenizer-path", default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    parser.add_argument("--context-length", type=int, default=None)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--max-running-requests", type=int, default=None)
    parser.add_argument("--max-total-tokens", type=int, default=None)
    parser.add_argument("--chunked-prefill-size", type=int, default=None)
    parser.add_argument("--max-prefill-tokens", type=int, default=SGLANG_DEFAULT_MAX_PREFILL_TOKENS)
    parser.add_argument("--schedule-policy", default="fcfs", choices=["lpm", "random", "fcfs", "dfs-weight"])
    parser.add_argument("--schedule-conservativeness", type=float, default=1.0)
    parser.add_argument("--disable-radix-cache", action="store_true", default=False)
    parser.add_argument("--disable-cuda-graph", action="store_true", default=False)
    parser.add_argument("--cuda-graph-max-bs-decode", type=int, default=None)  # 0.5.23; before: --cuda-graph-max-bs
    parser.add_argument("--disable-overlap-schedule", action="store_true", default=False)
    parser.add_argument("--enable-mixed-chunk", action="store_true", default=False)
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"])
    parser.add_argument("--page-size", type=int, default=1, choices=[1, *BLOCK_SIZES])
    parser.add_argument("--trust-remote-code", action="store_true", default=False)
    parser.add_argument("--log-level", default="info")


def _add_both_spellings(parser: argparse.ArgumentParser, *names: str, **kwargs: Any) -> None:
    """ATOM's FlexibleArgumentParser: each long flag also under its `-`/`_` counterpart, one dest."""
    expanded = list(names)
    for name in names:
        if name.startswith("--"):
            for alias in ("--" + name[2:].replace("_", "-"), "--" + name[2:].replace("-", "_")):
                if alias not in expanded and alias not in parser._option_string_actions:
                    expanded.append(alias)
    parser.add_argument(*expanded, **kwargs)


def _capture_sizes(text: str) -> list[int]:
    """ATOM reads --cudagraph-capture-sizes with ast.literal_eval (a Python list)."""
    try:
        sizes = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        sizes = None
    if not isinstance(sizes, list) or not all(isinstance(n, int) and n > 0 for n in sizes):
        raise argparse.ArgumentTypeError(f"Error parsing size list: {text}")
    return sizes


def _add_atom_args(parser: argparse.ArgumentParser) -> None:
    def add(*names: str, **kwargs: Any) -> None:
        _add_both_spellings(parser, *names, **kwargs)

    add("--model", required=True)
    add("--served-model-name", default=None)
    add("--trust-remote-code", action="store_true")
    add("--enforce-eager", action="store_true")
    add("--enable_prefix_caching", action=argparse.BooleanOptionalAction, default=True)
    add("--port", dest="engine_port", type=int, default=8006)  # internal; the sim has no engine process
    add("--kv_cache_dtype", choices=["bf16", "fp8"], default="bf16")
    add("--block-size", type=int, default=16)
    add("--max-model-len", type=int, default=None)
    add("--cudagraph-capture-sizes", type=_capture_sizes, default=ATOM_DEFAULT_CAPTURE_SIZES)
    add("--level", type=int, default=3)  # torch.compile level: not modelled, numerics only
    add("--cudagraph-mode", default="FULL", choices=ATOM_CUDAGRAPH_MODES)
    add("--max-num-batched-tokens", type=int, default=16384)
    add("--enable_chunked_prefill", action=argparse.BooleanOptionalAction, default=True)
    add("--max-num-seqs", type=int, default=512)
    add("--gpu-memory-utilization", type=float, default=0.9)
    add("--timeout-keep-alive", type=int, default=5)
    add("--disable-uvicorn-access-log", action="store_true")


def add_harness_args(parser: argparse.ArgumentParser, serving: bool, flavor: str = "vllm") -> None:
    parser.add_argument("--gpu", required=True, help="a GPU of hyperloom_assets/core/roofline/gpus.py, e.g. H100")
    parser.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--noise-pct", type=float, default=0.0, help="seeded step-time noise, percent")
    parser.add_argument("--seed", type=int, default=0, help="the noise's and the synthetic outputs' seed (default 0)")
    parser.add_argument("--flavor", choices=FLAVORS, default="vllm", help="the engine whose flags and API to mimic")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    parser.add_argument(http_port_flag(flavor), dest="port", type=int, required=serving, default=None,
                        help="the HTTP port to serve on")
    parser.add_argument("--host", default="127.0.0.1", help="the address to serve on (default 127.0.0.1)")
    parser.add_argument("--stream-interval-ms", type=float, default=10.0,
                        help="at most one stream event per request per this much wall time")
    parser.add_argument("--alter-outputs-with", default="",
                        help="engine flags, comma-separated and without their dashes (kv-cache-dtype), "
                             "that change the synthetic model's outputs when given")
    parser.add_argument("--fault", choices=FAULTS, default=None,
                        help="misbehave from request --fault-after-requests + 1 on (sim/faults.py)")
    parser.add_argument("--fault-after-requests", type=int, default=0,
                        help="requests served normally before the fault starts")
    parser.add_argument("--profile-dir", default=None,
                        help="serve /start_profile and /stop_profile, writing the model's time breakdown here")
    parser.add_argument("--calibration", default=None, metavar="FILE|NAME|GPU|auto",
                        help="a calibration profile (YAML, `hyperloom sim-calibrate`): the perf model's efficiency "
                             "parameters for --gpu. A file; a packaged profile by name (mi300x-vllm) or by its "
                             "GPU; or auto, the packaged profile for --gpu and the flavor where there is one "
                             "(default: the constants of sim/perf_model.py)")
    parser.add_argument("--engine-version", default=None, metavar="X.Y.Z",
                        help="the version of the engine the flavor mimics, which picks its CPU overhead per step "
                             "(sim/physics.py; default: the newest row, vLLM V1)")


def add_engine_args(parser: argparse.ArgumentParser, flavor: str) -> None:
    before = set(parser._actions)
    {"vllm": _add_vllm_args, "sglang": _add_sglang_args, "atom": _add_atom_args}[flavor](parser)
    for action in parser._actions:  # each mimics the real engine's flag, which documents it
        if action not in before and action.help is None:
            action.help = f"as {flavor}'s own flag (the sim accepts it and models what it changes)"


def engine_dests(flavor: str) -> list[str]:
    parser = argparse.ArgumentParser(add_help=False)
    add_engine_args(parser, flavor)
    return [action.dest for action in parser._actions]


def normalize_argv(argv: list[str], flavor: str) -> list[str]:
    """vLLM's parser accepts `--max_num_seqs` for `--max-num-seqs`; so does the sim's vLLM flavor."""
    if flavor != "vllm":
        return list(argv)
    result = []
    for token in argv:
        if token.startswith("--"):
            name, sep, value = token.partition("=")
            token = name.replace("_", "-") + sep + value
        result.append(token)
    return result


def flavor_of(argv: list[str]) -> str:
    harness, _ = split_harness_args(argv)
    flavor = str(harness.get("--flavor", "vllm"))
    return flavor if flavor in FLAVORS else "vllm"


def non_default_engine_args(args: argparse.Namespace, flavor: str) -> dict[str, Any]:
    """Engine args that differ from the parser's defaults, in declaration order."""
    parser = argparse.ArgumentParser(add_help=False)
    add_engine_args(parser, flavor)
    result = {}
    for action in parser._actions:
        value = getattr(args, action.dest)
        if action.required or value != action.default:
            result[action.dest] = value
    return result


def _kv_dtype_bytes(kv_cache_dtype: str) -> float | None:
    if kv_cache_dtype.startswith("fp8"):
        return 1.0
    return 2.0 if kv_cache_dtype in ("bf16", "bfloat16") else None


def kv_elem_bytes(config: EngineConfig, activation_bytes: int) -> float:
    """Bytes per KV element: one for fp8, two for bf16, else (`auto`) the model's activation dtype."""
    return _kv_dtype_bytes(config.kv_cache_dtype) or float(activation_bytes)


def _resolve_vllm(args: argparse.Namespace) -> EngineConfig:
    chunked = args.enable_chunked_prefill is not False
    default_budget = VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS if chunked else max(args.max_model_len or 0, 8192)
    return EngineConfig(
        flavor="vllm", model=args.model, served_names=args.served_model_name or [args.model],
        tokenizer=args.tokenizer, max_seqs=args.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS,
        token_budget=args.max_num_batched_tokens or default_budget, chunked_prefill=chunked,
        memory_fraction=args.gpu_memory_utilization, prefix_caching=args.enable_prefix_caching is not False,
        kv_cache_dtype=args.kv_cache_dtype, block_size=args.block_size or VLLM_DEFAULT_BLOCK_SIZE,
        cuda_graphs=not args.enforce_eager, graph_max_batch=None, max_model_len=args.max_model_len,
        max_total_tokens=None, mixed_batches=True, decode_reservation=0.0,
        cpu_overhead_hidden=args.async_scheduling, max_prefill_tokens=args.max_num_batched_tokens or default_budget,
    )


def sglang_memory_defaults(memory_gb: float) -> tuple[float, int, int]:
    """(mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a GPU of this size."""
    if memory_gb < 60:
        return 0.85, 4096, 160
    if memory_gb < 90:
        return 0.88, 8192, 256
    return 0.88, 16384, 256


def _resolve_sglang(args: argparse.Namespace, memory_gb: float) -> EngineConfig:
    fraction, chunk, graph_bs = sglang_memory_defaults(memory_gb)
    chunk_size = args.chunked_prefill_size if args.chunked_prefill_size is not None else chunk
    chunked = chunk_size > 0
    return EngineConfig(
        flavor="sglang", model=args.model_path, served_names=[args.served_model_name or args.model_path],
        tokenizer=args.tokenizer_path, max_seqs=args.max_running_requests or SGLANG_DEFAULT_MAX_RUNNING,
        token_budget=chunk_size if chunked else args.max_prefill_tokens, chunked_prefill=chunked,
        memory_fraction=args.mem_fraction_static or fraction, prefix_caching=not args.disable_radix_cache,
        kv_cache_dtype=args.kv_cache_dtype, block_size=args.page_size, cuda_graphs=not args.disable_cuda_graph,
        graph_max_batch=args.cuda_graph_max_bs_decode or graph_bs, max_model_len=args.context_length,
        max_total_tokens=args.max_total_tokens, mixed_batches=args.enable_mixed_chunk,
        decode_reservation=SGLANG_NEW_TOKEN_RATIO * args.schedule_conservativeness,
        cpu_overhead_hidden=not args.disable_overlap_schedule, max_prefill_tokens=args.max_prefill_tokens,
    )


def _resolve_atom(args: argparse.Namespace) -> EngineConfig:
    # ATOM's scheduler runs a prefill batch when one is ready, else a decode batch (no
    # mixing), and captures decode CUDA graphs at the listed batch sizes.
    sizes = args.cudagraph_capture_sizes  # argparse ran the string default through _capture_sizes too
    graphs = not args.enforce_eager and args.cudagraph_mode != "NONE"
    return EngineConfig(
        flavor="atom", model=args.model, served_names=[args.served_model_name or args.model], tokenizer=None,
        max_seqs=args.max_num_seqs, token_budget=args.max_num_batched_tokens,
        chunked_prefill=args.enable_chunked_prefill, memory_fraction=args.gpu_memory_utilization,
        prefix_caching=args.enable_prefix_caching, kv_cache_dtype=args.kv_cache_dtype, block_size=args.block_size,
        cuda_graphs=graphs, graph_max_batch=max(sizes), max_model_len=args.max_model_len, max_total_tokens=None,
        mixed_batches=False, decode_reservation=0.0, cpu_overhead_hidden=False,
        max_prefill_tokens=args.max_num_batched_tokens,
    )


def resolve_config(args: argparse.Namespace, flavor: str, memory_gb: float) -> EngineConfig:
    """The engine args as the scheduler uses them, defaults filled in as the real engine would."""
    if flavor == "atom":
        return _resolve_atom(args)
    return _resolve_vllm(args) if flavor == "vllm" else _resolve_sglang(args, memory_gb)


def engine_parser(flavor: str, prog: str) -> argparse.ArgumentParser:
    """A parser of the engine args alone (predict's engine_args, or tests)."""
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False)
    add_engine_args(parser, flavor)
    return parser
