"""The planner's inputs gathered from a target's evidence. Pure code.

The baseline (launch evidence, prefix share), the roofline (binding bound, achieved
share), the model shape (MoE, fp8) and the running best's telemetry (the baseline's, or
the last keeper's launch) become a PlanEvidence; the climb's trials so far become its
history; the planner does the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hyperloom_assets.core.config.targets import Target, TargetSlo
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.slo_verdict import slo_verdict
from hyperloom_assets.core.planning.diagnosis import SloBreach
from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.planning.planner import PlanEvidence, Tried, base_for, plan, prefix_share_of, replan
from hyperloom_assets.core.engines import speaking
from hyperloom_assets.core.engines.registry import engine_flags_for, grid_engine, harness_flags_for
from hyperloom_assets.core.planning.continuation import Admits, Continuation
from hyperloom_assets.core.planning.continuation_space import knob_space
from hyperloom_assets.core.planning.variants import setting_key
from hyperloom_assets.core.planning.patch_plan import patch_candidates, with_patches
from hyperloom_assets.core.planning.search_space import with_search_space
from hyperloom_assets.core.planning.slo_ceiling import broke_batch_latency, cap_ceiling, over_ceiling
from hyperloom_assets.core.planning.seed_grids import SeedGrid, load_grids
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.results import BaselineResult
from hyperloom_assets.core.roofline.model_shape import ModelShape, load_shape
from hyperloom_assets.core.roofline.roofline import FP8_DTYPES, Achieved, Roofline

def _sequence_cap(target: Target, evidence: dict | None) -> int | None:
    """The cap the engine's own record states (its module names the key), if it has one."""
    key = speaking(target.engine, target.server_args).sequence_cap_key
    value = (evidence or {}).get(key) if key else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _running_best(history: Sequence[TrialRecord]) -> TrialRecord | None:
    kept = [t for t in history if t.outcome == "KEEP"]
    return kept[-1] if kept else None


def slo_breach(slo: TargetSlo | None, latency: Latency | None) -> SloBreach | None:
    """The limits a launch breaks, judged as the climb judges them (each limit's upper bound at
    the percentile); None without an SLO, without latency, or when none is over its limit."""
    if slo is None or latency is None:
        return None
    verdict = slo_verdict(slo, [latency])
    over = {}
    for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
        limit, upper = getattr(slo, name), getattr(verdict, name.replace("_ms", "_upper_ms"))
        if limit is not None and upper is not None and upper > limit:
            over[name] = upper
    if not over:
        return None
    return SloBreach(percentile=slo.percentile, tpot_p50_ms=latency.tpot_ms.p50, itl_p99_ms=latency.itl_ms.p99, **over)


def plan_evidence(target: Target, baseline: BaselineResult, roofline: Roofline, achieved: Achieved,
                  history: Sequence[TrialRecord] = ()) -> PlanEvidence:
    """What the planner knows of the running best: the baseline, or the last keeper's launch."""
    shape = load_shape(target.model)
    best = _running_best(history)
    telemetry, achieved_pct = baseline.measurement.telemetry, achieved.achieved_pct
    if best is not None:
        telemetry = best.telemetry
        if best.output_throughput and achieved_pct is not None:  # the roofline's share is of tok/s
            achieved_pct *= best.output_throughput / baseline.measurement.output_throughput
    # A keeper meets the SLO (decisions/climb.py), so only a baseline that breaks it is read for latency.
    breach = slo_breach(target.slo, baseline.measurement.latency) if best is None else None
    return PlanEvidence(
        binding=roofline.binding, achieved_pct=achieved_pct, telemetry=telemetry, slo_breach=breach,
        sequence_cap=_sequence_cap(target, baseline.launch.evidence),
        prefix_share=prefix_share_of(target.workload, baseline.measurement.theoretical_prefix_hit_pct),
        host=host_kind(roofline), **model_class(shape),
    )


def model_class(shape: ModelShape) -> dict[str, bool]:
    """What the grids' `when` clauses ask of the model: MoE, fp8 weights, MTP layers."""
    return dict(moe=shape.experts > 0, fp8_model=shape.dtype in FP8_DTYPES, has_mtp=shape.mtp_layers > 0)


def host_kind(roofline: Roofline) -> str:
    """The seed grid's host kind for the engine's defaults: cpu or gpu."""
    return "cpu" if roofline.hardware.startswith("cpu") else "gpu"


def grids_for(target: Target, flavor: str | None) -> dict[str, SeedGrid]:
    """The packaged grids, the one that plans for this target with its search_space laid over it."""
    grids = dict(load_grids())
    engine = grid_engine(target.engine, flavor)
    grids[engine] = with_search_space(grids[engine], target.search_space)
    return grids


def plan_for_target(target: Target, baseline: BaselineResult, roofline: Roofline, achieved: Achieved,
                    keepers: list[Variant], tried: set[str], history: Sequence[TrialRecord] = (),
                    tried_patches: frozenset[str] = frozenset()) -> list[Variant]:
    """The plan on top of the stack so far (the first plan when there are no keepers)."""
    evidence = plan_evidence(target, baseline, roofline, achieved, history)
    flavor = speaking(target.engine, target.server_args).name
    past = [Tried(t.variant, t.outcome, t.decision.gain_pct, broke_batch_latency(target.slo, t.slo)) for t in history]
    patches = patch_candidates(target, baseline.launch.engine_version, keepers, tried, tried_patches)
    grids = grids_for(target, flavor)
    if not keepers:
        return with_patches(plan(target.engine, flavor, target.server_args, target.env, target.workload, evidence,
                                 tried, grids=grids, history=past), patches)
    return with_patches(replan(target.engine, flavor, target.server_args, target.env, keepers, target.workload,
                               evidence, tried, grids=grids, history=past), patches)


def slo_skip(target: Target, roofline: Roofline) -> Callable[[Variant, Sequence[TrialRecord]], bool] | None:
    """The climb's skip under an SLO: a sequence cap at or over one whose trial broke TPOT or E2E
    (a dropped cap steps to the engine's default), decided as the trials come in."""
    if target.slo is None:
        return None
    flavor = speaking(target.engine, target.server_args).name
    grid = grids_for(target, flavor)[grid_engine(target.engine, flavor)]
    host = host_kind(roofline)

    def skip(variant: Variant, trials: Sequence[TrialRecord]) -> bool:
        broke = [t.variant for t in trials if broke_batch_latency(target.slo, t.slo)]
        return over_ceiling(variant, cap_ceiling(broke, grid.sequence_cap_flag, grid.boolean_flag_set()), grid, host)

    return skip


def continuation_for_target(target: Target, baseline: BaselineResult, roofline: Roofline, achieved: Achieved,
                            admits: Admits | None = None) -> Continuation | None:
    """The target's continuation past the rule plan over the first plan's knobs; None when it is off."""
    if target.continuation == "off":
        return None
    flavor = speaking(target.engine, target.server_args).name
    grid = grids_for(target, flavor)[grid_engine(target.engine, flavor)]
    base = base_for(grid, target.server_args, target.env, target.workload,
                    plan_evidence(target, baseline, roofline, achieved))
    harness = {setting_key(f) for f in harness_flags_for(target.engine)}
    space = knob_space(base, harness, engine_flags_for(target.engine, flavor))
    return Continuation(space, target.continuation, target.slo, baseline.measurement.latency, admits)
