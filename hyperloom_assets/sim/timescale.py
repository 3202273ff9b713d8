"""From wall time back to the simulated GPU's time. Pure code.

A sim served at `--time-scale X` runs X times faster than the GPU it models, so what a
client measures is X times the throughput and 1/X the latency of the preview. Every
Measurement of a sim target is converted, so baselines, gains, rooflines and sweeps all
speak of the simulated GPU.
"""

from __future__ import annotations

from hyperloom_assets.core.measurement.measurement import Measurement, RepeatMetrics
from hyperloom_assets.sim.engine_args import split_harness_args

RATES = ("output_throughput", "output_throughput_ci_low", "output_throughput_ci_high", "request_throughput", "goodput")
LATENCIES = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p50_ms", "e2el_p50_ms", "duration_s")


def time_scale_of(server_args: list[str]) -> float:
    harness, _ = split_harness_args(server_args)
    return float(harness.get("--time-scale", 1.0))


def _scaled(fields: dict, scale: float) -> dict:
    for name in RATES:
        if fields.get(name) is not None:
            fields[name] = fields[name] / scale
    for name in LATENCIES:
        if fields.get(name) is not None:
            fields[name] = fields[name] * scale
    return fields


def to_simulated_time(measurement: Measurement, scale: float) -> Measurement:
    """The measurement as the simulated GPU would have shown it."""
    if scale == 1.0:
        return measurement
    repeats = [RepeatMetrics(**_scaled(r.model_dump(), scale)) for r in measurement.repeats]
    fields = _scaled(measurement.model_dump(exclude={"repeats"}), scale)
    return Measurement(**fields, repeats=repeats)
