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

from benchmarks.support.results import write_results  # noqa: E402
from hyperloom_assets.core.decisions.climb import Budget, TrialMeasurement, climb  # noqa: E402
from hyperloom_assets.core.planning.variants import Variant  # noqa: E402

LAUNCH_SDS = (0.0, 0.02, 0.05, 0.10)
REPEAT_SD = 0.03
GAINS = (0.0, 0.03, 0.05, 0.10, 0.30)
CANDIDATE = Variant(name="candidate", add_args=["--candidate"], provenance="seed_grid", reason="benchmark")


def launch(rng: random.Random, level: float, launch_sd: float, repeats: int = 3) -> list[float]:
    offset = level * (1 + rng.gauss(0, launch_sd))
    return [offset * (1 + rng.gauss(0, REPEAT_SD)) for _ in range(repeats)]


def one_trial(rng: random.Random, gain: float, launch_sd: float) -> tuple[str, int]:
    """(outcome, launches including the baseline's) of one climb with one candidate."""
    def measure(keepers: list[Variant], variant: Variant | None) -> TrialMeasurement:
        # the candidate on the (empty) stack, or the new stack's rebench after a KEEP
        level = 100.0 * (1 + gain) if variant is not None or keepers else 100.0
        return TrialMeasurement(throughputs=launch(rng, level, launch_sd), measuring_s=1.0)

    result = climb(launch(rng, 100.0, launch_sd), 1.0, Budget(max_trials=1, target_gain_pct=1e9),
                   lambda keepers, tried: [CANDIDATE], measure, lambda fingerprint: None, lambda record: None)
    trial = result.trials[0]
    return trial.outcome, 1 + trial.launch_count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    for launch_sd in LAUNCH_SDS:
        for gain in GAINS:
            rng = random.Random(1)
            results = [one_trial(rng, gain, launch_sd) for _ in range(args.trials)]
            rows.append({"launch_sd_pct": 100 * launch_sd, "repeat_sd_pct": 100 * REPEAT_SD, "true_gain_pct": 100 * gain,
                         "keep_pct": 100 * sum(1 for outcome, _ in results if outcome == "KEEP") / args.trials,
                         "mean_launches": statistics.fmean(n for _, n in results)})
    print(f"KEEP % (mean launches per trial, baseline included); repeat sd {100 * REPEAT_SD:.0f}%, "
          f"{args.trials} trials per cell; the 0% column is the false KEEP rate")
    print(f"{'launch sd %':>11} " + " ".join(f"{'gain ' + format(100 * g, '.0f') + '%':>15}" for g in GAINS))
    for launch_sd in LAUNCH_SDS:
        cells = [r for r in rows if r["launch_sd_pct"] == 100 * launch_sd]
        print(f"{100 * launch_sd:>11.0f} " + " ".join(f"{r['keep_pct']:>7.1f} ({r['mean_launches']:.2f})"
                                                       for r in cells))
    worst = max(r["keep_pct"] for r in rows if r["true_gain_pct"] == 0)
    print(f"worst false KEEP rate {worst:.1f}% (target <= 5%: {'met' if worst <= 5 else 'NOT met'})")
    write_results("decision_launch_noise", {"trials": args.trials, "rows": rows, "worst_false_keep_pct": worst})


if __name__ == "__main__":
    main()
