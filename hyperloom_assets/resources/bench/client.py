"""The benchmark client as a Dagster resource; the work is in resources/bench/runner.py."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.limits import DEFAULT_MAX_MEASUREMENT_S
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.resources.bench.runner import (
    BenchInputError,
    BenchOvertime,
    BenchRunError,
    ProgressFn,
    RoundFailed,
    RoundProgress,
    measure,
    measure_async,
    model_max_len,
    model_vocab_size,
)
from hyperloom_assets.resources.bench.stream import DEFAULT_SOCK_READ_TIMEOUT_S

__all__ = ["BenchmarkClient", "BenchInputError", "BenchOvertime", "BenchRunError", "ProgressFn", "RoundFailed", "RoundProgress",
           "measure", "measure_async", "model_max_len", "model_vocab_size"]


class BenchmarkClient(ConfigurableResource):
    """Measures an OpenAI-compatible server: warm-up, then repeats, per docs/design.md.

    `stall_timeout_s`: a stream silent this long is a stalled request (error class `stalled`).
    `max_measurement_s`: no measurement takes longer in all, however its server streams
    (core/measurement/limits.py; a smaller workload is bounded tighter by its own size).
    """

    stall_timeout_s: float = DEFAULT_SOCK_READ_TIMEOUT_S
    max_measurement_s: float = DEFAULT_MAX_MEASUREMENT_S

    def measure(self, base_url: str, served_model: str, workload: Workload, vocab_size: int, repeats: int,
                warmups: int | None = None, num_prompts: int | None = None, records_dir: Path | None = None,
                max_model_len: int | None = None, timeout_s: float | None = None,
                progress: ProgressFn | None = None) -> Measurement:
        """`timeout_s` bounds the whole measurement (BenchOvertime past it); `progress` follows each round."""
        return measure(base_url, served_model, workload, vocab_size, repeats=repeats, warmups=warmups,
                       num_prompts=num_prompts, records_dir=records_dir, max_model_len=max_model_len,
                       timeout_s=timeout_s, progress=progress, sock_read_timeout_s=self.stall_timeout_s,
                       max_total_s=self.max_measurement_s)
