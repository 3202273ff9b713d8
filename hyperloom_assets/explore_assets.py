"""Explore: `roofline`, `candidates`, `trials` and `accepted_patches`.

The roofline says how far the baseline is from the hardware; the planner proposes
variants from that evidence; the climb measures each against the running best and keeps
only what beats it by more than the noise.
"""

import time

import dagster as dg
from dagster import AssetExecutionContext
from pydantic import BaseModel, ConfigDict, ValidationError

from hyperloom_assets.climb import Budget, ClimbResult, TrialMeasurement, TrialRecord, climb, launched_changes
from hyperloom_assets.fingerprints import trial_fingerprint, variant_fingerprint
from hyperloom_assets.measure_step import run_measurement
from hyperloom_assets.model_shape import load_shape
from hyperloom_assets.plan_evidence import plan_for_target
from hyperloom_assets.rendering import trials_table, variants_table
from hyperloom_assets.results import BaselineResult
from hyperloom_assets.roofline import Roofline, achieved, kv_cache_dtype_from_args, workload_roofline
from hyperloom_assets.run_folders import step_dir
from hyperloom_assets.serving import ServerError
from hyperloom_assets.stack import stack_spec
from hyperloom_assets.variants import Variant
from hyperloom_assets.workloads import build_plan
from resources.bench_client import BenchmarkClient
from resources.catalog import TargetCatalog
from resources.gpu_host import LocalHost
from resources.hardware import target_hardware
from resources.store import ResultStore


class RooflineResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    roofline: Roofline
    achieved: dict
    warnings: list[str] = []


class TrialsResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    climb: ClimbResult
    baseline_mean: float
    context_key: str


def compute_roofline(target, baseline: BaselineResult, host) -> RooflineResult:
    shape = load_shape(target.model)
    hardware, warnings = target_hardware(target, host, shape.dtype)
    plan = build_plan(target.workload, shape.vocab) if target.workload.kind == "agentic" else None
    roofline = workload_roofline(shape, hardware, target.workload, plan=plan,
                                 kv_cache_dtype=kv_cache_dtype_from_args(target.server_args))
    m = baseline.measurement
    reached = achieved(roofline, m.output_throughput, m.output_throughput_ci_low, m.output_throughput_ci_high)
    if reached["warning"]:
        warnings.append(reached["warning"])
    return RooflineResult(roofline=roofline, achieved=reached, warnings=warnings)


def build_explore_assets(partitions: dg.PartitionsDefinition, pool: str) -> list:
    @dg.asset(partitions_def=partitions, group_name="baseline",
              description="The decode ceiling for this model, workload and hardware; achieved share of it.")
    def roofline(context: AssetExecutionContext, catalog: TargetCatalog, host: LocalHost,
                 baseline: BaselineResult) -> dg.Output[RooflineResult]:
        target = catalog.target(context.partition_key)
        result = compute_roofline(target, baseline, host)
        for warning in result.warnings:
            context.log.warning(warning)
        r, a = result.roofline, result.achieved
        return dg.Output(result, metadata={
            "ceiling_tok_s": r.ceiling_tok_s, "memory_bound_tok_s": r.memory_bound_tok_s,
            "compute_bound_tok_s": r.compute_bound_tok_s, "binding": r.binding, "explanation": r.explanation,
            "hardware": r.hardware, "achieved_pct": a["achieved_pct"], "achieved_pct_ci_low": a["achieved_pct_ci_low"],
            "achieved_pct_ci_high": a["achieved_pct_ci_high"], "above_ceiling": a["above_ceiling"],
        })

    @dg.asset(partitions_def=partitions, group_name="explore",
              description="The first plan: variants with fingerprint, provenance and reason, best first.")
    def candidates(context: AssetExecutionContext, catalog: TargetCatalog, store: ResultStore,
                   baseline: BaselineResult, roofline: RooflineResult) -> dg.Output[list[Variant]]:
        target = catalog.target(context.partition_key)
        variants = plan_for_target(target, baseline, roofline.roofline, roofline.achieved, keepers=[], tried=set())
        # Variants already in this context's ledger stay in the plan: the climb replays
        # their recorded outcome instead of measuring them again.
        recorded = {row["fingerprint"] for row in store.trials(baseline.context_key)}
        return dg.Output(variants, metadata={
            "count": len(variants), "in_ledger": sum(variant_fingerprint(v) in recorded for v in variants),
            "plan": dg.MetadataValue.md(variants_table(variants, recorded))})

    @dg.asset(partitions_def=partitions, group_name="explore", pool=pool,
              description="The climb: each variant against the running best, re-planning after each keeper.")
    def trials(context: AssetExecutionContext, catalog: TargetCatalog, host: LocalHost, bench: BenchmarkClient,
               store: ResultStore, baseline: BaselineResult, roofline: RooflineResult,
               candidates: list[Variant]) -> dg.Output[TrialsResult]:
        target = catalog.target(context.partition_key)
        result = run_climb(context, target, host, bench, store, baseline, roofline, candidates)
        kept = [t for t in result.climb.trials if t.outcome == "KEEP"]
        return dg.Output(result, metadata={
            "trials_run": len(result.climb.trials), "kept": len(kept), "stop_reason": result.climb.stop_reason,
            "best_gain_pct": result.climb.best_gain_pct(),
            "trials": dg.MetadataValue.md(trials_table(result.climb.trials)),
        })

    @dg.asset(partitions_def=partitions, group_name="explore",
              description="The keepers, in the order they joined, with their gains.")
    def accepted_patches(trials: TrialsResult) -> dg.Output[list[TrialRecord]]:
        kept = [t for t in trials.climb.trials if t.outcome == "KEEP"]
        return dg.Output(kept, metadata={"count": len(kept), "patches": dg.MetadataValue.md(trials_table(kept))})

    return [roofline, candidates, trials, accepted_patches]


def run_climb(context, target, host, bench, store, baseline: BaselineResult, roofline: RooflineResult,
              first_plan: list[Variant]) -> TrialsResult:
    name = context.partition_key
    key = baseline.context_key

    def plan(keepers: list[Variant], tried: set[str]) -> list[Variant]:
        if not keepers:
            return first_plan
        return plan_for_target(target, baseline, roofline.roofline, roofline.achieved, keepers=keepers, tried=tried)

    def measure(keepers: list[Variant], variant: Variant | None) -> TrialMeasurement:
        # variant None: the running best launched again beside a variant under review
        changes = launched_changes(keepers, variant)
        spec = stack_spec(target, changes, baseline.spec)
        fingerprint = trial_fingerprint(changes[:-1], changes[-1]) if changes else None
        kind = "trial" if variant is not None else "best_relaunch"
        folder = step_dir(host, name, context.run.run_id, f"{kind}-{fingerprint or 'baseline'}-{time.time_ns()}")
        try:
            measured = run_measurement(host=host, bench=bench, store=store, target=name, kind=kind, spec=spec,
                                       contract=baseline.contract, run_dir=folder, run_id=context.run.run_id,
                                       context_key=key, fingerprint=fingerprint)
        except ServerError as exc:
            return TrialMeasurement(error_class=exc.error_class, error=str(exc), argv=exc.argv, env=spec.env)
        return TrialMeasurement(throughputs=measured.measurement.repeats_throughputs(), measuring_s=measured.measuring_s,
                                measurement_id=measured.measurement_id, argv=measured.launch.argv, env=spec.env)

    def recall(fingerprint: str) -> TrialRecord | None:
        for row in store.trials(key):
            if row["fingerprint"] == fingerprint:
                try:
                    return TrialRecord.model_validate(row["record"])
                except ValidationError as exc:  # written by an older hyperloom: measure it again
                    context.log.warning("ledger entry %s is in an older format, measuring again: %s",
                                        fingerprint, str(exc).splitlines()[0])
        return None

    def remember(record: TrialRecord) -> None:
        store.record_trial(context_key=key, target=name, fingerprint=record.fingerprint,
                           variant=record.variant.model_dump(mode="json"), outcome=record.outcome,
                           record=record.model_dump(mode="json"),
                           measurement_id=record.measurement_ids[-1] if record.measurement_ids else None,
                           run_id=context.run.run_id)

    def on_trial(record: TrialRecord) -> None:
        context.log.info("trial %d %s: %s (%s)", record.index, record.name, record.outcome, record.decision.reason)
        context.log_event(dg.AssetObservation(asset_key="trials", partition=name, metadata={
            "trial": record.index, "name": record.name, "fingerprint": record.fingerprint,
            "outcome": record.outcome, "reason": record.decision.reason, "replayed": record.replayed,
            "gain_pct": record.decision.gain_pct if record.decision.gain_pct is not None else float("nan"),
        }))

    deadline = time.monotonic() + target.time_budget_min * 60 if target.time_budget_min else None
    budget = Budget(max_trials=target.max_trials, target_gain_pct=target.target_gain_pct, deadline_s=deadline)
    result = climb(baseline.measurement.repeats_throughputs(), baseline.measuring_s, budget, plan, measure,
                   recall, remember, on_trial)
    return TrialsResult(climb=result, baseline_mean=baseline.measurement.output_throughput, context_key=key)
