"""Where the climb keeps what it measured, so a run is never measured twice. Pure code.

A Ledger holds trials (`recall`/`remember`) keyed by the trial fingerprint within the run's
context, so re-executing a run replays recorded trials instead of measuring them again,
and each launch of a trial as it finishes (`recall_looks`/`remember_look`), so a run
killed mid-trial resumes that trial from its recorded launches and measures only what was
interrupted. It is told of each launch and trial as it is done (`on_look`/`on_trial`).
The `trials` asset keeps it in the result store; MemoryLedger keeps it in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from hyperloom_assets.core.decisions.trial_record import Look, TrialMeasurement, TrialRecord
from hyperloom_assets.core.planning.variants import Variant

MeasureFn = Callable[[list[Variant], Variant | None], TrialMeasurement]  # None: the stack alone


class Ledger(Protocol):
    """Where the climb's trials and launches are kept, and who is told of each as it is done."""

    def recall(self, fingerprint: str) -> TrialRecord | None:
        """The trial recorded under a fingerprint, replayed instead of measured."""

    def remember(self, record: TrialRecord) -> None: ...

    def settled(self) -> list[TrialRecord]:
        """Every trial recorded, in the order it was remembered (the parallel climb replays them so)."""

    def recall_looks(self, fingerprint: str) -> list[Look]:
        """A trial's recorded launches, for a trial a killed run left unfinished."""

    def remember_look(self, look: Look) -> None: ...

    def on_look(self, trial_index: int, variant_name: str, look: Look, replayed: bool) -> None: ...

    def on_trial(self, record: TrialRecord) -> None: ...


class MemoryLedger:
    """A ledger in memory, telling no one: what a climb outside the assets keeps.

    `looks` may be shared with another ledger, as a run killed mid-trial and its re-execution
    share the store; `finished` receives each trial as it is done.
    """

    def __init__(self, looks: list[Look] | None = None, finished: list[TrialRecord] | None = None):
        self.records: dict[str, TrialRecord] = {}
        self.looks = [] if looks is None else looks
        self.finished = [] if finished is None else finished

    def recall(self, fingerprint: str) -> TrialRecord | None:
        return self.records.get(fingerprint)

    def remember(self, record: TrialRecord) -> None:
        self.records[record.fingerprint] = record

    def settled(self) -> list[TrialRecord]:
        return list(self.records.values())

    def recall_looks(self, fingerprint: str) -> list[Look]:
        return [look for look in self.looks if look.trial == fingerprint]

    def remember_look(self, look: Look) -> None:
        self.looks.append(look)

    def on_look(self, trial_index: int, variant_name: str, look: Look, replayed: bool) -> None:
        pass

    def on_trial(self, record: TrialRecord) -> None:
        self.finished.append(record)


class Launcher:
    """A trial's launches in order: those the ledger holds are replayed, the rest measured.

    A recorded look is replayed where a look of its role is asked for, in the order recorded.
    A "variant" or "rebench" look is of the trial's config (its fingerprint); a "best" look is
    of the running best, replayed only under the same best (`against`): a parallel trial in
    flight when its run was killed starts again on the running best its re-execution replays
    to, which may be newer than the one it was measured against. A look measured anew takes
    an index after every recorded one, so no recorded launch is overwritten.
    """

    def __init__(self, trial: str, index: int, name: str, measure: MeasureFn, ledger: Ledger,
                 against: str | None = None):
        self.trial, self.trial_index, self.name = trial, index, name
        self.measure, self.ledger, self.against = measure, ledger, against
        recorded = sorted(ledger.recall_looks(trial), key=lambda look: look.index)
        self.recorded = [look for look in recorded if look.role != "best" or look.against == against]
        self.count = max((look.index for look in recorded), default=0)

    def __call__(self, role: str, keepers: list[Variant], variant: Variant | None) -> TrialMeasurement:
        look = next((look for look in self.recorded if look.role == role), None)
        if look is None:
            return self.record(role, self.measure(keepers, variant))
        self.recorded.remove(look)
        self.ledger.on_look(self.trial_index, self.name, look, True)
        return look.measurement

    def record(self, role: str, measurement: TrialMeasurement) -> TrialMeasurement:
        """Keep a launch just measured as the trial's next look of `role`, and tell the ledger."""
        self.count += 1
        look = Look(trial=self.trial, index=self.count, role=role, measurement=measurement, against=self.against)
        self.ledger.remember_look(look)
        self.ledger.on_look(self.trial_index, self.name, look, False)
        return measurement
