"""What a target may ask of the hosts file: a host it names, and slots its launches fit. Pure code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hyperloom_assets.core.config.problems import TargetProblem
from hyperloom_assets.core.fleet.slots import SlotError, devices_per_launch

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
        """A launch that takes more devices than its host declares could never get a slot, nor
        `parallel_trials` slots more than the host has. On a pool a launch fits on one member, and
        the slots are those of every member."""
        members = dict(self.gpus).get(target.host)
        parallel = target.parallel_trials
        if members is None:
            if isinstance(parallel, int) and parallel > 1:
                return TargetProblem(file=file, field="parallel_trials", expected=(
                    f"1 or auto on host {target.host!r}, which declares no gpus in {self.file} (one slot); got {parallel}"))
            return None
        try:
            needed = devices_per_launch(target.engine, target.server_args)
        except SlotError as error:
            return TargetProblem(file=file, field="server_args", expected=str(error))
        largest, slots = max(members), sum(declared // needed for declared in members)
        where = (f"host {target.host!r} declares {largest}" if len(members) == 1 else
                 f"the largest member of pool {target.host!r} declares {largest}")
        if needed > largest:
            return TargetProblem(file=file, field="server_args", expected=(
                f"at most {largest} devices per launch ({where} in {self.file}), "
                f"got tensor x pipeline x data parallel = {needed}"))
        if isinstance(parallel, int) and parallel > slots:
            held = (f"host {target.host!r} ({largest} declared" if len(members) == 1 else
                    f"pool {target.host!r} ({' + '.join(str(m) for m in members)} declared by its members")
            return TargetProblem(file=file, field="parallel_trials", expected=(
                f"at most {slots} slots of {needed} device(s) on {held} in {self.file}), got {parallel}"))
        return None

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
