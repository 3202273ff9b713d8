"""One sim scenario as a search space every searcher shares: its points, their truth, the noise.

Code only benchmarks use. The truth of a point is the sim's noise-free prediction
(throughput, latency and telemetry), computed once per distinct engine configuration. A
launch of a point is that truth with launch-to-launch and repeat noise on everything it
reports (launch_noise.py), drawn from a stream keyed by (seed, point, how often this
searcher launched it), so every searcher that launches the same point for the n-th time
sees the same numbers (common random numbers).

Under the scenario's SLO a point is feasible when each limit holds at its percentile, by
the truth's percentiles; the attainable gain is then the best feasible point's, and a pick
that breaks the SLO scores a share of 0 (the operator's config, which meets it, scores 0
too). A launch's own verdict (what a sampler can know) reads its measured percentiles.
"""

from __future__ import annotations

import random
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

from benchmarks.support.launch_noise import Noise, draw_launch, noisy_latency, noisy_telemetry
from benchmarks.support.offline_climb import SimScenario
from benchmarks.support.sim_grid import Families, config_key, grid_families, grid_points, point_argv
from hyperloom_assets.core.hashing import canonical_hash
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.planning.diagnosis import PlanEvidence
from hyperloom_assets.sim.perf_model import SimConfigError
from hyperloom_assets.sim.predict import SimArgError, predict

__all__ = ["LaunchBudgetSpent", "Launches", "Log", "Logged", "Noise", "Space", "pick_at"]
SLO_METRICS = (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"), ("e2e_ms", "e2el_ms"))  # the limit, Latency's field
LATENCY_SCALARS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p50_ms", "e2el_p50_ms")


class LaunchBudgetSpent(Exception):
    """The searcher asked for more launches than its budget."""


def _truth(job: tuple[str, list[str]]) -> Measurement | None:
    scenario_json, argv = job
    scenario = SimScenario.model_validate_json(scenario_json)
    try:
        return predict(scenario.model, scenario.gpu, argv, scenario.workload, flavor=scenario.flavor, tp=scenario.tp,
                       repeats=1, calibration=scenario.sim_calibration)
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

    def excess(self, m: Measurement) -> list[float]:
        """Each SLO limit's measured percentile minus the limit (<= 0: held); empty without an SLO.

        A launch without latency breaks every limit (a verdict needs its requests)."""
        slo = self.scenario.slo
        if slo is None:
            return []
        limits = [(getattr(slo, name), field) for name, field in SLO_METRICS if getattr(slo, name) is not None]
        if m.latency is None:
            return [float("inf")] * len(limits)
        return [getattr(m.latency, field).at(slo.percentile) - limit for limit, field in limits]

    def meets(self, m: Measurement) -> bool:
        return all(e <= 0 for e in self.excess(m))

    def feasible(self, key: str) -> bool:
        """Whether the point's truth meets the SLO (every point does without one)."""
        found = self.truth.get(key)
        return found is not None and self.meets(found)

    @property
    def best(self) -> float:
        return max(m.output_throughput for key, m in self.truth.items() if self.feasible(key))

    @property
    def best_unconstrained(self) -> float:
        return max(m.output_throughput for m in self.truth.values() if m is not None)

    def share(self, argv: list[str]) -> float:
        """The share of the attainable gain a pick reaches (negative when it is worse; 0 when it breaks the SLO)."""
        base = self.value(self.baseline_argv)
        value = self.value(argv)
        if value is None:
            return -1.0
        if not self.feasible(self.key(argv) or ""):
            return 0.0
        return (value - base) / (self.best - base)

    def near_best(self, within: float = 0.05) -> float:
        values = [m.output_throughput for key, m in self.truth.items() if self.feasible(key)]
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
        self.last: Measurement | None = None  # the latest launch's report

    def launch(self, argv: list[str]) -> Measurement | None:
        """One launch as the measurement protocol reports it; None where the engine refuses the config."""
        if self.count >= self.budget:
            raise LaunchBudgetSpent
        self.count += 1
        key = self.space.key(argv) or "refused"
        truth = self.space.truth.get(key)
        nth = self.per_key.get(key, 0)
        self.per_key[key] = nth + 1
        self.last = None
        if truth is not None:
            rng = random.Random(int(canonical_hash({"seed": self.seed, "key": key, "n": nth}), 16))
            self.last = noisy_measurement(truth, rng, self.noise)
        return self.last

    def repeats(self, argv: list[str]) -> list[float] | None:
        """One launch's per-repeat throughputs; None where the engine refuses the config."""
        m = self.launch(argv)
        return m.repeats_throughputs() if m else None

    def measurement(self, argv: list[str]) -> Measurement:
        m = self.launch(argv)
        if m is None:
            raise SimConfigError(f"the engine refuses {' '.join(argv)}")
        return m


def noisy_measurement(truth: Measurement, rng: random.Random, noise: Noise) -> Measurement:
    """The truth's shape with a launch's noise on its repeats, latency and telemetry."""
    draw = draw_launch(truth.output_throughput, rng, noise)
    by = draw.latency_factor
    scalars = {name: getattr(truth, name) * by for name in LATENCY_SCALARS}
    first = truth.repeats[0]
    rounds = [first.model_copy(update={"output_throughput": v, "latency": noisy_latency(first.latency, by),
                                       **{name: getattr(first, name) * by for name in LATENCY_SCALARS}})
              for v in draw.repeats]
    mean = statistics.fmean(draw.repeats)
    return truth.model_copy(update={"repeats": rounds, "output_throughput": mean, "output_throughput_ci_low": mean,
                                    "output_throughput_ci_high": mean, **scalars,
                                    "latency": noisy_latency(truth.latency, by),
                                    "telemetry": noisy_telemetry(truth.telemetry, rng, noise)})


class Logged(NamedTuple):
    """A sampler's launch: the point, its argv, the launch's mean (None where refused), its SLO verdict."""
    key: str
    argv: list[str]
    mean: float | None
    meets: bool = True


Log = list[Logged]  # a sampler's launches in order


def pick_at(log: Log, until: int) -> list[str]:
    """A sampler's pick after `until` launches: of the points no launch of which broke the SLO, the one whose
    launches so far average highest; the first launch's (the operator's config) when there is none."""
    seen: dict[str, tuple[list[str], list[float]]] = {}
    broke: set[str] = set()
    for entry in log[:until]:
        if entry.mean is not None:
            seen.setdefault(entry.key, (entry.argv, []))[1].append(entry.mean)
            if not entry.meets:
                broke.add(entry.key)
    kept = [item for key, item in seen.items() if key not in broke]
    if not kept:
        return log[0].argv
    return max(kept, key=lambda item: statistics.fmean(item[1]))[0]
