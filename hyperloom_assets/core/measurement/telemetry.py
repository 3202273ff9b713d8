"""What the engine itself reported while it was measured: its Prometheus `/metrics`. Pure code.

The client scrapes `/metrics` during the measured rounds (resources/bench/telemetry.py);
each engine module names the series that hold KV-cache usage, preemptions, the running
and waiting requests, prefix-cache queries and hits and the time in prefill against
decode (core/engines/spec.MetricNames). Counters become their increase from the first
scrape to the last, which bracket the rounds. Gauges become a mean and a maximum over the
scrapes between those two only: the edges see the server before the first request and
after the last, and counting them would report a busy server as idle (a round shorter than
the scrape interval has no gauges at all, None rather than a false 0). The sim fills the
same model from its own scheduler (hyperloom_assets/sim/telemetry.py), so the planner
reads one shape whichever engine served.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence

from hyperloom_assets.core.engines.spec import MetricNames, Series
from hyperloom_assets.core.models import Strict

# One sample line of the Prometheus text format: name, optional {labels}, value, optional timestamp.
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Scrape = dict[str, list[tuple[dict[str, str], float]]]  # series name -> (labels, value) per sample


class Telemetry(Strict):
    """The engine's own account of the measured rounds; None where it exposes no such series."""

    engine: str  # whose metric names were read
    scrapes: int
    kv_usage_pct_mean: float | None = None
    kv_usage_pct_max: float | None = None
    preemptions: int | None = None
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    prefix_queries: int | None = None  # prompt tokens looked up
    prefix_hits: int | None = None  # of those, found cached
    prefill_s: float | None = None
    decode_s: float | None = None

    @property
    def prefix_hit_pct(self) -> float | None:
        if not self.prefix_queries or self.prefix_hits is None:
            return None
        return 100.0 * self.prefix_hits / self.prefix_queries

    @property
    def prefill_share_pct(self) -> float | None:
        """Time in prefill as a share of prefill plus decode."""
        if self.prefill_s is None or self.decode_s is None or self.prefill_s + self.decode_s <= 0:
            return None
        return 100.0 * self.prefill_s / (self.prefill_s + self.decode_s)


def parse_prometheus(text: str) -> Scrape:
    """Every sample of a `/metrics` page; comments, blank lines and unreadable values are skipped."""
    found: Scrape = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        found.setdefault(name, []).append((dict(_LABEL.findall(labels or "")), value))
    return found


def series_value(scrape: Scrape, series: Series) -> float | None:
    """The series' value in one scrape (matching samples combined), None when it is absent."""
    wanted = dict(series.labels)
    values = [value for labels, value in scrape.get(series.name, [])
              if all(labels.get(k) == v for k, v in wanted.items()) and not math.isnan(value)]
    if not values:
        return None
    return (max(values) if series.combine == "max" else sum(values)) * series.scale


def _gauge(scrapes: Sequence[Scrape], series: Series) -> tuple[float | None, float | None]:
    values = [v for v in (series_value(s, series) for s in scrapes) if v is not None]
    return (statistics.fmean(values), max(values)) if values else (None, None)


def _increase(scrapes: Sequence[Scrape], series: Series | None) -> float | None:
    if series is None:
        return None
    values = [v for v in (series_value(s, series) for s in scrapes) if v is not None]
    return max(values[-1] - values[0], 0.0) if values else None


def _count(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def telemetry_from_scrapes(engine: str, names: MetricNames, scrapes: Sequence[Scrape]) -> Telemetry | None:
    """The measured rounds' telemetry from scrapes taken across them, first and last at their edges."""
    if not scrapes:
        return None
    during = scrapes[1:-1]
    kv_mean, kv_max = _gauge(during, names.kv_usage_pct)
    running_mean, running_max = _gauge(during, names.running)
    waiting_mean, waiting_max = _gauge(during, names.waiting)
    return Telemetry(
        engine=engine, scrapes=len(scrapes), kv_usage_pct_mean=kv_mean, kv_usage_pct_max=kv_max,
        preemptions=_count(_increase(scrapes, names.preemptions)), running_mean=running_mean,
        running_max=running_max, waiting_mean=waiting_mean, waiting_max=waiting_max,
        prefix_queries=_count(_increase(scrapes, names.prefix_queries)),
        prefix_hits=_count(_increase(scrapes, names.prefix_hits)),
        prefill_s=_increase(scrapes, names.prefill_s), decode_s=_increase(scrapes, names.decode_s),
    )


def speaker_of(scrape: Scrape, known: dict[str, MetricNames]) -> str | None:
    """Which engine's names a page uses: the first whose running-requests gauge is on it."""
    return next((engine for engine, names in known.items() if names.running.name in scrape), None)
