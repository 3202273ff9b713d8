"""The values between a keeper and the neighbour that lost, on an ordered knob. Pure code.

A ladder (the sequence cap, the token budget: planning/seed_grids.py) offers values a
factor apart. Once a keeper set the knob to one of them and a neighbour on the ladder lost
(REVERT: worse, not shown better, or breaking the SLO; KEEP_UNSTABLE: its stack did not
hold), the best value may lie between the two, and the plan tries the midpoint first,
before moving to other knobs (planner.plan). Each try narrows the interval: a midpoint kept
becomes the keeper's value, one that lost becomes the nearest loser, so the plan bisects
until the two are within MIN_STEP of each other. Under an SLO a neighbour that broke it is a
loser too, so the bisection searches the boundary where throughput is highest within the
limits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from hyperloom_assets.core.planning.variants import Variant, knob_of, setting_key, split_args

if TYPE_CHECKING:
    from hyperloom_assets.core.planning.seed_grids import GridEntry

LOST = ("REVERT", "KEEP_UNSTABLE")
MIN_STEP = 0.10  # a midpoint closer than this share of the kept value to either end is not worth a launch


class Between(NamedTuple):
    value: int
    kept: int
    lost: int
    why: str  # the losing trial's name and outcome


def _single_value(variant: Variant, key: str) -> int | None:
    """The value a variant that moves only this knob sets it to; None for any other variant."""
    if knob_of(variant) != frozenset({key}) or variant.remove_args:
        return None
    values = [s.value for s in split_args(variant.add_args) if s.flag and setting_key(s.flag) == key]
    try:
        return int(values[-1]) if values and values[-1] is not None else None
    except ValueError:
        return None


def between_values(flag: str, kept: int | None, tried: Sequence[tuple[Variant, str]]) -> list[Between]:
    """The midpoints between `kept` (the running stack's value of `flag`, set by a keeper) and the nearest
    value on each side whose single-knob trial lost, where the two are far enough apart."""
    if kept is None or kept < 1:
        return []
    key = setting_key(flag)
    losers = [(value, f"{variant.name}: {outcome}") for variant, outcome in tried
              if outcome in LOST and (value := _single_value(variant, key)) is not None and value != kept]
    found = []
    for side in (lambda v: v > kept, lambda v: v < kept):
        near = sorted((v for v in losers if side(v[0])), key=lambda v: abs(v[0] - kept))
        if not near:
            continue
        lost, why = near[0]
        mid, step = round((kept + lost) / 2), max(1.0, MIN_STEP * kept)
        if abs(mid - kept) >= step and abs(lost - mid) >= step:
            found.append(Between(mid, kept, lost, why))
    return found


def ladder_midpoints(entries: Sequence[GridEntry], held: set[str], current_of: Callable[[str], int | None],
                     tried: Sequence[tuple[Variant, str]]) -> list[tuple[GridEntry, Between]]:
    """(grid entry, Between) for each integer ladder of the grid whose knob a keeper set (`held`), at
    `current_of(flag)`, the running stack's value."""
    found = []
    for entry in entries:
        ladder = entry.ladder
        if entry.flag is None or ladder is None or ladder.format != "int" or setting_key(entry.flag) not in held:
            continue
        found += [(entry, mid) for mid in between_values(entry.flag, current_of(entry.flag), tried)]
    return found
