"""A pool's slots (resources/hosts/host_pool.py): taken on the first member's free devices first, then the
next's, every free one with `auto`, refused naming the pool when none is free; members that serve with
another GPU or engine install refuse the pool; and a PooledHost asks a server's questions of the slot
that serves it (resources/hosts/slot_pool.py)."""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from hyperloom_assets.core.fleet.run_slots import RunSlots
from hyperloom_assets.core.fleet.slots import SlotError
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.resources.hosts.host_pool import PoolMismatch, PoolRequest, check_members_agree, hold_pool_slots
from hyperloom_assets.resources.hosts.owner_scope import this_holder
from hyperloom_assets.resources.hosts.slot_leases import hold_slot
from hyperloom_assets.resources.hosts.slot_pool import PooledHost
from hyperloom_assets.resources.store.leases import HostLeased, HostLeases


class Member:
    """What the pool asks of a member host: its name, slot facts, GPUs and engine install."""

    def __init__(self, name: str, gpus: list[str] | None = None, install: str | None = "vllm 0.9.0"):
        self.name, self.gpus, self.install = name, gpus or ["NVIDIA H100 80GB HBM3"] * 2, install

    def slot_facts(self) -> dict:
        return {"gpu_tool": None, "topology": None, "allowed_cpus": [0, 1, 2, 3]}

    def gpu_names(self) -> list[str]:
        return self.gpus

    def engine_identity(self, spec: ServerSpec) -> str | None:
        return self.install


def pool(count: int, wanted: int, auto: bool = False) -> PoolRequest:
    """`wanted` slots of `count` devices; `auto`: the run's slots as run_slots decides `parallel_trials: auto`
    (only the first waited for)."""
    slots = RunSlots(per_launch=count, wanted=wanted, waited_for=1 if auto else wanted)
    return PoolRequest("gpu-pool", [(Member("gpu-a"), [0, 1]), (Member("gpu-b"), [0, 1])], slots)


def placed(slots) -> list[tuple[str, tuple[int, ...]]]:
    return [(slot.host, slot.devices) for slot in slots]


def test_slots_fill_the_first_members_devices_then_the_next(store) -> None:
    leases = HostLeases(store)
    with ExitStack() as held:
        slots = hold_pool_slots(held, leases, pool(1, 3), this_holder("run-1"))
        assert placed(slots) == [("gpu-a", (0,)), ("gpu-a", (1,)), ("gpu-b", (0,))]
        assert sorted(lease.host for lease in leases.of_host("gpu-b")) == ["gpu-b/gpu0"]
    assert leases.of_host("gpu-a") == [] and leases.of_host("gpu-b") == [], "released with the run"


def test_auto_takes_every_free_slot_of_every_member_around_another_runs(store) -> None:
    leases = HostLeases(store)
    with hold_slot(leases, Member("gpu-a"), [0, 1], 1, this_holder("run-other")), ExitStack() as held:
        slots = hold_pool_slots(held, leases, pool(1, 4, auto=True), this_holder("run-1"))
        assert placed(slots) == [("gpu-a", (1,)), ("gpu-b", (0,)), ("gpu-b", (1,))]


def test_a_pool_with_no_free_slot_is_refused_naming_the_pool_and_each_members_holder(store) -> None:
    leases, other = HostLeases(store), this_holder("run-other")
    with hold_slot(leases, Member("gpu-a"), [0, 1], 2, other), hold_slot(leases, Member("gpu-b"), [0, 1], 2, other):
        with ExitStack() as held, pytest.raises(HostLeased) as refused:
            hold_pool_slots(held, leases, pool(1, 1), this_holder("run-1"), wait_s=0)
    assert "pool 'gpu-pool': 0 of 1 slot(s) free" in str(refused.value)
    assert "host 'gpu-a'" in str(refused.value) and "host 'gpu-b'" in str(refused.value)
    assert "run run-other" in str(refused.value)


def test_a_launch_larger_than_every_member_is_a_slot_error_naming_the_pool() -> None:
    with pytest.raises(SlotError, match="no member of pool 'gpu-pool' declares that many"):
        pool(4, 1)


@pytest.mark.parametrize("other, differs", [
    (Member("gpu-b", install="vllm 0.10.1"), "vllm install 'vllm 0.10.1' on 'gpu-b', 'vllm 0.9.0' on 'gpu-a'"),
    (Member("gpu-b", gpus=["NVIDIA A100-SXM4-80GB"] * 2), "GPUs ['NVIDIA A100-SXM4-80GB', "),
])
def test_members_that_serve_with_another_gpu_or_install_refuse_the_pool(other, differs) -> None:
    spec = ServerSpec(engine="vllm", model=Path("/m"))
    check_members_agree("gpu-pool", [Member("gpu-a"), Member("gpu-b")], spec)  # alike: no error
    with pytest.raises(PoolMismatch) as refused:
        check_members_agree("gpu-pool", [Member("gpu-a"), other], spec)
    assert str(refused.value).startswith("pool 'gpu-pool': member 'gpu-b' differs from 'gpu-a': ")
    assert differs in str(refused.value)


class SlotHost:
    """A slot's host that records which server questions reach it."""

    def __init__(self, name: str):
        self.name, self.asked = name, []

    @contextmanager
    def serve(self, spec, run_dir, label=None):
        yield self.name

    def measure(self, bench, base_url, *args, **kwargs):
        self.asked.append(("measure", base_url))

    def post(self, url, timeout_s):
        self.asked.append(("post", url))


def test_a_pooled_host_asks_each_servers_questions_of_the_slot_that_serves_it() -> None:
    first, second = SlotHost("gpu-a"), SlotHost("gpu-b")
    pooled, both_serving = PooledHost([first, second]), threading.Barrier(2, timeout=10)

    def trial(url: str) -> None:
        with pooled.serve(None, Path("."), None):
            both_serving.wait()  # each thread holds its own slot now
            pooled.measure(None, url)
            pooled.post(url, 1.0)

    threads = [threading.Thread(target=trial, args=(url,)) for url in ("http://a", "http://b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    asked = {("measure", "http://a"), ("post", "http://a")}, {("measure", "http://b"), ("post", "http://b")}
    assert {frozenset(first.asked), frozenset(second.asked)} == {frozenset(asked[0]), frozenset(asked[1])}
