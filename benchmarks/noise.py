"""A/A pairs through the decision rule: how often does noise alone earn a KEEP?

Each pair is one `hyperloom_assets.core.decisions.climb.climb()` with one candidate that changes
nothing: the baseline and every trial launch are the same configuration, each on a
freshly launched server with its own noise seed (3 repeats after a warm-up, as a trial
would). The climb decides as the `trials` asset does: a NEEDS_REVIEW is launched again
with the running best relaunched beside it, at most 3 looks. Every KEEP is false.
Target: false KEEP at most 5%.

Servers: the sim engine with noise (`hyperloom sim-serve ... --noise-pct`, the default),
the echo server with per-request speed noise (--engine echo), or vLLM CPU serving the
tiny model exactly as the demo target does (--engine vllm; about a minute a launch, and
real launch-to-launch noise). Writes benchmarks/results/noise_<engine>.json.

Run: .venv/bin/python benchmarks/noise.py [--pairs 20] [--engine sim|echo|vllm]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.peers import running_server, vllm_server_argv  # noqa: E402
from benchmarks.support.results import write_results  # noqa: E402
from hyperloom_assets.core.config.targets import Workload  # noqa: E402
from hyperloom_assets.core.decisions.climb import Budget, TrialMeasurement, climb  # noqa: E402
from hyperloom_assets.core.decisions.rule import Outcome  # noqa: E402
from hyperloom_assets.core.planning.variants import Variant  # noqa: E402
from hyperloom_assets.resources.bench.runner import measure, model_vocab_size  # noqa: E402
from hyperloom_assets.resources.hosts.preflight import allocate_port  # noqa: E402

TINY_MODEL = ROOT / ".cache" / "models" / "tiny-llama"
FALSE_KEEP_TARGET = 0.05
SAME_CONFIG = Variant(name="same-config", add_args=["--same-config"], provenance="seed_grid",
                      reason="A/A: the server is launched exactly as the baseline")


def server(engine: str, port: int, seed: int, args: argparse.Namespace) -> tuple[list[str], str, dict[str, str], int]:
    """(argv, served model name, env, vocabulary size) for one fresh server."""
    if engine == "sim":
        return ([sys.executable, "-m", "hyperloom_assets.cli", "sim-serve", "--model", args.sim_model, "--gpu", "H100",
                 "--port", str(port), "--time-scale", str(args.time_scale), "--noise-pct", str(args.noise_pct),
                 "--seed", str(seed)], args.sim_model, {}, model_vocab_size(ROOT / args.sim_model))
    if engine == "vllm":  # targets/tiny-llama-cpu.yaml's server, with its poor --max-num-seqs 2
        argv = [*vllm_server_argv(TINY_MODEL, port, max_num_seqs=2), "--max-model-len", "1024"]
        return argv, str(TINY_MODEL), {"VLLM_CPU_KVCACHE_SPACE": "1"}, model_vocab_size(TINY_MODEL)
    return ([sys.executable, "-m", "benchmarks.support.echo_server", "--port", str(port), "--token-delay-ms", "2",
             "--noise-pct", str(args.noise_pct), "--seed", str(seed)], "echo", {}, 2048)


def workload_for(engine: str) -> Workload:
    if engine == "vllm":  # the demo target's workload
        return Workload(kind="random", isl=128, osl=64, concurrency=16, num_prompts=64)
    return Workload(kind="random", isl=64, osl=32, concurrency=8, num_prompts=32)


def one_measurement(engine: str, seed: int, workload: Workload, args: argparse.Namespace, work: Path) -> list[float]:
    port = allocate_port()
    base_url = f"http://127.0.0.1:{port}"
    argv, model, env, vocab = server(engine, port, seed, args)
    with running_server(argv, base_url, work / f"server-{seed}.log", env=env, timeout_s=300):
        m = measure(base_url, model, workload, vocab_size=vocab, repeats=args.repeats)
    return [r.output_throughput for r in m.repeats]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", choices=["sim", "echo", "vllm"], default="sim")
    parser.add_argument("--noise-pct", type=float, default=5.0)
    parser.add_argument("--time-scale", type=float, default=50.0)
    parser.add_argument("--sim-model", default="models/llama-3-8b")
    args = parser.parse_args()
    workload = workload_for(args.engine)
    outcomes: collections.Counter[str] = collections.Counter()
    pairs = []
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.pairs):
            seeds = iter(range(100 * index + 1, 100 * (index + 1)))

            def launch_once(keepers: list[Variant], variant: Variant | None) -> TrialMeasurement:
                return TrialMeasurement(throughputs=one_measurement(args.engine, next(seeds), workload, args,
                                                                    Path(scratch)), measuring_s=1.0)

            result = climb(launch_once([], None).throughputs, 0.0, Budget(max_trials=1, target_gain_pct=1e9),
                           lambda keepers, tried: [SAME_CONFIG], launch_once, lambda fingerprint: None,
                           lambda record: None)
            trial = result.trials[0]
            launches = 1 + trial.launch_count
            decision = trial.decision
            outcomes[decision.outcome.value] += 1
            pairs.append({"baseline": result.baseline_launches, "variant": trial.launches, "launches": launches,
                          "decision": decision.model_dump(mode="json")})
            interval = ("" if decision.ci_low_pct is None
                        else f"[{decision.ci_low_pct:+6.2f}, {decision.ci_high_pct:+6.2f}]")
            print(f"pair {index + 1:>3}: gain {decision.gain_pct:+6.2f}% {interval:<18} {decision.outcome.value} "
                  f"after {launches} launch(es)", flush=True)
    false_keep = outcomes[Outcome.KEEP.value] / args.pairs
    print(f"\n{'outcome':<14} {'count':>6}")
    for outcome in Outcome:
        print(f"{outcome.value:<14} {outcomes[outcome.value]:>6}")
    verdict = "met" if false_keep <= FALSE_KEEP_TARGET else "NOT met"
    print(f"false KEEP rate {100 * false_keep:.1f}% (target <= {100 * FALSE_KEEP_TARGET:.0f}%: {verdict}); "
          f"{sum(p['launches'] for p in pairs) / len(pairs):.2f} launches per pair")
    write_results(f"noise_{args.engine}", {"config": vars(args), "workload": workload.model_dump(mode="json"),
                                           "outcomes": dict(outcomes), "false_keep_rate": false_keep,
                                           "target_met": false_keep <= FALSE_KEEP_TARGET, "pairs": pairs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
