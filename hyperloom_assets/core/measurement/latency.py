"""Per-request latency percentiles, and what makes one of them meaningless. Pure code.

TTFT, TPOT, ITL and E2E latency at p50, p90, p95 and p99 (linear interpolation, as
`vllm bench serve` and stats.percentile compute them) and their mean, over the requests of one round or
pooled over a launch's measured rounds (metrics.latency_of), with a 95% upper bound on each
statistic an SLO may hold at (slo_statistic.py: distribution-free for a percentile, a
skewness-corrected t bound for the mean). The bound takes the requests as independent draws of one launch's
latency: a launch's rounds are pooled into one sample, and launches are never pooled,
since each has its own placement, warm-up and compiled state. TPOT is (E2E - TTFT) / (output tokens - 1) per request, ITL
each gap between streamed chunks.

A TPOT means a decode step only when the tokens arrived as they were made. A request
whose whole output came in one chunk (the server, a proxy or the engine's stream
interval coalesced the stream into one burst) has a TPOT of the burst's parse time, a
small fraction of a millisecond: the demo once reported 0.01 ms and "253,353 tok/s per
user". So does one whose chunks were flushed together after the tokens were made.
`warnings()` says so whenever most streams arrived in one chunk, or the median TPOT is
under any decode step's floor.
"""

from __future__ import annotations

import numpy as np

from hyperloom_assets.core.config.targets import SloStatistic
from hyperloom_assets.core.measurement.slo_statistic import STATISTICS, label, lower_bound, upper_bound
from hyperloom_assets.core.models import Strict

PERCENTILES = (50, 90, 95, 99)
BOUND_CONFIDENCE = 0.95
BURST_SHARE = 0.5  # from this share of multi-token streams arriving whole, TPOT and ITL are not per-token
# No engine's decode step takes under 0.1 ms (a kernel launch per layer alone costs more): a
# median TPOT below it is chunks flushed together. The demo's baseline, served by vLLM CPU
# with its engine in the API server's process, read 0.004 ms in its sweep.
TPOT_FLOOR_MS = 0.1


class Percentiles(Strict):
    p50: float
    p90: float
    p95: float
    p99: float
    count: int  # the samples they come from: requests, or chunk gaps for ITL
    mean: float | None = None  # None: recorded before the mean was kept
    # 95% upper confidence bounds on each statistic an SLO may hold at (slo_statistic.py); None when
    # too few samples admit one (p50 needs 5, p99 299, the mean 100) or recorded before it was kept.
    p50_upper: float | None = None
    p90_upper: float | None = None
    p95_upper: float | None = None
    p99_upper: float | None = None
    mean_upper: float | None = None
    # 95% lower bounds on the same statistics: one over a limit shows the launch breaking it (slo_verdict.py).
    p50_lower: float | None = None
    p90_lower: float | None = None
    p95_lower: float | None = None
    p99_lower: float | None = None
    mean_lower: float | None = None

    @classmethod
    def of(cls, seconds: list[float]) -> Percentiles:
        """Sorted once: a long round's ITL gaps run to hundreds of thousands."""
        if not seconds:
            return cls(p50=0.0, p90=0.0, p95=0.0, p99=0.0, count=0)
        ordered = np.sort(np.asarray(seconds, dtype=float))
        values = {f"p{q}": float(v) * 1000 for q, v in zip(PERCENTILES, np.percentile(ordered, PERCENTILES))}
        values["mean"] = float(np.mean(ordered)) * 1000
        for statistic in STATISTICS:
            for side, bound in (("upper", upper_bound(ordered, statistic, BOUND_CONFIDENCE)),
                                ("lower", lower_bound(ordered, statistic, BOUND_CONFIDENCE))):
                values[f"{label(statistic)}_{side}"] = None if bound is None else bound * 1000
        return cls(**values, count=len(ordered))

    def at(self, statistic: SloStatistic) -> float | None:
        return getattr(self, label(statistic))

    def upper(self, statistic: SloStatistic) -> float | None:
        """The statistic's 95% upper bound; None when too few samples gave one."""
        return getattr(self, f"{label(statistic)}_upper")

    def lower(self, statistic: SloStatistic) -> float | None:
        """The statistic's 95% lower bound; None when too few samples gave one, or recorded before it was kept."""
        return getattr(self, f"{label(statistic)}_lower")


class Latency(Strict):
    """Milliseconds at each percentile, and how many multi-token streams came as one burst."""

    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2el_ms: Percentiles
    streams: int = 0  # completed requests of more than one output token
    bursts: int = 0  # of those, the ones whose whole output arrived in one chunk

    def warnings(self) -> list[str]:
        """Why a metric here cannot be read as what its name says; empty when every one can.

        Read in the engine's time (a sim's latency is scaled back before anyone asks), so the
        floor is a decode step's, not the wall clock's of a sped-up server.
        """
        if not self.streams:
            return []
        fix = "stream per token (no coalescing proxy, stream interval 1, an API server whose loop is not blocked)"
        if self.bursts / self.streams >= BURST_SHARE:
            return [f"TPOT and ITL are not per-token: {self.bursts} of {self.streams} streams arrived as one burst "
                    f"(the whole output in one chunk), so TPOT p50 {self.tpot_ms.p50:.3g} ms is that burst's "
                    f"spread, not a decode step; {fix} to read it"]
        if self.tpot_ms.p50 < TPOT_FLOOR_MS:
            return [f"TPOT and ITL are not per-token: TPOT p50 {self.tpot_ms.p50:.3g} ms is under any decode step "
                    f"({TPOT_FLOOR_MS:g} ms), so most streams arrived as a burst of chunks after their tokens were "
                    f"made; {fix} to read it"]
        return []
