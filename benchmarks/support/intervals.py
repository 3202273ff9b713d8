"""Medians over seeds with percentile-bootstrap 95% intervals, and paired differences. Pure code.

Code only benchmarks use. A resample draws as many seeds as there are, with replacement,
from a fixed-seed generator (numpy's PCG64 at BOOTSTRAP_SEED), so the same shares give the
same intervals. A difference between two searchers resamples the seeds in pairs: both
medians come from the same resampled seeds, as both searchers met the same noise
(common random numbers) on each seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RESAMPLES = 2_000
BOOTSTRAP_SEED = 20_251_206
LEVEL = 0.95


def _indices(n: int, resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _bounds(stats: np.ndarray) -> tuple[float, float]:
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(stats, [tail, 100 - tail])
    return float(low), float(high)


def median_interval(values: Sequence[float], resamples: int = RESAMPLES,
                    seed: int = BOOTSTRAP_SEED) -> dict[str, float]:
    """{median, low, high}: the median over seeds and its percentile-bootstrap 95% interval."""
    data = np.asarray(values, dtype=float)
    medians = np.median(data[_indices(len(data), resamples, seed)], axis=1)
    low, high = _bounds(medians)
    return {"median": float(np.median(data)), "low": low, "high": high}


def paired_difference(a: Sequence[float], b: Sequence[float], resamples: int = RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> dict[str, float]:
    """{diff, low, high}: median(a) - median(b), the seeds resampled in pairs for its 95% interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired shares need the same seeds: {len(x)} and {len(y)}")
    picks = _indices(len(x), resamples, seed)
    diffs = np.median(x[picks], axis=1) - np.median(y[picks], axis=1)
    low, high = _bounds(diffs)
    return {"diff": float(np.median(x) - np.median(y)), "low": low, "high": high}
