"""The planner's inputs gathered from a target's evidence. Pure code.

The baseline (launch evidence, prefix share), the roofline (binding bound, achieved
share) and the model shape (MoE, fp8) become a PlanEvidence; the planner does the rest.
"""

from __future__ import annotations

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.planning.planner import PlanEvidence, plan, prefix_share_of, replan
from hyperloom_assets.core.engines import speaking
from hyperloom_assets.core.planning.patch_plan import patch_candidates, with_patches
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.results import BaselineResult
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.core.roofline.roofline import FP8_DTYPES, Achieved, Roofline

def _sequence_cap(target: Target, evidence: dict | None) -> int | None:
    """The cap the engine's own record states (its module names the key), if it has one."""
    key = speaking(target.engine, target.server_args).sequence_cap_key
    value = (evidence or {}).get(key) if key else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def plan_evidence(target: Target, baseline: BaselineResult, roofline: Roofline, achieved: Achieved) -> PlanEvidence:
    shape = load_shape(target.model)
    return PlanEvidence(
        binding=roofline.binding, achieved_pct=achieved.achieved_pct,
        sequence_cap=_sequence_cap(target, baseline.launch.evidence),
        prefix_share=prefix_share_of(target.workload, baseline.measurement.theoretical_prefix_hit_pct),
        host="cpu" if roofline.hardware.startswith("cpu") else "gpu",
        moe=shape.experts > 0, fp8_model=shape.dtype in FP8_DTYPES,
    )


def plan_for_target(target: Target, baseline: BaselineResult, roofline: Roofline, achieved: Achieved,
                    keepers: list[Variant], tried: set[str],
                    tried_patches: frozenset[str] = frozenset()) -> list[Variant]:
    """The plan on top of the stack so far (the first plan when there are no keepers)."""
    evidence = plan_evidence(target, baseline, roofline, achieved)
    flavor = speaking(target.engine, target.server_args).name
    patches = patch_candidates(target, baseline.launch.engine_version, keepers, tried, tried_patches)
    if not keepers:
        return with_patches(plan(target.engine, flavor, target.server_args, target.env, target.workload, evidence,
                                 tried), patches)
    return with_patches(replan(target.engine, flavor, target.server_args, target.env, keepers, target.workload,
                               evidence, tried), patches)
