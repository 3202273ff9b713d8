"""How many digits a number shown to a user keeps, by what it measures. Pure code.

A throughput's second decimal or a latency's microseconds are noise at these sample
sizes; showing them invites reading meaning into them. Metadata, tables and checks
round through `rounded` so one unit always shows the same precision.
"""

from __future__ import annotations

import math
from typing import Literal

Unit = Literal["tok/s", "tok/s/user", "req/s", "%", "ms", "s", "GB/s", "TFLOP/s", "tokens", "requests"]

DIGITS: dict[str, int] = {
    "tok/s": 1,  # output tokens per second
    "tok/s/user": 1,  # interactivity
    "req/s": 3,  # a long-output workload completes well under one request a second
    "%": 2,  # gains, intervals and shares of the roofline
    "ms": 1,
    "s": 2,
    "GB/s": 1,
    "TFLOP/s": 1,
    "tokens": 0,
    "requests": 1,  # a mean count of running or waiting requests
}


def rounded(value: float | None, unit: Unit) -> float | None:
    """`value` to its unit's precision; None and non-finite values pass through."""
    if value is None or not math.isfinite(value):
        return value
    return round(float(value), DIGITS[unit])
