"""The validated gain: from the validation's own launches, its noise estimate sharpened by the climb's."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.decisions.rule import validated_gain
from hyperloom_assets.core.measurement.stats import launch_gain_interval

BASE = [[100.0] * 3, [104.0] * 3]  # base, stack, base, stack: two launches a side
STACK = [[150.0] * 3, [153.0] * 3]


def test_the_gain_is_the_validations_own_and_the_climb_only_narrows_its_interval() -> None:
    alone = validated_gain(STACK, BASE, [])
    assert alone == pytest.approx(launch_gain_interval(STACK, BASE, (), 0.95))
    quiet_climb = [[[100.0] * 3, [100.5] * 3, [99.5] * 3], [[150.0] * 3, [150.5] * 3]]
    sharpened = validated_gain(STACK, BASE, quiet_climb)
    assert sharpened[0] == pytest.approx(alone[0]), "the climb's launches never enter the gain itself"
    assert alone[1] < sharpened[1] < sharpened[0] < sharpened[2] < alone[2]
