"""Capacity at the SLO: the highest load a config serves within it, by bisection. Pure code.

The load is the workload's concurrency, or its request rate when it sets one (then the
concurrency stays the cap on requests in flight). Each probe is a fresh round on a server
that is up, judged by slo_verdict.py on that round's requests alone. Latency is taken to
grow with load: from the target's own load the search doubles while the SLO holds (up to
CEILING_FACTOR times it) or halves while it breaks, then bisects between the highest
load that met and the lowest that broke, until they are within RESOLUTION of each other
or the SLO's `capacity_probes` rounds are spent (the answer then says where it broke). Every probe lies between the highest load that met and the
lowest that broke, so a noisy probe only moves one of the two: the answer is the highest
load seen to meet the SLO, all of them below the lowest seen to break it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from hyperloom_assets.core.measurement.percentile_bound import min_samples
from hyperloom_assets.core.models import Strict

Unit = Literal["concurrency", "request_rate"]
CEILING_FACTOR = 4  # the search stops doubling here: "at least this much" is said as such
RESOLUTION = 0.125  # stop when the lowest load that broke is within this share above the highest that met
PROBE_WAVES = 2  # a concurrency probe's prompts: this many waves of the load, at least a bound's worth


class Probe(Strict):
    load: float
    met: bool
    why: str


class Capacity(Strict):
    """One config's highest load within the SLO (0: not even the lowest load probed)."""
    load: float
    unit: Unit
    probes: list[Probe]
    at_ceiling: bool  # met at the highest load the search may probe: the capacity is at least `load`
    broke_at: float | None = None  # the lowest load probed that broke the SLO


class CapacityAtSlo(Strict):
    """The `capacity_at_slo` metadata: each side's capacity (None: not measured) and its unit."""
    baseline: float | None
    stack: float | None
    unit: Unit
    baseline_probes: list[Probe] = []
    stack_probes: list[Probe] = []
    at_ceiling: list[str] = []  # the sides whose capacity is a lower bound
    baseline_broke_at: float | None = None  # the lowest load that broke it, each side
    stack_broke_at: float | None = None

    def gain_pct(self) -> float | None:
        if not self.baseline or self.stack is None:
            return None
        return 100 * (self.stack / self.baseline - 1)


def _next_load(low: float, high: float | None, ceiling: float, unit: Unit) -> float | None:
    """The next load to probe, or None when the search is done."""
    if high is None:
        if low >= ceiling:
            return None
        return min(2 * low, ceiling)
    if high - low <= max(RESOLUTION * high, 1 if unit == "concurrency" else 0):
        return None
    middle = (low + high) / 2
    if unit == "concurrency":
        middle = math.floor(middle)
        if middle <= low:
            return None
    return middle


def find_capacity(meets: Callable[[float], tuple[bool, str]], start: float, unit: Unit, max_probes: int) -> Capacity:
    """Bisect on `meets(load)` -> (met, why) from the target's own load `start`, in `max_probes` rounds at most."""
    ceiling = CEILING_FACTOR * start
    low, high = 0.0, None  # the highest load that met, the lowest that broke
    probes: list[Probe] = []
    load: float | None = start
    while load is not None and len(probes) < max_probes:
        met, why = meets(load)
        probes.append(Probe(load=load, met=met, why=why))
        if met:
            low = load  # every probe lies above the highest load that met
        else:
            high = load  # and below the lowest that broke
        if low == 0.0:
            smallest = 1 if unit == "concurrency" else start / 2 ** max_probes
            load = None if high <= smallest else (max(1, math.floor(high / 2)) if unit == "concurrency" else high / 2)
        else:
            load = _next_load(low, high, ceiling, unit)
    return Capacity(load=low, unit=unit, probes=probes, at_ceiling=high is None and low >= ceiling, broke_at=high)


def probe_prompts(load: float, unit: Unit, percentile: int, contract_prompts: int) -> int:
    """Prompts in a probe's round: enough waves of the load, and enough requests for the percentile's bound."""
    if unit == "concurrency":
        return max(PROBE_WAVES * int(load), min_samples(percentile))
    return max(contract_prompts, min_samples(percentile))
