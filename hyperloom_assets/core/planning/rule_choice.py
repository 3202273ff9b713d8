"""Which rule of the rule table (planning/rules.yaml) scores a proposal, from the running base. Pure code.

A knob's family names its rules; which one applies reads the base: where the sequence cap
stands against the concurrency, whether the token budget already covers the batch, what
binds for an fp8 KV cache (planner.scored adds the rule's score and the diagnosis's boost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperloom_assets.core.planning.diagnosis import NEAR_ROOFLINE_PCT

if TYPE_CHECKING:
    from hyperloom_assets.core.planning.planner import Base, Proposal


def _cap_rule(proposal: Proposal, base: Base) -> str:
    cap, new, concurrency = base.cap, proposal.new_value, base.concurrency
    if cap is None or new is None:
        return "cap_unknown"
    if cap < concurrency and new > cap:
        return "cap_raise_to_concurrency" if new >= concurrency else "cap_raise_partial"
    if cap >= concurrency and new < cap and base.evidence.kv_pressure():
        return "cap_lower_kv_pressure"
    if new < cap and base.diagnosis.bottleneck == "slo_batch_tpot":
        return "cap_lower_slo"
    return "cap_other"


def _budget_covers_batch(base: Base) -> bool:
    """Every concurrent prompt already prefills whole in one step, so neither a larger budget
    nor turning chunking off changes a schedule (the make demo target: 16 x 128 tokens under
    the CPU's default 2048)."""
    return base.budget is not None and base.isl is not None and base.budget >= base.concurrency * base.isl


def _budget_rule(proposal: Proposal, base: Base) -> str:
    if base.budget is not None and proposal.new_value is not None and proposal.new_value < base.budget:
        return "budget_down"
    if _budget_covers_batch(base):
        return "budget_up_covered"
    cap_free = base.cap is None or base.cap >= base.concurrency
    return "budget_up_cap_free" if cap_free else "budget_up_cap_binding"


def _fp8_rule(base: Base) -> str:
    evidence = base.evidence
    if base.diagnosis.bottleneck == "kv_capacity":
        return "fp8_kv_capacity"
    if evidence.binding != "memory":
        return "fp8_kv_other"
    near_roofline = (evidence.achieved_pct or 0) >= NEAR_ROOFLINE_PCT
    return "fp8_kv_pressure" if evidence.kv_pressure() or near_roofline else "fp8_kv_memory"


def rule_for(proposal: Proposal, base: Base) -> str:
    """Which rule of RULES scores a proposal."""
    family = proposal.family
    if family == "sequence_cap":
        return _cap_rule(proposal, base)
    if family == "token_budget":
        return _budget_rule(proposal, base)
    if family == "cuda_graphs":
        return "cuda_graphs_gpu" if base.evidence.host == "gpu" else "cuda_graphs_cpu"
    if family == "fp8_kv":
        return _fp8_rule(base)
    if family == "chunked_prefill" and _budget_covers_batch(base):
        return "chunked_prefill_covered"
    if family == "kv_capacity":
        pressed = base.evidence.kv_pressure() or base.diagnosis.bottleneck == "kv_capacity"
        return "kv_capacity_pressure" if pressed else "kv_capacity_other"
    return family
