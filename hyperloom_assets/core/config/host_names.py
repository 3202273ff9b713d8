"""What a target may ask of the hosts file: a host it names, and slots its launches fit. Pure code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hyperloom_assets.core.config.problems import TargetProblem
from hyperloom_assets.core.fleet.run_slots import HostDevices, SlotRefusal, target_slots

if TYPE_CHECKING:
    from hyperloom_assets.core.config.targets import Target


@dataclass(frozen=True)
class HostNames:
    """The hosts a target may name, and the hosts file they come from (for the error)."""

    file: Path
    names: frozenset[str]
    broken: tuple[tuple[str, str], ...] = ()  # (host, what is wrong with its entry)
    unreadable: str | None = None  # what is wrong with the whole file, when it could not be read
    # (host or pool, how many devices each of its members declares): hosts with `gpus:` and pools only
    gpus: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def slot_problem(self, file: str, target: "Target") -> TargetProblem | None:
        """A target that could never get its slots here (core/fleet/run_slots.py decides): a launch
        larger than its host, or more `parallel_trials` than the host's (the pool's) slots."""
        decided = target_slots(target, self.devices_of(target.host))
        if isinstance(decided, SlotRefusal):
            return TargetProblem(file=file, field=decided.field, expected=decided.expected)
        return None

    def devices_of(self, host: str) -> HostDevices:
        """What `host` declares, for the slot decision: None for a host without `gpus:` (or unknown)."""
        return HostDevices(name=host, file=str(self.file), members=dict(self.gpus).get(host))

    def problem(self, file: str, host: str) -> TargetProblem | None:
        if host in self.names:
            return None
        if self.unreadable is not None:
            return TargetProblem(file=file, field="host", expected=f"a usable host, but the hosts file {self.file} "
                                 f"naming {host!r} is bad: {self.unreadable}")
        wrong = [text for name, text in self.broken if name == host]
        if wrong:
            return TargetProblem(file=file, field="host", expected=f"a usable host, but {host!r} in {self.file} is "
                                 f"bad: {'; '.join(wrong)}")
        return TargetProblem(file=file, field="host", expected=f"one of the hosts of {self.file} "
                             f"({', '.join(sorted(self.names))}), got {host!r}")
