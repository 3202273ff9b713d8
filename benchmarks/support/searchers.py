"""The searchers benchmarks/search_quality.py compares, each paying in launches of one Space.

- the planner and climb: `run_offline_climb` (the trials asset's climb, with
  `plan_for_target`, and under the target's SLO its SLO check) on the space's noisy
  launches, every plan narrowed to the space; its pick at a budget is the stack of the
  keepers it had kept by then; with or without the launch noise of earlier runs (as the
  store pools it: `history_prior`), with or without the variant that moves several knobs
  at once, with or without a model's proposer rounds (benchmarks/support/offline_proposer.py);
- Optuna's TPE sampler (the operator's config enqueued as its first trial), one
  categorical per knob, one launch per trial, refused configs told as failed: with its
  defaults (10 random start-up trials), with the start-up trials chosen per budget
  (tpe_tuning.py), and under an SLO with its constraints (each limit's measured
  percentile minus the limit, through `Trial.set_constraint`: what TPESampler's
  `constraints_func` feeds, deprecated for it in Optuna 5.0; the sampler reads both);
- random search over the space's distinct points, the operator's config first.
A sampler's pick is the point whose launches averaged highest among those no launch of
which broke the SLO (pick_at). Every searcher starts with one launch of the operator's config.
"""

from __future__ import annotations

import random

import optuna

from benchmarks.support.offline_climb import Proposer, run_offline_climb
from benchmarks.support.search_space import LaunchBudgetSpent, Launches, Log, Logged, Noise, Space, pick_at
from hyperloom_assets.core.decisions.climb import TrialRecord, launched_changes
from hyperloom_assets.core.decisions.history import prior_from
from hyperloom_assets.core.measurement.stats import LaunchNoise
from hyperloom_assets.core.planning.stack import composition
from hyperloom_assets.core.planning.variants import Variant

Picks = dict[int, list[str]]  # budget -> the searcher's pick after that many launches
DEFAULT_STARTUP = 10  # TPESampler's n_startup_trials


def _log_launch(launches: Launches, log: Log, argv: list[str]) -> Logged:
    m = launches.launch(argv)
    entry = Logged(launches.space.key(argv) or "refused", argv, m.output_throughput if m else None,
                   launches.space.meets(m) if m else True)
    log.append(entry)
    return entry


def sampler_picks(log: Log, budgets: list[int]) -> Picks:
    return {b: pick_at(log, b) for b in budgets}


def random_search(space: Space, noise: Noise, seed: int, budgets: list[int]) -> Picks:
    launches, log = Launches(space, noise, seed, max(budgets)), []
    others = [argv for argv in space.points if space.key(argv) != space.key(space.baseline_argv)]
    random.Random(seed).shuffle(others)
    for argv in [space.baseline_argv, *others][:max(budgets)]:
        _log_launch(launches, log, argv)
    return sampler_picks(log, budgets)


def tpe_log(space: Space, noise: Noise, seed: int, trials: int, startup: int = DEFAULT_STARTUP,
            constrained: bool = False, gp: bool = False) -> Log:
    """One TPE study of `trials` launches; `constrained`: each launch's SLO excess told as its constraints;
    `gp`: Optuna's GP sampler instead (which reads the same constraints)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    launches, log = Launches(space, noise, seed, trials), []
    sampler = (optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
               if gp else optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    knobs = list(space.families.values())
    study.enqueue_trial({f"knob{i}": 0 for i in range(len(knobs))})
    for _ in range(trials):
        trial = study.ask()
        choices = [trial.suggest_categorical(f"knob{i}", list(range(len(options) + 1))) for i, options in enumerate(knobs)]
        argv = space.choices_argv(choices)
        entry = _log_launch(launches, log, argv)
        if entry.mean is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        if constrained:
            for index, excess in enumerate(space.excess(launches.last)):
                trial.set_constraint(f"slo{index}", min(excess, 1e9))
        study.tell(trial, entry.mean)
    return log


def tpe_search(space: Space, noise: Noise, seed: int, budgets: list[int]) -> Picks:
    """TPE with its defaults: one study of the largest budget, its pick read at each."""
    return sampler_picks(tpe_log(space, noise, seed, max(budgets)), budgets)


def gp_search(space: Space, noise: Noise, seed: int, budgets: list[int]) -> Picks:
    """Optuna's GP sampler with its defaults (10 start-up trials), under an SLO told each launch's constraints:
    one study of the largest budget, its pick read at each."""
    constrained = space.scenario.slo is not None
    return sampler_picks(tpe_log(space, noise, seed, max(budgets), constrained=constrained, gp=True), budgets)


def tpe_budgeted(space: Space, noise: Noise, seed: int, startups: dict[int, int], constrained: bool = False) -> Picks:
    """TPE with the start-up trials chosen for each budget: one study a budget, its pick at its end."""
    return {b: pick_at(tpe_log(space, noise, seed, b, startup, constrained), b) for b, startup in startups.items()}


HISTORY_CONFIGS = 10  # what earlier runs on the host left: configs launched three times each
HISTORY_LAUNCHES = 3
HISTORY_SEED = 1_000_003  # the earlier runs' own noise stream, apart from every searcher's


def history_prior(space: Space, noise: Noise, seed: int) -> LaunchNoise | None:
    """The launch noise earlier runs of the same host, engine and model would leave in the store.

    Earlier runs launched other configs of the model (points of the space drawn at random),
    each three times with the noise model on their own stream; the store keeps each
    config's launch means and pools them (decisions/history.py: prior_from) as it would.
    """
    rng = random.Random(seed + 7_919)
    served = [argv for argv, key in zip(space.points, space.keys) if space.truth.get(key) is not None]
    launches = Launches(space, noise, HISTORY_SEED + seed, HISTORY_CONFIGS * HISTORY_LAUNCHES)
    groups = []
    for argv in rng.sample(served, min(HISTORY_CONFIGS, len(served))):
        groups.append([launches.launch(argv).output_throughput for _ in range(HISTORY_LAUNCHES)])
    return prior_from(groups)


def climb_search(space: Space, noise: Noise, seed: int, budgets: list[int], *, history: bool = False,
                 combine: bool = True, proposer: Proposer | None = None,
                 continuation: str = "off") -> tuple[Picks, list[TrialRecord]]:
    """The climb until its budget runs out (or it stops); its pick at each budget and its trials.

    `history`: start from the launch noise earlier runs left; `combine`: let the planner
    offer several knobs as one variant (planning/combine.py); `proposer`: a model's
    rounds ahead of the rule plan, narrowed to the space like every plan; `continuation`:
    the target's sampler past the rule plan (planning/continuation.py), its proposals
    narrowed to the space too.
    """
    # Only the launch budget stops it: a poor operator config can pass any gain target.
    scenario = space.scenario.model_copy(update={"max_trials": 10_000, "target_gain_pct": 1e9,
                                                 "continuation": continuation})
    target = scenario.target()
    launches = Launches(space, noise, seed, max(budgets))
    trials: list[TrialRecord] = []

    def admits(keepers: list[Variant], variant: Variant) -> bool:
        if not combine and variant.provenance == "combined":
            return False
        return space.contains(composition(target, launched_changes(keepers, variant)).argv)

    try:
        run_offline_climb(scenario, seed, launcher=lambda _, argv, __: launches.measurement(argv), admits=admits,
                          history=trials, prior=history_prior(space, noise, seed) if history else None, proposer=proposer)
    except LaunchBudgetSpent:
        pass  # the trial in progress when the budget ran out decided nothing
    return climb_picks(space, trials, budgets), trials


def climb_picks(space: Space, history: list[TrialRecord], budgets: list[int]) -> Picks:
    target = space.scenario.target()
    used, keepers, stacks = 1, [], [(1, space.baseline_argv)]
    for trial in history:
        used += trial.launch_count
        if trial.outcome == "KEEP":
            keepers.append(trial.variant)
            stacks.append((used, composition(target, keepers).argv))
    return {b: [argv for spent, argv in stacks if spent <= b][-1] for b in budgets}
