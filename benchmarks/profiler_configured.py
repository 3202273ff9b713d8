"""Does a configured, idle profiler slow the baseline's measured rounds?

The baseline's server is launched with the engine's profiler configured, so the profile
can be taken on it after the measured rounds instead of on a launch of its own
(resources/profiling.py). That is only honest if the configured profiler, idle until
/start_profile, leaves the measured rounds alone. vLLM 0.32's worker calls
`profiler.step()` every step, which returns at once while the profiler is not active
(vllm/profiler/wrapper.py, WorkerProfiler.step), and annotates nothing then
(gpu_worker.annotate_profile); this measures it.

Pairs of fresh launches of the same target, one with the profiler configured and one
without, the order turning each pair, each measured exactly as the baseline asset
measures (the target's workload contract: its warm-ups, prompts and repeats, through
LocalHost.serve and LocalHost.measure). The gain of configured over plain is a ratio of
geometric means of launch means with a Student-t 95% interval on the pairs' log ratios.
Verdict, a non-inferiority test: "not slowed" only when the whole interval lies above
-MARGIN_PCT (a slowdown larger than the margin is ruled out), "slowed" when the whole
interval lies below zero, "inconclusive" otherwise. Only "not slowed" lets an engine's
profile share the baseline's server (Profiler.free_when_idle); tests/unit/
test_profiler_evidence.py holds each engine's flag to its committed verdict.

Run: .venv/bin/python benchmarks/profiler_configured.py [--target tiny-llama-cpu] [--pairs 4]
Writes benchmarks/results/profiler_configured_<target>.json.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scipy import stats  # noqa: E402

from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.assets.workload_contract import workload_contract  # noqa: E402
from hyperloom_assets.core.config.targets import load_target  # noqa: E402
from hyperloom_assets.core.measurement.serving import ServerSpec  # noqa: E402
from hyperloom_assets.resources.bench.client import BenchmarkClient  # noqa: E402
from hyperloom_assets.resources.hosts.local import LocalHost  # noqa: E402
from hyperloom_assets.resources.measure import in_engine_time  # noqa: E402
from hyperloom_assets.resources.profiling import ServerProfile  # noqa: E402

# The source paths whose code each result of this benchmark measures ("*": any other result): it is
# stale once one changes (benchmarks/support/staleness.py).
EXERCISES = {
    "profiler_configured_tiny-llama-cpu": ("hyperloom_assets/resources/profiling.py",
                                           "hyperloom_assets/resources/measure.py",
                                           "hyperloom_assets/resources/bench/",
                                           "hyperloom_assets/core/engines/"),
    "*": ("hyperloom_assets/resources/profiling.py", "hyperloom_assets/resources/measure.py",
          "hyperloom_assets/resources/bench/", "hyperloom_assets/core/engines/", "hyperloom_assets/sim/"),
}


def one_launch(host: LocalHost, spec: ServerSpec, contract, folder: Path, configured: bool) -> dict:
    """One fresh server, measured as the baseline asset measures it."""
    profile = ServerProfile(host, BenchmarkClient(), spec, contract, folder)
    launched = profile.launch_spec() if configured else spec
    load = os.getloadavg()[0]
    with host.serve(launched, folder, label="configured" if configured else "plain") as launch:
        m = host.measure(BenchmarkClient(), launch.base_url, launch.served_model, contract.workload,
                         contract.vocab_size, repeats=contract.repeats, warmups=contract.warmups,
                         num_prompts=contract.num_prompts, max_model_len=contract.max_model_len, cpus=launch.cpus)
    m = in_engine_time(spec, m)
    return {"configured": configured, "argv": launch.argv, "mean": m.output_throughput,
            "repeats": m.repeats_throughputs(), "ready_s": launch.ready_s, "load": [load, os.getloadavg()[0]]}


# The slowdown a shared profile may cost the baseline at most: well under the noise any
# trial's decision already tolerates, so a baseline measured beside a configured profiler
# cannot move a keep/reject decision.
MARGIN_PCT = 5.0


def verdict_of(low: float, high: float, margin_pct: float = MARGIN_PCT) -> str:
    """Non-inferiority: "not slowed" needs the whole interval above -margin."""
    if low > -margin_pct:
        return "not slowed"
    if high < 0:
        return "slowed"
    return "inconclusive"


def interval(log_ratios: list[float]) -> tuple[float, float, float]:
    """(gain %, low %, high %): geometric mean ratio, Student-t 95% on the log ratios."""
    mean = statistics.fmean(log_ratios)
    if len(log_ratios) < 2:
        return 100 * math.expm1(mean), float("-inf"), float("inf")
    half = stats.t.ppf(0.975, len(log_ratios) - 1) * statistics.stdev(log_ratios) / math.sqrt(len(log_ratios))
    return 100 * math.expm1(mean), 100 * math.expm1(mean - half), 100 * math.expm1(mean + half)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", default="tiny-llama-cpu", help="a target file's name in targets/")
    parser.add_argument("--pairs", type=int, default=4)
    args, bench_run = start_run(parser)
    target = load_target(ROOT / "targets", args.target)
    spec = ServerSpec(engine=target.engine, model=target.model, server_args=target.server_args, env=target.env)
    contract = workload_contract(target)
    launches: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        host = LocalHost(state_dir=str(Path(scratch) / "state"), check_foreign_processes=False)
        for pair in range(args.pairs):
            for configured in ((True, False) if pair % 2 == 0 else (False, True)):
                run = one_launch(host, spec, contract, Path(scratch) / f"pair-{pair}-{configured}", configured)
                run["pair"] = pair
                launches.append(run)
                print(f"pair {pair + 1} {'configured' if configured else 'plain':>10}: {run['mean']:.1f} tok/s "
                      f"(repeats {', '.join(f'{r:.1f}' for r in run['repeats'])}), load {run['load'][0]:.1f}",
                      flush=True)
    means = {(r["pair"], r["configured"]): r["mean"] for r in launches}
    log_ratios = [math.log(means[(p, True)] / means[(p, False)]) for p in range(args.pairs)]
    gain, low, high = interval(log_ratios)
    verdict = verdict_of(low, high)
    print(f"\n{'engine':<8} {'pairs':>5} {'configured vs plain':>20} {'95% interval':>20}  verdict")
    print(f"{target.engine:<8} {args.pairs:>5} {gain:>+19.2f}% {f'[{low:+.1f}%, {high:+.1f}%]':>20}  {verdict}")
    write_results(f"profiler_configured_{args.target}", {
        "config": vars(args), "engine": target.engine, "server_args": target.server_args,
        "contract": contract.model_dump(mode="json"), "launches": launches,
        "gain_pct": gain, "ci_low_pct": low, "ci_high_pct": high, "margin_pct": MARGIN_PCT,
        "verdict": verdict}, bench_run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
