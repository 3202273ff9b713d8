"""Which validation launches run at once, and on which slot (core/planning/validation_plan.py)."""

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


def test_four_slots_serve_both_pairs_at_once_on_four_slots() -> None:
    assert placed(validation_waves(2, 4)) == [[(1, "base", 0), (1, "stack", 1), (2, "base", 2), (2, "stack", 3)]]


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
