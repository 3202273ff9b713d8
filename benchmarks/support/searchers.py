"""The searchers benchmarks/search_quality.py compares, each paying in launches of one Space.

- the planner and climb: `run_offline_climb` (the trials asset's climb, with
  `plan_for_target`) on the space's noisy launches, every plan narrowed to the space;
  its pick at a budget is the stack of the keepers it had kept by then; with or
  without the launch noise of earlier runs (as the store pools it), with or without
  the variant that moves several knobs at once, with or without a model's proposer
  rounds (benchmarks/support/offline_proposer.py);
- Optuna's TPE sampler (defaults; the operator's config enqueued as its first trial),
  one categorical per knob, one launch per trial, refused configs told as failed;
- random search over the space's distinct points, the operator's config first.
A sampler's pick is the point whose launches averaged highest. Every searcher starts
with one launch of the operator's config.
"""

from __future__ import annotations

import random
import statistics

import optuna

from benchmarks.support.offline_climb import Proposer, run_offline_climb
from benchmarks.support.search_space import LaunchBudgetSpent, Launches, Log, Noise, Space, pick_at
from hyperloom_assets.core.decisions.climb import TrialRecord, launched_changes
from hyperloom_assets.core.decisions.history import prior_from
from hyperloom_assets.core.measurement.stats import LaunchNoise
from hyperloom_assets.core.planning.stack import composition
from hyperloom_assets.core.planning.variants import Variant

Picks = dict[int, list[str]]  # budget -> the searcher's pick after that many launches


def _log_launch(launches: Launches, log: Log, argv: list[str]) -> float | None:
    values = launches.repeats(argv)
    mean = statistics.fmean(values) if values else None
    log.append((launches.space.key(argv) or "refused", argv, mean))
    return mean


def sampler_picks(log: Log, budgets: list[int]) -> Picks:
    return {b: pick_at(log, b) for b in budgets}


def random_search(space: Space, noise: Noise, seed: int, budgets: list[int]) -> Picks:
    launches, log = Launches(space, noise, seed, max(budgets)), []
    others = [argv for argv in space.points if space.key(argv) != space.key(space.baseline_argv)]
    random.Random(seed).shuffle(others)
    for argv in [space.baseline_argv, *others][:max(budgets)]:
        _log_launch(launches, log, argv)
    return sampler_picks(log, budgets)


def tpe_search(space: Space, noise: Noise, seed: int, budgets: list[int]) -> Picks:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    launches, log = Launches(space, noise, seed, max(budgets)), []
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    knobs = list(space.families.values())
    study.enqueue_trial({f"knob{i}": 0 for i in range(len(knobs))})
    for _ in range(max(budgets)):
        trial = study.ask()
        choices = [trial.suggest_categorical(f"knob{i}", list(range(len(options) + 1))) for i, options in enumerate(knobs)]
        mean = _log_launch(launches, log, space.choices_argv(choices))
        if mean is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, mean)
    return sampler_picks(log, budgets)


HISTORY_CONFIGS = 10  # what earlier runs on the host left: configs launched three times each


def history_prior(noise: Noise, seed: int) -> LaunchNoise | None:
    """The pooled launch noise earlier runs of the same host, engine and model would leave."""
    rng = random.Random(seed + 7_919)
    groups = [[level * (1 + rng.gauss(0, noise.launch_sd)) * (1 + rng.gauss(0, noise.repeat_sd / noise.repeats ** 0.5))
               for _ in range(3)] for level in (1000.0 * (1 + rng.random()) for _ in range(HISTORY_CONFIGS))]
    return prior_from(groups)


def climb_search(space: Space, noise: Noise, seed: int, budgets: list[int], *, history: bool = False,
                 combine: bool = True, proposer: Proposer | None = None) -> tuple[Picks, list[TrialRecord]]:
    """The climb until its budget runs out; its pick at each budget and its trials.

    `history`: start from the launch noise earlier runs left; `combine`: let the planner
    offer several knobs as one variant (planning/combine.py); `proposer`: a model's
    rounds ahead of the rule plan, narrowed to the space like every plan.
    """
    # Only the launch budget stops it: a poor operator config can pass any gain target.
    scenario = space.scenario.model_copy(update={"max_trials": 10_000, "target_gain_pct": 1e9})
    target = scenario.target()
    launches = Launches(space, noise, seed, max(budgets))
    trials: list[TrialRecord] = []

    def admits(keepers: list[Variant], variant: Variant) -> bool:
        if not combine and variant.provenance == "combined":
            return False
        return space.contains(composition(target, launched_changes(keepers, variant)).argv)

    try:
        run_offline_climb(scenario, seed, launcher=lambda _, argv, __: launches.measurement(argv), admits=admits,
                          history=trials, prior=history_prior(noise, seed) if history else None, proposer=proposer)
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
