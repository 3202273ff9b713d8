"""The anytime continuation: past the rule plan, a model-based sampler proposes the next config. Pure code.

When every planned variant was tried and budget is left, the climb asks this for one more
variant (climb_state.Checks.more). It reads every launch the climb measured in this
context, the trials replayed from the ledger included, as points of the plan's knob space
(continuation_space.py) with the objective's mean log launch mean over the baseline's,
and, under an SLO, each limit's measured percentile over its limit as a constraint; it
rebuilds an Optuna study from them (warm start: the sampler sees every launch, not only
its own) and asks Optuna's TPE or GP sampler for a point no launch has measured yet,
expressed as one change on top of the running best. The sampler is seeded by how much was
measured, so the same launches always lead to the same proposal and a re-executed run
replays it from the ledger. The candidate then meets the climb's guard, critic, gate and
keep rule like any other variant. Before asking, it stops the climb on evidence: once
enough configs are measured, when Optuna's regret bound (a GP's upper bound on how far the
best measured config can be from the best of the space) is below the launch noise, no
launch left could show a gain over the running best (StopReason.EXPECTED_GAIN_BELOW_NOISE).
"""

from __future__ import annotations

import math
import random
import statistics
import warnings
from collections.abc import Callable
from typing import NamedTuple

from hyperloom_assets.core.config.targets import TargetSlo
from hyperloom_assets.core.decisions.climb_state import BASELINE, Progress
from hyperloom_assets.core.decisions.stop_reasons import StopReason
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.slo_verdict import SloVerdict, slo_verdict
from hyperloom_assets.core.measurement.stats import Launches, between_launch_variance, within_launch_floor
from hyperloom_assets.core.planning.continuation_space import KnobSpace, Point, point_of, point_variant
from hyperloom_assets.core.planning.variants import Variant

SAMPLERS = ("tpe", "gp")
STARTUP = 4  # random proposals before the model is used, counting the measured configs
ASKS = 24  # proposals asked before falling back to an unmeasured neighbour of the running best
# The evidence stop judges only once this many configs carry a value: a GP's bound from a handful
# of points says more about its prior than about the space.
EVIDENCE_MIN_POINTS = 12
SLO_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")
# (keepers, variant) -> whether the variant may be tried (a benchmark's space); None: every one
Admits = Callable[[list[Variant], Variant], bool]


class Observed(NamedTuple):
    point: Point
    value: float | None  # mean log launch mean minus the baseline's; None: the launch failed
    excess: list[float]  # per SLO limit, measured percentile / limit - 1 (<= 0: held); empty without an SLO


def _log_mean(launches: Launches) -> float:
    return statistics.fmean(math.log(statistics.fmean(launch)) for launch in launches)


def slo_excess(slo: TargetSlo | None, verdict: SloVerdict | None) -> list[float]:
    """Each limit's measured percentile over the limit, minus 1; a config without a verdict breaks each."""
    if slo is None:
        return []
    limits = [(getattr(slo, name), name) for name in SLO_METRICS if getattr(slo, name) is not None]
    if verdict is None:
        return [1.0] * len(limits)
    return [(getattr(verdict, name) or math.inf) / limit - 1 if getattr(verdict, name) is not None else 1.0
            for limit, name in limits]


def launch_noise_sd(evidence: dict[str, Launches]) -> float:
    """The sd of a log launch mean, from every config launched twice or more (never below the repeats' floor)."""
    configs = list(evidence.values())
    between, dof = between_launch_variance(configs)
    return math.sqrt(max(between if dof else 0.0, within_launch_floor(configs)))


class Continuation:
    """The continuation's proposals for one climb: the space, the sampler, and what may be tried."""

    def __init__(self, space: KnobSpace, sampler: str = "tpe", slo: TargetSlo | None = None,
                 baseline_latency: Latency | None = None, admits: Admits | None = None, seed: int = 0):
        if sampler not in SAMPLERS:
            raise ValueError(f"continuation sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}")
        self.space, self.sampler, self.slo, self.admits, self.seed = space, sampler, slo, admits, seed
        self.baseline_excess = slo_excess(slo, slo_verdict(slo, [baseline_latency])) if slo else []
        self.origin = point_of(space, space.operator_args, space.operator_env)

    def observed(self, progress: Progress) -> list[Observed]:
        """Every measured config as a point: the baseline, then each trial that launched, in order."""
        found = [Observed(self.origin, 0.0, self.baseline_excess)] if self.origin is not None else []
        anchor = _log_mean(progress.evidence[BASELINE])
        for trial in progress.trials:
            if not trial.argv or trial.outcome == "REJECTED":
                continue
            point = point_of(self.space, trial.argv, trial.env)
            if point is None:
                continue
            launches = progress.evidence.get(trial.fingerprint)
            value = _log_mean(launches) - anchor if launches else None
            found.append(Observed(point, value, slo_excess(self.slo, trial.slo) if self.slo else []))
        return found

    def best_point(self, progress: Progress) -> Point | None:
        if progress.best_key == BASELINE:
            return self.origin
        kept = [t for t in progress.trials if t.fingerprint == progress.best_key and t.argv]
        return point_of(self.space, kept[-1].argv, kept[-1].env) if kept else None

    def __call__(self, progress: Progress) -> Variant | StopReason:
        """The next config to try on top of the running best, or why the climb stops."""
        observed = self.observed(progress)
        best = self.best_point(progress)
        if best is None:  # a running best outside the space (a patch, a recipe): nothing to move from
            return StopReason.NO_MORE_CANDIDATES
        if _regret_bound(self.space, observed) < launch_noise_sd(progress.evidence):
            return StopReason.EXPECTED_GAIN_BELOW_NOISE
        point, how = self._propose(observed, best, progress.keepers)
        if point is None:
            return StopReason.NO_MORE_CANDIDATES
        return point_variant(self.space, best, point, self.sampler,
                             f"[continuation] {how}, warm-started with {len(observed)} measured config(s)")

    def _fits(self, point: Point, best: Point, keepers: list[Variant], measured: set[Point]) -> bool:
        if point in measured or point == best:
            return False
        return self.admits is None or self.admits(keepers, point_variant(self.space, best, point, self.sampler, ""))

    def _propose(self, observed: list[Observed], best: Point, keepers: list[Variant]) -> tuple[Point | None, str]:
        measured = {o.point for o in observed}
        for point in _asked(self.space, observed, self.sampler, self.seed + len(observed)):
            if self._fits(point, best, keepers, measured):
                return point, f"Optuna's {self.sampler.upper()} sampler's proposal"
        for point in _neighbours(self.space, best, random.Random(self.seed + len(observed))):
            if self._fits(point, best, keepers, measured):
                return point, f"an unmeasured neighbour of the running best ({self.sampler.upper()} proposed only measured configs)"
        return None, "every point of the space is measured"


def _distributions(space: KnobSpace) -> dict:
    from optuna.distributions import CategoricalDistribution

    return {f"k{i}": CategoricalDistribution(list(range(len(knob.options) + 1))) for i, knob in enumerate(space.knobs)}


def _frozen(space: KnobSpace, observed: list[Observed]) -> list:
    """The measured configs as Optuna trials: a failed launch FAIL, each SLO limit a constraint."""
    import optuna

    dists = _distributions(space)
    trials = []
    for o in observed:
        params = {f"k{i}": choice for i, choice in enumerate(o.point)}
        attrs = {f"constraints:slo{i}": min(e, 1e9) for i, e in enumerate(o.excess)} if o.value is not None else {}
        state = optuna.trial.TrialState.COMPLETE if o.value is not None else optuna.trial.TrialState.FAIL
        trials.append(optuna.trial.create_trial(params=params, distributions=dists, value=o.value, state=state,
                                                system_attrs=attrs))
    return trials


def _sampler(name: str, seed: int):
    import optuna

    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=STARTUP, warn_independent_sampling=False)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP, multivariate=True,
                                      warn_independent_sampling=False)


def _asked(space: KnobSpace, observed: list[Observed], sampler: str, seed: int):
    """The sampler's proposals, one at a time; each measured one is told its measured value (a duplicate
    teaches it nothing new), so it moves on."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(direction="maximize", sampler=_sampler(sampler, seed))
        study.add_trials(_frozen(space, observed))
        values = {o.point: o for o in observed}
        dists = _distributions(space)
        for _ in range(ASKS):
            trial = study.ask(dists)
            point = tuple(trial.params[f"k{i}"] for i in range(len(space.knobs)))
            yield point
            known = values.get(point)
            if known is None or known.value is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                for i, e in enumerate(known.excess):
                    trial.set_constraint(f"slo{i}", min(e, 1e9))
                study.tell(trial, known.value)


def _neighbours(space: KnobSpace, best: Point, rng: random.Random) -> list[Point]:
    """Every point one knob away from the running best, then two knobs away, in a seeded order."""
    ones = [best[:i] + (c,) + best[i + 1:] for i, knob in enumerate(space.knobs)
            for c in range(len(knob.options) + 1) if c != best[i]]
    rng.shuffle(ones)
    twos = [p[:j] + (c,) + p[j + 1:] for p in ones for j, knob in enumerate(space.knobs)
            for c in range(len(knob.options) + 1) if p[j] == best[j] and c != best[j]]
    rng.shuffle(twos)
    return ones + twos


def _regret_bound(space: KnobSpace, observed: list[Observed]) -> float:
    """Optuna's regret bound over the configs that carry a value (and meet the SLO where one is set);
    infinite until EVIDENCE_MIN_POINTS of them are measured."""
    usable = [o for o in observed if o.value is not None and all(e <= 0 for e in o.excess)]
    if len({o.point for o in usable}) < EVIDENCE_MIN_POINTS:
        return math.inf
    import optuna
    from optuna.terminator import RegretBoundEvaluator

    dists = _distributions(space)
    trials = [optuna.trial.create_trial(params={f"k{i}": c for i, c in enumerate(o.point)}, distributions=dists,
                                        value=o.value) for o in usable]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(RegretBoundEvaluator().evaluate(trials, optuna.study.StudyDirection.MAXIMIZE))
