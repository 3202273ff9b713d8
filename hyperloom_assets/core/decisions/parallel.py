"""The parallel climb: several trials at once on the run's slots, against the running best. Pure code.

With `slots` > 1 (a run holding several slots of a host: core/fleet/slots.py) the climb
keeps every slot busy. It starts untried variants in plan order (at most one with source
patches in flight: the trials share the run's tree checkouts), several values of one knob
among them, which is where a ladder's best value is found fastest. A best measured once
(the baseline) gives no launch-to-launch interval, so no first look could be decided on it:
unless the ledger has its fresh launch already (the baseline asset launches it beside the
baseline: assets/baseline_beside.py), the first trials on it start together with one fresh
launch of it, and each waits for it after its own first launch. A keeper's evidence ends
with its stack's rebench, a launch of the moment its first trials start, so it is not
launched again for them. The plan's first variant on each running best, its likeliest keeper, is launched
DEEP times at once where slots are free: its first look, and the launches its second look
and its stack's rebench would take, so a keeper is decided and confirmed in the time of one
launch; a launch its decision did not ask for is kept in the ledger as a SPARE look. Each
trial then goes on alone, judged by the serial climb's rule
(climb.judged_trial: more looks with the best relaunched beside it, the gate, the stack
rebench), and settles as soon as it is decided, freeing its slot for the next variant, on
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

BEST = "running best"
JUDGED_AGAIN = "judged again on the new stack"
# Launches the plan's first variant on a running best starts at once: its first two looks and
# the one its stack's rebench would take, each a launch of the same config.
DEEP = 3
SPARE = "spare"  # the ledger's role of a launch started ahead that the trial's decision did not ask for


def relaunch_key(best_key: str) -> str:
    """The ledger key of the fresh launch of a running best its first parallel trials wait for."""
    return f"best-relaunch:{best_key}"


class _Flight(NamedTuple):
    variant: Variant
    fingerprint: str
    against: str  # the running best's key when it started
    width: int = 1  # the slots it holds: its own launch, and those started ahead for its later looks


class _Parallel:
    """The climb's state plus what is in flight: trials, and the fresh launch of each best."""

    def __init__(self, state: ClimbState, measure: MeasureFn, ledger: Ledger, checks: Checks,
                 baseline_measuring_s: float, prior: LaunchNoise | None):
        self.stopping = threading.Event()  # set when the climb stops on an error or an interrupt
        self.state, self.measure, self.ledger, self.checks = state, _unless(measure, self.stopping), ledger, checks
        self.baseline_measuring_s, self.prior = baseline_measuring_s, prior
        self.trials: dict[Future, _Flight] = {}
        self.relaunches: dict[str, Future] = {}  # best key -> its fresh launch, until merged
        self.merged: set[str] = set()  # bests whose fresh launch joined their evidence
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
        """Fill the free slots: the best's fresh launch first where it has none, then trials."""
        state = self.state
        free = slots - sum(flight.width for flight in self.trials.values()) - len(self.relaunches)
        room = budget.max_trials - len(state.trials) - len(self.trials)
        while free > 0 and room > 0:
            found = self._next()
            if found is None:
                return
            variant, fingerprint = found
            if self._needs_relaunch():
                if free < 2:  # no slot for the best's launch beside it yet: start it later
                    self.requeued.insert(0, variant)
                    state.seen.discard(fingerprint)
                    return
                launcher = Launcher(relaunch_key(state.best_key), 0, BEST, self.measure, self.ledger)
                self.relaunches[state.best_key] = pool.submit(launcher, "best", state.keepers, None)
                free -= 1
            width = self._width(variant, fingerprint, free)
            self._submit(pool, variant, fingerprint, width)
            free, room = free - width, room - 1

    def _needs_relaunch(self) -> bool:
        """Whether the running best needs a fresh launch beside its first trials: a best measured once
        (the baseline) gives no launch-to-launch interval, so none of them could be decided on its first
        look. A keeper's last launch, its stack's rebench, is of the moment its first trials start."""
        best = self.state.best_key
        return (len(self.state.evidence[best]) < 2 and best not in self.merged and best not in self.relaunches)

    def _width(self, variant: Variant, fingerprint: str, free: int) -> int:
        """How many launches a trial starts at once. The plan's first variant on each running best, its
        likeliest keeper, starts its later looks and its rebench's launch beside its first, on free slots:
        a keeper is then decided and confirmed in the time of one launch, not three, at the cost of the
        launches its decision does not ask for. Not for source patches (one checkout per trial), nor a
        trial a killed run started (its recorded launches replay)."""
        best = self.state.best_key
        if best in self.deep or variant.patches or self.ledger.recall_looks(fingerprint):
            return 1
        self.deep.add(best)
        return max(1, min(free, DEEP))

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
        return None

    def _submit(self, pool: ThreadPoolExecutor, variant: Variant, fingerprint: str, width: int = 1) -> None:
        state = self.state
        keepers, against = state.keepers, state.best_key
        index = len(state.trials) + len(self.trials) + 1
        refused, review = checked(index, fingerprint, variant, keepers, self.checks)
        flight = _Flight(variant=variant, fingerprint=fingerprint, against=against, width=width)
        if refused is not None:
            self.deep.discard(against)  # it launched nothing: the next trial on this best goes deep
            done: Future = Future()
            done.set_result(refused)
            self.trials[done] = flight._replace(width=1)
            return
        best, relaunch = list(state.evidence[against]), self.relaunches.get(against)
        others, slo = state.others(fingerprint), state.slo()

        def run() -> TrialRecord:
            with ThreadPoolExecutor(max_workers=width, thread_name_prefix="ahead") as ahead:
                # Its first look among them: each look asked takes the next, whichever finished first.
                spares = [ahead.submit(self.measure, keepers, variant) for _ in range(width if width > 1 else 0)]
                launcher = Launcher(fingerprint, index, variant.name, _taking(self.measure, variant, spares),
                                    self.ledger, against)
                first = launcher("variant", keepers, variant)
                if relaunch is not None:  # the best's launch of this moment, started with this trial's first
                    fresh = relaunch.result()
                    best.extend([objective_values(fresh, slo)] if fresh.error_class is None else [])
                record = judged_trial(index, fingerprint, variant, keepers, best, others, self.baseline_measuring_s,
                                      launcher, self.checks, self.prior, slo, review, first)
                _keep_unasked(launcher, spares)
            return record

        self.trials[pool.submit(run)] = flight

    def settle_finished(self) -> None:
        """Wait for something in flight to end; merge a best's fresh launch, settle each decided trial."""
        done, _ = wait([*self.trials, *self.relaunches.values()], return_when=FIRST_COMPLETED)
        for best_key, future in list(self.relaunches.items()):
            if future in done:
                self._merge(best_key, future.result())
                del self.relaunches[best_key]
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


def _taking(measure: MeasureFn, variant: Variant, spares: list[Future]) -> MeasureFn:
    """`measure`, answering a launch of the trial's own config (a look of the variant, or its stack's
    rebench) with the next of the launches started ahead for it, in the order asked."""
    def measured(keepers: list[Variant], asked: Variant | None) -> TrialMeasurement:
        ours = asked is variant or (asked is None and bool(keepers) and keepers[-1] is variant)
        return spares.pop(0).result() if ours and spares else measure(keepers, asked)
    return measured


def _keep_unasked(launcher: Launcher, spares: list[Future]) -> None:
    """Record the launches started ahead that the trial's decision did not ask for: each is a launch
    the host ran, kept in the ledger as a SPARE look, never replayed as one of the trial's looks."""
    for spare in spares:
        if spare.exception() is None:
            launcher.record(SPARE, spare.result())


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
                    for future in run.relaunches.values():  # a best's launch no trial waited for
                        future.result()
                    return run.state.result((stop or StopReason.NO_MORE_CANDIDATES).value)
                run.settle_finished()
        except BaseException:
            # A cancelled run (the interrupt lands here, in the main thread) or a failed one: the trials in
            # flight start no further launch, so the pool's exit waits only for the launches running now.
            run.stopping.set()
            raise
