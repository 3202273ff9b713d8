"""The target's objective as the numbers decisions compare, one per measured round. Pure code.

`throughput` compares output tok/s; `goodput` the requests per second that met every limit
of the target's slo (`metrics.meets_slo`, as `vllm bench serve --goodput` counts them, in the engine's time).
Decisions compare launches by the ratio of their geometric means, so a round where no
request met the SLO still needs a positive value: it counts half a request over the
round's duration (a continuity correction), which keeps it below any round where one did.
The goodput a run reports (mean_goodput) is of the same values, so its levels and its gains agree.
"""

from __future__ import annotations

import statistics

from hyperloom_assets.core.config.targets import Objective
from hyperloom_assets.core.measurement.measurement import Measurement, RepeatMetrics

UNITS: dict[str, str] = {"throughput": "output tok/s", "goodput": "good req/s"}


def decision_goodput(repeat: RepeatMetrics) -> float:
    """A round's goodput for a decision: at least half a request over the round."""
    if repeat.goodput is None:
        raise ValueError("the round was measured without an slo, so it has no goodput to compare")
    return max(repeat.goodput, 0.5 / repeat.duration_s) if repeat.duration_s > 0 else repeat.goodput


def repeat_values(measurement: Measurement, objective: Objective) -> list[float]:
    """Per-round values of the objective: what the climb and the validation compare."""
    if objective == "throughput":
        return measurement.repeats_throughputs()
    return [decision_goodput(r) for r in measurement.repeats]


def goodputs_if_measured(measurement: Measurement) -> list[float]:
    """Per-round decision goodputs where the rounds counted them (a target with an slo), else []."""
    if any(r.goodput is None for r in measurement.repeats):
        return []
    return repeat_values(measurement, "goodput")


def mean_goodput(measurement: Measurement) -> float | None:
    """The mean of the rounds' decision goodputs, as reported beside the gains; None where not counted."""
    counted = goodputs_if_measured(measurement)
    return statistics.fmean(counted) if counted else None
