"""The parallel climb: several trials at once, one slot each, against the running best. Pure code.

With `slots` > 1 (a run holding several slots of a host: core/fleet/slots.py) the climb
keeps every slot busy. It starts untried variants in plan order (at most one with source
patches in flight: the trials share the run's tree checkouts), several values of one knob
among them, which is where a ladder's best value is found fastest. The first trials on a
running best start together with one fresh launch of that best, and each waits for it
after its own first launch, so its first comparison is between launches of the same
moment. Each trial then goes on alone, judged by the serial climb's rule
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
(each best's fresh launch is replayed when it became the best), then goes on: a trial in
flight when the run was killed is started again and replays the launches it had finished.
Budgets are checked at each start: no trial starts past `max_trials` (those in flight
count) or the deadline, or once the target gain is reached; trials in flight then finish
and settle before the climb returns its stop reason.
"""

from __future__ import annotations

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


def relaunch_key(best_key: str) -> str:
    """The ledger key of the fresh launch of a running best its first parallel trials wait for."""
    return f"best-relaunch:{best_key}"


class _Flight(NamedTuple):
    variant: Variant
    fingerprint: str
    against: str  # the running best's key when it started


class _Parallel:
    """The climb's state plus what is in flight: trials, and the fresh launch of each best."""

    def __init__(self, state: ClimbState, measure: MeasureFn, ledger: Ledger, checks: Checks,
                 baseline_measuring_s: float, prior: LaunchNoise | None):
        self.state, self.measure, self.ledger, self.checks = state, measure, ledger, checks
        self.baseline_measuring_s, self.prior = baseline_measuring_s, prior
        self.trials: dict[Future, _Flight] = {}
        self.relaunches: dict[str, Future] = {}  # best key -> its fresh launch, until merged
        self.merged: set[str] = set()  # bests whose fresh launch joined their evidence
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
        free = slots - len(self.trials) - len(self.relaunches)
        room = budget.max_trials - len(state.trials) - len(self.trials)
        while free > 0 and room > 0:
            found = self._next()
            if found is None:
                return
            variant, fingerprint = found
            if state.best_key not in self.merged and state.best_key not in self.relaunches:
                if free < 2:  # no slot for the best's launch beside it yet: start it later
                    self.requeued.insert(0, variant)
                    state.seen.discard(fingerprint)
                    return
                launcher = Launcher(relaunch_key(state.best_key), 0, BEST, self.measure, self.ledger)
                self.relaunches[state.best_key] = pool.submit(launcher, "best", state.keepers, None)
                free -= 1
            self._submit(pool, variant, fingerprint)
            free, room = free - 1, room - 1

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

    def _submit(self, pool: ThreadPoolExecutor, variant: Variant, fingerprint: str) -> None:
        state = self.state
        keepers, against = state.keepers, state.best_key
        index = len(state.trials) + len(self.trials) + 1
        refused, review = checked(index, fingerprint, variant, keepers, self.checks)
        flight = _Flight(variant=variant, fingerprint=fingerprint, against=against)
        if refused is not None:
            done: Future = Future()
            done.set_result(refused)
            self.trials[done] = flight
            return
        best, relaunch = list(state.evidence[against]), self.relaunches.get(against)
        others, slo = state.others(fingerprint), state.slo()
        launcher = Launcher(fingerprint, index, variant.name, self.measure, self.ledger)

        def run() -> TrialRecord:
            first = launcher("variant", keepers, variant)
            if relaunch is not None:  # the best's launch of this moment, started with this trial's first
                fresh = relaunch.result()
                best.extend([objective_values(fresh, slo)] if fresh.error_class is None else [])
            return judged_trial(index, fingerprint, variant, keepers, best, others, self.baseline_measuring_s,
                                launcher, self.checks, self.prior, slo, review, first)

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
        while True:
            stop = stop or run.state.stop(budget)
            if stop is None:
                run.start(pool, slots, budget)
            if not run.trials:
                for future in run.relaunches.values():  # a best's launch no trial waited for
                    future.result()
                return run.state.result((stop or StopReason.NO_MORE_CANDIDATES).value)
            run.settle_finished()
