"""Whether a config meets the target's latency SLO over the launches measured, on 95% bounds. Pure code.

Each limit the SLO sets (TTFT, TPOT, E2E) is held at the SLO's percentile (or mean) against
the 95% upper bound on that statistic (slo_statistic.py: distribution-free for a percentile,
a skewness-corrected t bound for the mean), launch by launch: a
launch's rounds are one sample of its requests, and launches are not pooled (each has
its own placement and warm state). The config meets the SLO when every launch's bound
is within every limit; a launch with too few requests for a bound does not meet it, and
the verdict says why. The figures reported are the worst launch's.

A verdict that is not `met` is either `broken`, where some launch's 95% lower bound is over a
limit too (that launch surely breaks it), or unclear: the bound is over the limit, the lower
bound under it, and the launch may well meet it. The climb reverts only what is shown
breaking (climb.py). Both readings hold for these launches, and only while a launch's
requests are independent draws of its latency (ASSUMPTION): requests of one batch share
its step time, and benchmarks/slo_power.py measures how far that lowers a bound's coverage.
A launch needs slo_power.requests_for_power requests for its verdict to have power.
"""

from __future__ import annotations

from hyperloom_assets.core.config.targets import SloStatistic, TargetSlo
from hyperloom_assets.core.measurement.latency import Latency, Percentiles
from hyperloom_assets.core.measurement.slo_power import AT_LIMIT, POWER, requests_for_power
from hyperloom_assets.core.measurement.slo_statistic import label, min_samples
from hyperloom_assets.core.models import Strict

METRICS = (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"), ("e2e_ms", "e2el_ms"))  # the SLO's name, Latency's
# What every verdict rests on, said beside it: the bounds' 95% is not about the next launch, and
# requests of one batch share step time, which lowers the coverage (benchmarks/slo_power.py).
ASSUMPTION = ("for these launches only, each launch's requests taken as independent draws of its latency "
              "(requests of one batch share step time, so the bounds cover less than 95% where that dominates)")


class SloVerdict(Strict):
    percentile: SloStatistic
    ttft_ms: float | None = None  # measured at the percentile, the worst launch's (None: no limit on it)
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    ttft_upper_ms: float | None = None  # the 95% upper bound at the percentile, the worst launch's
    tpot_upper_ms: float | None = None
    e2e_upper_ms: float | None = None
    ttft_lower_ms: float | None = None  # the 95% lower bound at the percentile, the worst launch's
    tpot_lower_ms: float | None = None
    e2e_lower_ms: float | None = None
    launches: int
    met: bool
    broken: bool = False  # shown breaking: some launch's lower bound over a limit (met False, broken False: unclear)
    why: str
    requests: int | None = None  # the fewest requests of a launch behind a limited metric
    requests_for_power: int | None = None  # what a launch needs to read a config at 80% of a limit as meeting it
    power: float = POWER  # how often it must: the target's slo.power
    assumption: str = ASSUMPTION

    def short(self) -> str:
        """One cell: met or missed, and each limited metric at the percentile with its upper bound."""
        parts = []
        for name, _ in METRICS:
            measured, upper = getattr(self, name), getattr(self, name.replace("_ms", "_upper_ms"))
            if measured is not None:
                bound = f"{upper:.4g}" if upper is not None else "none"
                parts.append(f"{name.removesuffix('_ms').upper()} {measured:.4g} ms (bound {bound})")
        return f"{'met' if self.met else 'missed'} at {label(self.percentile)}: {', '.join(parts) or 'nothing measured'}"


def prompts_for_bound(percentile: SloStatistic, repeats: int) -> int:
    """Prompts per round so that one launch's rounds together bound the percentile."""
    return -(-min_samples(percentile) // repeats)


def _worst(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) or not values else max(values)


def _highest_known(values: list[float | None]) -> float | None:
    """A lower bound over launches: any launch's over a limit breaks it, so a launch without one hides nothing."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _held(name: str, limit: float, sets: list[Percentiles | None], q: SloStatistic, fields: dict) -> tuple[str, str]:
    """One limit over the launches: ("met" | "broken" | "unclear" | "unbounded", why); its figures into `fields`."""
    at = label(q)
    measured = _worst([s.at(q) if s else None for s in sets])
    upper = _worst([s.upper(q) if s else None for s in sets])
    lower = _highest_known([s.lower(q) if s else None for s in sets])
    fields[name], fields[name.replace("_ms", "_upper_ms")] = measured, upper
    fields[name.replace("_ms", "_lower_ms")] = lower
    breaks = f"; lower bound {lower:.4g} ms > {limit:g} ms: shown breaking it" if lower is not None and lower > limit \
        else None
    if upper is None:
        counts = [s.count if s else 0 for s in sets]
        why = f"{name}: a launch had {min(counts, default=0)} samples, a {at} bound needs {min_samples(q)}"
        return ("broken", why + breaks) if breaks else ("unbounded", why)
    if upper <= limit:
        return "met", ""
    why = f"{name} {at} upper bound {upper:.4g} ms > {limit:g} ms (measured {measured:.4g})"
    if breaks:
        return "broken", why + breaks
    shown = f"; lower bound {lower:.4g} ms" if lower is not None else "; no lower bound"
    return "unclear", why + shown + ": not shown breaking it"


def slo_verdict(slo: TargetSlo, latencies: list[Latency | None]) -> SloVerdict:
    """The verdict over a config's launches (one for a baseline, the validation's for a stack)."""
    q, at = slo.percentile, label(slo.percentile)
    fields: dict = {"percentile": q, "launches": len(latencies), "power": slo.power,
                    "requests_for_power": requests_for_power(q, power=slo.power)}
    readings: list[tuple[str, str]] = []
    counts: list[int] = []
    for name, attr in METRICS:
        limit = getattr(slo, name)
        if limit is None:
            continue
        sets: list[Percentiles | None] = [getattr(lat, attr) if lat else None for lat in latencies]
        counts += [s.count if s else 0 for s in sets]
        readings.append(_held(name, limit, sets, q, fields))
    met = bool(latencies) and all(state == "met" for state, _ in readings)
    broken = any(state == "broken" for state, _ in readings)
    fields["requests"] = min(counts) if counts else None
    if met:
        why = f"every limit holds at {at} for these launches (95% upper bounds, requests taken as independent)"
    else:
        why = "; ".join(text for state, text in readings if state != "met") or "no launch measured"
        if not broken and fields["requests"] is not None and fields["requests"] < fields["requests_for_power"]:
            why += (f" (a launch had {fields['requests']} requests; {fields['requests_for_power']} read a config at "
                    f"{AT_LIMIT:.0%} of a limit as meeting it {slo.power:.0%} of the time)")
    return SloVerdict(**fields, met=met, broken=broken, why=why)


def worst_ratio(slo: TargetSlo, verdict: SloVerdict, bound: str) -> float | None:
    """The largest of each limited metric's `bound` ("lower" or "upper", its 95% bound at the
    percentile, the worst launch's) over its limit: how far the config is from the SLO on the limit
    it misses most. An upper ratio needs every bound (None where one is missing: a launch with too
    few requests); a lower ratio takes the bounds known (None where none is)."""
    limited = [name for name, _ in METRICS if getattr(slo, name) is not None]
    bounds = [(getattr(verdict, name.replace("_ms", f"_{bound}_ms")), getattr(slo, name)) for name in limited]
    known = [value / limit for value, limit in bounds if value is not None]
    if not known or (bound == "upper" and len(known) < len(limited)):
        return None
    return max(known)


def measurably_closer(slo: TargetSlo, verdict: SloVerdict, best_lower_ratio: float | None) -> bool:
    """Whether a config that misses the SLO is measurably closer to it than a best that is shown breaking
    it: the upper bound of its worst limit's ratio under the lower bound of the best's (each a 95% bound,
    for these launches)."""
    upper = worst_ratio(slo, verdict, "upper")
    return upper is not None and best_lower_ratio is not None and upper < best_lower_ratio
