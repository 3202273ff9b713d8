"""A run's slots, decided once (core/fleet/run_slots.py): how many a target wants on its host or
pool, how many it waits for, and what is refused and why, the same for `targets check` and the fleet."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.fleet.run_slots import HostDevices, RunSlots, SlotRefusal, decide_slots, target_slots

FILE = "hosts.yaml"


def host(*members: int, name: str = "gpu-a") -> HostDevices:
    return HostDevices(name=name, file=FILE, members=members)


def target(parallel_trials, server_args: list[str] = (), host_name: str = "gpu-a") -> Target:
    return Target(engine="vllm", model=Path("/m"), host=host_name, server_args=list(server_args),
                  parallel_trials=parallel_trials, workload={"kind": "random", "isl": 8, "osl": 8,
                                                             "concurrency": 1})


def test_auto_wants_every_slot_of_the_host_and_waits_for_the_first() -> None:
    assert decide_slots("auto", host(4), 1) == RunSlots(per_launch=1, wanted=4, waited_for=1)


def test_a_number_wants_that_many_slots_and_waits_for_them_all() -> None:
    assert decide_slots(3, host(4), 1) == RunSlots(per_launch=1, wanted=3, waited_for=3)


def test_a_multi_gpu_launch_makes_fewer_larger_slots() -> None:
    assert decide_slots("auto", host(4), 2) == RunSlots(per_launch=2, wanted=2, waited_for=1)
    assert decide_slots("auto", host(5), 2).wanted == 2  # a device left over makes no slot
    assert decide_slots(2, host(4), 2) == RunSlots(per_launch=2, wanted=2, waited_for=2)


def test_more_slots_than_fit_are_refused_naming_the_room() -> None:
    refused = decide_slots(3, host(4), 2)
    assert refused == SlotRefusal(field="parallel_trials", expected=(
        "at most 2 slots of 2 device(s) on host 'gpu-a' (4 declared in hosts.yaml), got 3"))


@pytest.mark.parametrize("parallel_trials", [1, "auto"])
def test_a_launch_larger_than_the_host_is_refused_whatever_the_count(parallel_trials) -> None:
    refused = decide_slots(parallel_trials, host(2), 4)
    assert isinstance(refused, SlotRefusal) and refused.field == "server_args"
    assert refused.expected == ("at most 2 devices per launch (host 'gpu-a' declares 2 in hosts.yaml), "
                                "got tensor x pipeline x data parallel = 4")


def test_a_pool_counts_every_members_slots_and_a_launch_fits_on_one_member() -> None:
    pool = host(2, 4, name="gpu-pool")
    assert decide_slots("auto", pool, 2) == RunSlots(per_launch=2, wanted=3, waited_for=1)
    assert decide_slots(3, pool, 2) == RunSlots(per_launch=2, wanted=3, waited_for=3)
    assert decide_slots(1, pool, 4) == RunSlots(per_launch=4, wanted=1, waited_for=1)  # only on the 4-device member
    assert decide_slots(4, pool, 2) == SlotRefusal(field="parallel_trials", expected=(
        "at most 3 slots of 2 device(s) on pool 'gpu-pool' (2 + 4 declared by its members in hosts.yaml), got 4"))
    assert decide_slots(1, pool, 8).expected.startswith(
        "at most 4 devices per launch (the largest member of pool 'gpu-pool' declares 4")


def test_a_host_without_gpus_is_one_slot_leased_whole() -> None:
    whole = HostDevices(name="local", file=FILE, members=None)
    assert decide_slots("auto", whole, 1) == decide_slots(1, whole, 8) == RunSlots(per_launch=None, wanted=1,
                                                                                   waited_for=1)
    assert decide_slots(2, whole, 1) == SlotRefusal(field="parallel_trials", expected=(
        "1 or auto on host 'local', which declares no gpus in hosts.yaml (one slot); got 2"))


def test_only_the_slots_it_must_have_are_waited_for() -> None:
    auto, three = RunSlots(per_launch=1, wanted=4, waited_for=1), RunSlots(per_launch=1, wanted=3, waited_for=3)
    assert [auto.must_wait(held) for held in range(4)] == [True, False, False, False]
    assert [three.must_wait(held) for held in range(3)] == [True, True, True]


def test_a_target_is_decided_from_its_engines_size_flags() -> None:
    assert target_slots(target("auto", ["-tp", "2"]), host(4)) == RunSlots(per_launch=2, wanted=2, waited_for=1)
    bad = target_slots(target(1, ["-tp", "x"]), host(4))
    assert isinstance(bad, SlotRefusal) and bad.field == "server_args" and "-tp 'x'" in bad.expected
    # A host leased whole never asks the size flags.
    whole = HostDevices(name="local", file=FILE, members=None)
    assert target_slots(target(1, ["-tp", "x"], "local"), whole) == RunSlots(per_launch=None, wanted=1, waited_for=1)
