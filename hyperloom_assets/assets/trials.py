"""The `trials` asset: the climb, each variant against the running best.

The planner proposes, the climb (pure code) decides, and this asset supplies what acts:
one launch per measurement through the resources, and the ledger in the result store,
so a re-executed run replays recorded trials instead of measuring them again.
"""

import time

import dagster as dg
from dagster import AssetExecutionContext
from pydantic import ValidationError

from hyperloom_assets.assets.metadata import table_value
from hyperloom_assets.core.decisions.climb import Budget, TrialMeasurement, TrialRecord, climb, launched_changes
from hyperloom_assets.core.decisions.history import HISTORY_MAX_AGE, launch_means, launch_noise_key, prior_from
from hyperloom_assets.core.engines.registry import engine_for, speaking
from hyperloom_assets.core.measurement.serving import ServerError
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.plan_evidence import plan_for_target
from hyperloom_assets.core.planning.stack import stack_spec
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.report.tables import trials_table
from hyperloom_assets.core.results import BaselineResult, RooflineResult, TrialsResult
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.measure import run_measurement
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.sim.engine_args import split_harness_args


def build_trials_asset(partitions: dg.PartitionsDefinition, pool: str):
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
            "launch_noise_history_dof": result.launch_noise_dof,
            "best_gain_pct": rounded(result.climb.best_gain_pct(), "%"),
            "trials": table_value(trials_table(result.climb.trials)),
        })

    return trials


def run_climb(context, target, host, bench, store, baseline: BaselineResult, roofline: RooflineResult,
              first_plan: list[Variant]) -> TrialsResult:
    name = context.partition_key
    key = baseline.context_key
    history: list[TrialRecord] = []  # the trials so far: the planner's evidence after each keeper

    def plan(keepers: list[Variant], tried: set[str]) -> list[Variant]:
        if not keepers:
            return first_plan
        return plan_for_target(target, baseline, roofline.roofline, roofline.achieved, keepers=keepers, tried=tried,
                               history=history)

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
                                measurement_id=measured.measurement_id, argv=measured.launch.argv, env=spec.env,
                                telemetry=measured.measurement.telemetry)

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
        history.append(record)
        context.log.info("trial %d %s: %s (%s)", record.index, record.name, record.outcome, record.decision.reason)
        context.log_event(dg.AssetObservation(asset_key="trials", partition=name, metadata={
            "trial": record.index, "name": record.name, "fingerprint": record.fingerprint,
            "outcome": record.outcome, "reason": record.decision.reason, "replayed": record.replayed,
            "provenance": record.variant.provenance, "rule": record.variant.rule or "",
            "diagnosis": record.variant.diagnosis or "", "plan_reason": record.variant.reason,
            "gain_pct": rounded(record.decision.gain_pct, "%") if record.decision.gain_pct is not None else float("nan"),
        }))

    deadline = time.monotonic() + target.time_budget_min * 60 if target.time_budget_min else None
    budget = Budget(max_trials=target.max_trials, target_gain_pct=target.target_gain_pct, deadline_s=deadline)
    noise_key = target_noise_key(target, baseline)
    prior = prior_from(store.launch_noise_history(noise_key, HISTORY_MAX_AGE))
    context.log.info("launch noise from earlier runs: %s", f"{prior.dof} degrees of freedom, sd "
                     f"{100 * prior.variance ** 0.5:.1f}%" if prior else "none (first looks cannot decide)")
    result = climb(baseline.measurement.repeats_throughputs(), baseline.measuring_s, budget, plan, measure,
                   recall, remember, on_trial, prior=prior)
    store.record_launch_noise(noise_key=noise_key, target=name, run_id=context.run.run_id,
                              launch_means=launch_means(result.evidence))
    return TrialsResult(climb=result, baseline_mean=baseline.measurement.output_throughput, context_key=key,
                        launch_noise_dof=prior.dof if prior else 0)


def target_noise_key(target, baseline: BaselineResult) -> str:
    """Host, engine and its identity, model; a sim's harness flags too (its noise is one of them)."""
    identity = baseline.framework_version
    if engine_for(target.engine).simulated:
        harness, _ = split_harness_args(target.server_args, speaking(target.engine, target.server_args).name)
        identity += " " + " ".join(f"{k}={v}" for k, v in sorted(harness.items()))
    return launch_noise_key(target.host, target.engine, identity, str(target.model))
