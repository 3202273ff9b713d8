"""What a library patch does to throughput on vLLM CPU, on the demo target's config.

Base and patched trees alternate on fresh servers (base, patch, base, patch, ...), each
served from a worktree of a tree made by `framework-tree init`, each launch one
discarded warm-up and `--repeats` measured rounds of the demo workload; the gain is the
launch-level ratio of geometric means with its 95% interval, as the climb computes it.

Run: .venv/bin/python benchmarks/patch_effect.py [--patch cpu-worker-all-cores] [--pairs 3]
     [--max-num-seqs 16] [--repeats 2]
Writes benchmarks/results/patch_effect_<patch>_seqs<max-num-seqs>.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.core.config.targets import Workload  # noqa: E402
from hyperloom_assets.core.engines import engine_for  # noqa: E402
from hyperloom_assets.core.measurement.serving import ServerSpec  # noqa: E402
from hyperloom_assets.core.measurement.stats import launch_gain_interval  # noqa: E402
from hyperloom_assets.core.patches.library import library_patch  # noqa: E402
from hyperloom_assets.resources.bench.runner import measure, model_vocab_size  # noqa: E402
from hyperloom_assets.resources.hosts.local import LocalHost  # noqa: E402
from hyperloom_assets.resources.trees.init import init_tree  # noqa: E402
from hyperloom_assets.resources.trees.workspace import checkout, open_run_tree  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/core/patches/library/vllm/", "hyperloom_assets/core/patches/library.py",
             "hyperloom_assets/core/patches/patch.py", "hyperloom_assets/core/patches/run_tree.py",
             "hyperloom_assets/core/patches/diff_text.py", "hyperloom_assets/core/patches/git_paths.py",
             "hyperloom_assets/resources/trees/", "hyperloom_assets/resources/bench/",
             "hyperloom_assets/core/measurement/stats.py")

TINY_MODEL = ROOT / ".cache" / "models" / "tiny-llama"
WORKLOAD = Workload(kind="random", isl=128, osl=64, concurrency=16, num_prompts=64)  # the demo target's


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--patch", default="cpu-worker-all-cores")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--max-num-seqs", default="16", help="16: the demo's first keeper, where its climb tries "
                        "the patch; 2: the demo operator's")
    parser.add_argument("--repeats", type=int, default=2)
    options, bench_run = start_run(parser)
    patch = library_patch(engine_for("vllm"), options.patch)
    args = ["--max-num-seqs", options.max_num_seqs, "--enforce-eager", "--max-model-len", "1024"]
    sides: dict[str, list[list[float]]] = {"base": [], "patch": []}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        host = LocalHost(state_dir=str(work / "state"), check_foreign_processes=False)
        init_tree(engine_for("vllm"), work / "tree")
        run = open_run_tree(work / "tree", work / "state", "effect")
        for pair in range(options.pairs):
            for side in ("base", "patch"):
                tree = checkout(run, run.base_commit, patch.text if side == "patch" else None)
                spec = ServerSpec(engine="vllm", model=TINY_MODEL, server_args=args,
                                  env={"VLLM_CPU_KVCACHE_SPACE": "1"}, framework_tree=tree)
                with host.serve(spec, work / f"{side}-{pair}") as launch:
                    m = measure(launch.base_url, launch.served_model, WORKLOAD, model_vocab_size(TINY_MODEL),
                                repeats=options.repeats, warmups=8)
                sides[side].append(m.repeats_throughputs())
                print(f"pair {pair + 1} {side:<5}: {m.output_throughput:7.1f} tok/s", flush=True)
    gain, low, high = launch_gain_interval(sides["patch"], sides["base"])
    means = {side: statistics.fmean(statistics.fmean(l) for l in launches) for side, launches in sides.items()}
    print(f"\n{'side':<6} {'launches':>8} {'mean tok/s':>11}")
    for side, launches in sides.items():
        print(f"{side:<6} {len(launches):>8} {means[side]:>11.1f}")
    print(f"{options.patch}: gain {gain:+.1f}% (95% interval [{low:+.1f}%, {high:+.1f}%]), "
          f"{(time.monotonic() - started) / 60:.1f} min")
    write_results(f"patch_effect_{options.patch}_seqs{options.max_num_seqs}",
                  {"config": vars(options), "workload": WORKLOAD.model_dump(mode="json"), "launches": sides,
                   "means": means, "gain_pct": gain, "ci_low_pct": low, "ci_high_pct": high}, bench_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
