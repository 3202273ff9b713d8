"""The parallel climb: several trials at once on the run's slots, against the running best. Pure code.

With `slots` > 1 (a run holding several slots of a host: core/fleet/slots.py) the climb
keeps every slot busy. It starts untried variants in plan order (at most one with source
patches in flight: the trials share the run's tree checkouts), several values of one knob
among them, which is where a ladder's best value is found fastest. Every launch of a trial's
config (each look, its stack's rebench) has the running best launched beside it, at the same
moment on another slot (a PAIR of slots), so each look compares against a launch of the best
from its own moment, whatever drifted since the best's earlier ones; these launches are the
trial's launches of the best, and count as launches (a source patch's two launches are two
states of the run's one worktree: they start together and take turns). The baseline asset's
second launch of the baseline (assets/baseline_beside.py), replayed from the ledger, joins
the baseline's evidence first. The plan's first variant on each running best, its likeliest keeper, is launched
up to DEEP times at once where pairs of slots are free, each beside the best: its first look,
and the launches its second look and its stack's rebench would take, so a keeper is decided
and confirmed in the time of one launch; a launch of its config its decision did not ask for
is kept in the ledger as a SPARE look, and a launch of the best started beside it joins the
best's evidence all the same (a launch of the best, kept whatever it read). Each
trial then goes on alone, judged by the serial climb's rule
(climb.judged_trial, paired: more looks, the gate, the stack rebench, each with the best
beside it), and settles as soon as it is decided, freeing its slots for the next variant, on
whatever stack is the running best by then. A KEEP settled against the running best
becomes the new best and replans; a KEEP against a best that another trial replaced while
it ran is SUPERSEDED (never kept as it stands) and is started again, first, on the new
stack. Where that is the config it already was (another value of the knob the new keeper
set), the new trial's key is its fingerprint at the new best (`fp@best`), so it is judged
against the new best with launches of its own. Every other outcome stands.

The ledger keeps each launch as it finishes and each trial as it settles, in that order,
with the best it was measured against. A re-executed run first replays the settled
trials in the order they settled, which rebuilds the keepers and the evidence exactly
(the baseline's fresh launch is replayed first), then goes on: a trial in
flight when the run was killed is started again and replays the launches it had finished.
Budgets are checked at each start: no trial starts past `max_trials` (those in flight
count) or the deadline, or once the target gain is reached; trials in flight then finish
and settle before the climb returns its stop reason. An interrupt (a cancelled run) or an
error stops every trial in flight at its next launch (`Stopping`), so the climb ends when
the launches running then end.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import NamedTuple

from hyperloom_assets.core.decisions.climb import (
    Budget,
    Checks,
    ClimbResult,
    ClimbState,
    PlanFn,
    SloState,
    checked,
    climb,
    judged_trial,
    objective_values,
)
from hyperloom_assets.core.decisions.ledger import Launcher, Ledger, MeasureFn
from hyperloom_assets.core.decisions.rule import Outcome, superseded
from hyperloom_assets.core.decisions.stop_reasons import StopReason
from hyperloom_assets.core.decisions.trial_record import TrialMeasurement, TrialRecord
from hyperloom_assets.core.measurement.stats import LaunchNoise
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import Variant

JUDGED_AGAIN = "judged again on the new stack"
# Launches the plan's first variant on a running best starts at once: its first two looks and
# the one its stack's rebench would take, each a launch of the same config.
DEEP = 3
SPARE = "spare"  # the ledger's role of a launch started ahead that the trial's decision did not ask for
PAIR = 2  # the slots a launch of a trial's config takes: its own, and the running best's beside it


def relaunch_key(best_key: str) -> str:
    """The ledger key of the baseline's second launch, beside its first (assets/baseline_beside.py)."""
    return f"best-relaunch:{best_key}"


class _Flight(NamedTuple):
    variant: Variant
    fingerprint: str
    against: str  # the running best's key when it started
    width: int = PAIR  # the slots it holds: a PAIR per launch of its config it starts at once


class _Parallel:
    """The climb's state plus the trials in flight."""

    def __init__(self, state: ClimbState, measure: MeasureFn, ledger: Ledger, checks: Checks,
                 baseline_measuring_s: float, prior: LaunchNoise | None):
        self.stopping = threading.Event()  # set when the climb stops on an error or an interrupt
        self.state, self.measure, self.ledger, self.checks = state, _unless(measure, self.stopping), ledger, checks
        self.baseline_measuring_s, self.prior = baseline_measuring_s, prior
        self.trials: dict[Future, _Flight] = {}
        self.merged: set[str] = set()  # bests whose recorded second launch joined their evidence
        self.deep: set[str] = set()  # bests whose first trial has started, its later launches ahead
        self.requeued: list[Variant] = []

    def replay(self) -> None:
        """The trials an earlier run of this context settled, in the order they settled."""
        self._merge_recorded(self.state.best_key)
        for record in self.ledger.settled():
            self.state.seen.add(record.fingerprint)
            before = self.state.best_key
            self.state.settle(record.model_copy(update={"replayed": True}), record.variant, self.ledger,
                              against=record.against_key or before)
            if record.decision.outcome == Outcome.SUPERSEDED:
                self.requeued.append(record.variant)
            if self.state.best_key != before:
                self._merge_recorded(self.state.best_key)

    def _merge_recorded(self, best_key: str) -> None:
        looks = self.ledger.recall_looks(relaunch_key(best_key))
        if looks:
            self._merge(best_key, looks[0].measurement)

    def _merge(self, best_key: str, fresh: TrialMeasurement) -> None:
        if best_key in self.merged:
            return
        self.merged.add(best_key)
        if fresh.error_class is None:  # a fresh launch of the running best joins its evidence
            self.state.evidence[best_key] = self.state.evidence[best_key] + [objective_values(fresh, self.state.slo())]

    def start(self, pool: ThreadPoolExecutor, slots: int, budget: Budget) -> None:
        """Fill the free slots with trials, a PAIR of slots for each launch of a trial's config."""
        state = self.state
        free = slots - sum(flight.width for flight in self.trials.values())
        room = budget.max_trials - len(state.trials) - len(self.trials)
        while free >= PAIR and room > 0:
            found = self._next()
            if found is None:
                return
            variant, fingerprint = found
            free -= self._submit(pool, variant, fingerprint, self._width(variant, fingerprint, free))
            room -= 1

    def _width(self, variant: Variant, fingerprint: str, free: int) -> int:
        """How many launches of its config a trial starts at once, each beside a launch of the best. The
        plan's first variant on each running best, its likeliest keeper, starts its later looks and its
        rebench's launch beside its first, on free pairs of slots: a keeper is then decided and confirmed
        in the time of one launch, not three, at the cost of the launches its decision does not ask for.
        Not for source patches (one checkout per trial), nor a trial a killed run started (its recorded
        launches replay)."""
        best = self.state.best_key
        if best in self.deep or variant.patches or self.ledger.recall_looks(fingerprint):
            return 1
        self.deep.add(best)
        return max(1, min(free // PAIR, DEEP))

    def _next(self) -> tuple[Variant, str] | None:
        """The next variant to start and its trial's key: superseded ones first, then the plan's."""
        state = self.state
        patched = any(f.variant.patches for f in self.trials.values())
        for variant in [*self.requeued, *state.candidates]:
            fingerprint = trial_fingerprint(state.keepers, variant)
            again = any(variant is v for v in self.requeued)
            if again and fingerprint in state.seen:
                # Another value of the knob the new keeper set: the same config, judged now against the new best.
                fingerprint = f"{fingerprint}@{state.best_key}"
            if fingerprint in state.seen or (self.checks.skip and self.checks.skip(variant, state.trials)):
                continue
            if variant.patches and patched:
                continue
            state.seen.add(fingerprint)
            self.requeued = [v for v in self.requeued if v is not variant]
            return variant, fingerprint
        # Past the plan, the continuation reads every launch finished so far: asked with none in flight.
        variant = state.continued() if not self.trials and not self.requeued else None
        return (variant, trial_fingerprint(state.keepers, variant)) if variant is not None else None

    def _submit(self, pool: ThreadPoolExecutor, variant: Variant, fingerprint: str, width: int = 1) -> int:
        """Start a trial; the slots it takes."""
        state = self.state
        keepers, against = state.keepers, state.best_key
        index = len(state.trials) + len(self.trials) + 1
        refused, review = checked(index, fingerprint, variant, keepers, self.checks)
        flight = _Flight(variant=variant, fingerprint=fingerprint, against=against, width=PAIR * width)
        if refused is not None:
            self.deep.discard(against)  # it launched nothing: the next trial on this best goes deep
            done: Future = Future()
            done.set_result(refused)
            self.trials[done] = flight._replace(width=0)
            return 0
        best, others, slo = list(state.evidence[against]), state.others(fingerprint), state.slo()
        fresh = not self.ledger.recall_looks(fingerprint)  # a trial a killed run started replays its launches

        def run() -> TrialRecord:
            with ThreadPoolExecutor(max_workers=PAIR * width, thread_name_prefix="ahead") as ahead:
                beside = _Beside(self.measure, keepers, variant, ahead, width if fresh else 0)
                launcher = Launcher(fingerprint, index, variant.name, beside, self.ledger, against)
                record = judged_trial(index, fingerprint, variant, keepers, best, others, self.baseline_measuring_s,
                                      launcher, self.checks, self.prior, slo, review, paired=True)
                return beside.keep_unasked(launcher, record, slo)

        self.trials[pool.submit(run)] = flight
        return flight.width

    def settle_finished(self) -> None:
        """Wait for a trial in flight to end; settle each decided trial."""
        done, _ = wait(self.trials, return_when=FIRST_COMPLETED)
        for future in [f for f in self.trials if f in done]:
            self._settle(self.trials.pop(future), future.result())

    def _judge_again(self, flight: _Flight) -> str:
        """What becomes of a superseded variant: a trial of its own on the new stack, unless that config
        is the running best, or was started there already (the plan offered it on the new stack)."""
        state = self.state
        config = trial_fingerprint(state.keepers, flight.variant)
        if config == state.best_key:
            return "its change is part of the new running best"
        if config in state.seen and config != flight.fingerprint.split("@")[0]:
            return "the new stack's own trial of it judges it"
        return JUDGED_AGAIN

    def _settle(self, flight: _Flight, record: TrialRecord) -> None:
        state = self.state
        record = record.model_copy(update={"index": len(state.trials) + 1, "against_key": flight.against})
        if record.decision.outcome == Outcome.KEEP and flight.against != state.best_key:
            then = self._judge_again(flight)
            record = record.model_copy(update={"decision": superseded(record.decision, state.keepers[-1].name, then)})
            if then == JUDGED_AGAIN:
                self.requeued.insert(0, flight.variant)
        self.ledger.remember(record)
        state.settle(record, flight.variant, self.ledger, against=flight.against)


class Stopping(RuntimeError):
    """Raised in a trial's thread instead of a launch once the climb is stopping."""


def _unless(measure: MeasureFn, stopping: threading.Event) -> MeasureFn:
    """`measure`, refusing to start a launch once `stopping` is set."""
    def measured(keepers: list[Variant], variant: Variant | None) -> TrialMeasurement:
        if stopping.is_set():
            raise Stopping("the climb is stopping: no further launch")
        return measure(keepers, variant)
    return measured


class _Beside:
    """A trial's MeasureFn that serves each launch of its config (a look, its stack's rebench) beside a
    launch of the running best, at the same moment on another slot. The paired judge asks the best first
    (climb._judge); that ask starts both launches and answers with the best's, and the next ask of the
    trial's config takes its partner. `ahead` pairs are started at once when the trial starts; each ask
    takes the next of them, in the order asked."""

    def __init__(self, measure: MeasureFn, keepers: list[Variant], variant: Variant, pool: ThreadPoolExecutor,
                 ahead: int):
        self.measure, self.keepers, self.variant, self.pool = measure, keepers, variant, pool
        self.best: list[Future] = []  # launches of the best not yet asked for
        self.ours: list[Future] = []  # launches of the trial's config not yet asked for
        self.stale: list[Future] = []  # launches of its config whose moment passed unasked (a replayed look)
        for _ in range(ahead):
            self._pair()

    def _pair(self) -> None:
        self.best.append(self.pool.submit(self.measure, self.keepers, None))
        self.ours.append(self.pool.submit(self.measure, self.keepers, self.variant))

    def __call__(self, keepers: list[Variant], asked: Variant | None) -> TrialMeasurement:
        ours = asked is self.variant or (asked is None and bool(keepers) and keepers[-1] is self.variant)
        if ours:  # a look, or the rebench of the stack it makes: the partner of the best's last launch
            return self.ours.pop(0).result() if self.ours else self.measure(keepers, asked)
        if not self.best:
            self.stale, self.ours = self.stale + self.ours, []  # a partner a replayed look left unasked
            self._pair()
        return self.best.pop(0).result()

    def keep_unasked(self, launcher: Launcher, record: TrialRecord, slo: SloState | None) -> TrialRecord:
        """Record the launches started ahead that the trial's decision did not ask for, each a launch the
        host ran, as SPARE looks, never replayed as the trial's. A launch of the best among them that
        served also joins the trial's launches of the best: its moment is the trial's, and it is kept
        whatever it read, so it biases nothing."""
        best, ids = list(record.best_launches), list(record.best_measurement_ids)
        for future in [*self.stale, *self.ours, *self.best]:
            if future.exception() is not None:
                continue
            launcher.record(SPARE, measured := future.result())
            if any(future is b for b in self.best) and measured.error_class is None:
                best.append(objective_values(measured, slo))
                ids += [measured.measurement_id] if measured.measurement_id is not None else []
        return record.model_copy(update={"best_launches": best, "best_measurement_ids": ids})


def climb_parallel(baseline: list[float], baseline_measuring_s: float, budget: Budget, plan: PlanFn,
                   measure: MeasureFn, ledger: Ledger, *, slots: int, checks: Checks | None = None,
                   prior: LaunchNoise | None = None) -> ClimbResult:
    """climb.climb over `slots` concurrent launches; `measure` must be safe to call from several
    threads at once (each call on a slot of its own: resources/hosts/slot_pool.py)."""
    if slots < 2:
        return climb(baseline, baseline_measuring_s, budget, plan, measure, ledger, checks=checks, prior=prior)
    checks = checks or Checks()
    run = _Parallel(ClimbState(baseline, plan, checks), measure, ledger, checks, baseline_measuring_s, prior)
    run.replay()
    stop: StopReason | None = None
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="trial") as pool:
        try:
            while True:
                stop = stop or run.state.stop(budget)
                if stop is None:
                    run.start(pool, slots, budget)
                if not run.trials:
                    return run.state.result((stop or run.state.spent or StopReason.NO_MORE_CANDIDATES).value)
                run.settle_finished()
        except BaseException:
            # A cancelled run (the interrupt lands here, in the main thread) or a failed one: the trials in
            # flight start no further launch, so the pool's exit waits only for the launches running now.
            run.stopping.set()
            raise
