"""The decision rule against launch-to-launch noise (synthetic launches, the real climb).

Each trial is `hyperloom_assets.core.decisions.climb.climb()` with one candidate, exactly as the
`trials` asset runs it: the baseline is one launch; a NEEDS_REVIEW variant is launched
again with the running best relaunched beside it, at most 3 looks. A launch here is
synthetic: every launch gets its own offset (launch sd) and each of its 3 repeats its
own noise (repeat sd). With a true gain of 0 every KEEP is false (target: at most 5%);
with a true gain the KEEP rate is the rule's power. Prints a table and writes
benchmarks/results/decision_launch_noise.json.

    .venv/bin/python benchmarks/decision_launch_noise.py [--trials 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.core.decisions.climb import Budget, TrialMeasurement, climb  # noqa: E402
from hyperloom_assets.core.decisions.ledger import MemoryLedger  # noqa: E402
from hyperloom_assets.core.decisions.history import prior_from  # noqa: E402
from hyperloom_assets.core.measurement.stats import LaunchNoise  # noqa: E402
from hyperloom_assets.core.planning.variants import Variant  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/core/decisions/", "hyperloom_assets/core/measurement/stats.py")

LAUNCH_SDS = (0.0, 0.02, 0.05, 0.10)
REPEAT_SD = 0.03
GAINS = (0.0, 0.03, 0.05, 0.10, 0.30)
HISTORY_GROUPS = 10  # earlier runs' configs launched three times each: 20 degrees of freedom
CANDIDATE = Variant(name="candidate", add_args=["--candidate"], provenance="seed_grid", reason="benchmark")


def launch(rng: random.Random, level: float, launch_sd: float, repeats: int = 3) -> list[float]:
    offset = level * (1 + rng.gauss(0, launch_sd))
    return [offset * (1 + rng.gauss(0, REPEAT_SD)) for _ in range(repeats)]


def history_prior(rng: random.Random, launch_sd: float) -> LaunchNoise | None:
    """What earlier runs on the same host, engine and model leave: HISTORY_GROUPS configs launched thrice."""
    levels = [100.0 * (1 + rng.random()) for _ in range(HISTORY_GROUPS)]  # each config its own level
    return prior_from([[statistics.fmean(launch(rng, level, launch_sd)) for _ in range(3)] for level in levels])


def one_trial(rng: random.Random, gain: float, launch_sd: float, history: bool) -> tuple[str, int]:
    """(outcome, launches including the baseline's) of one climb with one candidate."""
    def measure(keepers: list[Variant], variant: Variant | None) -> TrialMeasurement:
        # the candidate on the (empty) stack, or the new stack's rebench after a KEEP
        level = 100.0 * (1 + gain) if variant is not None or keepers else 100.0
        return TrialMeasurement(throughputs=launch(rng, level, launch_sd), measuring_s=1.0)

    prior = history_prior(rng, launch_sd) if history else None
    result = climb(launch(rng, 100.0, launch_sd), 1.0, Budget(max_trials=1, target_gain_pct=1e9),
                   lambda keepers, tried: [CANDIDATE], measure, MemoryLedger(), prior=prior)
    trial = result.trials[0]
    return trial.outcome, 1 + trial.launch_count


def table(rows: list[dict], history: bool, trials: int) -> float:
    """Print one table (without or with pooled history); returns its worst false KEEP rate."""
    label = f"with history pooled ({HISTORY_GROUPS} earlier configs x 3 launches)" if history else "without history"
    print(f"\nKEEP % (mean launches per trial, baseline included), {label}; repeat sd {100 * REPEAT_SD:.0f}%, "
          f"{trials} trials per cell; the 0% column is the false KEEP rate")
    print(f"{'launch sd %':>11} " + " ".join(f"{'gain ' + format(100 * g, '.0f') + '%':>15}" for g in GAINS))
    mine = [r for r in rows if r["history"] == history]
    for launch_sd in LAUNCH_SDS:
        cells = [r for r in mine if r["launch_sd_pct"] == 100 * launch_sd]
        print(f"{100 * launch_sd:>11.0f} " + " ".join(f"{r['keep_pct']:>7.1f} ({r['mean_launches']:.2f})" for r in cells))
    return max(r["keep_pct"] for r in mine if r["true_gain_pct"] == 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=2000)
    args, bench_run = start_run(parser)
    rows = []
    for history in (False, True):
        for launch_sd in LAUNCH_SDS:
            for gain in GAINS:
                rng = random.Random(1)
                results = [one_trial(rng, gain, launch_sd, history) for _ in range(args.trials)]
                rows.append({"history": history, "launch_sd_pct": 100 * launch_sd, "repeat_sd_pct": 100 * REPEAT_SD,
                             "true_gain_pct": 100 * gain,
                             "keep_pct": 100 * sum(1 for outcome, _ in results if outcome == "KEEP") / args.trials,
                             "mean_launches": statistics.fmean(n for _, n in results)})
    worst = max(table(rows, False, args.trials), table(rows, True, args.trials))
    pooled = next(r for r in rows if r["history"] and r["launch_sd_pct"] == 5 and r["true_gain_pct"] == 10)
    false_keep = next(r for r in rows if r["history"] and r["launch_sd_pct"] == 5 and r["true_gain_pct"] == 0)
    print(f"worst false KEEP rate {worst:.1f}% (target <= 5%: {'met' if worst <= 5 else 'NOT met'}); with history "
          f"at 5% launch sd a true +10% is kept {pooled['keep_pct']:.1f}% (target >= 80%), false KEEP "
          f"{false_keep['keep_pct']:.1f}% (target <= 2%)")
    write_results("decision_launch_noise", {"trials": args.trials, "history_groups": HISTORY_GROUPS, "rows": rows,
                                            "worst_false_keep_pct": worst}, bench_run)


if __name__ == "__main__":
    main()
