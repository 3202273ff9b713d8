"""The parallel climb (core/decisions/parallel.py): trials measured at once, each launch of a trial's
config beside a launch of the running best, judged by the serial climb's rule and settled as they
finish; a KEEP overtaken by another is superseded and judged again on the new stack; a killed run
replays what it settled and the launches it finished."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter

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


def test_trials_start_beside_launches_of_the_baseline_and_keep_what_the_serial_climb_keeps() -> None:
    plan = lambda keepers, tried: [BUDGET, CAP, NOOP] if not keepers else [BUDGET, NOOP]  # noqa: E731
    slots = Slots(physics)
    parallel = run(plan, slots, slots=4)
    serial = climb(BASE, 1.0, Budget(max_trials=10, target_gain_pct=500.0), plan, physics, MemoryLedger())
    assert [k.name for k in parallel.keepers] == [k.name for k in serial.keepers] == ["cap", "budget"]
    assert slots.most == 4
    assert Counter(slots.calls[:4]) == {((), None): 2, ((), "budget"): 2}, \
        "the plan's first variant launched for its looks and rebench, each beside a launch of the baseline, at once"
    first = {(t.name, t.outcome) for t in parallel.trials if t.against == "baseline"}
    assert first == {("budget", "REVERT"), ("cap", "KEEP"), ("noop", "REVERT")}
    relaunched = sum(len(t.best_launches) for t in parallel.trials if t.against == "baseline")
    assert len(parallel.evidence["baseline"]) == 1 + relaunched, "each launch of the baseline joined its evidence"


def test_the_first_variant_on_each_best_is_decided_and_rebenched_on_launches_started_at_once() -> None:
    """The cap, first on the baseline, and the budget, first on the cap: on four slots each launched
    twice at once, each beside a launch of the running best, its first look and its rebench answered
    from those."""
    plan = lambda keepers, tried: [CAP] if not keepers else [BUDGET]  # noqa: E731
    slots, looks = Slots(physics), []
    result = run(plan, slots, slots=4, ledger=MemoryLedger(looks=looks))
    assert [(t.name, t.outcome, t.measurements, t.rebenches) for t in result.trials] == \
        [("cap", "KEEP", 1, 1), ("budget", "KEEP", 1, 1)]
    assert slots.calls.count(((), "cap")) == 2 and slots.calls.count((("cap",), "budget")) == 2
    assert slots.calls.count((("cap",), None)) == 2, "the cap launched beside each of the budget's launches"
    assert (("cap", "budget"), None) not in slots.calls, "the rebench took a launch started with the first look"
    assert [look.role for look in looks if look.trial == result.trials[1].fingerprint] == \
        ["best", "variant", "best", "rebench"]


class LaunchClock(Slots):
    """Slots on a logical clock: every launch takes one unit and starts when the launches that ended
    before it started had ended, so its end is the length of the chain of launches one after another
    that led to it, whatever this machine's speed."""

    def __init__(self, physics_of):
        super().__init__(physics_of)
        self.ended, self.last = 0, 0

    def __call__(self, keepers, v) -> TrialMeasurement:
        with self.lock:
            start = self.ended
        result = super().__call__(keepers, v)
        with self.lock:
            self.ended = max(self.ended, start + 1)
            self.last = max(self.last, start + 1)
        return result


def test_four_slots_reach_the_serial_keepers_in_at_most_40_percent_of_its_chain_of_launches() -> None:
    """The parallel_search benchmark's goal on a small case: the cap, then the budget on top of it."""
    plan = lambda keepers, tried: [CAP] if not keepers else ([BUDGET] if len(keepers) == 1 else [])  # noqa: E731
    serial, parallel = LaunchClock(physics), LaunchClock(physics)
    one, four = run(plan, serial, slots=1), run(plan, parallel, slots=4)
    assert [k.name for k in four.keepers] == [k.name for k in one.keepers] == ["cap", "budget"]
    assert serial.last == len(serial.calls), "one slot: every launch after the one before"
    assert parallel.last <= 0.4 * serial.last, (parallel.last, serial.last)


def test_a_variant_started_ahead_whose_first_look_reverts_leaves_its_other_launches_as_spares() -> None:
    plan = lambda keepers, tried: [NOOP, CAP]  # noqa: E731
    looks: list = []
    result = run(plan, Slots(physics), slots=4, ledger=MemoryLedger(looks=looks))
    noop = next(t for t in result.trials if t.name == "noop" and t.against == "baseline")
    assert (noop.outcome, noop.measurements) == ("REVERT", 1)
    assert [look.role for look in looks if look.trial == noop.fingerprint] == ["best", "variant", "spare", "spare"], \
        "four slots: two of the noop's, each beside the baseline's; the second pair, unasked, recorded"
    assert len(noop.best_launches) == 2, "a launch of the best started beside it is the best's evidence all the same"
    assert [k.name for k in result.keepers] == ["cap"]


def test_a_keepers_trials_have_it_launched_beside_each_of_their_launches() -> None:
    """A keeper's rebench is of the moment it was kept, not of its later trials' looks: each of them has
    the keeper launched beside it. Two slots: one trial at a time, the best on the other slot."""
    plan = lambda keepers, tried: [CAP] if not keepers else [BUDGET, NOOP]  # noqa: E731
    slots = Slots(physics)
    result = run(plan, slots, slots=2)
    assert [k.name for k in result.keepers] == ["cap", "budget"]
    on_cap = [t for t in result.trials if t.against == "stack of 1 keeper(s)"]
    launched = slots.calls.count((("cap",), None))
    assert launched == sum(len(t.best_launches) for t in on_cap) == sum(t.measurements + t.rebenches for t in on_cap), \
        "the best's launches, one beside each look and rebench of its trials"


def test_a_keep_overtaken_by_another_is_superseded_and_judged_again_on_the_new_stack() -> None:
    plan = lambda keepers, tried: [CAP, ASYNC]  # noqa: E731
    result = run(plan, Slots(paying), slots=8)  # three of the cap's and one of async's, each beside the baseline's
    assert len(result.trials) == 3
    kept = next(t for t in result.trials if t.outcome == "KEEP" and t.against == "baseline")
    overtaken = next(t for t in result.trials if t.outcome == "SUPERSEDED")
    again = next(t for t in result.trials if t.name == overtaken.name and t is not overtaken)
    assert (overtaken.against, kept.name) == ("baseline", "cap")
    assert (again.outcome, again.against) == ("KEEP", "stack of 1 keeper(s)")
    assert " was kept while it ran" in overtaken.decision.reason
    # The plan offered it on the new stack while it ran (and it may have been kept there by the time it
    # settles), or the superseded one is started there again.
    assert overtaken.decision.reason.endswith(("the new stack's own trial of it judges it",
                                               "its change is part of the new running best",
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


@pytest.mark.parametrize("killed_after", [2, 4, 6, 9])
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


def slow_and_close(keepers, v, looks=itertools.count()) -> TrialMeasurement:
    """The baseline reads 100 then 106; the noop loses 20% at once; the cap, slow to measure, reads 110 and
    98 in turn: under review."""
    level = 106.0
    if v is NOOP:
        level = 80.0
    elif v is CAP:
        time.sleep(0.3)
        level = 98.0 if next(looks) % 2 else 110.0
    return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0)


def test_a_run_interrupted_while_trials_are_in_flight_starts_no_further_launch() -> None:
    """The interrupt of a cancelled run lands in the climb's thread (here: as the noop settles, the cap's
    first look still running); the trials in flight then launch nothing more, so the run ends when the
    launches running now end, not when their trials would have."""
    slots, at_interrupt = Slots(slow_and_close), []

    class Interrupted(MemoryLedger):
        def on_trial(self, record) -> None:
            with slots.lock:
                at_interrupt.append(len(slots.calls))
            raise KeyboardInterrupt("Terminate")

    plan = lambda keepers, tried: [NOOP, CAP]  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        # eight slots: three of the noop's and the cap's first look, each beside the baseline's
        climb_parallel(BASE, 1.0, Budget(max_trials=10, target_gain_pct=500.0), plan, slots, Interrupted(), slots=8)
    assert at_interrupt and ((), "cap") in slots.calls[:at_interrupt[0]], "the cap's first look was in flight"
    assert len(slots.calls) == at_interrupt[0], "no launch started after the interrupt"


CAP32 = variant("cap32", "--max-num-seqs", "32")


def ladder(keepers, v) -> TrialMeasurement:
    """The cap's value matters: 16 pays 50%, 32 pays 70% (the last value given wins, as argparse's)."""
    args = [a for k in [*keepers, *([v] if v else [])] for a in k.add_args]
    cap = int(args[len(args) - 1 - args[::-1].index("--max-num-seqs") + 1]) if "--max-num-seqs" in args else 0
    level = {0: 100.0, 16: 150.0, 32: 170.0}[cap]
    return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0)


def test_two_values_of_one_knob_run_at_once_and_the_overtaken_one_is_judged_against_the_new_best() -> None:
    plan = lambda keepers, tried: [CAP, CAP32]  # noqa: E731
    result = run(plan, Slots(ladder), slots=8)  # three of the cap's and one of cap32's, each beside the baseline's
    kept, overtaken, again = result.trials[:3]
    assert {kept.name, overtaken.name} == {"cap", "cap32"} and overtaken.outcome == "SUPERSEDED"
    assert again.name == overtaken.name and again.fingerprint == f"{overtaken.fingerprint}@{kept.fingerprint}", \
        "the same config, judged with launches of its own against the new best"
    assert [k.name for k in result.keepers][-1] == "cap32", "the better value ends on top, whichever settled first"


class Served(Slots):
    """Slots that number each launch (its measurement id) and keep when it started and ended."""

    def __init__(self, physics_of):
        super().__init__(physics_of)
        self.spans: dict[int, tuple[float, float]] = {}

    def __call__(self, keepers, v) -> TrialMeasurement:
        with self.lock:
            launch = len(self.spans) + 1
            self.spans[launch] = (time.monotonic(), float("inf"))
        result = super().__call__(keepers, v)
        self.spans[launch] = (self.spans[launch][0], time.monotonic())
        return result.model_copy(update={"measurement_id": launch})

    def at_once(self, a: int, b: int) -> bool:
        return self.spans[a][0] < self.spans[b][1] and self.spans[b][0] < self.spans[a][1]


def test_every_launch_of_a_trials_config_is_served_beside_a_launch_of_the_best() -> None:
    """Each look and rebench of every trial, the first trials on a keeper included, is served at the same
    moment as a launch of the running best, the one it is compared with; those launches are the trial's
    launches of the best, and the ledger holds every launch the host ran."""
    # Mutation: relaunching the best only while it has fewer than two launches (and from the second look on,
    # after the variant's launches started ahead) leaves the cap's trials' first looks with no best beside them.
    plan = lambda keepers, tried: [CAP, NOOP] if not keepers else [BUDGET, NOOP]  # noqa: E731
    served, looks = Served(physics), []
    result = run(plan, served, slots=4, ledger=MemoryLedger(looks=looks))
    assert [k.name for k in result.keepers] == ["cap", "budget"]
    assert any(t.against == "stack of 1 keeper(s)" for t in result.trials)
    for trial in result.trials:
        ours = trial.measurement_ids + trial.rebench_measurement_ids
        assert len(trial.best_measurement_ids) >= len(ours), (trial.name, trial.against)
        assert all(served.at_once(a, b) for a, b in zip(ours, trial.best_measurement_ids)), \
            f"{trial.name} against {trial.against}: each launch beside a launch of the best, in the order asked"
    assert len(looks) == len(served.spans), "every launch, the best's beside the trials' included, is in the ledger"


def close_calls():
    """The cap reads 104, 101, 106 in turn against the baseline's 100: under review at its first look."""
    reads = itertools.count()

    def measured(keepers, v) -> TrialMeasurement:
        level = [104.0, 101.0, 106.0][next(reads) % 3] if "--max-num-seqs" in flags(keepers, v) else 100.0
        return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0)
    return measured


def test_a_deep_trials_second_look_compares_with_a_launch_of_the_best_from_its_own_wave() -> None:
    """The plan's first variant on four slots starts its first two looks at once, each beside a launch of
    the baseline: its second look's best was served with it, in the first wave, not after it."""
    # Mutation: the second look's best relaunched when the look is asked (after the look's launch
    # started ahead has ended), as before, is served after the look it is compared with.
    served = Served(close_calls())
    result = run(lambda keepers, tried: [CAP] if not keepers else [], served, slots=4)
    cap = result.trials[0]
    assert cap.measurements >= 2, cap.decision.reason
    assert len(cap.best_measurement_ids) >= cap.measurements, "a launch of the best for each look"
    (look1, look2), best2 = cap.measurement_ids[:2], cap.best_measurement_ids[1]  # in the order asked
    first_wave = [launch for launch in served.spans if served.spans[launch][0] < served.spans[look1][1]]
    assert look2 in first_wave and best2 in first_wave, "the second look and its best started with the first"
    assert served.at_once(look2, best2)
