"""Which validation launches run at once, and on which slot (core/planning/validation_plan.py)."""

from collections import Counter

import pytest

from hyperloom_assets.core.planning.validation_plan import validation_waves


def placed(waves) -> list[list[tuple[int, str, int]]]:
    return [[(launch.pair, launch.side, launch.slot) for launch in wave] for wave in waves]


def test_one_slot_takes_turns_base_then_stack_pair_after_pair() -> None:
    assert placed(validation_waves(2, 1)) == [[(1, "base", 0)], [(1, "stack", 0)], [(2, "base", 0)], [(2, "stack", 0)]]


def test_two_slots_serve_each_pairs_sides_at_once_and_swap_slots_for_the_next_pair() -> None:
    # Mutation: without the swap, slot 0 would serve every baseline launch and a faster slot
    # would pass for a gain.
    assert placed(validation_waves(2, 2)) == [[(1, "base", 0), (1, "stack", 1)], [(2, "base", 1), (2, "stack", 0)]]


def test_four_slots_serve_both_pairs_at_once_on_four_slots_the_sides_swapped_for_the_second() -> None:
    # Mutation: swapping the sides wave by wave only puts every base on an even slot and every stack
    # on an odd one, so a slot parity that serves faster (the first device of each host) favours one side.
    assert placed(validation_waves(2, 4)) == [[(1, "base", 0), (1, "stack", 1), (2, "base", 3), (2, "stack", 2)]]


@pytest.mark.parametrize("slots", [4, 6, 8])
def test_every_slot_serves_each_side_as_often_over_two_waves(slots: int) -> None:
    waves = validation_waves(slots, slots)  # two waves of slots // 2 pairs
    for wave in waves:
        bases = [launch.slot for launch in wave if launch.side == "base"]
        assert {slot % 2 for slot in bases} == {0, 1}, f"the bases of a wave sit on both parities: {bases}"
    served = Counter((launch.slot, launch.side) for wave in waves for launch in wave)
    assert served == {(slot, side): 1 for slot in range(slots) for side in ("base", "stack")}, served


def test_an_odd_slot_is_left_idle_rather_than_split_a_pair() -> None:
    assert placed(validation_waves(2, 3)) == placed(validation_waves(2, 2))
    assert placed(validation_waves(3, 5))[1] == [(3, "base", 1), (3, "stack", 0)]


def test_sides_that_cannot_be_served_at_once_take_turns_on_the_first_slot() -> None:
    # Two commits of one tree checkout: the stack's checkout would change the base's files under it.
    assert placed(validation_waves(2, 4, together=False)) == placed(validation_waves(2, 1))


def test_no_pair_or_no_slot_is_refused() -> None:
    with pytest.raises(ValueError, match="0 pair"):
        validation_waves(0, 2)
    with pytest.raises(ValueError, match="0 slot"):
        validation_waves(2, 0)
