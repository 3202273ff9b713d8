"""One noisy launch of a point whose truth is known: throughput, latency and telemetry alike. Pure code.

Code only benchmarks use. The noise model is the search-quality benchmark's launch-level
one (Noise): a launch has its own relative offset (launch_sd) and each of its repeats its
own noise around that (repeat_sd). Everything a launch reports carries it, not only the
throughput the decisions compare:
- throughput: each repeat is truth * (1 + offset) * (1 + repeat noise);
- latency: a launch that runs slow runs every request slow, so each percentile (and its
  upper bound) is the truth divided by the launch's throughput factor, times the noise of
  percentiles pooled over `repeats` rounds (repeat_sd / sqrt(repeats));
- telemetry (what the planner's diagnosis reads: KV usage, running and waiting requests,
  preemptions, prefix hits, prefill and decode time): each figure with its own draw of the
  same model, a launch offset and the pooled repeat noise; counts stay whole numbers,
  percentages within 0..100, hits within queries.
Every draw comes from one stream a launch is given (Launches keys it by seed, point and
how often the searcher launched that point), throughput first, so every searcher that
launches a point for the n-th time sees the same numbers (common random numbers).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hyperloom_assets.core.measurement.latency import Latency, Percentiles
from hyperloom_assets.core.measurement.telemetry import Telemetry

PERCENT_FIELDS = ("kv_usage_pct_mean", "kv_usage_pct_max")
LEVEL_FIELDS = ("running_mean", "running_max", "waiting_mean", "waiting_max", "prefill_s", "decode_s")
COUNT_FIELDS = ("preemptions", "prefix_queries", "prefix_hits")


@dataclass(frozen=True)
class Noise:
    launch_sd: float  # a launch's own offset, relative
    repeat_sd: float  # each repeat's noise on that launch, relative
    repeats: int = 3

    @property
    def pooled_sd(self) -> float:
        """The relative noise of a figure pooled over a launch's repeats."""
        return self.repeat_sd / self.repeats ** 0.5


@dataclass(frozen=True)
class LaunchDraw:
    """One launch's noise: its repeats' throughputs, and the factor on its latency."""
    repeats: list[float]
    latency_factor: float


def factor(rng: random.Random, noise: Noise) -> float:
    """A figure's multiplier for one launch: its launch offset and its repeats' pooled noise."""
    return max((1 + rng.gauss(0, noise.launch_sd)) * (1 + rng.gauss(0, noise.pooled_sd)), 1e-3)


def draw_launch(truth_tok_s: float, rng: random.Random, noise: Noise) -> LaunchDraw:
    launch = 1 + rng.gauss(0, noise.launch_sd)
    offset = truth_tok_s * launch
    repeats = [max(offset * (1 + rng.gauss(0, noise.repeat_sd)), 1e-6) for _ in range(noise.repeats)]
    latency_factor = max((1 + rng.gauss(0, noise.pooled_sd)) / max(launch, 1e-3), 1e-3)
    return LaunchDraw(repeats=repeats, latency_factor=latency_factor)


def _scaled(p: Percentiles, by: float) -> Percentiles:
    def times(v: float | None) -> float | None:
        return None if v is None else v * by
    return p.model_copy(update={"p50": p.p50 * by, "p90": p.p90 * by, "p95": p.p95 * by, "p99": p.p99 * by,
                                "p90_upper": times(p.p90_upper), "p95_upper": times(p.p95_upper),
                                "p99_upper": times(p.p99_upper)})


def noisy_latency(latency: Latency | None, by: float) -> Latency | None:
    """Every percentile of every metric, bounds included, times the launch's latency factor."""
    if latency is None:
        return None
    return latency.model_copy(update={name: _scaled(getattr(latency, name), by)
                                      for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")})


def noisy_telemetry(telemetry: Telemetry | None, rng: random.Random, noise: Noise) -> Telemetry | None:
    """Each figure the engine reports, with its own launch-level draw (fields it lacks stay None)."""
    if telemetry is None:
        return None
    update: dict = {}
    for name in (*PERCENT_FIELDS, *LEVEL_FIELDS, *COUNT_FIELDS):
        value = getattr(telemetry, name)
        by = factor(rng, noise)  # drawn for every field, so the stream does not depend on which are set
        if value is None:
            continue
        if name in PERCENT_FIELDS:
            update[name] = min(max(value * by, 0.0), 100.0)
        elif name in COUNT_FIELDS:
            update[name] = max(round(value * by), 0)
        else:
            update[name] = max(value * by, 0.0)
    if update.get("prefix_hits") is not None and update.get("prefix_queries") is not None:
        update["prefix_hits"] = min(update["prefix_hits"], update["prefix_queries"])
    return telemetry.model_copy(update=update)
