"""How close the sim's predictions are to published measurements: the calibration set, case by case.

For each case of benchmarks/calibration/cases.yaml whose architecture has a folder under
models/, the sim predicts the published figure with the case's GPU, tensor-parallel size,
weight and KV dtypes and its source's engine args: `fixed_batch_latency` submits the
batch's prompts together and runs them to their last token, as vLLM's benchmark_latency
does. The table shows measured and predicted seconds and their ratio (predicted /
measured: below 1 the sim is optimistic); the median and range close it. Cases whose
model has no folder are listed as skipped. Writes benchmarks/results/sim_fidelity.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.calibration.cases import CASES_FILE, Case, Source, load_cases  # noqa: E402
from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.core.roofline.model_shape import load_shape  # noqa: E402
from hyperloom_assets.sim.predict import fixed_batch_latency  # noqa: E402

PROFILE = "uncalibrated: the constants of hyperloom_assets/sim/perf_model.py"


def predict_case(case: Case, source: Source) -> float:
    """Simulated seconds for the case's batch, its checkpoint's weight dtype on the folder's architecture."""
    assert case.sim_model_dir is not None
    shape = load_shape(case.sim_model_dir).model_copy(update={"dtype": case.weight_dtype})
    args = [*source.sim_engine_args, "--kv-cache-dtype", case.kv_cache_dtype]
    return fixed_batch_latency(shape, case.gpu, args, case.batch, case.input_len, case.output_len, tp=case.tp)


def row(case: Case, source: Source) -> dict:
    predicted = predict_case(case, source)
    return {"case": case.id, "source": case.source, "gpu": case.gpu, "tp": case.tp, "batch": case.batch,
            "input_len": case.input_len, "output_len": case.output_len, "weight_dtype": case.weight_dtype,
            "measured_s": case.seconds, "predicted_s": round(predicted, 4), "ratio": round(predicted / case.seconds, 3)}


def print_table(rows: list[dict], summary: dict, skipped: list[str]) -> None:
    print(f"{'case':<40} {'gpu':<7} {'tp':>2} {'batch':>5} {'in':>5} {'out':>5} "
          f"{'measured s':>10} {'predicted s':>11} {'ratio':>6}")
    for r in rows:
        print(f"{r['case']:<40} {r['gpu']:<7} {r['tp']:>2} {r['batch']:>5} {r['input_len']:>5} {r['output_len']:>5} "
              f"{r['measured_s']:>10.3f} {r['predicted_s']:>11.3f} {r['ratio']:>6.3f}")
    print(f"predicted / measured over {summary['cases']} cases: median {summary['median_ratio']:.3f}, "
          f"range {summary['min_ratio']:.3f}-{summary['max_ratio']:.3f}")
    if skipped:
        print(f"skipped ({len(skipped)}, no model folder): {', '.join(skipped)}")


def main() -> None:
    _, bench_run = start_run(argparse.ArgumentParser(description=__doc__))
    calibration = load_cases()
    rows, skipped = [], []
    for case in calibration.cases:
        if case.sim_model_dir is None:
            skipped.append(case.id)
            continue
        rows.append(row(case, calibration.source_of(case)))
    ratios = [r["ratio"] for r in rows]
    summary = {"cases": len(rows), "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
               "max_ratio": max(ratios)}
    print_table(rows, summary, skipped)
    write_results("sim_fidelity", {"profile": PROFILE, "cases_file": str(CASES_FILE.relative_to(CASES_FILE.parents[2])),
                                   **summary, "rows": rows, "skipped": skipped}, bench_run)


if __name__ == "__main__":
    main()
