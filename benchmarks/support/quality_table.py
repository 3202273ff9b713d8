"""The search-quality benchmark's table: its budgets, its searcher columns and how a result prints.

Split from benchmarks/search_quality.py, which runs the scenarios; this reads a result's rows
(fresh, or read back from benchmarks/results/search_quality.json) and prints them.
"""

from __future__ import annotations

from benchmarks.support.quality_summary import CONSTRAINED, CONTINUED, GP, PLANNER, TUNED

BUDGETS = [5, 10, 20, 40, 80]
CONTINUED_GP = "planner+continuation-gp"  # the same with Optuna's GP sampler past the plan (--searchers only)
SEARCHERS = (CONTINUED, CONTINUED_GP, PLANNER, "planner", "planner-single+history", "planner-single", "tpe", TUNED,
             CONSTRAINED, GP, "random")
DEFAULT_SEARCHERS = tuple(name for name in SEARCHERS if name != CONTINUED_GP)
AHEAD_UP_TO = 20  # the goal: ahead of TPE at every budget up to this many launches


def with_int_budgets(row: dict) -> dict:
    """A row read back from JSON, its shares' per-budget keys numbers again."""
    return {**row, "shares": {name: {int(b): v for b, v in by.items()} for name, by in row["shares"].items()}}


def columns_of(row: dict) -> list[str]:
    return [name for name in (*SEARCHERS, *row.get("proposer", {})) if name in row["shares"]]


def print_table(rows: list[dict]) -> None:
    print(f"median share of the attainable gain at a budget of B launches (the operator's included) [95% bootstrap "
          f"interval over seeds]; * = {PLANNER} not ahead of default TPE at a budget up to {AHEAD_UP_TO}; "
          "under an SLO a pick that breaks it (noise-free) scores 0")
    if any(r.get("proposer") for r in rows):
        print(f"proposer:<label> = {PLANNER} with the model's rounds first; +/- = above/below {PLANNER}; "
              "under it the model's calls, rounds (fell back) and its variants tried (kept), all seeds summed")
    width = max(22, *(len(name) for r in rows for name in columns_of(r)))
    header = f"{'scenario':38} {'points':>6} {'gain':>6} {'searcher':>{width}} " + " ".join(
        f"{'B=' + str(b):>15}" for b in BUDGETS)
    print(header)
    print("-" * len(header))
    for r in rows:
        gain = f"{100 * (r['best_tok_s'] / r['baseline_tok_s'] - 1):5.0f}%"
        for index, name in enumerate(columns_of(r)):
            lead = f"{r['scenario']:38} {r['points']:6d} {gain:>6}" if index == 0 else " " * 52
            print(f"{lead} {name:>{width}} " + " ".join(_cell(r, name, b) for b in BUDGETS))
            if name in r.get("proposer", {}):
                a = r["proposer"][name]
                print(f"{' ' * 52} {'':>{width}} {a['llm_calls']} calls, {a['rounds']} rounds ({a['rounds_fell_back']} "
                      f"fell back, {a['calls_failed']} on a failed call), {a['llm_trials']} llm trials "
                      f"({a['llm_keepers']} kept) over {a['seeds']} seeds")
    print_behind(rows)


def _cell(row: dict, name: str, budget: int) -> str:
    i = row["interval"][name][budget]
    text = f"{100 * i['median']:.0f}% [{100 * i['low']:.0f},{100 * i['high']:.0f}]"
    return f"{text:>14}{_mark(row, name, budget)}"


def print_behind(rows: list[dict]) -> None:
    """Where a planner column's median is below tuned (or constrained) TPE's, with the paired interval."""
    print(f"behind tuned TPE (median share difference, paired 95% bootstrap interval; ! = the whole interval below 0):")
    found = [(r["scenario"], item) for r in rows for item in r["behind_tuned_tpe"]]
    for scenario, item in found:
        print(f"  {scenario} B={item['budget']}: {item['searcher']} - {item['against']} = {100 * item['diff']:+.1f} "
              f"points [{100 * item['low']:+.1f}, {100 * item['high']:+.1f}]{' !' if item['clearly'] else ''}")
    if not found:
        print("  nowhere")


def _mark(row: dict, name: str, budget: int) -> str:
    if name == PLANNER and PLANNER in row["ahead_of_tpe"]:
        return "*" if budget <= AHEAD_UP_TO and not row["ahead_of_tpe"][PLANNER][budget] else " "
    if name in row.get("proposer", {}):
        delta = row["median_share"][name][budget] - row["median_share"][PLANNER][budget]
        return "+" if delta > 1e-9 else "-" if delta < -1e-9 else " "
    return " "
