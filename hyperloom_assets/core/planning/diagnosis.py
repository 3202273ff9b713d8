"""What binds a served config, read from the engine's telemetry and the roofline. Pure code.

The planner diagnoses before it chooses knobs (docs/design.md, Measurement protocol 7): a
config whose KV cache is full, that preempts, or whose requests queue while the
sequence cap is not reached is KV-bound, and knobs that give KV room go first; a
running batch that sits at the cap with a queue behind it is cap-bound; and so on down
the table in rules.yaml. Without telemetry (an engine without `/metrics`) only the
config and the roofline speak, and the diagnosis says so.

Under a target's SLO that the running best breaks, its per-request latency speaks first:
a TTFT (or E2E) limit broken while TPOT holds is queueing for a slot; a TPOT limit broken
with an ITL tail several times the median TPOT is prefill chunks stalling the decode
steps; a TPOT limit broken with even steps is the batch itself.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hyperloom_assets.core.config.targets import SloStatistic
from hyperloom_assets.core.measurement.slo_statistic import label
from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.models import Frozen, Strict

Bottleneck = Literal["slo_queueing", "slo_prefill_interference", "slo_batch_tpot", "kv_capacity", "sequence_cap",
                     "prefill", "decode_launch", "memory_bandwidth", "unknown"]

KV_FULL_PCT = 90.0  # the most of the KV pool in use that counts as full
QUEUE_MIN = 0.5  # mean waiting requests that count as a queue
CAP_SATURATED = 0.9  # running mean over the cap (or the concurrency) at which the batch is full
PREFILL_SHARE_PCT = 35.0  # share of request time in prefill from which prefill is the bottleneck
NEAR_ROOFLINE_PCT = 80.0
# An ITL p99 this many times the median TPOT: some decode steps waited behind a prefill chunk.
INTERFERENCE_RATIO = 3.0


class SloBreach(Strict):
    """Which of the SLO's limits the running best breaks, with the figures a diagnosis cites."""
    percentile: SloStatistic
    ttft_ms: float | None = None  # the breaking launch's 95% upper bound at the percentile, where over its limit
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    tpot_p50_ms: float
    itl_p99_ms: float


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
    slo_breach: SloBreach | None = None  # the running best's latency, when it breaks the target's SLO

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


def _slo_bound(breach: SloBreach, t: Telemetry | None) -> Diagnosis:
    q = label(breach.percentile)
    if breach.tpot_ms is not None:
        ratio = breach.itl_p99_ms / breach.tpot_p50_ms if breach.tpot_p50_ms > 0 else 0.0
        if ratio >= INTERFERENCE_RATIO:
            return Diagnosis(bottleneck="slo_prefill_interference", because=(
                f"TPOT {q} bound {breach.tpot_ms:.4g} ms is over the SLO and the ITL p99 {breach.itl_p99_ms:.4g} ms "
                f"is {ratio:.1f}x the median TPOT {breach.tpot_p50_ms:.4g} ms"))
        return Diagnosis(bottleneck="slo_batch_tpot", because=(
            f"TPOT {q} bound {breach.tpot_ms:.4g} ms is over the SLO with even steps (ITL p99 "
            f"{breach.itl_p99_ms:.4g} ms, {ratio:.1f}x the median TPOT)"))
    over = f"TTFT {q} bound {breach.ttft_ms:.4g} ms" if breach.ttft_ms is not None else \
        f"E2E {q} bound {breach.e2e_ms:.4g} ms"
    waiting = f", {t.waiting_mean:.1f} requests waiting on average" if t and t.waiting_mean is not None else ""
    return Diagnosis(bottleneck="slo_queueing", because=f"{over} is over the SLO while TPOT holds{waiting}")


def diagnose(evidence: PlanEvidence, cap: int | None, concurrency: int, graphs_off: bool) -> Diagnosis:
    """The first bottleneck of the table that the evidence shows; `unknown` when none does."""
    t = evidence.telemetry
    if evidence.slo_breach is not None:
        return _slo_bound(evidence.slo_breach, t)
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
