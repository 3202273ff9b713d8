"""The launch records the sim prints, in the real engines' formats. Pure code.

vLLM (vllm/entrypoints/serve/utils/api_utils.py, `log_non_default_args`) logs
`non-default args: {...}`, the dict of parsed args that differ from the parser's
defaults, through its logger format `(APIServer pid=N) INFO MM-DD HH:MM:SS [file:line] msg`.
SGLang 0.5.23 logs `server_args={...}` (`logger.info(f"server_args={...}")` of its
resolved dict in its engine launcher; releases before logged the dataclass repr,
`server_args=ServerArgs(...)`), as `[YYYY-MM-DD HH:MM:SS] msg`. ATOM logs
no record of its resolved args, so its flavor prints none; its lines read
`[atom HH:MM:SS] msg` (atom/utils/__init__.py, getLogger). Harness flags are not engine
args and appear in no record.
"""

from __future__ import annotations

import argparse
import os
import time

from hyperloom_assets.sim.engine_args import EngineConfig, engine_dests, non_default_engine_args


def vllm_log_line(message: str, where: str = "api_utils.py:286") -> str:
    stamp = time.strftime("%m-%d %H:%M:%S")
    return f"(APIServer pid={os.getpid()}) INFO {stamp} [{where}] {message}"


def sglang_log_line(message: str) -> str:
    return f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}"


def vllm_record(args: argparse.Namespace) -> str:
    return vllm_log_line(f"non-default args: {non_default_engine_args(args, 'vllm')!r}")


def sglang_record(args: argparse.Namespace, config: EngineConfig) -> str:
    """The whole resolved record, with the defaults SGLang fills in from the GPU."""
    resolved = {
        "mem_fraction_static": config.memory_fraction,
        "chunked_prefill_size": config.token_budget if config.chunked_prefill else -1,
        "cuda_graph_max_bs_decode": config.graph_max_batch,
        "tokenizer_path": args.tokenizer_path or args.model_path,
        "served_model_name": config.served_names[0],
        "context_length": args.context_length,
    }
    record = {dest: resolved.get(dest, getattr(args, dest)) for dest in engine_dests("sglang")}
    return sglang_log_line(f"server_args={record!r}")


def atom_log_line(message: str) -> str:
    return f"[atom {time.strftime('%H:%M:%S')}] {message}"


def launch_record(args: argparse.Namespace, config: EngineConfig) -> str | None:
    if config.flavor == "atom":
        return None
    return vllm_record(args) if config.flavor == "vllm" else sglang_record(args, config)


def log_line(config: EngineConfig, message: str, where: str = "sim.py:1") -> str:
    if config.flavor == "atom":
        return atom_log_line(message)
    return vllm_log_line(message, where) if config.flavor == "vllm" else sglang_log_line(message)
