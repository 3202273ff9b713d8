"""The sim's time scale, from its harness flags. Pure code.

A sim served at `--time-scale X` runs X times faster than the GPU it models, so what a
client measures is X times the throughput and 1/X the latency of the preview. The sim's
engine spec (core/engines/sim.py) hands this scale to the harness, which converts every
Measurement of a sim target (core/measurement/engine_time.py), so baselines, gains,
rooflines and sweeps all speak of the simulated GPU.
"""

from __future__ import annotations

from hyperloom_assets.sim.engine_args import split_harness_args


def time_scale_of(server_args: list[str]) -> float:
    harness, _ = split_harness_args(server_args)
    return float(harness.get("--time-scale", 1.0))
