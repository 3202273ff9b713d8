"""One sim scenario as a search space every searcher shares: its points, their truth, the noise.

Code only benchmarks use. The truth of a point is the sim's noise-free prediction
(throughput and telemetry), computed once per distinct engine configuration. A launch
of a point is that truth with launch-to-launch and repeat noise drawn from a stream
keyed by (seed, point, how often this searcher launched it), so every searcher that
launches the same point for the n-th time sees the same numbers (common random numbers).
"""

from __future__ import annotations

import random
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from benchmarks.support.offline_climb import SimScenario
from benchmarks.support.sim_grid import Families, config_key, grid_families, grid_points, point_argv
from hyperloom_assets.core.hashing import canonical_hash
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.planning.diagnosis import PlanEvidence
from hyperloom_assets.sim.perf_model import SimConfigError
from hyperloom_assets.sim.predict import SimArgError, predict


class LaunchBudgetSpent(Exception):
    """The searcher asked for more launches than its budget."""


@dataclass(frozen=True)
class Noise:
    launch_sd: float  # a launch's own offset, relative
    repeat_sd: float  # each repeat's noise on that launch, relative
    repeats: int = 3


def _truth(job: tuple[str, list[str]]) -> Measurement | None:
    scenario_json, argv = job
    scenario = SimScenario.model_validate_json(scenario_json)
    try:
        return predict(scenario.model, scenario.gpu, argv, scenario.workload, flavor=scenario.flavor, tp=scenario.tp,
                       repeats=1)
    except (SimArgError, SimConfigError):
        return None


@dataclass
class Space:
    scenario: SimScenario
    families: Families
    points: list[list[str]]
    truth: dict[str, Measurement | None]  # config key -> noise-free prediction (None: refused)
    keys: list[str] = field(default_factory=list)  # the points' config keys, in order

    @classmethod
    def build(cls, scenario: SimScenario, workers: int = 2) -> Space:
        families, _ = grid_families(scenario, PlanEvidence())
        points = grid_points(scenario, families)
        jobs = [(scenario.model_dump_json(), argv) for argv in points]
        if workers > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                found = list(pool.map(_truth, jobs, chunksize=4))
        else:
            found = [_truth(job) for job in jobs]
        keys = [config_key(scenario, argv) for argv in points]
        return cls(scenario=scenario, families=families, points=points, truth=dict(zip(keys, found)), keys=keys)

    def to_json(self) -> dict:
        return {"truth": {k: m.model_dump(mode="json") if m else None for k, m in self.truth.items()}}

    @classmethod
    def from_json(cls, scenario: SimScenario, raw: dict) -> Space:
        """The space again from its saved truths (the points are recomputed: they are cheap)."""
        families, _ = grid_families(scenario, PlanEvidence())
        points = grid_points(scenario, families)
        truth = {k: Measurement.model_validate(m) if m else None for k, m in raw["truth"].items()}
        return cls(scenario=scenario, families=families, points=points, truth=truth,
                   keys=[config_key(scenario, argv) for argv in points])

    def key(self, argv: list[str]) -> str | None:
        return config_key(self.scenario, argv)

    def value(self, argv: list[str]) -> float | None:
        found = self.truth.get(self.key(argv) or "")
        return found.output_throughput if found else None

    def contains(self, argv: list[str]) -> bool:
        return self.key(argv) in self.truth

    @property
    def baseline_argv(self) -> list[str]:
        return self.scenario.target().server_args

    @property
    def best(self) -> float:
        return max(m.output_throughput for m in self.truth.values() if m is not None)

    def share(self, argv: list[str]) -> float:
        """The share of the attainable gain a pick reaches (negative when it is worse)."""
        base = self.value(self.baseline_argv)
        value = self.value(argv)
        return (value - base) / (self.best - base) if value is not None else -1.0

    def near_best(self, within: float = 0.05) -> float:
        values = [m.output_throughput for m in self.truth.values() if m is not None]
        return sum(v >= (1 - within) * self.best for v in values) / len(values)

    def choices_argv(self, choices: list[int]) -> list[str]:
        """A point by one option index per knob (0: leave the knob as the operator set it)."""
        options = [[None, *variants] for variants in self.families.values()]
        return point_argv(self.scenario, [opts[i] for opts, i in zip(options, choices)])


class Launches:
    """A searcher's launches of a space: noisy, counted, refused past the budget."""

    def __init__(self, space: Space, noise: Noise, seed: int, budget: int):
        self.space, self.noise, self.seed, self.budget = space, noise, seed, budget
        self.count = 0
        self.per_key: dict[str, int] = {}

    def repeats(self, argv: list[str]) -> list[float] | None:
        """One launch's per-repeat throughputs; None where the engine refuses the config."""
        if self.count >= self.budget:
            raise LaunchBudgetSpent
        self.count += 1
        key = self.space.key(argv) or "refused"
        truth = self.space.truth.get(key)
        nth = self.per_key.get(key, 0)
        self.per_key[key] = nth + 1
        if truth is None:
            return None
        rng = random.Random(int(canonical_hash({"seed": self.seed, "key": key, "n": nth}), 16))
        offset = truth.output_throughput * (1 + rng.gauss(0, self.noise.launch_sd))
        return [max(offset * (1 + rng.gauss(0, self.noise.repeat_sd)), 1e-6) for _ in range(self.noise.repeats)]

    def measurement(self, argv: list[str]) -> Measurement:
        """A launch as the measurement protocol reports it: the truth's shape with noisy repeats."""
        values = self.repeats(argv)
        if values is None:
            raise SimConfigError(f"the engine refuses {' '.join(argv)}")
        truth = self.space.truth[self.space.key(argv)]
        first = truth.repeats[0]
        rounds = [first.model_copy(update={"output_throughput": v}) for v in values]
        mean = statistics.fmean(values)
        return truth.model_copy(update={"repeats": rounds, "output_throughput": mean,
                                        "output_throughput_ci_low": mean, "output_throughput_ci_high": mean})


# A searcher's launches in order: (config key, argv, the launch's mean; None where refused).
Log = list[tuple[str, list[str], float | None]]


def pick_at(log: Log, until: int) -> list[str]:
    """A sampler's pick after `until` launches: the point whose launches so far average highest."""
    seen: dict[str, tuple[list[str], list[float]]] = {}
    for key, argv, value in log[:until]:
        if value is not None:
            seen.setdefault(key, (argv, []))[1].append(value)
    return max(seen.values(), key=lambda item: statistics.fmean(item[1]))[0]
