"""Every flag the project passes to a real engine, gathered from where it keeps them.

The engine's module (launcher flags, booleans, accuracy-risk knobs, its profiler's, the
parallel sizes a slot is counted from), its seed grid
(entries, defaults, keep flags, ablations) and the sim's flavor parser that imitates it.
The contract tests check each against the upstream registrations they quote.
"""

from __future__ import annotations

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.sim import HARNESS_FLAGS, accepted_flags
from hyperloom_assets.core.planning.seed_grids import load_grids
from hyperloom_assets.core.planning.variants import looks_like_flag, split_args


def grid_flags(engine: str) -> set[str]:
    grid = load_grids()[engine]
    flags = {grid.sequence_cap_flag, *grid.keep_flags, *(k for k in grid.ablation_rules if looks_like_flag(k))}
    flags |= {grid.token_budget_flag} if grid.token_budget_flag else set()
    for args in (grid.defaults.any, grid.defaults.gpu, grid.defaults.cpu):
        flags |= {s.flag for s in split_args(args) if s.flag}
    for entry in grid.entries:
        flags |= {entry.flag} if entry.flag else {s.flag for s in split_args(entry.add_args) if s.flag}
    return flags


def module_flags(engine: str) -> set[str]:
    spec = engine_for(engine)
    risks = {risk.knob for risk in spec.accuracy_risks if looks_like_flag(risk.knob)}
    profiler = {a for a in spec.profiler.server_args("/traces") if looks_like_flag(a)} if spec.profiler else set()
    return set(spec.launcher_flags()) | set(spec.boolean_flags) | risks | profiler | spec.devices.flags()


def sim_flavor_flags(engine: str) -> set[str]:
    """What the sim's flavor of this engine takes, harness flags aside."""
    return set(accepted_flags(engine)) - HARNESS_FLAGS


def project_flags(engine: str) -> set[str]:
    return grid_flags(engine) | module_flags(engine) | sim_flavor_flags(engine)
