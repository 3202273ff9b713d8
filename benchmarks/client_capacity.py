"""How many stream events per second our client sustains on one core, beside vLLM's client.

A trivial OpenAI-compatible server (benchmarks/support/echo_server.py) streams one-token
events as fast as it can, writing them in bursts so that its cost per event is far
below a client's; it runs pinned to core 0 and each client to core 1. Every event is one
token, so output tokens/s is events/s. Target: ours at least vLLM's.

Run: .venv/bin/python benchmarks/client_capacity.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.peers import pinned, running_server, vllm_bench_serve_argv  # noqa: E402
from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.resources.hosts.preflight import allocate_port  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/resources/bench/", "hyperloom_assets/cli/bench.py",
             "benchmarks/support/echo_server.py", "benchmarks/support/peers.py")

TOKENIZER = ROOT / ".cache" / "models" / "tiny-llama"  # vLLM's client needs one for its random dataset


def ours(base_url: str, args: argparse.Namespace, out: Path) -> dict:
    argv = pinned([sys.executable, "-m", "hyperloom_assets.cli", "bench", "--base-url", base_url, "--model", "echo",
                   "--workload", "random", "--isl", str(args.isl), "--osl", str(args.osl), "--concurrency",
                   str(args.concurrency), "--num-prompts", str(args.num_prompts), "--warmups", "4", "--vocab-size",
                   "2048", "--no-records", "--json-out", str(out)], args.client_cpus)
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    flat = json.loads(out.read_text())
    return {"tokens_per_s": flat["output_throughput"], "client_saturated": flat["client_saturated"]}


def vllms(base_url: str, args: argparse.Namespace, out: Path) -> dict:
    argv = pinned(vllm_bench_serve_argv(base_url, "echo", TOKENIZER, args.isl, args.osl, args.num_prompts,
                                        args.concurrency, out.parent, out.name, warmups=4), args.client_cpus)
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    return {"tokens_per_s": json.loads(out.read_text())["output_throughput"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--isl", type=int, default=16)
    parser.add_argument("--osl", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--num-prompts", type=int, default=128)
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--client-cpus", default="1")
    parser.add_argument("--burst", type=int, default=64)
    args, bench_run = start_run(parser)
    port = allocate_port()
    base_url = f"http://127.0.0.1:{port}"
    rows: dict[str, list[dict]] = {"hyperloom": [], "vllm": []}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        server = pinned([sys.executable, "-m", "benchmarks.support.echo_server", "--port", str(port), "--model", "echo",
                         "--burst", str(args.burst)], args.server_cpus)
        with running_server(server, base_url, work / "echo.log", timeout_s=60):
            for index in range(args.rounds):  # alternating, so drift hits both alike
                rows["hyperloom"].append(ours(base_url, args, work / f"ours-{index}.json"))
                rows["vllm"].append(vllms(base_url, args, work / f"vllm-{index}.json"))
    summary = {name: statistics.fmean(r["tokens_per_s"] for r in runs) for name, runs in rows.items()}
    ratio = summary["hyperloom"] / summary["vllm"]
    print(f"{'client':<12} {'events (tokens)/s per round':<44} {'mean':>10}")
    for name, runs in rows.items():
        per_round = ", ".join(f"{r['tokens_per_s']:.0f}" for r in runs)
        print(f"{name:<12} {per_round:<44} {summary[name]:>10.0f}")
    print(f"ours / vLLM's: {ratio:.2f}  (target >= 1.00: {'met' if ratio >= 1 else 'NOT met'})")
    write_results("client_capacity", {"config": vars(args), "runs": rows, "mean_tokens_per_s": summary,
                                      "ratio": ratio, "target_met": ratio >= 1}, bench_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
