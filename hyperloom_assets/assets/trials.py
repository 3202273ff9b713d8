"""The `trials` asset: the climb, each variant against the running best.

The planner proposes, the climb (pure code) decides, and this asset supplies what acts:
one launch per measurement through the resources, each stopped at the overtime limit,
and the ledger in the result store (whole trials, and each launch of a trial as it
finishes), so a re-executed or resumed run replays what was measured instead of
measuring it again.
"""

import time
from collections.abc import Callable

import dagster as dg
from dagster import AssetExecutionContext
from pydantic import ValidationError

from hyperloom_assets.assets.critic import PATCH_REVIEW_ROUND, Critic, variant_change
from hyperloom_assets.assets.metadata import run_secrets, table_value
from hyperloom_assets.assets.proposer_round import RoundInputs, propose, settings_for
from hyperloom_assets.assets.recipes import class_recipes, mark_if_missed, target_class
from hyperloom_assets.assets.stops import record_stop, recorded_stops
from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.decisions.climb import (
    OVERTIME,
    Budget,
    Checks,
    SloCheck,
    TrialMeasurement,
    TrialRecord,
    launched_changes,
)
from hyperloom_assets.core.decisions.parallel import climb_parallel
from hyperloom_assets.core.decisions.trial_record import Look
from hyperloom_assets.core.decisions.history import HISTORY_MAX_AGE, launch_means, launch_noise_key, prior_from
from hyperloom_assets.core.decisions.rule import overtime_limit_s
from hyperloom_assets.core.engines.registry import engine_for, speaking
from hyperloom_assets.core.measurement.objective import repeat_values
from hyperloom_assets.core.measurement.serving import ServerError
from hyperloom_assets.core.patches.patch import package_prefix
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.plan_evidence import continuation_for_target, plan_for_target, slo_skip
from hyperloom_assets.core.planning.recipes import RecipeClass, offered_recipes
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.proposer.critic_rules import Review
from hyperloom_assets.core.proposer.evidence import proposer_payload
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.report.tables import critic_text, trials_table
from hyperloom_assets.core.results import BaselineResult, ProfileResult, RooflineResult, TrialsResult
from hyperloom_assets.resources.accuracy.launch_gate import LaunchGate
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.hosts.slot_pool import PooledHost
from hyperloom_assets.resources.measure import MeasurementOvertime, run_measurement
from hyperloom_assets.resources.proposer.providers import LlmProviders
from hyperloom_assets.resources.store.llm_calls import LlmCallLog
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.resources.trees.trial_trees import TrialTrees


def build_trials_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="explore",
              description="The climb: each variant against the running best, re-planning after each keeper.")
    def trials(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet, bench: BenchmarkClient,
               store: ResultStore, llm: LlmProviders, baseline: BaselineResult, roofline: RooflineResult,
               profile: ProfileResult, candidates: list[Variant]) -> dg.Output[TrialsResult]:
        target = catalog.run_target(context.partition_key, context.run.run_id, store)
        slots = hosts.slot_hosts(target)  # parallel_trials: every launch takes a free one of the run's slots
        host = PooledHost(slots) if len(slots) > 1 else slots[0]
        settings = settings_for(target)
        klass = target_class(target, baseline, roofline)
        rounds = RoundInputs.for_asset(context, target, host, llm, store, baseline, roofline, settings,
                                       profile.evidence(), class_recipes(store, klass, target)) if settings.asks_a_model else None
        critic = PatchCritic(context, store, Critic(settings, speaking(target.engine, target.server_args), llm),
                             target, baseline, roofline, profile.evidence())
        with recorded_stops(context, store, "trials"):
            result = run_climb(context, target, host, bench, store, baseline, roofline, candidates, rounds, critic,
                               klass, slots=len(slots))
        kept = [t for t in result.climb.trials if t.outcome == "KEEP"]
        return dg.Output(result, metadata={
            "trials_run": len(result.climb.trials), "kept": len(kept), "stop_reason": result.climb.stop_reason,
            "slots": len(slots),
            "launch_noise_history_dof": result.launch_noise_dof,
            "best_gain_pct": rounded(result.climb.best_gain_pct(), "%"),
            "trials": table_value(trials_table(result.climb.trials), run_secrets(target.env, target.server_args)),
        })

    return trials


class StoreLedger:
    """The climb's ledger in the result store, keyed by the run's context; each launch and
    trial goes to the run log, and each trial to `settle` (what the run learns from it)."""

    def __init__(self, context, store: ResultStore, key: str, settle: Callable[[TrialRecord], None]):
        self.context, self.store, self.key, self.settle = context, store, key, settle

    def recall(self, fingerprint: str) -> TrialRecord | None:
        rows = [row for row in self.store.trials(self.key) if row["fingerprint"] == fingerprint]
        return next(iter(self._records(rows)), None)

    def settled(self) -> list[TrialRecord]:
        return self._records(self.store.trials(self.key))

    def _records(self, rows: list[dict]) -> list[TrialRecord]:
        """The rows' trials; one written by an older hyperloom is skipped, so it is measured again if planned."""
        records = []
        for row in rows:
            try:
                records.append(TrialRecord.model_validate(row["record"]))
            except ValidationError as exc:
                self.context.log.warning("ledger entry %s is in an older format, measuring again: %s",
                                         row["fingerprint"], str(exc).splitlines()[0])
        return records

    def remember(self, record: TrialRecord) -> None:
        self.store.record_trial(context_key=self.key, target=self.context.partition_key,
                                fingerprint=record.fingerprint, variant=record.variant.model_dump(mode="json"),
                                outcome=record.outcome, record=record.model_dump(mode="json"),
                                measurement_id=record.measurement_ids[-1] if record.measurement_ids else None,
                                run_id=self.context.run.run_id)

    def recall_looks(self, fingerprint: str) -> list[Look]:
        looks = []
        for row in self.store.looks(self.key, fingerprint):
            try:
                looks.append(Look.model_validate(row["record"]))
            except ValidationError:  # an older format: that launch is measured again
                continue
        return looks

    def remember_look(self, look: Look) -> None:
        self.store.record_look(context_key=self.key, fingerprint=look.trial, look=look.index,
                               record=look.model_dump(mode="json"), run_id=self.context.run.run_id)

    def on_look(self, index: int, variant_name: str, look: Look, replayed: bool) -> None:
        self.context.log.info("trial %d %s: launch %d (%s) %s%s", index, variant_name, look.index, look.role,
                              _look_text(look), ", replayed from the ledger" if replayed else "")

    def on_trial(self, record: TrialRecord) -> None:
        self.settle(record)
        _observe_trial(self.context, record)


def _look_text(look: Look) -> str:
    m = look.measurement
    if m.error_class is not None:
        return f"{m.error_class}: {(m.error or '').splitlines()[0][:200] if m.error else ''}"
    return f"{sum(m.throughputs) / len(m.throughputs):.1f} output tok/s over {len(m.throughputs)} repeat(s)"


class PatchCritic:
    """The critic on a planned patch before it touches the tree: the run log, its model call recorded."""

    def __init__(self, context, store: ResultStore, critic: Critic, target: Target, baseline: BaselineResult,
                 roofline: RooflineResult, profile: dict | None):
        self.context, self.store, self.critic = context, store, critic
        self.target, self.baseline, self.roofline, self.profile = target, baseline, roofline, profile

    def review(self, history: list[TrialRecord], keepers: list[Variant], variant: Variant,
               patched: tuple[tuple[str, str, str], ...] = ()) -> Review:
        """`patched`: (path, before, after) of the Python files the patch changes, from the tree (the rules
        critic reads a file whole where a hunk alone cannot be read)."""
        evidence = proposer_payload(self.target, self.baseline, self.roofline, history, [], self.profile, {},
                                    [k.name for k in keepers], 0)
        change = variant_change(variant).model_copy(update={"patched": patched})
        review, call = self.critic.review(change, evidence, PATCH_REVIEW_ROUND)
        if call is not None:
            LlmCallLog(self.store).record_call(self.context.partition_key, self.context.run.run_id, call)
        self.context.log.info("critic on %s: %s", variant.name, review.text())
        return review


def run_climb(context, target: Target, host: Host, bench: BenchmarkClient, store: ResultStore,
              baseline: BaselineResult, roofline: RooflineResult,
              first_plan: list[Variant], rounds: RoundInputs | None = None,
              critic: PatchCritic | None = None, klass: RecipeClass | None = None, slots: int = 1) -> TrialsResult:
    name, key = context.partition_key, baseline.context_key
    history: list[TrialRecord] = []  # the trials so far: the planner's and the proposer's evidence
    tried_patches: set[str] = set()  # sha256 of every patch tried in this run: each is tried once
    asked = [1]  # the proposer's rounds so far: `candidates` asked the first

    def plan(keepers: list[Variant], tried: set[str]) -> list[Variant]:
        if not keepers:
            return first_plan
        rules = plan_for_target(target, baseline, roofline.roofline, roofline.achieved, keepers=keepers, tried=tried,
                                tried_patches=frozenset(tried_patches), history=history)
        recipes = offered_recipes(class_recipes(store, klass, target), keepers, tried,
                                  has_tree=target.framework_tree is not None) if klass else []
        if rounds is None or asked[0] >= rounds.settings.max_rounds:
            return recipes + rules
        asked[0] += 1
        return recipes + propose(rounds, asked[0], trials=history, keepers=keepers, tried=tried) + rules

    trees = TrialTrees(baseline.run_tree, str(package_prefix(engine_for(target.engine))))
    launch_spec = trees.spec_maker(target, baseline.spec)

    def settle(record: TrialRecord) -> None:
        mark_if_missed(store, record, name, context.run.run_id)
        history.append(record)
        trees.settle(record)
        tried_patches.update(patch.sha256 for patch in record.variant.patches)

    ledger = StoreLedger(context, store, key, settle)
    deadline = time.monotonic() + target.time_budget_min * 60 if target.time_budget_min else None
    budget = Budget(max_trials=target.max_trials, target_gain_pct=target.target_gain_pct, deadline_s=deadline)
    gate = LaunchGate(host, target.accuracy_check(), step_dir(host, name, context.run.run_id, "accuracy"),
                      launch_spec, context.log, baseline_answers=baseline.gate_answers)
    noise_key, prior = _launch_noise_prior(context, store, target, baseline)
    checks = Checks(admit=trees.admit, gate=gate.judge_variant,
                    review=(lambda keepers, variant: critic.review(history, keepers, variant,
                                                                   trees.patched_files(keepers, variant)))
                    if critic else None,
                    slo=SloCheck(target.slo, baseline.measurement.latency, target.objective) if target.slo else None,
                    skip=slo_skip(target, roofline.roofline),
                    more=continuation_for_target(target, baseline, roofline.roofline, roofline.achieved))
    result = climb_parallel(repeat_values(baseline.measurement, target.objective), baseline.measuring_s, budget, plan,
                            _measurer(context, target, host, bench, store, baseline, launch_spec, gate), ledger,
                            slots=slots, checks=checks, prior=prior)
    trees.rest()
    store.record_launch_noise(noise_key=noise_key, target=name, run_id=context.run.run_id,
                              launch_means=launch_means(result.evidence))
    record_stop(context, store, result.stop_reason, f"{len(result.trials)} trial(s), {len(result.keepers)} kept, "
                f"running gain {result.best_gain_pct():+.2f}%")
    return TrialsResult(climb=result, baseline_mean=baseline.measurement.output_throughput, context_key=key,
                        tree_commit=trees.head(), patch_commits=trees.commits,
                        launch_noise_dof=prior.dof if prior else 0, recipe_class=klass)


def _measurer(context, target: Target, host: Host, bench: BenchmarkClient, store: ResultStore,
              baseline: BaselineResult, launch_spec, gate: LaunchGate):
    """The climb's MeasureFn: one launch of the stack (plus the variant), as a TrialMeasurement.

    An accuracy-risky variant's launch is asked the gate's prompts after its measured rounds,
    so a KEEP's gate need not launch it again."""
    name, limit = context.partition_key, overtime_limit_s(baseline.measuring_s)

    def measure(keepers: list[Variant], variant: Variant | None) -> TrialMeasurement:
        # variant None: the running best launched again beside a variant under review, or
        # the new stack's rebench after a KEEP
        changes = launched_changes(keepers, variant)
        fingerprint = trial_fingerprint(changes[:-1], changes[-1]) if changes else None
        kind = "trial" if variant is not None else "best_relaunch"
        folder = step_dir(host, name, context.run.run_id, f"{kind}-{fingerprint or 'baseline'}-{time.time_ns()}")
        risky = variant is not None and variant.accuracy_risky and fingerprint is not None
        try:
            with launch_spec(keepers, variant) as spec:  # its tree held until its server is gone
                measured = run_measurement(host=host, bench=bench, store=store, target=name, kind=kind, spec=spec,
                                           contract=baseline.contract, run_dir=folder, run_id=context.run.run_id,
                                           context_key=baseline.context_key, fingerprint=fingerprint,
                                           overtime_s=limit, after_rounds=gate.ask_on(fingerprint) if risky else None)
        except ServerError as exc:
            if exc.error_class == "environment_unavailable":  # the host, not the variant: never a failed trial
                raise dg.Failure(description=f"environment_unavailable: {exc}",
                                 metadata={"stop_reason": "environment_unavailable"}) from exc
            return TrialMeasurement(error_class=exc.error_class, error=str(exc), argv=exc.argv, env=spec.env)
        except MeasurementOvertime as exc:
            return TrialMeasurement(error_class=OVERTIME, error=str(exc), measuring_s=exc.measuring_s,
                                    argv=exc.argv, env=spec.env)
        return measured.as_trial_launch(spec.env)

    return measure


def _observe_trial(context, record: TrialRecord) -> None:
    """A finished trial in the run log and as an observation of `trials`, its secrets `<redacted>`."""
    secrets = run_secrets(record.env, record.argv)
    context.log.info("trial %d %s: %s (%s)%s", record.index, record.name, record.outcome,
                     secrets.text(record.decision.reason), ", replayed from the ledger" if record.replayed else "")
    variant = record.variant
    metadata = secrets.value({
        "trial": record.index, "name": record.name, "fingerprint": record.fingerprint,
        "outcome": record.outcome, "reason": record.decision.reason, "replayed": record.replayed,
        "provenance": variant.trial_provenance(), "rule": variant.rule or "",
        "diagnosis": variant.diagnosis or "", "plan_reason": variant.reason, "critic": critic_text(record) or "",
        **({"llm_verdict": variant.llm.model_dump(mode="json", exclude={"patch"})} if variant.llm else {}),
        "gain_pct": rounded(record.decision.gain_pct, "%") if record.decision.gain_pct is not None else float("nan"),
    })
    if "llm_verdict" in metadata:
        metadata["llm_verdict"] = dg.MetadataValue.json(metadata["llm_verdict"])
    context.log_event(dg.AssetObservation(asset_key="trials", partition=context.partition_key, metadata=metadata))


def _launch_noise_prior(context, store: ResultStore, target: Target, baseline: BaselineResult):
    """(the key earlier runs' launch noise is kept under, the prior they give, or None)."""
    noise_key = target_noise_key(target, baseline.framework_version)
    prior = prior_from(store.launch_noise_history(noise_key, HISTORY_MAX_AGE))
    context.log.info("launch noise from earlier runs: %s", f"{prior.dof} degrees of freedom, sd "
                     f"{100 * prior.variance ** 0.5:.1f}%" if prior else "none (first looks cannot decide)")
    return noise_key, prior


def target_noise_key(target: Target, framework_version: str) -> str:
    """Host, engine and its identity (a sim's harness flags too: its noise is one of them), model."""
    identity = engine_for(target.engine).noise_identity(framework_version, target.server_args)
    key = launch_noise_key(target.host, target.engine, identity, str(target.model))
    # Goodput counts requests, and spreads otherwise than tok/s: its launch noise is its own.
    return key if target.objective == "throughput" else f"{key}|{target.objective}"
