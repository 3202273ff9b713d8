"""Does the planner and climb find more of the gain than Optuna's TPE or random search, launch for launch?

Each scenario (benchmarks/support/quality_scenarios.py) is a sim target (a model, a GPU,
a workload and a poor operator config) and the space the planner would search for it:
the engine's seed grid and the ablations of the operator's flags (sim_grid.py), or the
target's own `search_space` laid over the grid, or alone with `only: true`, by the
planner's own code (core/planning/search_space.py). Every flavour the sim mimics (vLLM,
SGLang, ATOM) has a scenario with a search_space whose knobs the seed grid lacks, and one
space has nine knobs of the target's own; two scenarios have a TPOT SLO (p95, p99) that the
fastest points break, and one a TTFT and TPOT SLO at p90 that the operator's config breaks
and no single move from it meets. No scenario searches goodput yet (the sim's prediction
counts no requests within an SLO). The truth of every point is the
sim's noise-free prediction (`sim-predict`: throughput, latency, telemetry), computed once
and cached under .cache/search_quality.

Every searcher pays in launches of the same space, each launch noisy as on real engines
(launch-to-launch offset and repeat noise: --launch-sd, --repeat-sd, 3 repeats; the
defaults sit between the sim's and vLLM CPU's levels in benchmarks/noise.py and
decision_launch_noise.py) on everything it reports: throughput, the latency percentiles
the SLO check reads and the telemetry the planner diagnoses from (launch_noise.py), with
common random numbers across searchers. Every one starts with one launch of the operator's config:
- `planner`: this project's planner and climb (offline_climb.py, the trials asset's code,
  its SLO check under an SLO), its pick the stack of what it kept within the budget;
  `+history`: with the launch-noise prior the store would pool from earlier runs on the
  host (launches of other points of the space, three each, on their own noise stream);
  `-single`: without the variant that moves several knobs at once;
- `tpe`: Optuna's TPE sampler with its defaults (10 random start-up trials: at 5 and 10
  launches it is random search), one categorical per knob, one launch a trial;
- `tpe-tuned`: TPE with n_startup_trials chosen for each budget from {2, 3, 5, 10, 20}
  (those up to half the budget, plus one) by the mean share on 10 held-out seeds of the
  same scenario, one study per budget (tpe_tuning.py). Chosen, not a rule such as
  max(2, budget // 4): the best count differs between spaces, and tuning on the space
  itself is the strongest TPE the benchmark can field, which is what the planner is held to;
- `tpe-constrained` (SLO scenarios): tuned TPE told each launch's constraints, the
  measured latency percentile minus the limit (Optuna's constraints; `constraints_func`
  is deprecated in Optuna 5 for Trial.set_constraint, which the same sampler reads);
- `planner+continuation`: planner+history with the target's `continuation: tpe`: once its rule
  plan is spent it goes on with Optuna's TPE over the plan's knobs, warm-started with every
  launch it made (core/planning/continuation.py), its proposals narrowed to the space and
  judged by the same rules; `planner+continuation-gp` (only with --searchers) the same with
  Optuna's GP sampler;
- `gp`: Optuna's GPSampler with its defaults (10 start-up trials), one study of the largest
  budget, under an SLO told each launch's constraints as constrained TPE is (minutes per seed
  at 80 launches: it fits a GP at every trial);
- `random`: distinct points in random order.
A sampler's pick is the point whose launches averaged highest, of those none of whose
launches broke the SLO by its measured percentile. Every pick is validated the same way:
its noise-free throughput as a share of the attainable gain (pick - operator) / (best -
operator); under an SLO the best is the best point that meets it (noise-free percentile)
and a pick that breaks it scores 0. Reported per budget (5, 10, 20, 40, 80 launches): the
median share over --seeds runs with its percentile-bootstrap 95% interval (2,000
resamples of the seeds, fixed seed: intervals.py), whether planner+history is ahead of
default TPE, and `behind_tuned_tpe`: every budget where a planner column's median is
below tuned (or constrained) TPE's or GP's, with the paired bootstrap's interval of the difference.
--searchers runs a subset of the columns (a development run; planner+history always runs).

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
--calibration auto runs the scenarios whose GPU and flavor have a packaged calibration
profile (hyperloom_assets/sim/profiles/) on it and writes search_quality_calibrated.json,
whose rows also say how calibration reranks the space
(benchmarks/support/calibrated_scenarios.py); the others are search_quality.json's.
--add keeps the committed columns of search_quality.json and computes only the proposer
column: the seeds, budgets and noise must match, and planner+history (run again) must come
out as committed for every seed, else it refuses; without it every column is computed
again and an earlier proposer column is dropped.

Run: .venv/bin/python benchmarks/search_quality.py [--seeds 20] [--only NAME] [--workers 2]
     [--proposer vllm-tiny]                                        # every column, and the floor's
     [--proposer real --provider anthropic --model claude-sonnet-4-5 --seeds 10 --add]
     [--results-dir DIR --allow-dirty]                             # a smoke run, apart from the committed one
Writes benchmarks/results/search_quality.json (or DIR/search_quality.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.calibrated_scenarios import calibrated, calibration_fields  # noqa: E402
from benchmarks.support.offline_climb import SimScenario  # noqa: E402
from benchmarks.support.proposer_column import KINDS, MAX_ROUNDS, ProposerColumn  # noqa: E402
from benchmarks.support.quality_scenarios import SYNTHETIC_TRACE, cached_space, scenarios, synthetic_trace_file  # noqa: E402
from benchmarks.support.quality_summary import CONSTRAINED, CONTINUED, GP, PLANNER, TUNED, summarise  # noqa: E402
from benchmarks.support.intervals import BOOTSTRAP_SEED, LEVEL, RESAMPLES  # noqa: E402
from benchmarks.support.results import RESULTS_DIR, RunStart, machine, start_run, write_results  # noqa: E402
from benchmarks.support.search_space import Noise, Space  # noqa: E402
from benchmarks.support.searchers import (  # noqa: E402
    HISTORY_CONFIGS,
    HISTORY_LAUNCHES,
    Picks,
    climb_search,
    gp_search,
    random_search,
    tpe_budgeted,
    tpe_search,
)
from benchmarks.support.tpe_tuning import STARTUP_GRID, TUNING_SEEDS, tuned_startups  # noqa: E402
from benchmarks.support.staleness import OFFLINE_CLIMB  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = OFFLINE_CLIMB + (
    "hyperloom_assets/core/config/search_space.py", "hyperloom_assets/core/proposer/",
    "benchmarks/support/quality_scenarios.py", "benchmarks/support/calibrated_scenarios.py",
    "benchmarks/support/quality_summary.py", "benchmarks/support/search_space.py", "benchmarks/support/searchers.py",
    "benchmarks/support/tpe_tuning.py", "benchmarks/support/sim_grid.py", "benchmarks/support/launch_noise.py",
    "benchmarks/support/intervals.py", "benchmarks/support/proposer_column.py",
    "benchmarks/support/offline_proposer.py", "benchmarks/support/llm_servers.py")

from benchmarks.support.quality_table import (  # noqa: E402
    AHEAD_UP_TO, BUDGETS, CONTINUED_GP, DEFAULT_SEARCHERS, SEARCHERS, print_table, with_int_budgets)


def run_scenario(scenario: SimScenario, noise: Noise, seeds: int, workers: int,
                 column: ProposerColumn | None = None, previous: dict | None = None,
                 searchers: tuple[str, ...] = DEFAULT_SEARCHERS) -> dict:
    """The scenario's row; with `previous` (its committed row), only the proposer column, merged into it.
    `searchers`: the columns to run (a development run's subset); planner+history always runs."""
    started = time.monotonic()
    space = cached_space(scenario, workers)
    grid_s = time.monotonic() - started
    first_trials: list[list[str]] = []
    # --add runs planner+history again: the column's base, and the proof that the kept columns still hold.
    tuning = {} if previous else tpe_tuning(space, noise, searchers)
    tuning_s = time.monotonic() - started - grid_s
    runs = {name: run for name, run in searcher_runs(space, noise, first_trials, tuning).items()
            if name in searchers or name == PLANNER}
    shares = {name: shares_of(space, run, seeds) for name, run in runs.items() if not previous or name == PLANNER}
    if previous:
        check_reproduced(previous, space, shares[PLANNER])  # before a model is asked anything
    search_s = time.monotonic() - started - grid_s - tuning_s
    asked: list[dict] = []
    if column:
        shares[column.name] = shares_of(space, column_run(space, noise, column, asked), seeds)
    column_s = time.monotonic() - started - grid_s - tuning_s - search_s
    if previous:
        return merged_row(previous, column, shares, column_stats(asked, column_s))
    return {
        **describe(space), **summarise(shares, (column.name,) if column else ()), "shares": shares,
        "tpe_startups": tuning, "planner_first_trials": first_trials[:3], "grid_s": round(grid_s, 1),
        "tuning_s": round(tuning_s, 1), "search_s": round(search_s, 1),
        "proposer": {column.name: column_stats(asked, column_s)} if column else {},
    }


def describe(space: Space) -> dict:
    """What a row says of its scenario and space, before any searcher's figures."""
    scenario = space.scenario
    values = [m.output_throughput for m in space.truth.values() if m is not None]
    return {
        "scenario": scenario.name, "model": scenario.model.name, "gpu": f"{scenario.gpu} x{scenario.tp}",
        "flavor": scenario.flavor, "workload": scenario.workload.model_dump(mode="json"),
        "operator_args": scenario.server_args,
        "search_space": scenario.search_space.model_dump(mode="json") if scenario.search_space else None,
        "slo": scenario.slo.model_dump(mode="json") if scenario.slo else None,
        "points": len(space.points), "knobs": len(space.families),
        "knob_options": {k: len(v) + 1 for k, v in space.families.items()},
        "baseline_tok_s": space.value(space.baseline_argv), "best_tok_s": space.best,
        "best_unconstrained_tok_s": space.best_unconstrained,
        "feasible_share": sum(space.feasible(k) for k in space.truth) / len(values),
        "near_best_share": space.near_best(),
    }


def tpe_tuning(space: Space, noise: Noise, searchers: tuple[str, ...] = DEFAULT_SEARCHERS) -> dict[str, dict]:
    """TPE's start-up trials per budget, chosen on held-out seeds; constrained TPE's too under an SLO."""
    found = {TUNED: tuned_startups(space, noise, BUDGETS)} if TUNED in searchers else {}
    if space.scenario.slo and CONSTRAINED in searchers:
        found[CONSTRAINED] = tuned_startups(space, noise, BUDGETS, constrained=True)
    return found


def searcher_runs(space: Space, noise: Noise, first_trials: list[list[str]],
                  tuning: dict[str, dict]) -> dict[str, Callable[[int], Picks]]:
    """Each searcher's run of one seed; planner+history's first trials land in `first_trials`."""
    def planner_history(seed: int) -> Picks:
        picks, trials = climb_search(space, noise, seed, BUDGETS, history=True)
        first_trials.append([f"{t.name}: {t.outcome}" for t in trials[:5]])
        return picks

    def startups(name: str) -> dict[int, int]:
        return {b: tuned["chosen"] for b, tuned in tuning[name].items()}

    runs = {PLANNER: planner_history, "planner": lambda seed: climb_search(space, noise, seed, BUDGETS)[0],
            CONTINUED: lambda seed: climb_search(space, noise, seed, BUDGETS, history=True, continuation="tpe")[0],
            CONTINUED_GP: lambda seed: climb_search(space, noise, seed, BUDGETS, history=True, continuation="gp")[0],
            GP: lambda seed: gp_search(space, noise, seed, BUDGETS),
            "planner-single+history": lambda seed: climb_search(space, noise, seed, BUDGETS, history=True,
                                                                combine=False)[0],
            "planner-single": lambda seed: climb_search(space, noise, seed, BUDGETS, combine=False)[0],
            "tpe": lambda seed: tpe_search(space, noise, seed, BUDGETS),
            "random": lambda seed: random_search(space, noise, seed, BUDGETS)}
    if TUNED in tuning:
        runs[TUNED] = lambda seed: tpe_budgeted(space, noise, seed, startups(TUNED))
    if CONSTRAINED in tuning:
        runs[CONSTRAINED] = lambda seed: tpe_budgeted(space, noise, seed, startups(CONSTRAINED), constrained=True)
    return runs


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


def merged_row(previous: dict, column: ProposerColumn, shares: dict, stats: dict) -> dict:
    """The committed row with the proposer column's shares added, its figures summarised again, and its asks."""
    merged = {**previous["shares"], column.name: shares[column.name]}
    return {**previous, **summarise(merged, (column.name,)), "shares": merged,
            "proposer": {**previous.get("proposer", {}), column.name: stats}}


def previous_results(folder: Path = RESULTS_DIR) -> dict:
    path = folder / "search_quality.json"
    if not path.is_file():
        raise SystemExit(f"--add needs {path} (run without --add first)")
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
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help="where search_quality.json goes (a smoke run: elsewhere than the committed one)")
    parser.add_argument("--searchers", default=",".join(DEFAULT_SEARCHERS),
                        help=f"the columns to run, comma-separated, of {', '.join(SEARCHERS)} (planner+history always)")
    parser.add_argument("--calibration", choices=["none", "auto"], default="none",
                        help="auto: each scenario on its GPU's packaged calibration profile, where there is one, "
                             "with the ranking against the uncalibrated space; writes search_quality_calibrated.json")
    args, bench_run = start_run(parser)
    if (args.proposer == "real") != bool(args.provider and args.model) or (args.proposer != "real" and (
            args.provider or args.model)):
        parser.error("--provider and --model go together, with --proposer real")
    if args.add and not args.proposer:
        parser.error("--add adds a proposer column: name it with --proposer")
    noise = Noise(launch_sd=args.launch_sd, repeat_sd=args.repeat_sd)
    settings = settings_of(args.seeds, noise)
    kept = previous_payload(settings, args.results_dir) if args.add else {"rows": [], "columns": {}, "machine": None}
    column = ProposerColumn(args.proposer, args.provider, args.model, args.max_rounds) if args.proposer else None
    started = time.monotonic()
    chosen = [s for s in scenarios(synthetic_trace_file()) if not args.only or args.only in s.name]
    if args.calibration == "auto":  # a scenario without a profile is search_quality.json's row as it is
        chosen = [s for s in map(calibrated, chosen) if s.calibration_profile]
    name = "search_quality" + ("_calibrated" if args.calibration == "auto" else "")
    rows = {r["scenario"]: r for r in kept["rows"]}
    with column or contextlib.nullcontext():
        columns = {**kept["columns"], **({column.name: {**column.describe(), "machine": machine(bench_run)}} if column else {})}
        for scenario in chosen:
            if args.add and scenario.name not in rows:
                raise SystemExit(f"--add: {scenario.name} has no committed row; run it without --add first")
            row = run_scenario(scenario, noise, args.seeds, args.workers, column, rows.get(scenario.name) if args.add
                               else None, searchers=chosen_searchers(parser, args.searchers))
            rows[scenario.name] = row | (calibration_fields(scenario, args.workers) if args.calibration == "auto" else {})
            print(f"{scenario.name}: {row['points']} points, grid {row['grid_s']} s, search {row['search_s']} s"
                  + (f", {column.name} {row['proposer'][column.name]['search_s']} s" if column else ""), flush=True)
            save(settings, list(rows.values()), columns, kept["machine"], bench_run, args.results_dir, name)  # as it lands
    shown = [rows[s.name] for s in chosen]
    print_table(shown)
    for name in (CONTINUED, PLANNER, "planner", *([column.name] if column else [])):
        if any(name not in r["ahead_of_tpe"] for r in shown):
            continue
        misses = [(r["scenario"], b) for r in shown for b in BUDGETS if b <= AHEAD_UP_TO and not r["ahead_of_tpe"][name][b]]
        print(f"{name} ahead of TPE at every budget up to {AHEAD_UP_TO}: "
              f"{'yes' if not misses else 'no: ' + ', '.join(f'{s} at {b}' for s, b in misses)}")
    print(f"{time.monotonic() - started:.0f} s")
    return 0


def chosen_searchers(parser: argparse.ArgumentParser, text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in SEARCHERS]
    if unknown:
        parser.error(f"--searchers: unknown {', '.join(unknown)}; expected some of {', '.join(SEARCHERS)}")
    return names


def settings_of(seeds: int, noise: Noise) -> dict:
    """What every row was run with, and how its figures were summarised."""
    return {"budgets": BUDGETS, "seeds": seeds, "launch_sd": noise.launch_sd, "repeat_sd": noise.repeat_sd,
            "repeats": noise.repeats, "synthetic_trace": SYNTHETIC_TRACE,
            "noisy": ["throughput", "latency", "telemetry"],
            "history": {"configs": HISTORY_CONFIGS, "launches_each": HISTORY_LAUNCHES,
                        "from": "earlier launches of other points of the space, on their own noise stream"},
            "tpe_tuning": {"grid": list(STARTUP_GRID), "held_out_seeds": list(TUNING_SEEDS),
                           "chosen_by": "highest mean held-out share per scenario and budget, ties to the larger"},
            "bootstrap": {"resamples": RESAMPLES, "seed": BOOTSTRAP_SEED, "level": LEVEL,
                          "kind": "percentile over seeds; differences paired by seed"}}


def previous_payload(settings: dict, folder: Path = RESULTS_DIR) -> dict:
    """The committed rows and proposer columns, when they were run with the same seeds, budgets and noise."""
    previous = previous_results(folder)
    results = previous["results"]
    differ = [key for key in ("budgets", "seeds", "launch_sd", "repeat_sd", "repeats") if results[key] != settings[key]]
    if differ:
        raise SystemExit(f"--add: the committed results differ in {', '.join(differ)} "
                         f"({', '.join(f'{k}={results[k]}' for k in differ)}); pass the same or run without --add")
    return {"rows": [with_int_budgets(r) for r in results["scenarios"]],
            "columns": results.get("proposer_columns", {}),
            "machine": results.get("other_columns_machine") or previous["machine"]}


def save(settings: dict, rows: list[dict], columns: dict, other_columns_machine: dict | None, bench_run: RunStart,
         results_dir: Path = RESULTS_DIR, name: str = "search_quality") -> None:
    behind = [{"scenario": r["scenario"], **item} for r in rows for item in r["behind_tuned_tpe"]]
    payload = {**settings, "searchers": list(SEARCHERS), "proposer_columns": columns, "scenarios": rows,
               "behind_tuned_tpe": behind}
    if other_columns_machine:  # --add: the other columns are the committed ones, measured there
        payload["other_columns_machine"] = other_columns_machine
    write_results(name, payload, bench_run, results_dir)


if __name__ == "__main__":
    sys.exit(main())
