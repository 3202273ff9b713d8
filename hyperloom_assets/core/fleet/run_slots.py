"""How many slots a run takes on its host or pool, decided once. Pure code.

A target's `parallel_trials` is a number of slots, or `auto`: every slot its host (every
member of its pool) could hold, each of as many devices as one launch takes
(slots.devices_per_launch). The run waits for the slots it must have (all of a number,
the first of `auto`) and takes the rest of `auto`'s only when they are free as it starts.

`targets check` (core/config/host_names.py), the fleet resource (resources/hosts/fleet.py)
and the pool (resources/hosts/host_pool.py) all read `decide_slots`, so a target the check
passes is one the fleet can seat, and a refusal reads the same from both. No other module
reads `parallel_trials` (tests/unit/test_layering.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import PositiveInt

from hyperloom_assets.core.fleet.slots import SlotError, devices_per_launch
from hyperloom_assets.core.models import Frozen

if TYPE_CHECKING:
    from hyperloom_assets.core.config.targets import Target

ParallelTrials = PositiveInt | Literal["auto"]


class HostDevices(Frozen):
    """What a target's host declares: its name, the hosts file, and how many devices each of
    its members declares (a host is its own one member; None: a host that declares no gpus)."""
    name: str
    file: str
    members: tuple[int, ...] | None


class RunSlots(Frozen):
    """The slots a run takes: `wanted` of them, the first `waited_for` waited for, the rest
    taken only when free at once. `per_launch` None: a host without declared gpus, leased whole."""
    per_launch: PositiveInt | None
    wanted: PositiveInt
    waited_for: PositiveInt

    def must_wait(self, held: int) -> bool:
        """Whether the run, holding `held` slots, waits for the next (else it takes it only if free)."""
        return held < self.waited_for


class SlotRefusal(Frozen):
    """A target that could never get its slots: the field at fault and what it should be."""
    field: Literal["parallel_trials", "server_args"]
    expected: str


def decide_slots(parallel_trials: ParallelTrials, host: HostDevices, per_launch: int) -> RunSlots | SlotRefusal:
    """The run's slots on `host`, each of `per_launch` devices, or why it can have none.

    A launch must fit on one member (the largest); `parallel_trials` slots must fit in the
    members' slots together; `auto` wants them all and waits for one."""
    if host.members is None:
        return _whole_host(parallel_trials, host)
    largest, fitting = max(host.members), sum(declared // per_launch for declared in host.members)
    if per_launch > largest:
        where = (f"host {host.name!r} declares {largest}" if len(host.members) == 1 else
                 f"the largest member of pool {host.name!r} declares {largest}")
        return SlotRefusal(field="server_args", expected=(
            f"at most {largest} devices per launch ({where} in {host.file}), "
            f"got tensor x pipeline x data parallel = {per_launch}"))
    if parallel_trials == "auto":
        return RunSlots(per_launch=per_launch, wanted=fitting, waited_for=1)
    if parallel_trials > fitting:
        held = (f"host {host.name!r} ({largest} declared" if len(host.members) == 1 else
                f"pool {host.name!r} ({' + '.join(str(m) for m in host.members)} declared by its members")
        return SlotRefusal(field="parallel_trials", expected=(
            f"at most {fitting} slots of {per_launch} device(s) on {held} in {host.file}), got {parallel_trials}"))
    return RunSlots(per_launch=per_launch, wanted=parallel_trials, waited_for=parallel_trials)


def _whole_host(parallel_trials: ParallelTrials, host: HostDevices) -> RunSlots | SlotRefusal:
    """A host that declares no gpus is one slot, leased whole."""
    if parallel_trials != "auto" and parallel_trials > 1:
        return SlotRefusal(field="parallel_trials", expected=(
            f"1 or auto on host {host.name!r}, which declares no gpus in {host.file} (one slot); "
            f"got {parallel_trials}"))
    return RunSlots(per_launch=None, wanted=1, waited_for=1)


def target_slots(target: "Target", host: HostDevices) -> RunSlots | SlotRefusal:
    """`decide_slots` for a target: its devices per launch from its engine's size flags, a bad
    size flag refused as its server_args (asked only where the host declares its gpus)."""
    if host.members is None:
        return _whole_host(target.parallel_trials, host)
    try:
        per_launch = devices_per_launch(target.engine, target.server_args)
    except SlotError as error:
        return SlotRefusal(field="server_args", expected=str(error))
    return decide_slots(target.parallel_trials, host, per_launch)
