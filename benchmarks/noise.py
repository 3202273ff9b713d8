"""A/A pairs through the decision rule: how often does noise alone earn a KEEP?

Each pair measures the same configuration twice, each time on a freshly launched server
with its own noise seed (3 repeats after a warm-up, as a trial would), then asks
hyperloom_assets.decisions whether the second beats the first; a NEEDS_REVIEW is measured
again on a fresh server and pooled, at most 3 launches in all, exactly as the climb
does. Every KEEP is false.
Target: false KEEP at most 5%.

Server: the sim engine with noise (`hyperloom sim-serve ... --noise-pct`) when it is
installed, else the echo server with per-request speed noise (--engine echo).

Run: .venv/bin/python benchmarks/noise.py [--pairs 20] [--engine sim|echo]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hyperloom_assets.decisions import Outcome, decide_trial  # noqa: E402
from hyperloom_assets.targets import Workload  # noqa: E402
from resources.bench_peers import free_port, running_server  # noqa: E402
from resources.bench_runner import measure, model_vocab_size  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "noise.json"
FALSE_KEEP_TARGET = 0.05


def server_argv(engine: str, port: int, seed: int, args: argparse.Namespace) -> tuple[list[str], str]:
    """(argv, served model name) for one fresh server."""
    if engine == "sim":
        return ([sys.executable, "-m", "hyperloom_assets.cli", "sim-serve", "--model", args.sim_model, "--gpu", "H100",
                 "--port", str(port), "--time-scale", str(args.time_scale), "--noise-pct", str(args.noise_pct),
                 "--seed", str(seed)], args.sim_model)
    return ([sys.executable, "-m", "resources.bench_echo_server", "--port", str(port), "--token-delay-ms", "2",
             "--noise-pct", str(args.noise_pct), "--seed", str(seed)], "echo")


def one_measurement(engine: str, seed: int, workload: Workload, args: argparse.Namespace, work: Path) -> list[float]:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    argv, model = server_argv(engine, port, seed, args)
    with running_server(argv, base_url, work / f"server-{seed}.log", timeout_s=120):
        vocab = model_vocab_size(ROOT / args.sim_model) if engine == "sim" else 2048
        m = measure(base_url, model, workload, vocab_size=vocab, repeats=args.repeats)
    return [r.output_throughput for r in m.repeats]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", choices=["sim", "echo"],
                        default="sim" if importlib.util.find_spec("hyperloom_assets.sim") else "echo")
    parser.add_argument("--noise-pct", type=float, default=5.0)
    parser.add_argument("--time-scale", type=float, default=50.0)
    parser.add_argument("--sim-model", default="models/llama-3-8b")
    args = parser.parse_args()
    workload = Workload(kind="random", isl=64, osl=32, concurrency=8, num_prompts=32)
    outcomes: collections.Counter[str] = collections.Counter()
    pairs = []
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.pairs):
            first = one_measurement(args.engine, 10 * index + 1, workload, args, Path(scratch))
            second = one_measurement(args.engine, 10 * index + 2, workload, args, Path(scratch))
            launches = 1
            decision = decide_trial(second, first, measurements=launches)
            # As the climb does: NEEDS_REVIEW is measured again on a fresh server, pooled.
            while decision.outcome == Outcome.NEEDS_REVIEW:
                launches += 1
                second += one_measurement(args.engine, 10 * index + 1 + launches, workload, args, Path(scratch))
                decision = decide_trial(second, first, measurements=launches)
            outcomes[decision.outcome.value] += 1
            pairs.append({"a1": first, "a2": second, "launches": launches, "decision": decision.model_dump(mode="json")})
            print(f"pair {index + 1:>3}: gain {decision.gain_pct:+6.2f}% "
                  f"[{decision.ci_low_pct:+6.2f}, {decision.ci_high_pct:+6.2f}]  {decision.outcome.value} "
                  f"after {launches} launch(es)")
    false_keep = outcomes[Outcome.KEEP.value] / args.pairs
    print(f"\n{'outcome':<14} {'count':>6}")
    for outcome in Outcome:
        print(f"{outcome.value:<14} {outcomes[outcome.value]:>6}")
    verdict = "met" if false_keep <= FALSE_KEEP_TARGET else "NOT met"
    print(f"false KEEP rate {100 * false_keep:.1f}% (target <= {100 * FALSE_KEEP_TARGET:.0f}%: {verdict})")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"config": vars(args), "workload": workload.model_dump(mode="json"),
                                   "outcomes": dict(outcomes), "false_keep_rate": false_keep,
                                   "target_met": false_keep <= FALSE_KEEP_TARGET, "pairs": pairs}, indent=1))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
