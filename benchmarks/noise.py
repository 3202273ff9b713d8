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

`--compare-pinning N` asks instead whether pinning the server and the client apart
(resources/hosts/cpu_pinning.py) cuts the client-saturated flags and the launch-to-launch
spread: N launches of the demo target's vLLM CPU server through the real host path
(LocalHost.serve, LocalHost.measure) with the client on the last CPU and the server on the
rest ("pinned": `client_cpus` naming that CPU), alternating with N with `client_cpus: off`
("shared"), side by side in one run. Writes benchmarks/results/noise_pinning.json.

Run: .venv/bin/python benchmarks/noise.py [--pairs 20] [--engine sim|echo|vllm] [--compare-pinning 6]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.peers import running_server, vllm_server_argv  # noqa: E402
from benchmarks.support.results import RunStart, start_run, write_results  # noqa: E402
from hyperloom_assets.core.config.targets import Workload  # noqa: E402
from hyperloom_assets.core.decisions.climb import Budget, TrialMeasurement, climb  # noqa: E402
from hyperloom_assets.core.decisions.ledger import MemoryLedger  # noqa: E402
from hyperloom_assets.core.decisions.rule import Outcome  # noqa: E402
from hyperloom_assets.core.measurement.serving import ServerSpec  # noqa: E402
from hyperloom_assets.core.planning.variants import Variant  # noqa: E402
from hyperloom_assets.resources.bench.client import BenchmarkClient  # noqa: E402
from hyperloom_assets.resources.bench.runner import measure, model_vocab_size  # noqa: E402
from hyperloom_assets.resources.hosts.local import LocalHost  # noqa: E402
from hyperloom_assets.resources.hosts.preflight import allocate_port  # noqa: E402

# The source paths whose code each result of this benchmark measures ("*": any other result): it is
# stale once one changes (benchmarks/support/staleness.py).
EXERCISES = {
    "noise_pinning": ("hyperloom_assets/core/decisions/", "hyperloom_assets/core/measurement/",
                      "hyperloom_assets/resources/bench/", "benchmarks/support/peers.py",
                      "benchmarks/support/echo_server.py",
                      "hyperloom_assets/resources/hosts/cpu_pinning.py"),
    "noise_vllm": ("hyperloom_assets/core/decisions/", "hyperloom_assets/core/measurement/",
                   "hyperloom_assets/resources/bench/", "benchmarks/support/peers.py",
                   "benchmarks/support/echo_server.py"),
    "*": ("hyperloom_assets/core/decisions/", "hyperloom_assets/core/measurement/",
          "hyperloom_assets/resources/bench/", "benchmarks/support/peers.py",
          "benchmarks/support/echo_server.py", "hyperloom_assets/sim/"),
}

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


def pinned_or_shared_launch(arm: str, index: int, args: argparse.Namespace, work: Path) -> dict:
    """One launch of the demo target's server through the local host, measured like a trial."""
    client_cpus = str(max(os.sched_getaffinity(0))) if arm == "pinned" else "off"
    host = LocalHost(state_dir=str(work / "state"), check_foreign_processes=False, client_cpus=client_cpus)
    spec = ServerSpec(engine="vllm", model=TINY_MODEL, env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                      server_args=["--max-num-seqs", "2", "--max-model-len", "1024", "--enforce-eager"])
    load_before = os.getloadavg()[0]
    with host.serve(spec, work / f"{arm}-{index}") as launch:
        m = host.measure(BenchmarkClient(), launch.base_url, launch.served_model, workload_for("vllm"),
                         model_vocab_size(TINY_MODEL), repeats=args.repeats, cpus=launch.cpus)
    return {"arm": arm, "client_cpus": client_cpus, "placement": launch.cpus.model_dump() if launch.cpus else None,
            "mean": m.output_throughput, "repeats": [r.output_throughput for r in m.repeats],
            "client_saturated": m.client_saturated, "client_cpu_pct": m.client_cpu_pct,
            "client_loop_lag_p99_ms": m.client_loop_lag_p99_ms, "load": [load_before, os.getloadavg()[0]]}


def compare_pinning(args: argparse.Namespace, bench_run: RunStart) -> int:
    launches: dict[str, list[dict]] = {"pinned": [], "shared": []}
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.compare_pinning):
            for arm in (("pinned", "shared") if index % 2 == 0 else ("shared", "pinned")):
                run = pinned_or_shared_launch(arm, index, args, Path(scratch))
                launches[arm].append(run)
                print(f"launch {index + 1} {arm:>6}: {run['mean']:.0f} tok/s (repeats "
                      f"{', '.join(f'{r:.0f}' for r in run['repeats'])}), saturated {run['client_saturated']}, "
                      f"client CPU {run['client_cpu_pct']:.0f}%, load {run['load'][0]:.1f}", flush=True)
    ratios = [a["mean"] / b["mean"] for a, b in zip(launches["pinned"], launches["shared"])]
    summary = {arm: {"launch_cv_pct": 100 * statistics.stdev(r["mean"] for r in runs) / statistics.fmean(
                         r["mean"] for r in runs),
                     "mean": statistics.fmean(r["mean"] for r in runs),
                     "saturated": sum(r["client_saturated"] for r in runs), "launches": len(runs),
                     "repeat_spread_pct": statistics.fmean(100 * (max(r["repeats"]) - min(r["repeats"])) /
                                                           statistics.fmean(r["repeats"]) for r in runs)}
               for arm, runs in launches.items()}
    print(f"\n{'CPUs':<12} {'mean tok/s':>10} {'launch CV %':>12} {'repeat spread %':>16} {'saturated':>10}")
    for arm, row in summary.items():
        print(f"{arm:<12} {row['mean']:>10.0f} {row['launch_cv_pct']:>12.1f} {row['repeat_spread_pct']:>16.1f} "
              f"{row['saturated']:>6}/{row['launches']}")
    print(f"pinned/shared throughput per pair: median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")
    write_results("noise_pinning", {"config": vars(args), "workload": workload_for("vllm").model_dump(mode="json"),
                                    "launches": launches, "summary": summary, "pinned_over_shared": ratios}, bench_run)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", choices=["sim", "echo", "vllm"], default="sim")
    parser.add_argument("--noise-pct", type=float, default=5.0)
    parser.add_argument("--time-scale", type=float, default=50.0)
    parser.add_argument("--sim-model", default="models/llama-3-8b")
    parser.add_argument("--compare-pinning", type=int, default=0, metavar="N",
                        help="instead: N pinned and N shared vLLM CPU launches, alternating")
    args, bench_run = start_run(parser)
    if args.compare_pinning:
        return compare_pinning(args, bench_run)
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
                           lambda keepers, tried: [SAME_CONFIG], launch_once, MemoryLedger())
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
                                           "target_met": false_keep <= FALSE_KEEP_TARGET, "pairs": pairs}, bench_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
