"""Does the planner and climb find more of the gain than Optuna's TPE or random search, launch for launch?

Each scenario is a sim target (a model, a GPU, a workload and a poor operator config)
and its search space: every knob the engine's seed grid offers for it (benchmarks/
support/sim_grid.py), hundreds to thousands of distinct engine configurations whose
knobs interact (KV room, the sequence cap and the token budget bind one another). The
truth of every point is the sim's noise-free prediction (`sim-predict`), computed once.

Every searcher pays in launches of the same space, each launch noisy as on real
engines (launch-to-launch offset and repeat noise: --launch-sd, --repeat-sd, 3 repeats;
the defaults sit between the sim's and vLLM CPU's levels in benchmarks/noise.py and
decision_launch_noise.py), with common random numbers, and every one starts with one
launch of the operator's config:
- `planner`: this project's planner and climb (benchmarks/support/offline_climb.py, the
  trials asset's code), its pick the stack of what it kept within the budget;
- `tpe`: Optuna's TPE sampler (defaults), one categorical per knob, one launch a trial;
- `random`: distinct points in random order.
A sampler's pick is the point whose launches averaged highest. Every pick is validated
the same way: its noise-free throughput, as a share of the attainable gain
(pick - operator) / (best point - operator). Reported per budget (5, 10, 20, 40
launches): the median share over --seeds runs, and whether the planner is ahead of TPE.

Run: .venv/bin/python benchmarks/search_quality.py [--seeds 20] [--only NAME] [--workers 2]
Writes benchmarks/results/search_quality.json; point truths are cached under .cache/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.offline_climb import SimScenario  # noqa: E402
from benchmarks.support.results import write_results  # noqa: E402
from benchmarks.support.search_space import Noise, Space  # noqa: E402
from benchmarks.support.searchers import climb_search, random_search, tpe_search  # noqa: E402
from hyperloom_assets.core.config.targets import Workload  # noqa: E402
from hyperloom_assets.core.measurement.workloads import synthetic_trace, write_trace  # noqa: E402

BUDGETS = [5, 10, 20, 40]
PLANNER = "planner+history"  # the product on a host it served before: the store pools earlier launch noise
SEARCHERS = (PLANNER, "planner", "planner-single+history", "planner-single", "tpe", "random")
AHEAD_UP_TO = 20  # the goal: ahead of TPE at every budget up to this many launches
MODELS = ROOT / "models"
CACHE = ROOT / ".cache" / "search_quality"
TRACE = ROOT / "examples" / "agentic_small.jsonl"
SYNTHETIC_TRACE = dict(sessions=32, turns=4, first_user_tokens=2048, user_tokens=256, output_tokens=128,
                       think_ms=200.0, seed=11)


def scenarios(synthetic: Path) -> list[SimScenario]:
    return [
        # Held out: a 32B dense model on one 80 GB GPU leaves ~6 GB of KV; prompts share
        # three quarters of their tokens, served with the prefix cache off and memory held back.
        SimScenario(name="heldout-qwen32b-h100-shared-prefix", model=MODELS / "qwen2.5-32b", gpu="H100",
                    server_args=["--no-enable-prefix-caching", "--max-model-len", "4096", "--max-num-seqs", "48",
                                 "--gpu-memory-utilization", "0.88"],
                    workload=Workload(kind="shared_prefix", isl=2048, prefix_len=1536, osl=256, concurrency=64,
                                      num_prompts=192)),
        # A small model with a tight cap, a small budget, no CUDA graphs and memory held back.
        SimScenario(name="llama8b-h100-random-capped", model=MODELS / "llama-3-8b", gpu="H100",
                    server_args=["--max-num-seqs", "16", "--max-num-batched-tokens", "2048", "--enforce-eager",
                                 "--gpu-memory-utilization", "0.85"],
                    workload=Workload(kind="random", isl=1024, osl=256, concurrency=128, num_prompts=384)),
        # MoE on SGLang replaying agent sessions, the radix cache off, a tight cap.
        SimScenario(name="mixtral-mi300x-sglang-agentic", model=MODELS / "mixtral-8x7b", gpu="MI300X", flavor="sglang",
                    server_args=["--max-running-requests", "8", "--chunked-prefill-size", "2048", "--disable-radix-cache"],
                    workload=Workload(kind="agentic", trace=synthetic, concurrency=32)),
        # A 70B over two H200s with long shared prefixes, no CUDA graphs, coarse blocks, memory held back.
        SimScenario(name="llama70b-h200x2-shared-prefix", model=MODELS / "llama-3-70b", gpu="H200", tp=2,
                    server_args=["--max-num-seqs", "32", "--enforce-eager", "--block-size", "32", "--max-model-len", "8192",
                                 "--gpu-memory-utilization", "0.85"],
                    workload=Workload(kind="shared_prefix", isl=4096, prefix_len=3072, osl=256, concurrency=64,
                                      num_prompts=192)),
        # A 70B over four H100s replaying the shipped agentic trace with a tiny cap.
        SimScenario(name="llama70b-h100x4-agentic", model=MODELS / "llama-3-70b", gpu="H100", tp=4,
                    server_args=["--max-num-seqs", "2", "--enforce-eager", "--max-num-batched-tokens", "1024"],
                    workload=Workload(kind="agentic", trace=TRACE, concurrency=8)),
    ]


def synthetic_trace_file() -> Path:
    """The synthetic agentic trace, at a fixed path so the scenario (and its cached truths) stay the same."""
    path = CACHE / "agentic_synthetic.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(synthetic_trace(**SYNTHETIC_TRACE), path)
    return path


def cached_space(scenario: SimScenario, workers: int) -> Space:
    """The space with its truths, cached by the scenario and the grids that define it."""
    from hyperloom_assets.core.hashing import canonical_hash, file_hash
    from hyperloom_assets.core.engines.spec import GRIDS_DIR

    key = canonical_hash({"scenario": scenario.model_dump(mode="json"),
                          "grids": [file_hash(p) for p in sorted(GRIDS_DIR.glob("*.yaml"))],
                          "sim": [file_hash(p) for p in sorted((ROOT / "hyperloom_assets" / "sim").glob("*.py"))]})
    path = CACHE / f"{scenario.name}-{key}.json"
    if path.is_file():
        return Space.from_json(scenario, json.loads(path.read_text()))
    space = Space.build(scenario, workers)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(space.to_json()))
    return space


def run_scenario(scenario: SimScenario, noise: Noise, seeds: int, workers: int) -> dict:
    started = time.monotonic()
    space = cached_space(scenario, workers)
    grid_s = time.monotonic() - started
    shares: dict[str, dict[int, list[float]]] = {name: {b: [] for b in BUDGETS} for name in SEARCHERS}
    first_trials = []
    for seed in range(seeds):
        picks, trials = climb_search(space, noise, seed, BUDGETS, history=True)
        first_trials.append([f"{t.name}: {t.outcome}" for t in trials[:5]])
        found = {PLANNER: picks, "planner": climb_search(space, noise, seed, BUDGETS)[0],
                 "planner-single+history": climb_search(space, noise, seed, BUDGETS, history=True, combine=False)[0],
                 "planner-single": climb_search(space, noise, seed, BUDGETS, combine=False)[0],
                 "tpe": tpe_search(space, noise, seed, BUDGETS), "random": random_search(space, noise, seed, BUDGETS)}
        for name, by_budget in found.items():
            for budget, argv in by_budget.items():
                shares[name][budget].append(space.share(argv))
    medians = {name: {b: statistics.median(v) for b, v in by.items()} for name, by in shares.items()}
    ahead = {name: {b: medians[name][b] > medians["tpe"][b] for b in BUDGETS} for name in (PLANNER, "planner")}
    return {
        "scenario": scenario.name, "model": scenario.model.name, "gpu": f"{scenario.gpu} x{scenario.tp}",
        "flavor": scenario.flavor, "workload": scenario.workload.model_dump(mode="json"),
        "operator_args": scenario.server_args, "points": len(space.points), "knobs": len(space.families),
        "knob_options": {k: len(v) + 1 for k, v in space.families.items()},
        "baseline_tok_s": space.value(space.baseline_argv), "best_tok_s": space.best,
        "near_best_share": space.near_best(), "median_share": medians, "shares": shares,
        "ahead_of_tpe": ahead, "planner_first_trials": first_trials[:3],
        "grid_s": round(grid_s, 1), "search_s": round(time.monotonic() - started - grid_s, 1),
    }


def print_table(rows: list[dict]) -> None:
    print(f"median share of the attainable gain at a budget of B launches (the operator's included); "
          f"* = {PLANNER} not ahead of TPE at a budget up to {AHEAD_UP_TO}")
    header = f"{'scenario':36} {'points':>6} {'knobs':>5} {'gain':>6} {'searcher':>22} " + " ".join(
        f"{'B=' + str(b):>6}" for b in BUDGETS)
    print(header)
    print("-" * len(header))
    for r in rows:
        gain = f"{100 * (r['best_tok_s'] / r['baseline_tok_s'] - 1):5.0f}%"
        for index, name in enumerate(SEARCHERS):
            lead = f"{r['scenario']:36} {r['points']:6d} {r['knobs']:5d} {gain:>6}" if index == 0 else " " * 55
            marks = ["*" if name == PLANNER and b <= AHEAD_UP_TO and not r["ahead_of_tpe"][PLANNER][b] else " "
                     for b in BUDGETS]
            print(f"{lead} {name:>22} " + " ".join(f"{100 * r['median_share'][name][b]:5.0f}%{m}"
                                                   for b, m in zip(BUDGETS, marks)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20, help="runs per searcher and scenario")
    parser.add_argument("--only", default=None, help="the scenarios whose name contains this")
    parser.add_argument("--workers", type=int, default=2, help="processes for the points' truths")
    parser.add_argument("--launch-sd", type=float, default=0.05)
    parser.add_argument("--repeat-sd", type=float, default=0.03)
    args = parser.parse_args()
    noise = Noise(launch_sd=args.launch_sd, repeat_sd=args.repeat_sd)
    started = time.monotonic()
    chosen = [s for s in scenarios(synthetic_trace_file()) if not args.only or args.only in s.name]
    rows = []
    for scenario in chosen:
        rows.append(run_scenario(scenario, noise, args.seeds, args.workers))
        print(f"{scenario.name}: {rows[-1]['points']} points, grid {rows[-1]['grid_s']} s, "
              f"search {rows[-1]['search_s']} s", flush=True)
    print_table(rows)
    for name in (PLANNER, "planner"):
        misses = [(r["scenario"], b) for r in rows for b in BUDGETS if b <= AHEAD_UP_TO and not r["ahead_of_tpe"][name][b]]
        print(f"{name} ahead of TPE at every budget up to {AHEAD_UP_TO}: "
              f"{'yes' if not misses else 'no: ' + ', '.join(f'{s} at {b}' for s, b in misses)}")
    print(f"{time.monotonic() - started:.0f} s")
    write_results("search_quality", {"budgets": BUDGETS, "seeds": args.seeds, "launch_sd": args.launch_sd,
                                     "repeat_sd": args.repeat_sd, "repeats": noise.repeats,
                                     "synthetic_trace": SYNTHETIC_TRACE, "scenarios": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
