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

With --proposer, a column `proposer:<label>`: planner+history with a model's rounds as
`candidates` and `trials` ask them (assets/proposer_round.py: guard, critic, approved
variants ahead of the rule plan; round 1 on the first plan, one after each keeper up to
--max-rounds), at the same budgets and seeds; a model call is not a launch. Per
scenario it also records the model's calls, rounds, rounds that fell back and the
variants it got tried and kept (benchmarks/support/proposer_column.py):
- `vllm-tiny`: vLLM CPU serving the tiny random Llama (the floor; its replies are noise);
- `scripted`: an in-process scripted server whose one proposal is the space's best point
  one change can reach (an oracle, no model);
- `real` with --provider anthropic|openai --model M: keys and base URLs are the SDK's own
  variables (ANTHROPIC_API_KEY, OPENAI_API_KEY, *_BASE_URL), never read here.
--add keeps the committed columns of search_quality.json and computes only the proposer
column: the seeds, budgets and noise must match, and planner+history (run again) must come
out as committed for every seed, else it refuses; without it every column is computed
again and an earlier proposer column is dropped.

Run: .venv/bin/python benchmarks/search_quality.py [--seeds 20] [--only NAME] [--workers 2]
     [--proposer vllm-tiny]                                        # every column, and the floor's
     [--proposer real --provider anthropic --model claude-sonnet-4-5 --seeds 10 --add]
Writes benchmarks/results/search_quality.json; point truths are cached under .cache/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.offline_climb import SimScenario  # noqa: E402
from benchmarks.support.proposer_column import KINDS, MAX_ROUNDS, ProposerColumn  # noqa: E402
from benchmarks.support.results import RESULTS_DIR, RunStart, machine, start_run, write_results  # noqa: E402
from benchmarks.support.search_space import Noise, Space  # noqa: E402
from benchmarks.support.searchers import Picks, climb_search, random_search, tpe_search  # noqa: E402
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


def run_scenario(scenario: SimScenario, noise: Noise, seeds: int, workers: int,
                 column: ProposerColumn | None = None, previous: dict | None = None) -> dict:
    """The scenario's row; with `previous` (its committed row), only the proposer column, merged into it."""
    started = time.monotonic()
    space = cached_space(scenario, workers)
    grid_s = time.monotonic() - started
    first_trials: list[list[str]] = []
    # --add runs planner+history again: the column's base, and the proof that the kept columns still hold.
    runs = {PLANNER: searcher_runs(space, noise, first_trials)[PLANNER]} if previous else \
        searcher_runs(space, noise, first_trials)
    shares = {name: shares_of(space, run, seeds) for name, run in runs.items()}
    if previous:
        check_reproduced(previous, space, shares[PLANNER])  # before a model is asked anything
    search_s = time.monotonic() - started - grid_s
    asked: list[dict] = []
    if column:
        shares[column.name] = shares_of(space, column_run(space, noise, column, asked), seeds)
    column_s = time.monotonic() - started - grid_s - search_s
    medians = {name: {b: statistics.median(v) for b, v in by.items()} for name, by in shares.items()}
    if previous:
        return merged_row(previous, column, shares, medians, column_stats(asked, column_s))
    names = (PLANNER, "planner", *([column.name] if column else []))
    return {
        "scenario": scenario.name, "model": scenario.model.name, "gpu": f"{scenario.gpu} x{scenario.tp}",
        "flavor": scenario.flavor, "workload": scenario.workload.model_dump(mode="json"),
        "operator_args": scenario.server_args, "points": len(space.points), "knobs": len(space.families),
        "knob_options": {k: len(v) + 1 for k, v in space.families.items()},
        "baseline_tok_s": space.value(space.baseline_argv), "best_tok_s": space.best,
        "near_best_share": space.near_best(), "median_share": medians, "shares": shares,
        "ahead_of_tpe": {name: {b: medians[name][b] > medians["tpe"][b] for b in BUDGETS} for name in names},
        "planner_first_trials": first_trials[:3], "grid_s": round(grid_s, 1), "search_s": round(search_s, 1),
        "proposer": {column.name: column_stats(asked, column_s)} if column else {},
    }


def searcher_runs(space: Space, noise: Noise, first_trials: list[list[str]]) -> dict[str, Callable[[int], Picks]]:
    """Each searcher's run of one seed; planner+history's first trials land in `first_trials`."""
    def planner_history(seed: int) -> Picks:
        picks, trials = climb_search(space, noise, seed, BUDGETS, history=True)
        first_trials.append([f"{t.name}: {t.outcome}" for t in trials[:5]])
        return picks

    return {PLANNER: planner_history, "planner": lambda seed: climb_search(space, noise, seed, BUDGETS)[0],
            "planner-single+history": lambda seed: climb_search(space, noise, seed, BUDGETS, history=True,
                                                                combine=False)[0],
            "planner-single": lambda seed: climb_search(space, noise, seed, BUDGETS, combine=False)[0],
            "tpe": lambda seed: tpe_search(space, noise, seed, BUDGETS),
            "random": lambda seed: random_search(space, noise, seed, BUDGETS)}


def column_run(space: Space, noise: Noise, column: ProposerColumn, asked: list[dict]) -> Callable[[int], Picks]:
    """The proposer column's run of one seed: planner+history with the model's rounds; its asks in `asked`."""
    def run(seed: int) -> Picks:
        with column.climb(space) as proposer:
            picks, trials = climb_search(space, noise, seed, BUDGETS, history=True, proposer=proposer)
        asked.append(model_rounds(proposer.summary(), trials))
        return picks

    return run


def shares_of(space: Space, run: Callable[[int], Picks], seeds: int) -> dict[int, list[float]]:
    """Budget -> each seed's pick's share of the attainable gain."""
    picks = [run(seed) for seed in range(seeds)]
    return {b: [space.share(p[b]) for p in picks] for b in BUDGETS}


def model_rounds(summary: dict[str, int], trials: list) -> dict:
    """One climb's asks of the model and what its variants became."""
    llm = [t for t in trials if t.variant.provenance == "llm"]
    return {**summary, "llm_trials": len(llm), "llm_keepers": sum(t.outcome == "KEEP" for t in llm),
            "first_trials": [f"{t.name}: {t.outcome}" for t in trials[:5]]}


def column_stats(asked: list[dict], search_s: float) -> dict:
    """What the climbs of one scenario asked of the model, summed over the seeds."""
    totals = {key: sum(a[key] for a in asked) for key in
              ("llm_calls", "rounds", "rounds_fell_back", "calls_failed", "approved", "llm_trials", "llm_keepers")}
    return {**totals, "seeds": len(asked), "first_trials": [a["first_trials"] for a in asked[:3]],
            "search_s": round(search_s, 1)}


def check_reproduced(previous: dict, space: Space, planner_shares: dict[int, list[float]]) -> None:
    """The committed row must be of this space and this code, or its columns and the new one would not compare."""
    stale = previous["points"] != len(space.points) or abs(previous["best_tok_s"] - space.best) > 1e-6 * space.best
    stale = stale or any(len(planner_shares[b]) != len(previous["shares"][PLANNER][b]) or any(
        abs(new - old) > 1e-9 for new, old in zip(planner_shares[b], previous["shares"][PLANNER][b])) for b in BUDGETS)
    if stale:
        raise SystemExit(f"--add: {previous['scenario']}'s committed row is not what this code and space give "
                         f"({PLANNER} differs, or the space: {previous['points']} points, best "
                         f"{previous['best_tok_s']:.1f} then, {len(space.points)}, {space.best:.1f} now); "
                         "run again without --add")


def merged_row(previous: dict, column: ProposerColumn, shares: dict, medians: dict, stats: dict) -> dict:
    """The committed row with the proposer column's shares, medians, standing against TPE and asks added."""
    name = column.name
    return {**previous, "median_share": {**previous["median_share"], name: medians[name]},
            "shares": {**previous["shares"], name: shares[name]},
            "ahead_of_tpe": {**previous["ahead_of_tpe"],
                             name: {b: medians[name][b] > previous["median_share"]["tpe"][b] for b in BUDGETS}},
            "proposer": {**previous.get("proposer", {}), name: stats}}


def with_int_budgets(row: dict) -> dict:
    """A row read back from JSON, its per-budget keys numbers again."""
    def by_budget(table: dict) -> dict:
        return {name: {int(b): v for b, v in values.items()} for name, values in table.items()}
    return {**row, "median_share": by_budget(row["median_share"]), "shares": by_budget(row["shares"]),
            "ahead_of_tpe": by_budget(row["ahead_of_tpe"])}


def columns_of(row: dict) -> list[str]:
    return [*SEARCHERS, *row.get("proposer", {})]


def print_table(rows: list[dict]) -> None:
    print(f"median share of the attainable gain at a budget of B launches (the operator's included); "
          f"* = {PLANNER} not ahead of TPE at a budget up to {AHEAD_UP_TO}")
    if any(r.get("proposer") for r in rows):
        print(f"proposer:<label> = {PLANNER} with the model's rounds first; +/- = above/below {PLANNER}; "
              "under it the model's calls, rounds (fell back) and its variants tried (kept), all seeds summed")
    width = max(22, *(len(name) for r in rows for name in columns_of(r)))
    header = f"{'scenario':36} {'points':>6} {'knobs':>5} {'gain':>6} {'searcher':>{width}} " + " ".join(
        f"{'B=' + str(b):>6}" for b in BUDGETS)
    print(header)
    print("-" * len(header))
    for r in rows:
        gain = f"{100 * (r['best_tok_s'] / r['baseline_tok_s'] - 1):5.0f}%"
        for index, name in enumerate(columns_of(r)):
            lead = f"{r['scenario']:36} {r['points']:6d} {r['knobs']:5d} {gain:>6}" if index == 0 else " " * 55
            print(f"{lead} {name:>{width}} " + " ".join(f"{100 * r['median_share'][name][b]:5.0f}%{_mark(r, name, b)}"
                                                        for b in BUDGETS))
            if name in r.get("proposer", {}):
                a = r["proposer"][name]
                print(f"{' ' * 55} {'':>{width}} {a['llm_calls']} calls, {a['rounds']} rounds ({a['rounds_fell_back']} "
                      f"fell back, {a['calls_failed']} on a failed call), {a['llm_trials']} llm trials "
                      f"({a['llm_keepers']} kept) over {a['seeds']} seeds")


def _mark(row: dict, name: str, budget: int) -> str:
    if name == PLANNER:
        return "*" if budget <= AHEAD_UP_TO and not row["ahead_of_tpe"][PLANNER][budget] else " "
    if name in row.get("proposer", {}):
        delta = row["median_share"][name][budget] - row["median_share"][PLANNER][budget]
        return "+" if delta > 1e-9 else "-" if delta < -1e-9 else " "
    return " "


def previous_results() -> dict:
    path = RESULTS_DIR / "search_quality.json"
    if not path.is_file():
        raise SystemExit("--add needs benchmarks/results/search_quality.json (run without --add first)")
    return json.loads(path.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20, help="runs per searcher and scenario")
    parser.add_argument("--only", default=None, help="the scenarios whose name contains this")
    parser.add_argument("--workers", type=int, default=2, help="processes for the points' truths")
    parser.add_argument("--launch-sd", type=float, default=0.05)
    parser.add_argument("--repeat-sd", type=float, default=0.03)
    parser.add_argument("--proposer", choices=KINDS, help="add a proposer column (see above)")
    parser.add_argument("--provider", choices=["anthropic", "openai"], help="with --proposer real")
    parser.add_argument("--model", help="with --proposer real: the provider's model name")
    parser.add_argument("--max-rounds", type=int, default=MAX_ROUNDS, help="the proposer's rounds per climb at most")
    parser.add_argument("--add", action="store_true",
                        help="keep the committed columns and compute only the proposer column")
    args, bench_run = start_run(parser)
    if (args.proposer == "real") != bool(args.provider and args.model) or (args.proposer != "real" and (
            args.provider or args.model)):
        parser.error("--provider and --model go together, with --proposer real")
    if args.add and not args.proposer:
        parser.error("--add adds a proposer column: name it with --proposer")
    noise = Noise(launch_sd=args.launch_sd, repeat_sd=args.repeat_sd)
    settings = {"budgets": BUDGETS, "seeds": args.seeds, "launch_sd": args.launch_sd, "repeat_sd": args.repeat_sd,
                "repeats": noise.repeats, "synthetic_trace": SYNTHETIC_TRACE}
    kept = previous_payload(settings) if args.add else {"rows": [], "columns": {}, "machine": None}
    column = ProposerColumn(args.proposer, args.provider, args.model, args.max_rounds) if args.proposer else None
    started = time.monotonic()
    chosen = [s for s in scenarios(synthetic_trace_file()) if not args.only or args.only in s.name]
    rows = {r["scenario"]: r for r in kept["rows"]}
    with column or contextlib.nullcontext():
        columns = {**kept["columns"], **({column.name: {**column.describe(), "machine": machine(bench_run)}} if column else {})}
        for scenario in chosen:
            if args.add and scenario.name not in rows:
                raise SystemExit(f"--add: {scenario.name} has no committed row; run it without --add first")
            row = run_scenario(scenario, noise, args.seeds, args.workers, column, rows.get(scenario.name) if args.add
                               else None)
            rows[scenario.name] = row
            print(f"{scenario.name}: {row['points']} points, grid {row['grid_s']} s, search {row['search_s']} s"
                  + (f", {column.name} {row['proposer'][column.name]['search_s']} s" if column else ""), flush=True)
            save(settings, list(rows.values()), columns, kept["machine"], bench_run)  # each row as it lands
    shown = [rows[s.name] for s in chosen]
    print_table(shown)
    for name in (PLANNER, "planner", *([column.name] if column else [])):
        misses = [(r["scenario"], b) for r in shown for b in BUDGETS if b <= AHEAD_UP_TO and not r["ahead_of_tpe"][name][b]]
        print(f"{name} ahead of TPE at every budget up to {AHEAD_UP_TO}: "
              f"{'yes' if not misses else 'no: ' + ', '.join(f'{s} at {b}' for s, b in misses)}")
    print(f"{time.monotonic() - started:.0f} s")
    return 0


def previous_payload(settings: dict) -> dict:
    """The committed rows and proposer columns, when they were run with the same seeds, budgets and noise."""
    previous = previous_results()
    results = previous["results"]
    differ = [key for key in ("budgets", "seeds", "launch_sd", "repeat_sd", "repeats") if results[key] != settings[key]]
    if differ:
        raise SystemExit(f"--add: the committed results differ in {', '.join(differ)} "
                         f"({', '.join(f'{k}={results[k]}' for k in differ)}); pass the same or run without --add")
    return {"rows": [with_int_budgets(r) for r in results["scenarios"]],
            "columns": results.get("proposer_columns", {}),
            "machine": results.get("other_columns_machine") or previous["machine"]}


def save(settings: dict, rows: list[dict], columns: dict, other_columns_machine: dict | None, bench_run: RunStart) -> None:
    payload = {**settings, "searchers": list(SEARCHERS), "proposer_columns": columns, "scenarios": rows}
    if other_columns_machine:  # --add: the other columns are the committed ones, measured there
        payload["other_columns_machine"] = other_columns_machine
    write_results("search_quality", payload, bench_run)


if __name__ == "__main__":
    sys.exit(main())
