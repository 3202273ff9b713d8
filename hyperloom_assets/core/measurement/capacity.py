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

A rate probe's requests are timed from their scheduled arrival (workload.latency_from), so
the time a request waits for one of the client's concurrency slots counts, and a rate probe
also breaks when the client could not send at the offered rate (rate_shortfall): above what
the cap sustains, the arrivals queue at the client while the server's own latency stays flat.
A probe whose round fails (an error, its time limit) counts as broken, its reason kept; a
server gone with it ends the search. The answer is an interval: the highest load that met
and the lowest that broke (`broke_at`); where nothing broke it is only a lower bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from hyperloom_assets.core.measurement.limits import ROUND_ALLOWANCE_S
from hyperloom_assets.core.measurement.measurement import ArrivalLoad
from hyperloom_assets.core.measurement.slo_statistic import min_samples
from hyperloom_assets.core.models import Strict

Unit = Literal["concurrency", "request_rate"]
CEILING_FACTOR = 4  # the search stops doubling here: "at least this much" is said as such
RESOLUTION = 0.125  # stop when the lowest load that broke is within this share above the highest that met
PROBE_WAVES = 2  # a concurrency probe's prompts: this many waves of the load, at least a bound's worth
# A rate probe's client must send within this share of the offered rate, or 2/sqrt(n) of its n
# sessions where wider: n Poisson arrivals span n/rate with a relative spread of 1/sqrt(n).
RATE_TOLERANCE = 0.05
# ... and its queue may grow over the round by at most this share of its sessions (2 at least):
# measured against the round's own arrivals, the queue carries no Poisson spread of the rate.
QUEUE_GROWTH_SHARE = 0.05
# A probe's round may take this many times what the baseline's measuring took per request
# (more where its load is below the target's), plus each round's allowance; past it, it broke.
PROBE_LIMIT_FACTOR = 4.0


class Probe(Strict):
    load: float
    met: bool
    why: str
    failed: bool = False  # its round failed (an error, its time limit): counted as broken, `why` says how
    last: bool = False  # it left the server unable to take another probe (the server is gone): the search ends


class Capacity(Strict):
    """One config's highest load within the SLO (0: not even the lowest load probed)."""
    load: float
    unit: Unit
    probes: list[Probe]
    at_ceiling: bool  # met at the highest load the search may probe: the capacity is at least `load`
    broke_at: float | None = None  # the lowest load probed that broke the SLO

    def bracket(self) -> list[float | None]:
        """[the highest load that met, the lowest that broke]: the capacity lies between them
        (None above: nothing broke, so `load` is only a lower bound)."""
        return [self.load, self.broke_at]


class CapacityAtSlo(Strict):
    """The `capacity_at_slo` metadata: each side's capacity (None: not measured) and its unit."""
    baseline: float | None
    stack: float | None
    unit: Unit
    baseline_probes: list[Probe] = []
    stack_probes: list[Probe] = []
    at_ceiling: list[str] = []  # the sides that met it at the highest load the search may probe
    baseline_broke_at: float | None = None  # the lowest load that broke it, each side
    stack_broke_at: float | None = None
    at_least: list[str] = []  # the sides whose capacity is a lower bound: nothing probed broke it
    baseline_bracket: list[float | None] | None = None  # [highest load that met, lowest that broke], each side
    stack_bracket: list[float | None] | None = None
    resolution: float = RESOLUTION  # the bracket the search narrows to: this share of the load (or one stream)

    def bracketed(self, side: str) -> bool:
        """Whether a load broke the side's SLO, so its capacity lies between two loads probed."""
        return getattr(self, side) is not None and getattr(self, f"{side}_broke_at") is not None

    def gain_pct(self) -> float | None:
        """The stack's capacity over the baseline's, only where both are bracketed: a lower bound
        over a lower bound, or over an interval, is no gain."""
        if not (self.bracketed("baseline") and self.bracketed("stack")) or not self.baseline:
            return None
        return 100 * (self.stack / self.baseline - 1)

    def gain_at_least_pct(self) -> float | None:
        """Where only the stack is a lower bound: the gain it shows at least (the stack's lower
        bound over the load that broke the baseline), None where that shows none."""
        if not self.bracketed("baseline") or self.stack is None or self.bracketed("stack"):
            return None
        gain = 100 * (self.stack / self.baseline_broke_at - 1)
        return gain if gain > 0 else None


def rate_shortfall(arrivals: ArrivalLoad) -> str | None:
    """Why a rate probe's client did not keep up with the offered rate, or None: it sent more than
    the noise below it, or its queue of arrivals waiting for a slot grew over the round."""
    n = arrivals.sessions
    tolerance = max(RATE_TOLERANCE, 2 / math.sqrt(n))
    if arrivals.achieved_rate < arrivals.offered_rate * (1 - tolerance):
        return (f"the client sent {arrivals.achieved_rate:.3g} req/s of the {arrivals.offered_rate:.3g} offered "
                f"(more than {100 * tolerance:.0f}% short over {n} requests)")
    if arrivals.queue_end - arrivals.queue_start > max(QUEUE_GROWTH_SHARE * n, 2):
        return (f"the client's queue grew from {arrivals.queue_start:.1f} to {arrivals.queue_end:.1f} requests "
                f"waiting for a slot over the round")
    return None


def probe_limit_s(baseline_measuring_s: float, baseline_requests: int, probe_requests: int, start: float,
                  load: float, rounds: int = 2) -> float:
    """A probe's time limit (its warm-up and round): PROBE_LIMIT_FACTOR times the baseline's measuring
    per request, for the probe's requests, times start/load below the target's own load (fewer in
    flight take longer each), plus each round's allowance."""
    per_request = baseline_measuring_s / max(1, baseline_requests)
    return (PROBE_LIMIT_FACTOR * per_request * probe_requests * max(1.0, start / load)
            + rounds * ROUND_ALLOWANCE_S)


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


def find_capacity(meets: Callable[[float], Probe], start: float, unit: Unit, max_probes: int) -> Capacity:
    """Bisect on `meets(load)` -> its Probe from the target's own load `start`, in `max_probes` rounds at most."""
    ceiling = CEILING_FACTOR * start
    low, high = 0.0, None  # the highest load that met, the lowest that broke
    probes: list[Probe] = []
    load: float | None = start
    while load is not None and len(probes) < max_probes:
        probe = meets(load)
        probes.append(probe)
        if probe.met and not probe.failed:
            low = load  # every probe lies above the highest load that met
        else:
            high = load  # and below the lowest that broke
        if probe.last:
            break
        if low == 0.0:
            smallest = 1 if unit == "concurrency" else start / 2 ** max_probes
            load = None if high <= smallest else (max(1, math.floor(high / 2)) if unit == "concurrency" else high / 2)
        else:
            load = _next_load(low, high, ceiling, unit)
    return Capacity(load=low, unit=unit, probes=probes, at_ceiling=high is None and low >= ceiling, broke_at=high)


def probe_prompts(load: float, unit: Unit, percentile: int | str, contract_prompts: int | None) -> int:
    """Prompts in a probe's round: enough waves of the load, and enough requests for the percentile's bound."""
    if unit == "concurrency":
        return max(PROBE_WAVES * int(load), min_samples(percentile))
    return max(contract_prompts or 0, min_samples(percentile))
