"""The accuracy gate's calibration: A/A false drops against corrupting patches and fp8 KV.

Every server is launched fresh, from a tree made by `framework-tree init` (as a target
with a framework_tree serves), and answers the gate's 32 fixed prompts (greedy, 16
tokens, top-8 logprobs). Then:
- A/A: every pair among `--baselines` fresh servers of the base config (k(k-1)/2
  pairs), and every batching-only variant (sequence cap, token budget) against every
  baseline server. A drop here is a false drop. Goal: at most 1%.
- detection: each corrupting library patch (skip the last decoder layer, perturb the
  logits) served from the tree, and fp8 KV cache where the engine starts with it,
  against every baseline server. Goal: every corrupting patch dropped.
For each pair it records how many prompts agree, so the threshold (MIN_AGREEMENT in
core/accuracy/agreement.py) is read off the two distributions rather than guessed.

Run: .venv/bin/python benchmarks/accuracy_gate.py [--engine vllm|sim] [--baselines 7]
Writes benchmarks/results/accuracy_gate_<engine>.json.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.results import RunStart, start_run, write_results  # noqa: E402
from hyperloom_assets.core.accuracy.agreement import MIN_AGREEMENT, PromptOutput, judge  # noqa: E402
from hyperloom_assets.core.config.targets import AgreementCheck  # noqa: E402
from hyperloom_assets.core.engines import engine_for  # noqa: E402
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec  # noqa: E402
from hyperloom_assets.core.patches.library import library_patch  # noqa: E402
from hyperloom_assets.resources.accuracy.client import GateUnavailable, collect_outputs  # noqa: E402
from hyperloom_assets.resources.hosts.local import LocalHost  # noqa: E402
from hyperloom_assets.resources.trees.init import init_tree  # noqa: E402
from hyperloom_assets.resources.trees.workspace import checkout, open_run_tree  # noqa: E402

# The source paths whose code each result of this benchmark measures ("*": any other result): it is
# stale once one changes (benchmarks/support/staleness.py).
EXERCISES = {
    "accuracy_gate_vllm": ("hyperloom_assets/core/accuracy/", "hyperloom_assets/resources/accuracy/",
                           "hyperloom_assets/core/patches/library/vllm/",
                           "hyperloom_assets/core/patches/library.py",
                           "hyperloom_assets/resources/trees/"),
    "*": ("hyperloom_assets/core/accuracy/", "hyperloom_assets/resources/accuracy/",
          "hyperloom_assets/core/patches/library/", "hyperloom_assets/core/patches/library.py",
          "hyperloom_assets/resources/trees/", "hyperloom_assets/sim/"),
}

TINY_MODEL = ROOT / ".cache" / "models" / "tiny-llama"
FALSE_DROP_GOAL = 0.01
SETUPS = {
    "vllm": {"model": TINY_MODEL, "base": ["--max-num-seqs", "2", "--enforce-eager", "--max-model-len", "1024"],
             "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
             "batching": [["--max-num-seqs", "1"], ["--max-num-seqs", "16"], ["--max-num-batched-tokens", "512"]],
             "corrupting": ["skip-last-decoder-layer", "perturb-logits"], "fp8": ["--kv-cache-dtype", "fp8"]},
    "sim": {"model": ROOT / "models" / "llama-3-8b", "base": ["--gpu", "H100", "--time-scale", "50"], "env": {},
            "batching": [["--max-num-seqs", "4"], ["--max-num-batched-tokens", "1024"], ["--max-num-seqs", "64"]],
            "corrupting": ["perturb-logits"], "fp8": None},
}


def serve_outputs(host: LocalHost, engine: str, setup: dict, args: list[str], tree: Path, folder: Path,
                  check: AgreementCheck) -> list[PromptOutput] | str:
    """One fresh server's outputs, or why there are none."""
    spec = ServerSpec(engine=engine, model=setup["model"], server_args=[*setup["base"], *args], env=setup["env"],
                      framework_tree=tree)
    try:
        with host.serve(spec, folder) as launch:
            return collect_outputs(launch.base_url, launch.served_model, check)
    except (ServerError, GateUnavailable) as exc:
        return str(exc).splitlines()[0]


def pair_row(kind: str, name: str, reference: list[PromptOutput], candidate: list[PromptOutput]) -> dict:
    result = judge(reference, candidate)
    return {"kind": kind, "name": name, "verdict": result.verdict, "agreed": result.agreed, "prompts": result.prompts,
            "identical": sum(p.diverged_at is None for p in result.per_prompt)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", choices=sorted(SETUPS), default="vllm")
    parser.add_argument("--baselines", type=int, default=7)
    options, bench_run = start_run(parser)
    engine, setup, check = options.engine, SETUPS[options.engine], AgreementCheck()
    started = time.monotonic()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        host = LocalHost(state_dir=str(work / "state"), check_foreign_processes=False)
        init_tree(engine_for(engine), work / "operator-tree")
        run = open_run_tree(work / "operator-tree", work / "state", "bench")
        launches = itertools.count()

        def serve(args: list[str], patch: str | None = None) -> list[PromptOutput] | str:
            tree = checkout(run, run.base_commit, library_patch(engine_for(engine), patch).text if patch else None)
            outputs = serve_outputs(host, engine, setup, args, tree, work / f"launch-{next(launches)}", check)
            print(f"  served {' '.join(args) or 'base'}{' + ' + patch if patch else ''}: "
                  f"{'ok' if isinstance(outputs, list) else outputs}", flush=True)
            return outputs

        bases = [serve([]) for _ in range(options.baselines)]
        bases = [b for b in bases if isinstance(b, list)]
        rows += [pair_row("A/A", "base vs base", a, b) for a, b in itertools.combinations(bases, 2)]
        for args in setup["batching"]:
            variant = serve(args)
            if isinstance(variant, list):
                rows += [pair_row("A/A", " ".join(args), base, variant) for base in bases]
        for patch in setup["corrupting"]:
            variant = serve([], patch)
            rows += [pair_row("corrupting", patch, base, variant) for base in bases] if isinstance(variant, list) else []
        fp8 = serve(setup["fp8"]) if setup["fp8"] else "the engine has no fp8 KV cache here"
        fp8_note = fp8 if isinstance(fp8, str) else None
        if isinstance(fp8, list):
            rows += [pair_row("fp8 KV", " ".join(setup["fp8"]), base, fp8) for base in bases]
    return report(engine, rows, fp8_note, time.monotonic() - started, options, bench_run)


def report(engine: str, rows: list[dict], fp8_note: str | None, elapsed_s: float, options,
           bench_run: RunStart) -> int:
    print(f"\n{'kind':<11} {'variant':<28} {'pairs':>5} {'dropped':>7} {'agreed (min..max of 32)':>24} {'identical':>10}")
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["kind"], row["name"]), []).append(row)
    summary = []
    for (kind, name), group in groups.items():
        dropped = sum(r["verdict"] != "pass" for r in group)
        agreed = [r["agreed"] for r in group]
        identical = [r["identical"] for r in group]
        summary.append({"kind": kind, "name": name, "pairs": len(group), "dropped": dropped,
                        "agreed_min": min(agreed), "agreed_max": max(agreed), "identical_min": min(identical)})
        print(f"{kind:<11} {name:<28} {len(group):>5} {dropped:>7} {min(agreed):>12}..{max(agreed):<11} "
              f"{min(identical):>10}")
    aa = [r for r in rows if r["kind"] == "A/A"]
    false_drop = sum(r["verdict"] != "pass" for r in aa) / len(aa) if aa else None
    corrupting = [s for s in summary if s["kind"] == "corrupting"]
    detected = all(s["dropped"] == s["pairs"] for s in corrupting) and bool(corrupting)
    if false_drop is not None:
        print(f"A/A false-drop rate {100 * false_drop:.1f}% over {len(aa)} pairs (goal <= 1%: "
              f"{'met' if false_drop <= FALSE_DROP_GOAL else 'NOT met'})")
    print(f"corrupting patches detected on every pair: {'yes' if detected else 'NO'}; fp8 KV: "
          + (fp8_note or next((f"{s['dropped']} of {s['pairs']} dropped" for s in summary if s["kind"] == "fp8 KV"), "-")))
    print(f"threshold MIN_AGREEMENT {MIN_AGREEMENT} ({MIN_AGREEMENT * 32:.1f} of 32); {elapsed_s / 60:.1f} min")
    write_results(f"accuracy_gate_{engine}", {"config": vars(options), "min_agreement": MIN_AGREEMENT,
                                              "false_drop_rate": false_drop, "aa_pairs": len(aa),
                                              "corrupting_detected": detected, "fp8_note": fp8_note,
                                              "summary": summary, "pairs": rows, "elapsed_s": round(elapsed_s, 1)}, bench_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
