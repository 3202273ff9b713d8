"""SLO verdicts: their error rate, their power, and what shared step time does to them (synthetic latency).

A launch's verdict on one limit is the statistic's 95% upper bound against it (met), its 95%
lower bound over it (shown breaking), or neither (slo_verdict.py); the bounds are the
project's own (`slo_statistic.upper_bound` / `lower_bound`). Each row draws a launch's
requests from a latency model, again and again, scaled so the true statistic is 1, and reads
every limit off the same draws: at the limit (true statistic = limit) a "met" is a false one,
the error rate, at most 5% by the bound's coverage; at 80% and 90% of the limit "met" is the
power, which `slo_power.requests_for_power` sizes at 90% for a lognormal latency of log spread
0.5; at 80% a "shown breaking" is false; at 125% it is the power to show a break.

Sizing: "minimum" is the fewest requests that have a bound (`slo_statistic.min_samples`: p99
299, where the bound is the largest request), "power" the fewest that give the power.

Independence: requests of one batch share its step time. The model draws requests in waves
of 32 (one closed-loop concurrency's batch), each request exp(σ_w·Z_wave + σ_i·Z_own), so the
requests of a wave share a factor; its marginal latency is lognormal of log spread √(σ_w² + σ_i²),
whose true quantile the coverage is of. Beside the verdict's bound over every request it reads
two that the batch structure cannot inflate: one request per wave (thinned), and the bound of
the per-wave maxima (valid under any dependence inside a wave: a request is never over its
wave's maximum), each at as many waves as the power sizing asks requests.

    .venv/bin/python benchmarks/slo_power.py [--reps 2000]

Prints two tables and writes benchmarks/results/slo_power.json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.page_sections import table  # noqa: E402
from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.core.measurement.slo_power import requests_for_power  # noqa: E402
from hyperloom_assets.core.measurement.slo_statistic import label, lower_bound, min_samples, upper_bound  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/core/measurement/percentile_bound.py",
             "hyperloom_assets/core/measurement/slo_statistic.py",
             "hyperloom_assets/core/measurement/slo_power.py")

STATISTICS = (50, 90, 95, 99, "mean")
WAVE = 32  # requests sharing one step-time factor
# (name, σ_w, σ_i): the log spread shared by a wave and a request's own; each marginal is σ 0.5.
WAVE_MODELS = (("independent, lognormal σ 0.5", 0.0, 0.5),
               ("wave of 32 shares half the log variance", 0.5 / np.sqrt(2), 0.5 / np.sqrt(2)),
               ("wave of 32 shares 3/4 of the log variance", 0.5 * np.sqrt(0.75), 0.25))


def _lognormal(sigma: float) -> tuple[Callable, Callable]:
    """(draw(rng, shape), the true statistic) of a lognormal latency of log spread sigma."""
    def truth(statistic):
        if statistic == "mean":
            return float(np.exp(sigma ** 2 / 2))
        return float(np.exp(sigma * norm.ppf(statistic / 100)))
    return (lambda rng, shape: rng.lognormal(0.0, sigma, shape)), truth


def _exponential() -> tuple[Callable, Callable]:
    def truth(statistic):
        return 1.0 if statistic == "mean" else float(-np.log(1 - statistic / 100))
    return (lambda rng, shape: rng.exponential(1.0, shape)), truth


MODELS = {"lognormal σ 0.5": _lognormal(0.5), "lognormal σ 0.3": _lognormal(0.3),
          "lognormal σ 1": _lognormal(1.0), "exponential": _exponential()}


def bounds(samples: np.ndarray, statistic) -> tuple[np.ndarray, np.ndarray]:
    """Each replication's (upper, lower) bound, nan where it has none."""
    ordered = np.sort(samples, axis=1)
    pairs = [(upper_bound(row, statistic), lower_bound(row, statistic)) for row in ordered]
    return (np.array([np.nan if u is None else u for u, _ in pairs]),
            np.array([np.nan if v is None else v for _, v in pairs]))


def rate(flags: np.ndarray) -> float:
    return round(float(np.mean(flags)), 4)


def power_rows(reps: int, rng: np.random.Generator) -> list[dict]:
    rows = []
    for statistic in STATISTICS:
        for model, (draw, truth) in MODELS.items():
            for sizing, n in (("minimum", min_samples(statistic)), ("power", requests_for_power(statistic))):
                upper, lower = bounds(draw(rng, (reps, n)) / truth(statistic), statistic)
                met = {f: (upper <= 1 / f) for f in (1.0, 0.9, 0.8)}  # nan compares False: no bound, no "met"
                rows.append({"statistic": label(statistic), "model": model, "sizing": sizing, "requests": n,
                             "false_met_at_limit": rate(met[1.0]), "met_at_90pct": rate(met[0.9]),
                             "met_at_80pct": rate(met[0.8]), "false_broken_at_80pct": rate(lower > 1 / 0.8),
                             "broken_at_125pct": rate(lower > 1 / 1.25)})
    return rows


def _waves(rng: np.random.Generator, reps: int, n: int, shared: float, own: float) -> np.ndarray:
    waves = -(-n // WAVE)
    factor = np.repeat(rng.standard_normal((reps, waves)), WAVE, axis=1)[:, :n]
    return np.exp(shared * factor + own * rng.standard_normal((reps, n)))


def independence_rows(reps: int, rng: np.random.Generator) -> list[dict]:
    rows = []
    for statistic in (95, 99):
        sized = requests_for_power(statistic)
        for model, shared, own in WAVE_MODELS:
            truth = float(np.exp(np.hypot(shared, own) * norm.ppf(statistic / 100)))
            readings = []
            for n in (min_samples(statistic), sized):  # the verdict's bound, over every request
                readings.append((f"every request ({n})", n, bounds(_waves(rng, reps, n, shared, own), statistic)[0]))
            many = _waves(rng, max(reps // 4, 50), sized * WAVE, shared, own)  # as many waves as requests above
            readings.append(("one request per wave", sized * WAVE, bounds(many[:, ::WAVE], statistic)[0]))
            maxima = many.reshape(len(many), sized, WAVE).max(axis=2)
            readings.append(("per-wave maxima", sized * WAVE, bounds(maxima, statistic)[0]))
            for bound, requests, upper in readings:
                rows.append({"statistic": label(statistic), "model": model, "bound": bound, "requests": requests,
                             "nominal": 0.95, "coverage": rate(upper >= truth),
                             "met_at_80pct": rate(upper <= truth / 0.8)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000, help="replications per row")
    parser.add_argument("--seed", type=int, default=47)
    args, run = start_run(parser)
    rng = np.random.default_rng(args.seed)
    power = power_rows(args.reps, rng)
    print(table(["statistic", "model", "sizing", "requests", "false met at limit", "met at 90%", "met at 80%",
                 "false broken at 80%", "broken at 125%"],
                [[r["statistic"], r["model"], r["sizing"], r["requests"], r["false_met_at_limit"], r["met_at_90pct"],
                  r["met_at_80pct"], r["false_broken_at_80pct"], r["broken_at_125pct"]] for r in power]))
    waves = independence_rows(args.reps, rng)
    print()
    print(table(["statistic", "model", "bound over", "requests", "nominal", "coverage", "met at 80%"],
                [[r["statistic"], r["model"], r["bound"], r["requests"], r["nominal"], r["coverage"],
                  r["met_at_80pct"]] for r in waves]))
    write_results("slo_power", {"reps": args.reps, "seed": args.seed, "wave": WAVE, "power": power,
                                "independence": waves}, run)


if __name__ == "__main__":
    main()
