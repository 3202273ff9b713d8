"""What binds a served config, read from the engine's telemetry and the roofline. Pure code.

The planner diagnoses before it chooses knobs (docs/design.md, Measurement protocol 7): a
config whose KV cache is full, that preempts, or whose requests queue while the
sequence cap is not reached is KV-bound, and knobs that give KV room go first; a
running batch that sits at the cap with a queue behind it is cap-bound; and so on down
the table in rules.yaml. Without telemetry (an engine without `/metrics`) only the
config and the roofline speak, and the diagnosis says so.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.models import Frozen, Strict

Bottleneck = Literal["kv_capacity", "sequence_cap", "prefill", "decode_launch", "memory_bandwidth", "unknown"]

KV_FULL_PCT = 90.0  # the most of the KV pool in use that counts as full
QUEUE_MIN = 0.5  # mean waiting requests that count as a queue
CAP_SATURATED = 0.9  # running mean over the cap (or the concurrency) at which the batch is full
PREFILL_SHARE_PCT = 35.0  # share of request time in prefill from which prefill is the bottleneck
NEAR_ROOFLINE_PCT = 80.0


class PlanEvidence(Strict):
    binding: Literal["memory", "compute"] | None = None  # the roofline's binding bound
    achieved_pct: float | None = None  # achieved throughput as % of the roofline
    sequence_cap: int | None = None  # the engine's resolved cap (launch evidence), if known
    prefix_share: float = Field(default=0.0, ge=0, le=1)  # theoretical prefix hit or prefix_len/isl
    telemetry: Telemetry | None = None  # the running best's own /metrics (the baseline's at first)
    host: Literal["gpu", "cpu"] = "gpu"
    moe: bool = False
    has_mtp: bool = False
    fp8_model: bool = False

    def kv_pressure(self) -> bool | None:
        """True on preemptions or a full KV cache; None without telemetry."""
        t = self.telemetry
        if t is None or (t.preemptions is None and t.kv_usage_pct_max is None):
            return None
        return bool(t.preemptions) or (t.kv_usage_pct_max or 0) >= KV_FULL_PCT


class Diagnosis(Frozen):
    bottleneck: Bottleneck
    because: str  # the numbers the diagnosis rests on


def _kv_bound(t: Telemetry, cap: int | None, concurrency: int) -> str | None:
    if t.preemptions:
        return f"{t.preemptions} requests preempted during the rounds"
    limit = min(cap or concurrency, concurrency)
    queued = (t.waiting_mean or 0) >= QUEUE_MIN
    below_cap = t.running_mean is not None and t.running_mean < CAP_SATURATED * limit
    if (t.kv_usage_pct_max or 0) >= KV_FULL_PCT and queued and below_cap:
        return (f"KV cache {t.kv_usage_pct_max:.0f}% full with {t.waiting_mean:.1f} requests waiting while "
                f"{t.running_mean:.1f} run (cap {cap or 'unknown'}, concurrency {concurrency})")
    return None


def _cap_bound(t: Telemetry | None, cap: int | None, concurrency: int) -> str | None:
    if cap is None or cap >= concurrency:
        return None
    if t is None or t.running_mean is None:
        return f"the sequence cap {cap} is below the concurrency {concurrency}"
    if t.running_mean >= CAP_SATURATED * cap and (t.waiting_mean or 0) >= QUEUE_MIN:
        return f"{t.running_mean:.1f} requests run at the cap {cap} with {t.waiting_mean:.1f} waiting"
    return None


def diagnose(evidence: PlanEvidence, cap: int | None, concurrency: int, graphs_off: bool) -> Diagnosis:
    """The first bottleneck of the table that the evidence shows; `unknown` when none does."""
    t = evidence.telemetry
    found: list[tuple[Bottleneck, str | None]] = [
        ("kv_capacity", _kv_bound(t, cap, concurrency) if t else None),
        ("sequence_cap", _cap_bound(t, cap, concurrency)),
        ("decode_launch", "CUDA graphs are off on a GPU" if graphs_off and evidence.host == "gpu" else None),
        ("prefill", f"{t.prefill_share_pct:.0f}% of request time is prefill"
         if t and (t.prefill_share_pct or 0) >= PREFILL_SHARE_PCT else None),
        ("memory_bandwidth", f"decode at {evidence.achieved_pct:.0f}% of the memory roofline"
         if evidence.binding == "memory" and (evidence.achieved_pct or 0) >= NEAR_ROOFLINE_PCT else None),
    ]
    for bottleneck, because in found:
        if because:
            return Diagnosis(bottleneck=bottleneck, because=because)
    why = "no telemetry from the engine" if t is None else "the telemetry shows no bottleneck of the table"
    return Diagnosis(bottleneck="unknown", because=why)
