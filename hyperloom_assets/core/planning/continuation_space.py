"""The space the continuation samples: the plan's knobs, each config a point of it. Pure code.

A knob is one setting the plan can move (a seed-grid entry, a search_space flag, the
ablation of an operator's flag), with the values the plan offers for it relative to the
operator's config; option 0 leaves the knob as the operator set it. A launched config
(argv, env) is read back as a point: for each knob, the first option whose change it
already holds. A point is launched on top of the running best as one change: each knob
the two differ on set to the point's option, or put back as the operator had it.
The knobs are the ones the first plan reads (planner.seed_proposals and
ablation_proposals on the operator's config), so the space is the one
benchmarks/support/sim_grid.py enumerates for the same target.
"""

from __future__ import annotations

from typing import NamedTuple

from hyperloom_assets.core.planning.planner import Base, _admissible, ablation_proposals, seed_proposals
from hyperloom_assets.core.planning.variants import (
    EffectiveConfig,
    Variant,
    apply_variant,
    knob_of,
    merge_changes,
    setting_key,
    split_args,
)

Point = tuple[int, ...]  # one option index per knob; 0: as the operator set it


class Knob(NamedTuple):
    keys: frozenset[str]  # the settings it moves (flag keys, env names)
    options: list[Variant]  # its values besides the operator's, the plan's order


class KnobSpace(NamedTuple):
    knobs: list[Knob]
    operator_args: list[str]
    operator_env: dict[str, str]
    booleans: frozenset[str]

    def size(self) -> int:
        total = 1
        for knob in self.knobs:
            total *= len(knob.options) + 1
        return total


def knob_space(base: Base, harness: set[str], accepted_flags: frozenset[str] | None) -> KnobSpace:
    """The knobs of the plan on the operator's config (`base`), with every value it offers for each."""
    proposals = seed_proposals(base)
    if base.grid.ablate:
        proposals += ablation_proposals(base, base.args, base.env, harness)
    booleans = base.grid.boolean_flag_set()
    knobs: dict[frozenset[str], list[Variant]] = {}
    changes: dict[frozenset[str], list[EffectiveConfig]] = {}
    for proposal in proposals:
        variant = proposal.variant
        if variant.patches or not _admissible(variant, base, harness, accepted_flags, base.args):
            continue
        config = apply_variant(base.args, base.env, variant, booleans)
        key = knob_of(variant)
        if any(config.same_as(other, booleans) for other in changes.get(key, [])):
            continue  # two routes to one config are one option
        knobs.setdefault(key, []).append(variant)
        changes.setdefault(key, []).append(config)
    return KnobSpace([Knob(keys, options) for keys, options in knobs.items()], list(base.args), dict(base.env),
                     booleans)


def point_of(space: KnobSpace, argv: list[str], env: dict[str, str]) -> Point | None:
    """The point a launched config is: per knob, the first option it already holds, 0 where it holds the
    operator's setting; None for a config outside the space (a knob at a value the space does not offer)."""
    config = EffectiveConfig(argv=list(argv), env=dict(env))
    point = []
    for knob in space.knobs:
        held = [i for i, change in enumerate([_as_operator_set(space, knob), *knob.options])
                if apply_variant(argv, env, change, space.booleans).same_as(config, space.booleans)]
        if not held:
            return None
        point.append(held[0])
    return tuple(point)


def _as_operator_set(space: KnobSpace, knob: Knob) -> Variant:
    """The change that puts a knob back as the operator had it."""
    settings = [s for s in split_args(space.operator_args, space.booleans) if s.flag and setting_key(s.flag) in knob.keys]
    present = {setting_key(s.flag) for s in settings}
    flags = [key for key in sorted(knob.keys) if key.startswith("-") and key not in present]
    names = [key for key in sorted(knob.keys) if not key.startswith("-")]
    return Variant(name="as the operator set " + ",".join(sorted(knob.keys)),
                   add_args=[token for s in settings for token in s.tokens], remove_args=flags,
                   set_env={n: space.operator_env[n] for n in names if n in space.operator_env},
                   unset_env=[n for n in names if n not in space.operator_env], provenance="seed_grid",
                   reason="the operator's setting")


def change_to(space: KnobSpace, current: Point, target: Point) -> list[Variant]:
    """The changes that take a config at `current` to `target`, one per knob they differ on."""
    parts = []
    for knob, now, then in zip(space.knobs, current, target):
        if now != then:
            parts.append(knob.options[then - 1] if then else _as_operator_set(space, knob))
    return parts


def point_variant(space: KnobSpace, current: Point, target: Point, sampler: str, why: str) -> Variant:
    """`target` as one variant on top of a running best at `current`, its provenance the continuation's."""
    parts = change_to(space, current, target)
    if not parts:
        raise ValueError("the continuation proposed the running best itself")
    merged = merge_changes(parts, name=f"continuation:{sampler}: " + " + ".join(p.name for p in parts))
    return merged.model_copy(update={"provenance": "continuation", "sampler": sampler,
                                     "accuracy_risky": any(p.accuracy_risky for p in parts),
                                     "rule": "continuation", "reason": why})
