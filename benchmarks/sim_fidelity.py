"""How close the sim's predictions are to published measurements: the calibration set, case by case.

For each case of benchmarks/calibration/cases.yaml whose architecture has a folder under
models/, the sim predicts the published figure with the case's GPU, tensor-parallel size,
weight and KV dtypes and its source's engine args: `fixed_batch_latency` submits the
batch's prompts together and runs them to their last token, as vLLM's benchmark_latency
does. The table shows measured and predicted seconds and their ratio (predicted /
measured: below 1 the sim is optimistic); the median and range close it. Cases whose
model has no folder are listed as skipped.

Each case of a GPU with a calibration profile (the packaged ones of
hyperloom_assets/sim/profiles/, or `--calibration FILE...`, one per GPU) also gets the
calibrated prediction ("after") and the leave-one-out ratio the profile recorded for it
(predicted by a fit without that case). Target: every case with a model folder predicted
within 0.8-1.25x by its GPU's profile; a case of a GPU without one misses it.
Writes benchmarks/results/sim_fidelity.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.sim.calibration import PROFILES_DIR, CalibrationProfile, load_profile  # noqa: E402
from hyperloom_assets.sim.cases import CASES_FILE, REPO, CalibrationSet, Case, load_cases  # noqa: E402
from hyperloom_assets.sim.perf_model import DEFAULT_CALIBRATION, SimCalibration  # noqa: E402
from hyperloom_assets.sim.predict import fixed_batch_latency  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/sim/predict.py", "hyperloom_assets/sim/scheduler.py",
             "hyperloom_assets/sim/perf_model.py", "hyperloom_assets/sim/physics.py",
             "hyperloom_assets/sim/kv_cache.py", "hyperloom_assets/sim/build.py",
             "hyperloom_assets/sim/engine_args.py", "hyperloom_assets/sim/telemetry.py",
             "hyperloom_assets/sim/profiles/", "models/", "hyperloom_assets/sim/calibration.py",
             "hyperloom_assets/sim/cases.py", "benchmarks/calibration/")

UNCALIBRATED = "uncalibrated: the constants of hyperloom_assets/sim/perf_model.py"
RATIO_TARGET = (0.8, 1.25)  # calibrated / measured, every case


def within_target(row: dict) -> bool:
    ratio = row.get("calibrated_ratio")
    return ratio is not None and RATIO_TARGET[0] <= ratio <= RATIO_TARGET[1]


def predict_case(calibration_set: CalibrationSet, case: Case, parameters: SimCalibration = DEFAULT_CALIBRATION) -> float:
    """Simulated seconds for the case's batch, its checkpoint's weight dtype on the folder's architecture."""
    return fixed_batch_latency(case.sim_shape(), case.gpu, calibration_set.sim_engine_args(case), case.batch,
                               case.input_len, case.output_len, tp=case.tp, calibration=parameters,
                               engine_version=calibration_set.engine_version(case))


def row(calibration_set: CalibrationSet, case: Case, profile: CalibrationProfile | None) -> dict:
    predicted = predict_case(calibration_set, case)
    result = {"case": case.id, "source": case.source, "gpu": case.gpu, "tp": case.tp, "batch": case.batch,
              "input_len": case.input_len, "output_len": case.output_len, "weight_dtype": case.weight_dtype,
              "measured_s": case.seconds, "predicted_s": round(predicted, 4), "ratio": round(predicted / case.seconds, 3)}
    if profile is not None:
        after = predict_case(calibration_set, case, profile.parameters)
        fitted = {fit.id: fit for fit in profile.fit.cases} if profile.fit else {}
        loo = fitted[case.id].loo_ratio if case.id in fitted else None
        result |= {"calibrated_s": round(after, 4), "calibrated_ratio": round(after / case.seconds, 3),
                   "loo_ratio": None if loo is None else round(loo, 3)}
    return result


def _cell(value: float | None, width: int) -> str:
    return f"{value:>{width}.3f}" if value is not None else f"{'-':>{width}}"


def print_table(rows: list[dict], summary: dict, skipped: list[str]) -> None:
    print(f"{'case':<40} {'gpu':<7} {'tp':>2} {'batch':>5} {'in':>5} {'out':>5} "
          f"{'measured s':>10} {'predicted s':>11} {'ratio':>6} {'after s':>8} {'after':>6} {'LOO':>6}")
    for r in rows:
        print(f"{r['case']:<40} {r['gpu']:<7} {r['tp']:>2} {r['batch']:>5} {r['input_len']:>5} {r['output_len']:>5} "
              f"{r['measured_s']:>10.3f} {r['predicted_s']:>11.3f} {r['ratio']:>6.3f} "
              f"{_cell(r.get('calibrated_s'), 8)} {_cell(r.get('calibrated_ratio'), 6)} {_cell(r.get('loo_ratio'), 6)}")
    for label, stats in summary.items():
        if stats:
            print(f"{label} over {stats['cases']} cases: median {stats['median_ratio']:.3f}, "
                  f"range {stats['min_ratio']:.3f}-{stats['max_ratio']:.3f}")
    if skipped:
        print(f"skipped ({len(skipped)}, no model folder): {', '.join(skipped)}")


def ratio_stats(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"cases": len(values), "median_ratio": statistics.median(values), "min_ratio": min(values),
            "max_ratio": max(values)}


def _display(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calibration", type=Path, nargs="*", default=sorted(PROFILES_DIR.glob("*.yaml")),
                        help="calibration profiles (one per GPU) to predict each case again with "
                             "(default: the packaged ones)")
    args, bench_run = start_run(parser)
    profiles = {profile.gpu: profile for profile in map(load_profile, args.calibration)}
    calibration_set = load_cases()
    rows, skipped = [], []
    for case in calibration_set.cases:
        if case.sim_model_dir is None:
            skipped.append(case.id)
            continue
        rows.append(row(calibration_set, case, profiles.get(case.gpu)))
    summary = {"predicted / measured": ratio_stats([r["ratio"] for r in rows]),
               "calibrated / measured": ratio_stats([r["calibrated_ratio"] for r in rows if "calibrated_ratio" in r]),
               "leave-one-out / measured": ratio_stats([r["loo_ratio"] for r in rows if r.get("loo_ratio")])}
    print_table(rows, summary, skipped)
    missed = [r["case"] for r in rows if not within_target(r)]
    print(f"calibrated within {RATIO_TARGET[0]}-{RATIO_TARGET[1]}x: {len(rows) - len(missed)} of {len(rows)} cases"
          + (f"; missed: {', '.join(missed)}" if missed else " (target met)"))
    before = summary["predicted / measured"]
    write_results("sim_fidelity", {
        "profile": UNCALIBRATED, "calibration": {gpu: str(path) for gpu, path in zip(profiles, args.calibration)},
        "cases_file": str(CASES_FILE.relative_to(REPO)), **before,
        "calibrated": summary["calibrated / measured"], "leave_one_out": summary["leave-one-out / measured"],
        "ratio_target": list(RATIO_TARGET), "target_met": not missed, "missed": missed,
        "rows": rows, "skipped": skipped}, bench_run)


if __name__ == "__main__":
    main()
