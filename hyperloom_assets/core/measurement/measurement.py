"""The Measurement: what one benchmark of one server configuration produced.

Pure code: the shape every producer fills (our client, the sim's predictor, peers'
result files) and every consumer reads (assets, decisions, reports). Metric names follow
docs/design.md's `baseline` metadata keys and `vllm bench serve`.
"""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.models import Strict

# The metrics averaged over repeats and published under these exact names.
METRIC_NAMES: tuple[str, ...] = (
    "output_throughput",
    "request_throughput",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "itl_p50_ms",
    "e2el_p50_ms",
)



class RequestRecord(Strict):
    """One request as the client saw it; kept as JSONL beside each result."""

    ok: bool
    prompt_tokens: int
    output_tokens: int = 0
    start_s: float = 0.0  # send time, relative to the round's start
    # In a rate round, a session's first request: its scheduled arrival, relative to the round's
    # start (start_s - arrival_s is its wait for a concurrency slot). None in a closed-loop round.
    arrival_s: float | None = None
    ttft_s: float = 0.0
    e2el_s: float = 0.0
    itl_s: list[float] = []  # gaps between consecutive streamed chunks
    session_id: str | None = None
    turn: int | None = None
    error: str | None = None
    error_class: str | None = None  # one of serving.REQUEST_ERROR_CLASSES when the request failed


class ArrivalLoad(Strict):
    """How a rate round's client kept up with its arrival schedule (metrics.arrival_load), in the
    client's clock, the one the workload's request_rate is in."""

    offered_rate: float  # the workload's request_rate: sessions per second
    achieved_rate: float  # sessions sent per second: all of them over the time the last one was sent
    sessions: int
    # The client's queue (sessions arrived and still waiting for a concurrency slot), its mean as
    # seen by each arrival of the first and of the last quarter of the round's arrivals.
    queue_start: float
    queue_end: float


class RepeatMetrics(Strict):
    """The metrics of one measured round."""

    output_throughput: float
    request_throughput: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    itl_p50_ms: float
    e2el_p50_ms: float
    completed: int
    failed: int = 0
    duration_s: float
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    goodput: float | None = None  # requests/s meeting the SLO, when one is set
    latency: Latency | None = None  # this round's per-request percentiles
    arrivals: ArrivalLoad | None = None  # a rate round's: how its client kept up with the schedule


class Measurement(Strict):
    """Means over repeats with the output-throughput 95% interval, plus flags."""

    output_throughput: float
    output_throughput_ci_low: float
    output_throughput_ci_high: float
    request_throughput: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    itl_p50_ms: float
    e2el_p50_ms: float
    completed: int  # requests per repeat
    repeats: list[RepeatMetrics]
    converged: bool = True  # False when repeats spread more than 3%
    client_saturated: bool = False
    # The worst round's client load (our client's own monitor; None from other sources), so a
    # saturation verdict shows the numbers it rests on.
    client_loop_lag_p99_ms: float | None = None
    client_cpu_pct: float | None = None  # of one core
    seed: int = 0
    workload: dict[str, Any] = {}
    theoretical_prefix_hit_pct: float | None = None
    goodput: float | None = None
    source: str = "hyperloom"  # which client or tool produced it
    telemetry: Telemetry | None = None  # the engine's own /metrics over the measured rounds
    # Per-request percentiles pooled over the measured rounds' requests (one launch), when the
    # producer had the requests; a peer's result file gives only its own summary.
    latency: Latency | None = None

    @property
    def interactivity(self) -> float:
        """Tokens per second per user: 1000 / TPOT p50."""
        return 1000.0 / self.tpot_p50_ms if self.tpot_p50_ms > 0 else 0.0

    def repeats_throughputs(self) -> list[float]:
        """Per-repeat output throughputs: what decisions compare."""
        return [r.output_throughput for r in self.repeats]

    def flat(self) -> dict[str, Any]:
        """The flat JSON of `hyperloom bench --json-out` and `sim-predict`."""
        return self.model_dump(mode="json")
