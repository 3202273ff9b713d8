"""Statistics for small samples: Student-t intervals and spread. Pure code."""

from __future__ import annotations

import math
import statistics

# Two-sided 95% Student-t critical values by degrees of freedom; beyond 30, ~normal.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
        16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
        23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}


def t95(dof: float) -> float:
    """Critical value; fractional dof (Welch) rounds down, the conservative side."""
    if dof < 1:
        return math.inf
    whole = int(math.floor(dof))
    return _T95.get(whole, 1.96 if whole > 120 else 2.0)


def mean_ci95(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% interval; a single value has a zero-width interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def diff_ci95(variant: list[float], base: list[float]) -> tuple[float, float, float]:
    """Welch interval of mean(variant) - mean(base)."""
    diff = statistics.fmean(variant) - statistics.fmean(base)
    if len(variant) < 2 or len(base) < 2:
        return diff, -math.inf, math.inf
    va = statistics.variance(variant) / len(variant)
    vb = statistics.variance(base) / len(base)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    dof = (va + vb) ** 2 / ((va**2 / (len(variant) - 1)) + (vb**2 / (len(base) - 1)))
    half = t95(dof) * se
    return diff, diff - half, diff + half


def spread_pct(values: list[float]) -> float:
    """(max - min) / mean, in percent: the convergence check's measure."""
    mean = statistics.fmean(values)
    return 100.0 * (max(values) - min(values)) / mean if mean else 0.0


def percentile(values: list[float], pct: float) -> float:
    """Linear-interpolated percentile (numpy's default), 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
