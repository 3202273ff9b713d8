"""The climb driven by sim predictions instead of server launches. Pure code.

A scenario is a sim target: a model, a GPU, the operator's engine args and a workload,
and, as a target may have them, its own search_space and a latency SLO.
Its baseline is a noisy `predict()`; the planner gets what the `baseline` and `roofline`
assets would give it (the engine's own launch record, the roofline, the achieved
share) through `plan_for_target`, the function the assets call; every trial is a noisy
`predict()` with a fresh seed, as a fresh server launch would be measured, judged by
`climb()`. Benchmarks and tests use it to hold the optimizer's decisions against the
sim's noise-free ground truth.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from hyperloom_assets.core.config.search_space import SearchSpace
from hyperloom_assets.core.config.targets import Target, TargetSlo, Workload
from hyperloom_assets.core.decisions.climb import (
    Budget,
    Checks,
    ClimbResult,
    SloCheck,
    TrialMeasurement,
    TrialRecord,
    launched_changes,
)
from hyperloom_assets.core.decisions.ledger import MemoryLedger
from hyperloom_assets.core.decisions.climb_state import BASELINE
from hyperloom_assets.core.decisions.parallel import climb_parallel, relaunch_key
from hyperloom_assets.core.decisions.trial_record import Look
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerSpec
from hyperloom_assets.core.measurement.stats import LaunchNoise
from hyperloom_assets.core.measurement.workloads import build_plan, default_warmups
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.plan_evidence import (
    continuation_for_target,
    plan_evidence,
    plan_for_target,
    slo_skip,
)
from hyperloom_assets.core.planning.planner import PlanEvidence
from hyperloom_assets.core.planning.recipes import Recipe, offered_recipes
from hyperloom_assets.core.planning.stack import composition
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.results import BaselineResult, RooflineResult
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.core.roofline.roofline import (
    achieved,
    gpu_hardware,
    kv_cache_dtype_from_args,
    workload_roofline,
)
from hyperloom_assets.sim.engine_args import resolve_config
from hyperloom_assets.sim.launch_record import launch_record
from hyperloom_assets.sim.perf_model import DEFAULT_CALIBRATION, SimCalibration, SimConfigError
from hyperloom_assets.sim.predict import SimArgError, parse_engine_args, predict


class SimScenario(Strict):
    name: str
    model: Path
    gpu: str
    tp: int = 1
    flavor: Literal["vllm", "sglang", "atom"] = "vllm"
    server_args: list[str] = []  # the operator's engine args (no harness flags)
    workload: Workload
    search_space: SearchSpace | None = None  # the target's own knobs (core/config/search_space.py)
    slo: TargetSlo | None = None  # the target's latency SLO: the climb holds every launch to it
    max_trials: int = 16
    target_gain_pct: float = 1000.0  # by default climb until the plan or the trials run out
    noise_pct: float = 2.5
    repeats: int = 3
    # A calibration profile's parameters (hyperloom_assets/sim/profiles/), and the profile's file
    # name; None: the perf model's constants.
    calibration: SimCalibration | None = None
    calibration_profile: str | None = None
    continuation: Literal["off", "tpe", "gp"] = "off"  # the target's continuation past the rule plan

    @property
    def sim_calibration(self) -> SimCalibration:
        return self.calibration or DEFAULT_CALIBRATION

    def target(self) -> Target:
        harness = ["--gpu", self.gpu, "--tp", str(self.tp), "--flavor", self.flavor]
        return Target(engine="sim", model=self.model, server_args=[*harness, *self.server_args],
                      workload=self.workload, max_trials=self.max_trials, target_gain_pct=self.target_gain_pct,
                      repeats=self.repeats, search_space=self.search_space, slo=self.slo,
                      continuation=self.continuation)


class OfflineClimb(Strict):
    scenario: str
    baseline: Measurement  # the noisy baseline the climb anchored on
    evidence: PlanEvidence
    climb: ClimbResult
    launches: int  # the baseline's plus every trial's, re-measures and the best's re-launches included
    final_args: list[str]  # the stack's launched argv (harness flags included, as predict() takes them)


def launch_evidence(scenario: SimScenario, args: list[str]) -> dict | None:
    """What the sim's launch record says it ran with, read as the baseline asset reads it."""
    parsed = parse_engine_args(scenario.model, args, scenario.flavor)
    record = launch_record(parsed, resolve_config(parsed, scenario.flavor, gpu_spec(scenario.gpu).memory_gb))
    return engine_for(scenario.flavor).parse_evidence(record or "")


def noisy_prediction(scenario: SimScenario, args: list[str], seed: int) -> Measurement:
    """What the measurement protocol would report for one launch with this seed."""
    return predict(scenario.model, scenario.gpu, args, scenario.workload, flavor=scenario.flavor, tp=scenario.tp,
                   seed=seed, noise_pct=scenario.noise_pct, repeats=scenario.repeats,
                   calibration=scenario.sim_calibration)


# One launch of a config: (scenario, argv, the launch's seed) -> what it measured; raises
# SimArgError or SimConfigError where the engine refuses the args, as predict() does.
Launcher = Callable[[SimScenario, list[str], int], Measurement]
# Whether the climb may try a variant on top of its keepers (a benchmark's space); default all.
Admits = Callable[[list[Variant], Variant], bool]


@dataclass(frozen=True)
class RoundEvidence:
    """What the offline climb hands a proposer round: what the baseline and roofline assets would."""
    target: Target
    baseline: BaselineResult
    roofline: RooflineResult


class Proposer(Protocol):
    """A model's rounds in the climb, as the trials asset asks them (benchmarks/support/offline_proposer.py)."""
    max_rounds: int

    def propose(self, round_no: int, evidence: RoundEvidence, keepers: list[Variant],
                trials: list[TrialRecord]) -> list[Variant]:
        """The round's approved variants, in the model's order."""
        ...


def measure_once(scenario: SimScenario, args: list[str], seed: int, launcher: Launcher | None = None) -> TrialMeasurement:
    """One launch: a noisy prediction with this launch's seed, or the engine's refusal."""
    try:
        m = (launcher or noisy_prediction)(scenario, args, seed)
    except SimArgError as exc:
        return TrialMeasurement(error_class="argv_invalid", error=f"unrecognized arguments: {exc}", argv=args)
    except SimConfigError as exc:
        return TrialMeasurement(error_class="crash", error=str(exc), argv=args)
    return TrialMeasurement(throughputs=m.repeats_throughputs(), measuring_s=sum(r.duration_s for r in m.repeats),
                            argv=args, telemetry=m.telemetry, latency=m.latency)


def true_throughput(scenario: SimScenario, args: list[str]) -> float | None:
    """Noise-free predicted output throughput; None where the engine refuses the args."""
    try:
        return predict(scenario.model, scenario.gpu, args, scenario.workload, flavor=scenario.flavor,
                       tp=scenario.tp, calibration=scenario.sim_calibration).output_throughput
    except (SimArgError, SimConfigError):
        return None


def sim_baseline(scenario: SimScenario, seed: int, launcher: Launcher | None = None) -> BaselineResult:
    target = scenario.target()
    m = (launcher or noisy_prediction)(scenario, target.server_args, seed)
    launch = LaunchRecord(argv=target.server_args, env={}, base_url="sim://", served_model=str(scenario.model),
                          log_path=Path("/dev/null"), ready_s=0.0, evidence=launch_evidence(scenario, target.server_args))
    contract = WorkloadContract(workload=scenario.workload, vocab_size=load_shape(scenario.model).vocab,
                                max_model_len=load_shape(scenario.model).max_position_embeddings, num_prompts=None,
                                warmups=default_warmups(scenario.workload.concurrency), repeats=scenario.repeats)
    return BaselineResult(target=scenario.name, spec=ServerSpec(engine="sim", model=scenario.model), measurement=m,
                          launch=launch, contract=contract, measurement_id=0, measuring_s=sum(r.duration_s for r in m.repeats),
                          framework_version="sim", config_version="offline", context_key=scenario.name, run_id="offline")


def sim_roofline(scenario: SimScenario, baseline: BaselineResult) -> RooflineResult:
    """The roofline asset's computation for a sim target: the table's GPU times --tp."""
    shape = load_shape(scenario.model)
    workload = scenario.workload
    plan = build_plan(workload, shape.vocab) if workload.kind == "agentic" else None
    hardware = gpu_hardware(scenario.gpu, scenario.tp, shape.dtype)
    roofline = workload_roofline(shape, hardware, workload, plan=plan,
                                 kv_cache_dtype=kv_cache_dtype_from_args(scenario.server_args))
    m = baseline.measurement
    return RooflineResult(roofline=roofline, hardware=hardware, achieved=achieved(
        roofline, m.output_throughput, m.output_throughput_ci_low, m.output_throughput_ci_high))


def run_offline_climb(scenario: SimScenario, seed: int = 0, launcher: Launcher | None = None,
                      admits: Admits | None = None, history: list[TrialRecord] | None = None,
                      prior: LaunchNoise | None = None, proposer: Proposer | None = None,
                      recipes: list[Recipe] | None = None, slots: int = 1,
                      looks: list[Look] | None = None, on_climb: Callable[[], None] | None = None) -> OfflineClimb:
    """The trials asset's climb with predictions for launches; each launch gets its own seed.

    `launcher` replaces the noisy prediction, `admits` narrows every plan to a space, and
    `history` (appended to as trials finish) outlives a launcher that stops the climb;
    `prior` is the launch noise earlier runs left (decisions/history.py). `proposer` asks
    a model as `candidates` and `trials` do: round 1 on the first plan, another after each
    keeper up to its max_rounds, its approved variants ahead of the rule planner's.
    `recipes` are the class's recipe memory, offered first in every plan as the assets do.
    `slots` over 1 measures batches at once (core/decisions/parallel.py: `launcher` must then be
    safe from several threads); `looks` receives every launch, as the ledger keeps them. With
    slots, the baseline is launched twice at once, as the baseline asset does (its second launch
    the ledger's fresh launch of the baseline). `on_climb` is called as the climb starts.
    """
    target = scenario.target()
    seeds = itertools.count(seed * 10_000 + 1)
    looks = [] if looks is None else looks
    baseline_seed = next(seeds)
    with ThreadPoolExecutor(max_workers=1) as beside:
        fresh = beside.submit(measure_once, scenario, target.server_args, next(seeds), launcher) if slots > 1 else None
        baseline = sim_baseline(scenario, baseline_seed, launcher)
    if fresh is not None:
        looks.append(Look(trial=relaunch_key(BASELINE), index=1, role="best", measurement=fresh.result()))
    found_roofline = sim_roofline(scenario, baseline)
    roofline, reached = found_roofline.roofline, found_roofline.achieved
    history = [] if history is None else history
    evidence = RoundEvidence(target=target, baseline=baseline, roofline=found_roofline)
    asked = [0]  # the proposer's rounds so far

    def plan(keepers: list[Variant], tried: set[str]) -> list[Variant]:
        found = plan_for_target(target, baseline, roofline, reached, keepers=keepers, tried=tried, history=history)
        if proposer is not None and asked[0] < proposer.max_rounds:
            asked[0] += 1
            found = proposer.propose(asked[0], evidence, keepers, history) + found
        found = offered_recipes(recipes or [], keepers, tried, has_tree=False) + found
        return [v for v in found if admits is None or admits(keepers, v)]

    def measure(keepers: list[Variant], variant: Variant | None) -> TrialMeasurement:
        argv = composition(target, launched_changes(keepers, variant)).argv
        return measure_once(scenario, argv, next(seeds), launcher)

    budget = Budget(max_trials=target.max_trials, target_gain_pct=target.target_gain_pct)
    # Under an SLO every launch is held to it, as the trials asset does (assets/trials.py); a scenario
    # has no objective of its own, so the climb compares output tok/s (the target's default).
    checks = Checks(slo=SloCheck(target.slo, baseline.measurement.latency, target.objective) if target.slo else None,
                    skip=slo_skip(target, roofline),
                    more=continuation_for_target(target, baseline, roofline, reached, admits))
    if on_climb is not None:
        on_climb()
    result = climb_parallel(baseline.measurement.repeats_throughputs(), baseline.measuring_s, budget, plan, measure,
                            MemoryLedger(looks=looks, finished=history), slots=slots, checks=checks, prior=prior)
    return OfflineClimb(scenario=scenario.name, baseline=baseline.measurement,
                        evidence=plan_evidence(target, baseline, roofline, reached), climb=result,
                        launches=1 + sum(t.launch_count for t in result.trials),
                        final_args=composition(target, result.keepers).argv)
