"""Whether a config meets the target's latency SLO, with confidence. Pure code.

Each limit the SLO sets (TTFT, TPOT, E2E) is held at the SLO's percentile against the
distribution-free 95% upper bound on that percentile (latency.py), launch by launch: a
launch's rounds are one sample of its requests, and launches are not pooled (each has
its own placement and warm state). The config meets the SLO when every launch's bound
is within every limit; a launch with too few requests for a bound does not meet it, and
the verdict says why. The figures reported are the worst launch's.
"""

from __future__ import annotations

from hyperloom_assets.core.config.targets import TargetSlo
from hyperloom_assets.core.measurement.latency import Latency, Percentiles
from hyperloom_assets.core.measurement.percentile_bound import min_samples
from hyperloom_assets.core.models import Strict

METRICS = (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"), ("e2e_ms", "e2el_ms"))  # the SLO's name, Latency's


class SloVerdict(Strict):
    percentile: int
    ttft_ms: float | None = None  # measured at the percentile, the worst launch's (None: no limit on it)
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    ttft_upper_ms: float | None = None  # the 95% upper bound at the percentile, the worst launch's
    tpot_upper_ms: float | None = None
    e2e_upper_ms: float | None = None
    launches: int
    met: bool
    why: str

    def short(self) -> str:
        """One cell: met or missed, and each limited metric at the percentile with its upper bound."""
        parts = []
        for name, _ in METRICS:
            measured, upper = getattr(self, name), getattr(self, name.replace("_ms", "_upper_ms"))
            if measured is not None:
                bound = f"{upper:.4g}" if upper is not None else "none"
                parts.append(f"{name.removesuffix('_ms').upper()} {measured:.4g} ms (bound {bound})")
        return f"{'met' if self.met else 'missed'} at p{self.percentile}: {', '.join(parts) or 'nothing measured'}"


def prompts_for_bound(percentile: int, repeats: int) -> int:
    """Prompts per round so that one launch's rounds together bound the percentile."""
    return -(-min_samples(percentile) // repeats)


def _worst(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) or not values else max(values)


def slo_verdict(slo: TargetSlo, latencies: list[Latency | None]) -> SloVerdict:
    """The verdict over a config's launches (one for a baseline, the validation's for a stack)."""
    q = slo.percentile
    fields: dict = {"percentile": q, "launches": len(latencies)}
    missed, unbounded = [], []
    for name, attr in METRICS:
        limit = getattr(slo, name)
        if limit is None:
            continue
        sets: list[Percentiles | None] = [getattr(lat, attr) if lat else None for lat in latencies]
        measured = _worst([s.at(q) if s else None for s in sets])
        upper = _worst([getattr(s, f"p{q}_upper") if s else None for s in sets])
        fields[name], fields[name.replace("_ms", "_upper_ms")] = measured, upper
        if upper is None:
            counts = [s.count if s else 0 for s in sets]
            unbounded.append(f"{name}: a launch had {min(counts, default=0)} samples, a p{q} bound needs "
                             f"{min_samples(q)}")
        elif upper > limit:
            missed.append(f"{name} p{q} upper bound {upper:.4g} ms > {limit:g} ms (measured {measured:.4g})")
    met = bool(latencies) and not missed and not unbounded
    why = "; ".join(missed + unbounded) if not met else f"every limit holds at p{q} with 95% confidence"
    return SloVerdict(**fields, met=met, why=why or "no launch measured")
