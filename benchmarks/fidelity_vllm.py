"""Does our client measure what vLLM's own `bench serve` measures, on the same server?

One real vLLM CPU server (the tiny Llama, `hyperloom tiny-model .cache/models/tiny-llama`)
pinned to core 0; both clients pinned to core 1; the same random workload (fixed ISL/OSL,
forced output length) measured alternately A B A B A B so drift hits both alike.
Targets: output tokens/s within 5%, TTFT p50 within 15%.

`--server echo` is the control: the echo server with fixed delays (TTFT 50 ms, 10 ms a
token), where the right answer is known, so a gap there is the clients' and a gap only
on vLLM is the server's (vLLM's client sends text, ours token IDs).

Run: .venv/bin/python benchmarks/fidelity_vllm.py [--pairs 3] [--server vllm|echo]
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

from resources.bench_peers import (  # noqa: E402
    free_port, pinned, running_server, vllm_bench_serve_argv, vllm_server_argv,
)

RESULTS_DIR = ROOT / "benchmarks" / "results"
MODEL = ROOT / ".cache" / "models" / "tiny-llama"
TARGETS = {"output_throughput": 5.0, "ttft_p50_ms": 15.0}  # allowed |difference| in percent


def ours(base_url: str, args: argparse.Namespace, out: Path) -> dict:
    argv = pinned([sys.executable, "-m", "hyperloom_assets.cli", "bench", "--base-url", base_url, "--model", args.model,
                   "--workload", "random", "--isl", str(args.isl), "--osl", str(args.osl), "--concurrency",
                   str(args.concurrency), "--num-prompts", str(args.num_prompts), "--warmups", str(args.warmups),
                   "--seed", str(args.seed), "--no-records", "--json", str(out)], args.client_cpus)
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    flat = json.loads(out.read_text())
    return {k: flat[k] for k in ("output_throughput", "ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms", "e2el_p50_ms")}


def vllms(base_url: str, args: argparse.Namespace, out: Path) -> dict:
    argv = pinned(vllm_bench_serve_argv(base_url, args.model, MODEL, args.isl, args.osl, args.num_prompts,
                                        args.concurrency, out.parent, out.name, seed=args.seed,
                                        warmups=args.warmups), args.client_cpus)
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    raw = json.loads(out.read_text())
    return {"output_throughput": raw["output_throughput"], "ttft_p50_ms": raw["median_ttft_ms"],
            "tpot_p50_ms": raw["median_tpot_ms"], "itl_p50_ms": raw["median_itl_ms"],
            "e2el_p50_ms": raw["median_e2el_ms"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--isl", type=int, default=128)
    parser.add_argument("--osl", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--warmups", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--client-cpus", default="1")
    parser.add_argument("--server", choices=["vllm", "echo"], default="vllm")
    args = parser.parse_args()
    args.model = str(MODEL) if args.server == "vllm" else "echo"
    if not (MODEL / "config.json").is_file():
        print(f"no tiny model at {MODEL}; run: hyperloom tiny-model {MODEL}", file=sys.stderr)
        return 2
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    runs: dict[str, list[dict]] = {"hyperloom": [], "vllm": []}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        if args.server == "vllm":
            server = pinned(vllm_server_argv(MODEL, port, max_num_seqs=8), args.server_cpus)
        else:
            server = pinned([sys.executable, "-m", "resources.bench_echo_server", "--port", str(port), "--model", "echo",
                             "--ttft-ms", "50", "--token-delay-ms", "10"], args.server_cpus)
        with running_server(server, base_url, work / "server.log", env={"VLLM_CPU_KVCACHE_SPACE": "2"}, timeout_s=300):
            for index in range(args.pairs):
                runs["hyperloom"].append(ours(base_url, args, work / f"ours-{index}.json"))
                runs["vllm"].append(vllms(base_url, args, work / f"vllm-{index}.json"))
    means = {c: {m: statistics.fmean(r[m] for r in rs) for m in rs[0]} for c, rs in runs.items()}
    diffs = {m: 100 * (means["hyperloom"][m] - means["vllm"][m]) / means["vllm"][m] for m in means["vllm"]}
    print(f"{'metric':<20} {'hyperloom':>12} {'vllm bench':>12} {'diff %':>8}  target")
    for metric, diff in diffs.items():
        target = TARGETS.get(metric)
        verdict = "" if target is None else f"|d| <= {target:g}%: {'met' if abs(diff) <= target else 'NOT met'}"
        print(f"{metric:<20} {means['hyperloom'][metric]:>12.2f} {means['vllm'][metric]:>12.2f} {diff:>+8.2f}  {verdict}")
    met = all(abs(diffs[m]) <= t for m, t in TARGETS.items())
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    results = RESULTS_DIR / ("fidelity_vllm.json" if args.server == "vllm" else "fidelity_vllm_echo_control.json")
    results.write_text(json.dumps({"config": vars(args), "runs": runs, "means": means, "diff_pct": diffs,
                                   "targets_pct": TARGETS, "targets_met": met}, indent=1))
    print(f"wrote {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
