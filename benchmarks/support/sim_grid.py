"""A sim scenario's search space: every knob the engine's seed grid offers, and their product.

Code only benchmarks use. A scenario with a search_space searches the grid the planner
would (core/planning/search_space.py lays it over the seed grid). A knob is one setting (its family's values relative to the
operator's config, the ablation of the operator's own flag, or leaving it alone); a
point is one choice per knob, counted once per distinct engine configuration (two
routes to the same resolved config are one point). Values the sim's parser does not
know (e.g. --stream-interval) are left out and listed.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ProcessPoolExecutor

from benchmarks.support.offline_climb import SimScenario, true_throughput
from hyperloom_assets.core.engines.registry import grid_engine, harness_flags_for
from hyperloom_assets.core.planning.plan_evidence import grids_for
from hyperloom_assets.core.planning.planner import PlanEvidence, ablation_proposals, base_for, seed_proposals
from hyperloom_assets.core.planning.variants import Variant, compose, setting_key, split_args
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.sim.engine_args import resolve_config
from hyperloom_assets.sim.predict import SimArgError, parse_engine_args

Families = dict[str, list[Variant]]  # knob -> its alternatives to leaving it alone


def knob_name(variant: Variant) -> str:
    keys = {setting_key(s.flag) for s in split_args(variant.add_args) if s.flag}
    keys |= {setting_key(f) for f in variant.remove_args} | set(variant.set_env) | set(variant.unset_env)
    return ",".join(sorted(keys))


def accepted(scenario: SimScenario, argv: list[str]) -> bool:
    try:
        parse_engine_args(scenario.model, argv, scenario.flavor)
    except SimArgError:
        return False
    return True


def config_key(scenario: SimScenario, argv: list[str]) -> str | None:
    """The resolved engine configuration an argv launches; None where the parser refuses it."""
    try:
        parsed = parse_engine_args(scenario.model, argv, scenario.flavor)
    except SimArgError:
        return None
    return resolve_config(parsed, scenario.flavor, gpu_spec(scenario.gpu).memory_gb).model_dump_json()


def grid_families(scenario: SimScenario, evidence: PlanEvidence) -> tuple[Families, list[str]]:
    """Knob -> its alternatives (every value the grid family offers, every ablation); and the refused ones.

    The grid is the one the planner searches for the target: its search_space laid over the
    seed grid (or, with `only: true`, alone and without ablations), by the planner's own code.
    """
    target = scenario.target()
    grid = grids_for(target, scenario.flavor)[grid_engine("sim", scenario.flavor)]
    args = target.server_args
    base = base_for(grid, args, {}, scenario.workload, evidence)
    harness = {setting_key(f) for f in harness_flags_for("sim")}
    # Ablations first: where a drop and a counter-flag resolve to the same engine config,
    # the grid keeps (and prints) the drop.
    ablations = ablation_proposals(base, args, {}, harness) if grid.ablate else []
    proposals = ablations + seed_proposals(base)
    families: Families = {}
    refused = []
    for proposal in proposals:
        variant = proposal.variant
        if not accepted(scenario, compose(args, {}, [variant]).argv):
            refused.append(variant.name)
            continue
        families.setdefault(knob_name(variant), []).append(variant)
    return families, refused


def point_argv(scenario: SimScenario, choices: list[Variant | None]) -> list[str]:
    return compose(scenario.target().server_args, {}, [v for v in choices if v is not None],
                   harness_flags_for("sim")).argv


def grid_points(scenario: SimScenario, families: Families) -> list[list[str]]:
    """Every combination (leaving a knob alone included), one per distinct engine configuration."""
    seen, points = set(), []
    for combo in itertools.product(*[[None, *options] for options in families.values()]):
        argv = point_argv(scenario, list(combo))
        key = config_key(scenario, argv)
        if key not in seen:
            seen.add(key)
            points.append(argv)
    return points


def _point_throughput(job: tuple[str, list[str]]) -> float | None:
    scenario_json, argv = job
    return true_throughput(SimScenario.model_validate_json(scenario_json), argv)


def exhaustive_grid(scenario: SimScenario, points: list[list[str]], workers: int) -> list[float | None]:
    """Every point's noise-free predicted throughput (None where the engine refuses it)."""
    jobs = [(scenario.model_dump_json(), argv) for argv in points]
    if workers <= 1:
        return [_point_throughput(job) for job in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_point_throughput, jobs, chunksize=4))
