"""Does the recipe memory pay? A second target of a class, with and without the first one's keepers.

For each pair of sim scenarios of one class (same engine, model, GPU and workload bands;
the second's prompt length and concurrency differ within their bands), the first target
climbs (the offline climb: sim predictions with launch noise for launches); its keepers
become recipes, with the gains its trials measured. The second target then climbs twice
with the same seed: cold, and with the recipes offered first (as `candidates` and each
re-plan do). The goal is the first target's best, applied to the second: the noise-free
throughput of the first stack's changes on the second target. The table gives, per pair,
the median launches (the baseline's included) until the second target's running best
reaches 97% of that goal, cold and with memory, in how many seeds each got there within
its trials, in how many the memory took fewer or more launches, and in how many the cold
climb's first trial already reached the goal (no memory can do better there). The verdict
(`memory_pays`): with memory, never more launches, and fewer wherever the cold climb's
first trial fell short. Writes benchmarks/results/recipe_memory.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.support.offline_climb import (  # noqa: E402
    OfflineClimb,
    SimScenario,
    run_offline_climb,
    sim_baseline,
    sim_roofline,
    true_throughput,
)
from benchmarks.support.results import start_run, write_results  # noqa: E402
from benchmarks.support.staleness import OFFLINE_CLIMB  # noqa: E402
from hyperloom_assets.core.config.targets import Workload  # noqa: E402
from hyperloom_assets.core.planning.recipes import Recipe, class_of, recipe_of, stack_recipe  # noqa: E402
from hyperloom_assets.core.planning.stack import composition  # noqa: E402
from hyperloom_assets.core.roofline.model_shape import load_shape  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = OFFLINE_CLIMB

MODELS = Path(__file__).resolve().parents[1] / "models"
REACHED = 0.97  # of the goal: launch noise makes an exact match a coin toss


def pairs(max_trials: int) -> list[tuple[SimScenario, SimScenario]]:
    capped = ["--max-num-seqs", "8", "--max-num-batched-tokens", "2048", "--enforce-eager"]
    budget = ["--max-num-seqs", "8", "--max-num-batched-tokens", "64"]
    return [
        (SimScenario(name="llama8b-h100-capped", model=MODELS / "llama-3-8b", gpu="H100", server_args=capped,
                     workload=Workload(kind="random", isl=512, osl=128, concurrency=32), max_trials=max_trials),
         SimScenario(name="llama8b-h100-capped-second", model=MODELS / "llama-3-8b", gpu="H100", server_args=capped,
                     workload=Workload(kind="random", isl=448, osl=128, concurrency=40), max_trials=max_trials)),
        (SimScenario(name="llama8b-h200-budget", model=MODELS / "llama-3-8b", gpu="H200", server_args=budget,
                     workload=Workload(kind="random", isl=512, osl=128, concurrency=32), max_trials=max_trials),
         SimScenario(name="llama8b-h200-budget-second", model=MODELS / "llama-3-8b", gpu="H200", server_args=budget,
                     workload=Workload(kind="random", isl=576, osl=112, concurrency=28), max_trials=max_trials)),
    ]


def recipes_from(first: SimScenario, climb: OfflineClimb, seed: int) -> list[Recipe]:
    """The first climb's keepers, filed as the optimization_stack asset files a validated stack's."""
    baseline = sim_baseline(first, seed)
    klass = class_of(first.target(), load_shape(first.model), sim_roofline(first, baseline).hardware, "sim")
    kept = [t for t in climb.climb.trials if t.outcome == "KEEP"]
    run = f"offline-seed-{seed}"
    recipes = [recipe_of(klass, t.variant, t.decision.gain_pct or 0.0, (t.decision.ci_low_pct, t.decision.ci_high_pct),
                         first.name, run) for t in kept]
    if len(kept) > 1:  # the offline climb validates nothing: the stack's gain is the climb's running gain
        recipes.append(stack_recipe(klass, climb.climb.keepers, climb.climb.best_gain_pct(), (None, None),
                                    first.name, run))
    return [recipe.model_copy(update={"id": i + 1}) for i, recipe in enumerate(recipes)]


def launches_to_goal(second: SimScenario, climb: OfflineClimb, goal: float) -> int | None:
    """Launches (the baseline's first) until the running best's true throughput reaches the goal."""
    reached = trials_to_goal(second, climb, goal)
    if reached is None:
        return None
    return 1 + sum(t.launch_count for t in climb.climb.trials[:reached])


def trials_to_goal(second: SimScenario, climb: OfflineClimb, goal: float) -> int | None:
    """Trials until the running best's true throughput reaches the goal (0: the baseline does)."""
    target, keepers = second.target(), []
    if (true_throughput(second, composition(target, []).argv) or 0) >= REACHED * goal:
        return 0
    for index, trial in enumerate(climb.climb.trials, start=1):
        if trial.outcome == "KEEP":
            keepers.append(trial.variant)
            if (true_throughput(second, composition(target, keepers).argv) or 0) >= REACHED * goal:
                return index
    return None


def same_class(first: SimScenario, second: SimScenario) -> bool:
    keys = []
    for scenario in (first, second):
        hardware = sim_roofline(scenario, sim_baseline(scenario, 0)).hardware
        keys.append(class_of(scenario.target(), load_shape(scenario.model), hardware, "sim").key)
    return keys[0] == keys[1]


def run_pair(first: SimScenario, second: SimScenario, seeds: int) -> dict:
    assert same_class(first, second), f"{first.name} and {second.name} must share a class"
    cold, warm, cold_trials = [], [], []
    for seed in range(seeds):
        climb = run_offline_climb(first, seed)
        goal = true_throughput(second, composition(second.target(), climb.climb.keepers).argv) or 0.0
        recipes = recipes_from(first, climb, seed)
        cold_climb = run_offline_climb(second, seed + 1000)
        cold.append(launches_to_goal(second, cold_climb, goal))
        cold_trials.append(trials_to_goal(second, cold_climb, goal))
        warm.append(launches_to_goal(second, run_offline_climb(second, seed + 1000, recipes=recipes), goal))
    return {"first": first.name, "second": second.name, "seeds": seeds, "cold_launches": cold, "warm_launches": warm,
            "cold_trials_to_goal": cold_trials, "cold_median": _median(cold), "warm_median": _median(warm),
            "cold_reached": sum(x is not None for x in cold), "warm_reached": sum(x is not None for x in warm),
            "warm_fewer_in": sum(w is not None and (c is None or w < c) for c, w in zip(cold, warm)),
            "warm_more_in": sum(c is not None and (w is None or w > c) for c, w in zip(cold, warm)),
            "cold_first_trial_in": sum(t is not None and t <= 1 for t in cold_trials)}


def pair_verdict(row: dict) -> bool:
    """The memory never costs a launch, and saves launches where the cold climb's first trial did not
    already reach the goal (nothing can reach it sooner than one trial)."""
    room = row["seeds"] - row["cold_first_trial_in"]
    return row["warm_more_in"] == 0 and (room == 0 or row["warm_fewer_in"] > 0) and \
        (row["warm_median"] is not None and (row["cold_median"] is None or room == 0
                                             or row["warm_median"] < row["cold_median"]))


def _median(values: list[int | None]) -> float | None:
    reached = [v for v in values if v is not None]
    return statistics.median(reached) if reached else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--max-trials", type=int, default=8)
    args, bench_run = start_run(parser)
    rows = [run_pair(first, second, args.seeds) for first, second in pairs(args.max_trials)]
    print(f"{'second target':<28} {'cold median':>11} {'warm median':>11} {'cold reached':>12} "
          f"{'warm reached':>12} {'warm fewer':>10} {'warm more':>9} {'cold at trial 1':>15}")
    for r in rows:
        n = r["seeds"]
        print(f"{r['second']:<28} {str(r['cold_median']):>11} {str(r['warm_median']):>11} "
              f"{r['cold_reached']:>9}/{n} {r['warm_reached']:>9}/{n} {r['warm_fewer_in']:>7}/{n} "
              f"{r['warm_more_in']:>6}/{n} {r['cold_first_trial_in']:>12}/{n}")
    verdict = all(pair_verdict(r) for r in rows)
    print(f"with memory: never more launches, and fewer wherever the cold climb's first trial fell short: {verdict}")
    write_results("recipe_memory", {"reached_share": REACHED, "max_trials": args.max_trials, "rows": rows,
                                    "memory_pays": verdict}, bench_run)


if __name__ == "__main__":
    main()
