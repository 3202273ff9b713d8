"""Metrics from per-request records, as `vllm bench serve` defines them. Pure code."""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.config.targets import Slo
from hyperloom_assets.core.measurement.latency import Latency, Percentiles
from hyperloom_assets.core.measurement.measurement import Measurement, RepeatMetrics, RequestRecord
from hyperloom_assets.core.measurement.stats import mean_ci95, spread_pct

CONVERGENCE_SPREAD_PCT = 3.0


def _meets_slo(record: RequestRecord, slo: Slo) -> bool:
    if slo.ttft_ms is not None and record.ttft_s * 1000 > slo.ttft_ms:
        return False
    if slo.e2e_ms is not None and record.e2el_s * 1000 > slo.e2e_ms:
        return False
    if slo.tpot_ms is not None and record.output_tokens > 1:
        if (record.e2el_s - record.ttft_s) * 1000 / (record.output_tokens - 1) > slo.tpot_ms:
            return False
    return True


def repeat_metrics(records: list[RequestRecord], duration_s: float, slo: Slo | None = None) -> RepeatMetrics:
    """One round's metrics; throughput counts only output tokens the server streamed."""
    done = [r for r in records if r.ok]
    out_tokens = sum(r.output_tokens for r in done)
    latency = latency_of(records)
    goodput = None
    if slo is not None:
        goodput = sum(1 for r in done if _meets_slo(r, slo)) / duration_s if duration_s > 0 else 0.0
    return RepeatMetrics(
        output_throughput=out_tokens / duration_s if duration_s > 0 else 0.0,
        request_throughput=len(done) / duration_s if duration_s > 0 else 0.0,
        ttft_p50_ms=latency.ttft_ms.p50 if latency else 0.0,
        ttft_p99_ms=latency.ttft_ms.p99 if latency else 0.0,
        tpot_p50_ms=latency.tpot_ms.p50 if latency else 0.0,
        itl_p50_ms=latency.itl_ms.p50 if latency else 0.0,
        e2el_p50_ms=latency.e2el_ms.p50 if latency else 0.0,
        completed=len(done),
        failed=len(records) - len(done),
        duration_s=duration_s,
        total_input_tokens=sum(r.prompt_tokens for r in done),
        total_output_tokens=out_tokens,
        goodput=goodput,
        latency=latency,
    )


def summarize(repeats: list[RepeatMetrics], records: list[RequestRecord] | None = None, **extra: Any) -> Measurement:
    """Means over repeats, the output-throughput interval and the convergence flag; with the
    measured rounds' `records`, their latency percentiles pooled (one launch's requests)."""
    if not repeats:
        raise ValueError("a Measurement needs at least one measured repeat")
    throughputs = [r.output_throughput for r in repeats]
    mean, low, high = mean_ci95(throughputs)

    def avg(name: str) -> float:
        return sum(getattr(r, name) for r in repeats) / len(repeats)

    goodputs = [r.goodput for r in repeats if r.goodput is not None]
    fields: dict[str, Any] = dict(
        output_throughput=mean, output_throughput_ci_low=low, output_throughput_ci_high=high,
        request_throughput=avg("request_throughput"), ttft_p50_ms=avg("ttft_p50_ms"),
        ttft_p99_ms=avg("ttft_p99_ms"), tpot_p50_ms=avg("tpot_p50_ms"), itl_p50_ms=avg("itl_p50_ms"),
        e2el_p50_ms=avg("e2el_p50_ms"), completed=round(avg("completed")), repeats=repeats,
        converged=spread_pct(throughputs) <= CONVERGENCE_SPREAD_PCT,
        goodput=sum(goodputs) / len(goodputs) if goodputs else None,
        latency=latency_of(records) if records else None,
    )
    fields.update(extra)
    return Measurement(**fields)


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
