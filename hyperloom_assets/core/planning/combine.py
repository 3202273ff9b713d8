"""One variant that moves several knobs at once: the plan's best value of each knob, together. Pure code.

Trying one knob at a time costs a launch (often three, before the launch noise is
known) per knob, and a poor config is poor in several knobs at once. When the diagnosis
names several knobs that act on the bottleneck (a positive boost in rules.yaml), their
best values are also offered together, first; under a diagnosis that names fewer, every
knob whose best value scores at least the table's `combine.min_score` joins
(planner._joint picks which): one trial takes them all, and the climb
keeps the combination only if it beats the running best by more than the noise, as for
any variant. The knobs are distinct, so no value overrides another; what the
combination got wrong is left to the next plan, which proposes every knob's other
values on top of it. benchmarks/search_quality.py measured what this saves.
"""

from __future__ import annotations

from collections.abc import Sequence

from hyperloom_assets.core.planning.rules import CombineRules
from hyperloom_assets.core.planning.variants import Variant, knob_of, merge_changes


def combined(plan: list[Variant], rules: CombineRules, held: frozenset[str] = frozenset(),
             refused: Sequence[Variant] = ()) -> Variant | None:
    """The best value of each strong knob as one variant; None when fewer than `min_knobs` qualify.

    `held` are the settings the keepers already moved: a combination that also moved one
    of them back could not tell whether the keeper or the new knobs paid, so those knobs
    are left to single trials. `refused` are combinations the engine would not start (two
    settings it will not take together, e.g. no chunked prefill under a small token
    budget): each time, the next one leaves out the weakest knob of the refused one.
    """
    held = held | _weakest_of_refused(plan, refused)
    chosen: dict[frozenset[str], Variant] = {}
    for variant in plan:  # best first, so the first value of a knob is its best
        knob = knob_of(variant)
        if variant.provenance == "combined" or variant.expected_value < rules.min_score or knob in chosen:
            continue
        if knob & held or any(knob & other for other in chosen):
            continue  # two variants on one setting cannot both hold
        chosen[knob] = variant
        if len(chosen) == rules.max_knobs:
            break
    if len(chosen) < rules.min_knobs:
        return None
    parts = list(chosen.values())
    merged = merge_changes(parts, name="combined: " + " + ".join(v.name for v in parts))
    why = "; ".join(f"{v.name} [{v.rule}] {v.expected_value:g}" for v in parts)
    return merged.model_copy(update={
        "provenance": "combined", "accuracy_risky": any(v.accuracy_risky for v in parts),
        "expected_value": sum(v.expected_value for v in parts), "rule": "combined", "diagnosis": parts[0].diagnosis,
        "reason": f"[combined] the best value of each knob scoring at least {rules.min_score:g}, tried together: {why}"})


def _weakest_of_refused(plan: list[Variant], refused: Sequence[Variant]) -> frozenset[str]:
    """For each refused combination, the settings of its lowest-scoring knob still in the plan."""
    left_out: set[str] = set()
    for combination in refused:
        members = [v for v in plan if v.provenance != "combined" and knob_of(v) <= knob_of(combination)
                   and not knob_of(v) & left_out]
        if members:
            left_out |= knob_of(min(members, key=lambda v: v.expected_value))
    return frozenset(left_out)
