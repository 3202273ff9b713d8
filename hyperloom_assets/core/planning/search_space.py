"""A target's search_space laid over its engine's seed grid. Pure code.

Each knob of the space becomes a grid entry tried at each of its values, scored by the
family of the grid's knob it is (a space's `--max-num-seqs` is the sequence cap, with the
cap's rules), else by the `search_space` rule: a knob the rules know nothing of is still
tried, and its measurement decides. With `only: true` the space's entries replace the
grid's and the operator's own flags are not ablated: the plan holds the space alone.
"""

from __future__ import annotations

from hyperloom_assets.core.config.search_space import SearchSpace, as_text
from hyperloom_assets.core.planning.seed_grids import GridEntry, ScoringFamily, SeedGrid
from hyperloom_assets.core.planning.variants import setting_key, split_args

UNKNOWN_KNOB: ScoringFamily = "search_space"
DOC = "the target's search_space"


def flag_family(grid: SeedGrid, flag: str) -> ScoringFamily:
    """The family the grid scores this flag by; `search_space` when the grid has no such knob."""
    key = setting_key(flag)
    if key == setting_key(grid.sequence_cap_flag):
        return "sequence_cap"
    if grid.token_budget_flag and key == setting_key(grid.token_budget_flag):
        return "token_budget"
    for entry in grid.entries:
        flags = [entry.flag] if entry.flag else [s.flag for s in split_args(entry.add_args) if s.flag]
        if any(setting_key(f) == key for f in flags):
            return entry.rule
    for knob, family in grid.ablation_rules.items():
        if knob.startswith("-") and setting_key(knob) == key:
            return family
    return UNKNOWN_KNOB


def env_family(grid: SeedGrid, name: str) -> ScoringFamily:
    for entry in grid.entries:
        if entry.env_var == name or name in entry.set_env:
            return entry.rule
    return grid.ablation_rules.get(name, UNKNOWN_KNOB)


def space_entries(grid: SeedGrid, space: SearchSpace) -> list[GridEntry]:
    entries = []
    for flag, values in space.args.items():
        family = flag_family(grid, flag)
        if values == [True]:
            entries.append(GridEntry(name=flag, rule=family, doc=DOC, add_args=[flag], from_search_space=True))
        else:
            entries.append(GridEntry(name=flag, rule=family, doc=DOC, flag=flag, choices=[as_text(v) for v in values],
                                     from_search_space=True))
    for name, values in space.env.items():
        entries.append(GridEntry(name=name, rule=env_family(grid, name), doc=DOC, env_var=name,
                                 choices=[as_text(v) for v in values], from_search_space=True))
    return entries


def with_search_space(grid: SeedGrid, space: SearchSpace | None) -> SeedGrid:
    """The grid the planner searches for a target: the space's knobs first, then (unless `only`) the grid's."""
    if space is None:
        return grid
    entries = space_entries(grid, space) + ([] if space.only else list(grid.entries))
    return grid.model_copy(update={"entries": entries, "ablate": not space.only})
