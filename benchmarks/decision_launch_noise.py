"""False KEEPs of the decision rule when launches vary more than repeats (synthetic).

Each trial compares a variant with the running best, both the same configuration: every
launch gets its own offset (launch-to-launch sd) and each of its 3 repeats its own noise
(repeat sd); NEEDS_REVIEW is re-measured on a new launch and pooled, at most 3 launches,
exactly as hyperloom_assets.climb does. The rule treats repeats as independent, so the
launch offset is missing from its interval: this script measures how much that costs.
Prints a table and writes benchmarks/results/decision_launch_noise.json.

    .venv/bin/python benchmarks/decision_launch_noise.py [--trials 4000]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from hyperloom_assets.decisions import Outcome, decide_trial

RESULTS = Path(__file__).resolve().parent / "results" / "decision_launch_noise.json"
CASES = [(0.0, 0.05), (0.02, 0.03), (0.05, 0.03), (0.10, 0.03), (0.15, 0.05)]


def launch(rng: random.Random, launch_sd: float, repeat_sd: float, repeats: int = 3) -> list[float]:
    level = 100 * (1 + rng.gauss(0, launch_sd))
    return [level * (1 + rng.gauss(0, repeat_sd)) for _ in range(repeats)]


def a_a_trial(rng: random.Random, launch_sd: float, repeat_sd: float) -> tuple[Outcome, int]:
    best = launch(rng, launch_sd, repeat_sd)
    pooled: list[float] = []
    looks = 0
    while True:
        looks += 1
        pooled += launch(rng, launch_sd, repeat_sd)
        decision = decide_trial(pooled, best, measurements=looks)
        if decision.outcome != Outcome.NEEDS_REVIEW:
            return decision.outcome, looks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=4000)
    args = parser.parse_args()
    rows = []
    for launch_sd, repeat_sd in CASES:
        rng = random.Random(1)
        results = [a_a_trial(rng, launch_sd, repeat_sd) for _ in range(args.trials)]
        keeps = [looks for outcome, looks in results if outcome == Outcome.KEEP]
        rows.append({"launch_sd_pct": 100 * launch_sd, "repeat_sd_pct": 100 * repeat_sd,
                     "false_keep_pct": 100 * len(keeps) / args.trials,
                     "keeps_at_first_look_pct": 100 * sum(1 for k in keeps if k == 1) / args.trials})
    print(f"{'launch sd %':>11} {'repeat sd %':>11} {'false KEEP %':>12} {'at 1st look %':>13}")
    for r in rows:
        print(f"{r['launch_sd_pct']:>11.0f} {r['repeat_sd_pct']:>11.0f} {r['false_keep_pct']:>12.1f} "
              f"{r['keeps_at_first_look_pct']:>13.1f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"trials": args.trials, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
