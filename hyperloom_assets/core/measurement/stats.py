"""Statistics for small samples: Student-t intervals, launch-level comparisons, spread. Pure code.

A comparison of two server configurations has two levels of noise: repeats on one
server vary, and every launch carries an offset of its own (on the 2-core vLLM CPU host
two launches of one config differed by 25%). Treating repeats on one server as
independent leaves the launch offset out and makes noise look like a gain, so configs
are compared launch by launch: see `launch_gain_interval`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scipy.stats import t as student_t

from hyperloom_assets.core.models import Frozen

# A config's evidence: one list of per-repeat values per launch of it.
Launches = list[list[float]]


class LaunchNoise(Frozen):
    """A pooled estimate of the launch-to-launch variance of log launch means, from earlier runs."""

    variance: float
    dof: int


def t_critical(confidence: float, dof: float) -> float:
    """Two-sided Student-t critical value; infinite without a degree of freedom."""
    if dof <= 0:
        return math.inf
    return float(student_t.ppf(0.5 + confidence / 2, dof))


def mean_ci95(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% interval; a single value has a zero-width interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t_critical(0.95, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def repeats_of(launches: Launches) -> list[float]:
    """Every repeat of every launch, in order."""
    return [value for launch in launches for value in launch]


def _log_means(launches: Launches) -> list[float]:
    means = [statistics.fmean(launch) for launch in launches]
    if any(m <= 0 for m in means):
        raise ValueError(f"every launch needs a positive mean throughput, got {means}")
    return [math.log(m) for m in means]


def between_launch_variance(configs: Sequence[Launches], prior: LaunchNoise | None = None) -> tuple[float, int]:
    """Pooled variance of log launch means within each config, and its degrees of freedom.

    Configs differ by their effects; launches of one config differ only by noise, so
    every config launched twice or more adds to one estimate of the launch-mean variance;
    a prior from earlier runs of the same host, engine and model adds its own.
    """
    squares, dof = (prior.variance * prior.dof, prior.dof) if prior is not None else (0.0, 0)
    for launches in configs:
        if len(launches) >= 2:
            squares += (len(launches) - 1) * statistics.variance(_log_means(launches))
            dof += len(launches) - 1
    return (squares / dof if dof else 0.0), dof


def pooled_launch_noise(groups: Sequence[Sequence[float]]) -> LaunchNoise | None:
    """The launch noise of launch means grouped by config and run; None with no group of two."""
    configs = [[[mean] for mean in group] for group in groups if len(group) >= 2 and all(m > 0 for m in group)]
    variance, dof = between_launch_variance(configs)
    return LaunchNoise(variance=variance, dof=dof) if dof else None


def within_launch_floor(configs: Sequence[Launches]) -> float:
    """The launch-mean variance that repeats alone imply: no launch can vary less than this.

    Pooled relative within-launch variance (the delta method's var(log y)) over the mean
    number of repeats per launch.
    """
    squares, dof, repeats, count = 0.0, 0, 0, 0
    for launches in configs:
        for launch in launches:
            repeats, count = repeats + len(launch), count + 1
            if len(launch) >= 2:
                squares += (len(launch) - 1) * statistics.variance(launch) / statistics.fmean(launch) ** 2
                dof += len(launch) - 1
    return squares / dof / (repeats / count) if dof else 0.0


def launch_gain_interval(variant: Launches, best: Launches, others: Sequence[Launches] = (),
                         confidence: float = 0.95, prior: LaunchNoise | None = None) -> tuple[float, float, float]:
    """Gain of `variant` over `best` with its interval, in percent: (gain, low, high).

    The gain is the ratio of geometric means of launch means. The interval is a
    Student-t interval on the log scale with the launch as the unit: the variance of a
    launch mean is estimated from every config launched more than once (`variant`,
    `best` and `others`: the run's other evidence), never below what the repeats alone
    imply, with the between-launch degrees of freedom. Without any config launched
    twice there is no estimate and the interval is infinite.
    """
    if not variant or not best:
        raise ValueError("a comparison needs at least one launch on each side")
    diff = statistics.fmean(_log_means(variant)) - statistics.fmean(_log_means(best))
    configs = [variant, best, *others]
    # the gain is rounded far below any threshold so that 101 over 100 is exactly +1%
    gain = round(_pct(diff), 9)
    between, dof = between_launch_variance(configs, prior)
    if dof == 0:
        return gain, -100.0, math.inf
    launch_variance = max(between, within_launch_floor(configs))
    half = t_critical(confidence, dof) * math.sqrt(launch_variance * (1 / len(variant) + 1 / len(best)))
    return gain, _pct(diff - half), _pct(diff + half)


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


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
