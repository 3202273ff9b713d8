"""The fleet resource leases the slots core/fleet/run_slots.py decides (resources/hosts/fleet.py): with
`auto` it takes every free slot around another run's without waiting for the held one, a number waits
for all of them, and a target the decision refuses is refused before any lease."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.fleet.slots import SlotError
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.owner_scope import this_holder
from hyperloom_assets.resources.hosts.slot_leases import hold_slot
from hyperloom_assets.resources.store.leases import HostLeased, HostLeases

GPUS = [0, 1, 2, 3]


class FourGpuHost:
    """What hold_slot asks of a host: its name and its slot facts (a CPU-only host here)."""
    name = "box"

    def slot_facts(self) -> dict:
        return {"gpu_tool": None, "topology": None, "allowed_cpus": [0, 1, 2, 3]}


def fleet(tmp_path: Path, store, slot_wait_s: float) -> HostFleet:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(yaml.safe_dump({"box": {"kind": "local", "gpus": GPUS}}))
    return HostFleet(local=LocalHost(state_dir=str(tmp_path / "state")), store=store, slot_wait_s=slot_wait_s,
                     catalog=TargetCatalog(folder=str(tmp_path / "targets"), hosts_file=str(hosts)))


def target(parallel_trials) -> Target:
    return Target(engine="vllm", model=Path("/m"), host="box", parallel_trials=parallel_trials,
                  workload={"kind": "random", "isl": 8, "osl": 8, "concurrency": 1})


def hold(resource: HostFleet, parallel_trials, held: ExitStack) -> list:
    host = FourGpuHost()
    slots = resource._run_slots(target(parallel_trials), [(host, GPUS)])
    log = SimpleNamespace(warning=print, info=print)
    return resource._hold_slots(held, host, GPUS, slots, this_holder("run-1"), SimpleNamespace(log=log))


def test_auto_takes_every_free_slot_around_another_runs_without_waiting(tmp_path, store) -> None:
    resource = fleet(tmp_path, store, slot_wait_s=30)
    with hold_slot(HostLeases(store), FourGpuHost(), GPUS, 1, this_holder("run-other")), ExitStack() as held:
        started = time.monotonic()
        slots = hold(resource, "auto", held)
        assert [slot.devices for slot in slots] == [(1,), (2,), (3,)]
        assert time.monotonic() - started < 10, "the slot another run holds is not waited for"


def test_a_number_of_slots_waits_for_them_all_and_is_refused_short_of_one(tmp_path, store) -> None:
    resource = fleet(tmp_path, store, slot_wait_s=0)
    with hold_slot(HostLeases(store), FourGpuHost(), GPUS, 1, this_holder("run-other")), ExitStack() as held:
        with pytest.raises(HostLeased, match="no free slot of 1 device"):
            hold(resource, 4, held)


def test_a_target_the_slot_decision_refuses_is_refused_before_any_lease(tmp_path, store) -> None:
    resource = fleet(tmp_path, store, slot_wait_s=0)
    with pytest.raises(SlotError, match=r"parallel_trials: at most 4 slots of 1 device\(s\) on host 'box'"):
        resource._run_slots(target(5), [(FourGpuHost(), GPUS)])
    assert HostLeases(store).of_host("box") == []
