"""A search-quality row's figures from its per-seed shares: medians, intervals, where the planner is behind.

Code only benchmarks use. Per searcher and budget: the median share over seeds with its
percentile-bootstrap 95% interval (intervals.py); per planner column and budget, its
median minus tuned TPE's (and, under an SLO, minus constrained TPE's) with the paired
bootstrap's 95% interval; `behind_tuned_tpe` lists every budget where that difference is
below zero (by more than LEVEL_WITHIN), `clearly` when its whole interval is.
"""

from __future__ import annotations

from benchmarks.support.intervals import median_interval, paired_difference

PLANNER = "planner+history"  # the product on a host it served before: the store pools earlier launch noise
CONTINUED = "planner+continuation"  # planner+history going on past its rule plan with TPE (planning/continuation.py)
PLANNERS = (CONTINUED, PLANNER, "planner")  # the columns held against the peers (and a proposer column, when there is one)
TUNED = "tpe-tuned"
CONSTRAINED = "tpe-constrained"
GP = "gp"  # Optuna's GPSampler, its defaults (constrained under an SLO)
LEVEL_WITHIN = 5e-4  # a median difference smaller than this (0.05 points of share) is level, not behind

Shares = dict[str, dict[int, list[float]]]  # searcher -> budget -> each seed's share


def references(shares: Shares) -> list[str]:
    """The peers a planner is held against: tuned TPE, constrained TPE where it ran (an SLO), and GP where it ran."""
    return [name for name in (TUNED, CONSTRAINED, GP) if name in shares]


def interval_table(shares: Shares) -> dict[str, dict[int, dict[str, float]]]:
    return {name: {b: median_interval(v) for b, v in by.items()} for name, by in shares.items()}


def against_tpe(shares: Shares, planners: list[str]) -> dict[str, dict[str, dict[int, dict[str, float]]]]:
    """Planner column -> TPE column -> budget -> {diff, low, high} (paired over seeds)."""
    return {name: {ref: {b: paired_difference(shares[name][b], shares[ref][b]) for b in shares[name]}
                   for ref in references(shares)} for name in planners if name in shares}


def behind(differences: dict[str, dict[str, dict[int, dict[str, float]]]]) -> list[dict]:
    """Every (planner column, TPE column, budget) where the planner's median share is below TPE's."""
    return [{"searcher": name, "against": ref, "budget": b, "diff": round(d["diff"], 4), "low": round(d["low"], 4),
             "high": round(d["high"], 4), "clearly": d["high"] < 0}
            for name, by_ref in differences.items() for ref, by_budget in by_ref.items()
            for b, d in by_budget.items() if d["diff"] < -LEVEL_WITHIN]


def summarise(shares: Shares, extra_planners: tuple[str, ...] = ()) -> dict:
    """The row's medians, intervals, standing against default TPE, and differences from tuned TPE."""
    intervals = interval_table(shares)
    medians = {name: {b: interval["median"] for b, interval in by.items()} for name, by in intervals.items()}
    planners = [*PLANNERS, *extra_planners]
    differences = against_tpe(shares, planners)
    return {
        "median_share": medians,
        "interval": intervals,
        "ahead_of_tpe": {name: {b: medians[name][b] > medians["tpe"][b] for b in medians[name]}
                         for name in planners if name in medians and "tpe" in medians},
        "vs_tuned_tpe": differences,
        "behind_tuned_tpe": behind(differences),
    }
