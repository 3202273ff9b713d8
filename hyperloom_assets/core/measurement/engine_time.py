"""A measurement in its engine's own time. Pure code.

A server that runs X times faster than the engine it stands for (the sim's time scale,
from its engine spec) shows X times the throughput and 1/X the latency; dividing that
back out puts its numbers in the engine's time. A scale of 1 changes nothing.
"""

from __future__ import annotations

from hyperloom_assets.core.measurement.measurement import Measurement, RepeatMetrics

RATES = ("output_throughput", "output_throughput_ci_low", "output_throughput_ci_high", "request_throughput", "goodput")
LATENCIES = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p50_ms", "e2el_p50_ms", "duration_s")
PERCENTILE_SETS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")  # of `latency`, each {p50, ..., p99, count}


def _scaled(fields: dict, scale: float) -> dict:
    for name in RATES:
        if fields.get(name) is not None:
            fields[name] = fields[name] / scale
    for name in LATENCIES:
        if fields.get(name) is not None:
            fields[name] = fields[name] * scale
    latency = fields.get("latency")
    if latency is not None:
        for name in PERCENTILE_SETS:
            latency[name] = {key: value if key == "count" or value is None else value * scale
                             for key, value in latency[name].items()}
    return fields


def to_engine_time(measurement: Measurement, scale: float) -> Measurement:
    """The measurement as the engine would have shown it at its own speed."""
    if scale == 1.0:
        return measurement
    repeats = [RepeatMetrics(**_scaled(r.model_dump(), scale)) for r in measurement.repeats]
    fields = _scaled(measurement.model_dump(exclude={"repeats"}), scale)
    return Measurement(**fields, repeats=repeats)
