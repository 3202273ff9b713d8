"""The parallel climb (core/decisions/parallel.py): trials measured at once, one slot each, judged by the
serial climb's rule and settled as they finish; a KEEP overtaken by another is superseded and judged
again on the new stack; a killed run replays what it settled and the launches it finished."""

from __future__ import annotations

import threading
import time

import pytest

from hyperloom_assets.core.decisions.climb import Budget, TrialMeasurement, climb
from hyperloom_assets.core.decisions.ledger import MemoryLedger
from hyperloom_assets.core.decisions.parallel import climb_parallel
from tests.unit.test_climb import BASE, BUDGET, CAP, CRASH, NOOP, flags, physics, variant

ASYNC = variant("async", "--async-scheduling")


def paying(keepers, v) -> TrialMeasurement:
    """The cap pays 50%, async scheduling 20%, each alone and on top of the other."""
    on = flags(keepers, v)
    level = 100.0 * (1.5 if "--max-num-seqs" in on else 1.0) * (1.2 if "--async-scheduling" in on else 1.0)
    return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0)


class Slots:
    """A measure that takes a little wall time, counting the launches in flight at once."""

    def __init__(self, physics_of, stop_after: int | None = None):
        self.physics_of, self.stop_after = physics_of, stop_after
        self.lock, self.now, self.most, self.calls = threading.Lock(), 0, 0, []

    def __call__(self, keepers, v) -> TrialMeasurement:
        with self.lock:
            if self.stop_after is not None and len(self.calls) >= self.stop_after:
                raise KeyboardInterrupt("the run was killed")
            self.calls.append((tuple(k.name for k in keepers), v.name if v else None))
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.05)
        with self.lock:
            self.now -= 1
        return self.physics_of(keepers, v)


def run(plan, measure, slots: int, ledger: MemoryLedger | None = None, **budget):
    limits = {"max_trials": 10, "target_gain_pct": 500.0, **budget}
    return climb_parallel(BASE, 1.0, Budget(**limits), plan, measure, ledger or MemoryLedger(), slots=slots)


def test_trials_start_with_the_running_bests_fresh_launch_and_keep_what_the_serial_climb_keeps() -> None:
    plan = lambda keepers, tried: [BUDGET, CAP, NOOP] if not keepers else [BUDGET, NOOP]  # noqa: E731
    slots = Slots(physics)
    parallel = run(plan, slots, slots=4)
    serial = climb(BASE, 1.0, Budget(max_trials=10, target_gain_pct=500.0), plan, physics, MemoryLedger())
    assert [k.name for k in parallel.keepers] == [k.name for k in serial.keepers] == ["cap", "budget"]
    assert slots.most == 4, "three first launches and the running best's, at once"
    assert slots.calls[:4].count(((), None)) == 1, "the baseline's fresh launch starts with the first trials"
    first = {(t.name, t.outcome) for t in parallel.trials[:3]}
    assert first == {("budget", "REVERT"), ("cap", "KEEP"), ("noop", "REVERT")}
    relaunched = sum(len(t.best_launches) for t in parallel.trials if t.against == "baseline")
    assert len(parallel.evidence["baseline"]) == 1 + 1 + relaunched, "the fresh launch joined the baseline's"


def test_a_keep_overtaken_by_another_is_superseded_and_judged_again_on_the_new_stack() -> None:
    plan = lambda keepers, tried: [CAP, ASYNC]  # noqa: E731
    result = run(plan, Slots(paying), slots=3)
    kept, overtaken, again = result.trials
    assert (kept.outcome, kept.against) == ("KEEP", "baseline")
    assert (overtaken.outcome, overtaken.against, overtaken.name) == ("SUPERSEDED", "baseline", again.name)
    assert (again.outcome, again.against) == ("KEEP", "stack of 1 keeper(s)")
    assert f"but {kept.name} was kept while it ran" in overtaken.decision.reason
    # The plan offered it on the new stack while it ran, or the superseded one is started there again.
    assert overtaken.decision.reason.endswith(("the new stack's own trial of it judges it",
                                               "judged again on the new stack"))
    assert {k.name for k in result.keepers} == {"cap", "async"}


def test_no_trial_starts_past_what_the_budget_has_left() -> None:
    plan = lambda keepers, tried: [BUDGET, NOOP, CRASH, CAP]  # noqa: E731
    result = run(plan, Slots(physics), slots=8, max_trials=3)
    assert {t.name for t in result.trials} == {"budget", "noop", "crash"} and result.stop_reason == "budget_exhausted"


def test_one_slot_is_the_serial_climb() -> None:
    plan = lambda keepers, tried: [BUDGET, CAP] if not keepers else [BUDGET]  # noqa: E731
    slots = Slots(physics)
    result = run(plan, slots, slots=1)
    assert [(t.name, t.outcome) for t in result.trials] == [("budget", "REVERT"), ("cap", "KEEP"), ("budget", "KEEP")]
    assert slots.most == 1


@pytest.mark.parametrize("killed_after", [2, 5, 9, 12])
def test_a_run_killed_with_trials_in_flight_resumes_measuring_none_of_its_finished_launches_again(killed_after) -> None:
    plan = lambda keepers, tried: [CAP, ASYNC, NOOP]  # noqa: E731
    looks: list = []
    killed = MemoryLedger(looks=looks)  # its trials and launches are the store's, and outlive the run
    with pytest.raises(KeyboardInterrupt):
        run(plan, Slots(paying, stop_after=killed_after), slots=3, ledger=killed)
    finished = {(look.trial, look.index) for look in looks}
    assert len(finished) == len(looks), "each launch recorded once"
    settled = list(killed.records.values())
    again = MemoryLedger(looks=looks)
    again.records = dict(killed.records)
    resumed = run(plan, Slots(paying), slots=3, ledger=again)
    measured_again = {(look.trial, look.index) for look in looks[len(finished):]}
    assert not measured_again & finished, "no finished launch measured twice"
    assert [(t.name, t.outcome, t.replayed) for t in resumed.trials[:len(settled)]] == \
        [(t.name, t.outcome, True) for t in settled], "what settled is replayed first, in its order"
    assert {k.name for k in resumed.keepers} == {"cap", "async"}
    assert {t.outcome for t in resumed.trials} <= {"KEEP", "SUPERSEDED", "REVERT"}


CAP32 = variant("cap32", "--max-num-seqs", "32")


def ladder(keepers, v) -> TrialMeasurement:
    """The cap's value matters: 16 pays 50%, 32 pays 70% (the last value given wins, as argparse's)."""
    args = [a for k in [*keepers, *([v] if v else [])] for a in k.add_args]
    cap = int(args[len(args) - 1 - args[::-1].index("--max-num-seqs") + 1]) if "--max-num-seqs" in args else 0
    level = {0: 100.0, 16: 150.0, 32: 170.0}[cap]
    return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0)


def test_two_values_of_one_knob_run_at_once_and_the_overtaken_one_is_judged_against_the_new_best() -> None:
    plan = lambda keepers, tried: [CAP, CAP32]  # noqa: E731
    result = run(plan, Slots(ladder), slots=3)
    kept, overtaken, again = result.trials[:3]
    assert {kept.name, overtaken.name} == {"cap", "cap32"} and overtaken.outcome == "SUPERSEDED"
    assert again.name == overtaken.name and again.fingerprint == f"{overtaken.fingerprint}@{kept.fingerprint}", \
        "the same config, judged with launches of its own against the new best"
    assert [k.name for k in result.keepers][-1] == "cap32", "the better value ends on top, whichever settled first"
