"""How fast the sim simulates: simulated seconds per wall second at concurrency 256, one core.

Runs `predict` (the same scheduler `sim-serve` paces against the wall clock) for a few
workloads and engine configs, prints a table and writes benchmarks/results/sim_speed.json.
A ratio well above the time scales the tests use means the sim is never the bottleneck.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.sim.predict import predict

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/sim/predict.py", "hyperloom_assets/sim/scheduler.py",
             "hyperloom_assets/sim/perf_model.py", "hyperloom_assets/sim/physics.py",
             "hyperloom_assets/sim/kv_cache.py", "hyperloom_assets/sim/build.py",
             "hyperloom_assets/sim/engine_args.py", "hyperloom_assets/sim/telemetry.py",
             "hyperloom_assets/sim/profiles/", "models/")

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "llama-3-8b"
CASES = [
    ("random 512/256, defaults", [], dict(kind="random", isl=512, osl=256)),
    ("random 512/256, eager, 2048 budget", ["--enforce-eager", "--max-num-batched-tokens", "2048"],
     dict(kind="random", isl=512, osl=256)),
    ("shared prefix 2048/128", [], dict(kind="shared_prefix", isl=2048, prefix_len=1536, osl=128)),
    ("random 2048/512, KV-bound (util 0.35)", ["--gpu-memory-utilization", "0.35"], dict(kind="random", isl=2048, osl=512)),
]


def main() -> None:
    _, bench_run = start_run(argparse.ArgumentParser(description=__doc__))
    rows = []
    for name, args, fields in CASES:
        workload = Workload(concurrency=256, num_prompts=1024, **fields)
        started = time.process_time()
        measurement = predict(MODEL, "H100", args, workload, warmups=0)
        cpu_s = time.process_time() - started
        simulated = sum(r.duration_s for r in measurement.repeats)
        rows.append({"case": name, "simulated_s": simulated, "cpu_s": cpu_s, "sim_s_per_cpu_s": simulated / cpu_s,
                     "output_tokens": sum(r.total_output_tokens for r in measurement.repeats)})
    print(f"{'case':<40} {'simulated s':>12} {'cpu s':>8} {'sim s / s':>10}")
    for row in rows:
        print(f"{row['case']:<40} {row['simulated_s']:>12.1f} {row['cpu_s']:>8.2f} {row['sim_s_per_cpu_s']:>10.1f}")
    write_results("sim_speed", {"concurrency": 256, "gpu": "H100", "model": "llama-3-8b", "rows": rows}, bench_run)


if __name__ == "__main__":
    main()
