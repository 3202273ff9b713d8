"""The batch climb: several trials at once, one slot each, against the running best. Pure code.

With `slots` > 1 (a run holding several slots of a host: core/fleet/slots.py) the climb
takes up to `slots - 1` untried variants that touch distinct knobs from the plan as one
batch, in plan order, and measures them together: their first launches and a fresh launch of the
running best start at once, so each first comparison is between launches of the same
moment; each trial then goes on alone, judged by the same rule as the serial climb
(climb.judged_trial: more looks with the best relaunched beside them, the gate, the
stack rebench). The batch's trials are settled in plan order. The first KEEP becomes
the running best; a later KEEP of the same batch won against the old best, so it is
SUPERSEDED (never kept as it stands) and goes first into the next batch, to be judged
on the new stack. Every other outcome stands, as in the serial climb.

Everything else is the serial climb's: the ledger (each launch recorded as it finishes,
each trial when its batch is settled, so a run killed mid-batch replays the finished
launches and measures only the rest), fingerprints, budgets and stop reasons. The
batch's relaunch of the running best is a look of its own in the ledger, keyed by the
best and the batch's first trial index. Budgets are checked between batches: a batch
never holds more trials than `max_trials` has left.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

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
from hyperloom_assets.core.planning.variants import Variant, knob_of

BEST = "running best"


def relaunch_key(best_key: str, first_index: int) -> str:
    """The ledger key of a batch's relaunch of the running best: one per batch."""
    return f"batch-relaunch:{best_key}:{first_index}"


def climb_parallel(baseline: list[float], baseline_measuring_s: float, budget: Budget, plan: PlanFn,
                   measure: MeasureFn, ledger: Ledger, *, slots: int, checks: Checks | None = None,
                   prior: LaunchNoise | None = None) -> ClimbResult:
    """climb.climb over `slots` concurrent launches; `measure` must be safe to call from several
    threads at once (each call on a slot of its own: resources/hosts/slot_pool.py)."""
    if slots < 2:
        return climb(baseline, baseline_measuring_s, budget, plan, measure, ledger, checks=checks, prior=prior)
    checks = checks or Checks()
    state = ClimbState(baseline, plan, checks)
    requeued: list[Variant] = []
    while True:
        reason = state.stop(budget)
        if reason:
            return state.result(reason.value)
        batch = _batch(state, requeued, min(slots - 1, budget.max_trials - len(state.trials)))
        if not batch:
            return state.result(StopReason.NO_MORE_CANDIDATES.value)
        records = _measure_batch(state, batch, baseline_measuring_s, measure, ledger, checks, prior)
        left = [variant for variant in requeued if all(variant is not other for other in batch)]
        requeued = left + _settle_batch(state, batch, records, ledger)


def _batch(state: ClimbState, requeued: list[Variant], room: int) -> list[Variant]:
    """Up to `room` untried variants, the superseded ones first, then in plan order. They touch
    distinct knobs, so a later KEEP of the batch always changes the new stack and can be judged
    on it (two values of one flag are tried one after the other, as the serial climb does), and
    at most one has source patches, since a batch's trials share the run's tree checkouts."""
    batch: list[Variant] = []
    knobs: set[str] = set()
    for variant in [*requeued, *state.candidates]:
        if len(batch) >= room:
            break
        fingerprint = trial_fingerprint(state.keepers, variant)
        if fingerprint in state.seen or (state.checks.skip and state.checks.skip(variant, state.trials)):
            continue
        if knob_of(variant) & knobs or (variant.patches and any(other.patches for other in batch)):
            continue
        batch.append(variant)
        knobs |= knob_of(variant)
        state.seen.add(fingerprint)
    return batch


def _measure_batch(state: ClimbState, batch: list[Variant], baseline_measuring_s: float, measure: MeasureFn,
                   ledger: Ledger, checks: Checks, prior: LaunchNoise | None) -> list[TrialRecord]:
    first_index, keepers = len(state.trials) + 1, state.keepers
    fingerprints = [trial_fingerprint(keepers, variant) for variant in batch]
    records: dict[int, TrialRecord] = {}
    reviews = {}
    for at, (variant, fingerprint) in enumerate(zip(batch, fingerprints)):
        recalled = ledger.recall(fingerprint)
        if recalled is not None:
            records[at] = recalled.model_copy(update={"index": first_index + at, "replayed": True})
            continue
        refused, reviews[at] = checked(first_index + at, fingerprint, variant, keepers, checks)
        if refused is not None:
            records[at] = refused
    pending = [at for at in range(len(batch)) if at not in records]
    best_launcher = Launcher(relaunch_key(state.best_key, first_index), first_index, BEST, measure, ledger)
    if not pending and not best_launcher.recorded:
        return [records[at] for at in range(len(batch))]
    launchers = {at: Launcher(fingerprints[at], first_index + at, batch[at].name, measure, ledger) for at in pending}
    slo = state.slo()
    with ThreadPoolExecutor(max_workers=len(pending) + 1, thread_name_prefix="batch-launch") as pool:
        relaunch = pool.submit(best_launcher, "best", keepers, None)
        first_looks = {at: pool.submit(launchers[at], "variant", keepers, batch[at]) for at in pending}
        fresh = relaunch.result()
        firsts: dict[int, TrialMeasurement] = {at: future.result() for at, future in first_looks.items()}
    if fresh.error_class is None:  # the batch's launch of the running best joins its evidence
        state.evidence[state.best_key] = state.evidence[state.best_key] + [objective_values(fresh, slo)]
    best = state.evidence[state.best_key]
    if not pending:  # a replayed batch: its relaunch was replayed for the evidence, as the run had it
        return [records[at] for at in range(len(batch))]
    with ThreadPoolExecutor(max_workers=len(pending), thread_name_prefix="batch-trial") as pool:
        judged = {at: pool.submit(judged_trial, first_index + at, fingerprints[at], batch[at], keepers, best,
                                  state.others(fingerprints[at]), baseline_measuring_s, launchers[at], checks, prior,
                                  slo, reviews.get(at), firsts[at]) for at in pending}
        records.update({at: future.result() for at, future in judged.items()})
    return [records[at] for at in range(len(batch))]


def _settle_batch(state: ClimbState, batch: list[Variant], records: list[TrialRecord],
                  ledger: Ledger) -> list[Variant]:
    """Each trial in plan order; returns the superseded variants, to be judged again on the new stack."""
    against, kept_first = state.best_key, None
    requeued: list[Variant] = []
    for variant, record in zip(batch, records):
        if record.decision.outcome == Outcome.KEEP and kept_first is not None:
            record = record.model_copy(update={"decision": superseded(record.decision, kept_first)})
        if not record.replayed:
            ledger.remember(record)
        state.settle(record, variant, ledger, against=against, replan=False)
        if record.decision.outcome == Outcome.KEEP:
            kept_first = record.name
        elif record.decision.outcome == Outcome.SUPERSEDED:
            requeued.append(variant)
    if kept_first is not None:
        state.replan()
    return requeued
