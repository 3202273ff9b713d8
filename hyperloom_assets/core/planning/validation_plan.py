"""Which validation launch runs on which slot, and which run at once. Pure code.

The stack is validated on pairs of fresh servers, the baseline's and the stack's. On one
slot they take turns (base, stack, base, stack). A run that holds two slots or more serves
each pair's two sides at the same moment on two slots, so drift between launches cannot
fall on one side, and the validation takes half the time or less. The sides swap slots from
one pair to the next, inside a wave (base on slot 0 and stack on slot 1 for its first pair,
stack on slot 2 and base on slot 3 for its second, ...) and from one wave to the next, so a
slot that serves faster, or a parity of slots that does, cannot favour one side either.
"""

from __future__ import annotations

from hyperloom_assets.core.models import Strict

SIDES = ("base", "stack")


class ValidationLaunch(Strict):
    pair: int  # from 1
    side: str  # "base" or "stack"
    slot: int  # index into the run's slots


def validation_waves(pairs: int, slots: int, together: bool = True) -> list[list[ValidationLaunch]]:
    """The validation's launches in waves: each wave's launches at once, the waves in turn.

    `together` False (both sides cannot be served at once, e.g. two commits of one tree
    checkout) or a single slot: one launch a wave, base then stack, pair after pair.
    """
    if pairs < 1 or slots < 1:
        raise ValueError(f"a validation needs a pair and a slot at least, not {pairs} pair(s) on {slots} slot(s)")
    if slots < 2 or not together:
        return [[ValidationLaunch(pair=pair, side=side, slot=0)] for pair in range(1, pairs + 1) for side in SIDES]
    per_wave = slots // 2
    waves: list[list[ValidationLaunch]] = []
    for start in range(0, pairs, per_wave):
        wave = []
        for group, pair in enumerate(range(start + 1, min(start + per_wave, pairs) + 1)):
            order = SIDES[::-1] if (len(waves) + group) % 2 else SIDES  # alternate pair by pair, wave by wave
            wave += [ValidationLaunch(pair=pair, side=side, slot=2 * group + order.index(side)) for side in SIDES]
        waves.append(wave)
    return waves
