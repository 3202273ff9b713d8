"""The sim's own telemetry: the series a real engine's `/metrics` exposes, from its scheduler.

Pure code. The scheduler reports every step (its length, the running and waiting
requests, the KV blocks in use) and every finished request (time from admission to its
first token, and from there to its end) to an EngineMeter. `sim-serve` renders the
meter's current values under its flavor's metric names (the vLLM and SGLang modules of
core/engines name them), so the client's scraper reads the sim as it reads the engine;
`sim-predict` reads a window of it directly, with gauges weighted by simulated time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperloom_assets.core.engines.registry import engine_for
from hyperloom_assets.core.engines.spec import MetricNames, Series
from hyperloom_assets.core.measurement.telemetry import Telemetry


@dataclass
class _Window:
    """Sums and maxima since the window opened; counters as they stood then."""
    time_s: float = 0.0
    running_s: float = 0.0
    waiting_s: float = 0.0
    kv_pct_s: float = 0.0
    running_max: int = 0
    waiting_max: int = 0
    kv_pct_max: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)


@dataclass
class EngineMeter:
    """Cumulative counters and current gauges of one sim engine."""
    running: int = 0
    waiting: int = 0
    kv_pct: float = 0.0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    prefill_s: float = 0.0  # per request: admission to first token (vLLM's PREFILL phase)
    decode_s: float = 0.0  # per request: first token to the end
    extend_step_s: float = 0.0  # steps that only prefill (SGLang's forward time by batch kind)
    decode_step_s: float = 0.0  # steps that only decode
    window: _Window = field(default_factory=_Window)

    def observe_step(self, duration: float, running: int, waiting: int, kv_pct: float, prefill: bool,
                     decode: bool) -> None:
        """One step as it ran: the batch held `running`, `waiting` queued behind it."""
        self.running, self.waiting, self.kv_pct = running, waiting, kv_pct
        w = self.window
        w.time_s += duration
        w.running_s += running * duration
        w.waiting_s += waiting * duration
        w.kv_pct_s += kv_pct * duration
        w.running_max, w.waiting_max = max(w.running_max, running), max(w.waiting_max, waiting)
        w.kv_pct_max = max(w.kv_pct_max, kv_pct)
        if prefill and not decode:
            self.extend_step_s += duration
        elif decode and not prefill:
            self.decode_step_s += duration

    def observe_request(self, admitted_s: float, first_token_s: float, finish_s: float) -> None:
        self.prefill_s += max(first_token_s - admitted_s, 0.0)
        self.decode_s += max(finish_s - first_token_s, 0.0)

    def counters(self) -> dict[str, float]:
        return {"preemptions": self.preemptions, "prefix_queries": self.prefix_queries,
                "prefix_hits": self.prefix_hits, "prefill_s": self.prefill_s, "decode_s": self.decode_s,
                "extend_step_s": self.extend_step_s, "decode_step_s": self.decode_step_s}

    def open_window(self) -> None:
        self.window = _Window(counters=self.counters())

    def window_telemetry(self, flavor: str) -> Telemetry:
        """What a scraper would have read over the window, gauges weighted by simulated time."""
        w, now = self.window, self.counters()
        grew = {key: now[key] - w.counters.get(key, 0.0) for key in now}
        span = w.time_s or 1.0
        by_step = flavor == "sglang"  # SGLang counts forward time by batch kind, vLLM per request
        return Telemetry(
            engine=flavor, scrapes=0, kv_usage_pct_mean=w.kv_pct_s / span, kv_usage_pct_max=w.kv_pct_max,
            preemptions=int(grew["preemptions"]), running_mean=w.running_s / span, running_max=float(w.running_max),
            waiting_mean=w.waiting_s / span, waiting_max=float(w.waiting_max),
            prefix_queries=int(grew["prefix_queries"]), prefix_hits=int(grew["prefix_hits"]),
            prefill_s=grew["extend_step_s" if by_step else "prefill_s"],
            decode_s=grew["decode_step_s" if by_step else "decode_s"],
        )


def _sample(series: Series, value: float) -> str:
    labels = ",".join(f'{key}="{val}"' for key, val in (("engine", "0"), *series.labels))
    return f"{series.name}{{{labels}}} {value / series.scale!r}"


def prometheus_text(meter: EngineMeter, flavor: str) -> str | None:
    """The meter under the flavor's metric names, as its `/metrics` page; None for a flavor without one."""
    names: MetricNames | None = engine_for(flavor).metrics
    if names is None:
        return None
    by_step = flavor == "sglang"
    values = [(names.kv_usage_pct, meter.kv_pct), (names.preemptions, meter.preemptions),
              (names.running, meter.running), (names.waiting, meter.waiting),
              (names.prefix_queries, meter.prefix_queries), (names.prefix_hits, meter.prefix_hits),
              (names.prefill_s, meter.extend_step_s if by_step else meter.prefill_s),
              (names.decode_s, meter.decode_step_s if by_step else meter.decode_s)]
    return "".join(_sample(series, float(value)) + "\n" for series, value in values if series is not None)
