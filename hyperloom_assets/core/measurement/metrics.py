"""Metrics from per-request records, as `vllm bench serve` defines them. Pure code.

A Measurement's percentiles are pooled over its measured rounds' requests, as `vllm bench
serve` pools a run's (np.percentile, linear interpolation), never the mean of each round's:
a mean of per-round p99s is no p99 of anything and reads lower than vLLM's `p99_ttft_ms`
whenever the rounds differ. Each round keeps its own in `repeats`.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from hyperloom_assets.core.config.targets import Slo
from hyperloom_assets.core.measurement.latency import Latency, Percentiles
from hyperloom_assets.core.measurement.measurement import ArrivalLoad, Measurement, RepeatMetrics, RequestRecord
from hyperloom_assets.core.measurement.stats import mean_ci95, spread_pct

CONVERGENCE_SPREAD_PCT = 3.0


def meets_slo(record: RequestRecord, slo: Slo) -> bool:
    """Whether one request met every limit, as `vllm bench serve --goodput` counts it, in the
    engine's time: the limits are the engine's, and a server `slo.time_scale` times faster than
    it (a sim) shows 1/scale of each latency on the client's clock."""
    ms = 1000 * slo.time_scale
    if slo.ttft_ms is not None and record.ttft_s * ms > slo.ttft_ms:
        return False
    if slo.e2e_ms is not None and record.e2el_s * ms > slo.e2e_ms:
        return False
    if slo.tpot_ms is not None and record.output_tokens > 1:
        if (record.e2el_s - record.ttft_s) * ms / (record.output_tokens - 1) > slo.tpot_ms:
            return False
    return True


def arrival_load(records: list[RequestRecord], request_rate: float) -> ArrivalLoad | None:
    """How a rate round's client kept up with its schedule, from its sessions' arrivals and sends;
    None when no record carries an arrival. Under a concurrency cap a server slower than the offered
    rate keeps every slot busy, so the client sends at the server's pace and its queue grows."""
    firsts = sorted((r for r in records if r.arrival_s is not None), key=lambda r: r.arrival_s)
    if not firsts:
        return None
    sends = sorted(r.start_s for r in firsts)
    # Arrival i sees the i sessions that arrived before it, less those already sent by then.
    queue = [max(0, i - bisect_right(sends, r.arrival_s)) for i, r in enumerate(firsts)]
    quarter = max(1, len(firsts) // 4)
    return ArrivalLoad(offered_rate=request_rate, sessions=len(firsts),
                       achieved_rate=len(firsts) / sends[-1] if sends[-1] > 0 else request_rate,
                       queue_start=sum(queue[:quarter]) / quarter, queue_end=sum(queue[-quarter:]) / quarter)


def repeat_metrics(records: list[RequestRecord], duration_s: float, slo: Slo | None = None,
                   request_rate: float | None = None) -> RepeatMetrics:
    """One round's metrics; throughput counts only output tokens the server streamed. A rate round's
    (`request_rate`) also says how its client kept up with the arrival schedule."""
    done = [r for r in records if r.ok]
    out_tokens = sum(r.output_tokens for r in done)
    latency = latency_of(records)
    goodput = None
    if slo is not None:
        goodput = sum(1 for r in done if meets_slo(r, slo)) / duration_s if duration_s > 0 else 0.0
    return RepeatMetrics(
        output_throughput=out_tokens / duration_s if duration_s > 0 else 0.0,
        request_throughput=len(done) / duration_s if duration_s > 0 else 0.0,
        **(percentile_metrics(latency) if latency else dict.fromkeys(PERCENTILE_METRICS, 0.0)),
        completed=len(done),
        failed=len(records) - len(done),
        duration_s=duration_s,
        total_input_tokens=sum(r.prompt_tokens for r in done),
        total_output_tokens=out_tokens,
        goodput=goodput,
        latency=latency,
        arrivals=arrival_load(records, request_rate) if request_rate else None,
    )


def summarize(repeats: list[RepeatMetrics], records: list[RequestRecord] | None = None, **extra: Any) -> Measurement:
    """Means over repeats, the output-throughput interval and the convergence flag; with the
    measured rounds' `records`, every latency percentile pooled over them (one launch's requests).
    Without them (a peer's summaries) the percentiles are the rounds' means, the best those allow."""
    if not repeats:
        raise ValueError("a Measurement needs at least one measured repeat")
    throughputs = [r.output_throughput for r in repeats]
    mean, low, high = mean_ci95(throughputs)

    def avg(name: str) -> float:
        return sum(getattr(r, name) for r in repeats) / len(repeats)

    goodputs = [r.goodput for r in repeats if r.goodput is not None]
    latency = latency_of(records) if records else None
    fields: dict[str, Any] = dict(
        output_throughput=mean, output_throughput_ci_low=low, output_throughput_ci_high=high,
        request_throughput=avg("request_throughput"),
        **(percentile_metrics(latency) if latency else {name: avg(name) for name in PERCENTILE_METRICS}),
        completed=round(avg("completed")), repeats=repeats,
        converged=spread_pct(throughputs) <= CONVERGENCE_SPREAD_PCT,
        goodput=sum(goodputs) / len(goodputs) if goodputs else None,
        latency=latency,
    )
    fields.update(extra)
    return Measurement(**fields)


PERCENTILE_METRICS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p50_ms", "e2el_p50_ms")


def percentile_metrics(latency: Latency) -> dict[str, float]:
    """The flat percentile metrics (a round's, or a Measurement's pooled), read from its latency."""
    return dict(ttft_p50_ms=latency.ttft_ms.p50, ttft_p99_ms=latency.ttft_ms.p99, tpot_p50_ms=latency.tpot_ms.p50,
                itl_p50_ms=latency.itl_ms.p50, e2el_p50_ms=latency.e2el_ms.p50)


def latency_of(records: list[RequestRecord]) -> Latency | None:
    """The completed requests' latency percentiles; None when none completed."""
    done = [r for r in records if r.ok]
    if not done:
        return None
    streams = [r for r in done if r.output_tokens > 1]
    return Latency(
        ttft_ms=Percentiles.of([r.ttft_s for r in done]),
        tpot_ms=Percentiles.of([(r.e2el_s - r.ttft_s) / (r.output_tokens - 1) for r in streams]),
        itl_ms=Percentiles.of([gap for r in done for gap in r.itl_s]),
        e2el_ms=Percentiles.of([r.e2el_s for r in done]),
        streams=len(streams),
        bursts=sum(1 for r in streams if not r.itl_s),
    )
