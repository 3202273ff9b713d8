"""The `optimization_stack` asset: the keepers composed, the gain validated.

The climb says what helped on the way; the stack is validated against the baseline on
fresh servers, in pairs: interleaved (base, stack, base, stack) on one slot, each pair's
two sides at once on two slots where the run holds them. The headline gain has its own
interval that the climb's selection cannot inflate. The last pair's servers, once their
validation rounds are done, also climb the concurrency ladder, so `concurrency_sweep`
needs no launch of its own in the run that validated. The same keepers already validated
in the same context are replayed from the store, as trials are, with no launch at all.
"""

import statistics
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.assets.capacity import capacity_after_rounds, capacity_result, measure_capacity
from hyperloom_assets.assets.checks import STACK_CHECKS, check_specs, validated_gain_interval_excludes_zero
from hyperloom_assets.assets.metadata import argv_text, run_secrets
from hyperloom_assets.assets.recipes import file_keepers
from hyperloom_assets.assets.stops import recorded_stops
from hyperloom_assets.core.config.targets import Objective, Target
from hyperloom_assets.core.decisions.rule import validated_gain
from hyperloom_assets.core.measurement.capacity import Capacity, CapacityAtSlo
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.objective import goodputs_if_measured, mean_goodput
from hyperloom_assets.core.measurement.serving import ServerError
from hyperloom_assets.core.measurement.slo_verdict import slo_verdict
from hyperloom_assets.core.measurement.stats import Launches, repeats_of
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.fingerprints import BASELINE_FINGERPRINT, config_fingerprint
from hyperloom_assets.core.planning.stack import composition, final_command, stack_spec
from hyperloom_assets.core.planning.validation_plan import ValidationLaunch, validation_waves
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.releases.run import ReleaseCheck, stack_verdict
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.report.tables import sweep_rows
from hyperloom_assets.core.results import AcceptedPatches, BaselineResult, StackResult, TrialsResult
from hyperloom_assets.resources.bench.client import BenchInputError, BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.measure import (MeasuredConfig, MeasurementOvertime, run_measurement, run_on_server,
                                                sweep_rungs)
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.resources.trees.holds import TreeHolds
from hyperloom_assets.resources.trees.workspace import served_at

VALIDATION_PAIRS = 2


class Validation(Strict):
    """Each side's launches, the stack's argv and, when asked, the last pair's sweep rows."""
    base: Launches = []  # output tok/s, launch by launch
    top: Launches = []
    base_goodputs: Launches = []  # requests/s within the SLO (objective.decision_goodput), where counted
    top_goodputs: Launches = []
    top_argv: list[str] = []
    top_latency: list[Latency | None] = []  # each stack launch's request latency, for the SLO verdict
    sweep_rows: list[dict] | None = None
    capacity: dict[str, Capacity | None] = {}  # "baseline"/"stack" -> its capacity at the SLO (an SLO target's)


def sweep_after_rounds(context, host: Host, bench: BenchmarkClient, store: ResultStore,
                       baseline: BaselineResult, spec, folder, config: str,
                       ladder: list[int], rows: list[dict], failed: list[str], fingerprint: str | None = None):
    """The sweep on a validation server after its rounds; a failed rung leaves the sweep to its own asset."""
    def sweep(launch) -> None:
        try:
            results = sweep_rungs(host=host, bench=bench, store=store, target=context.partition_key, spec=spec,
                                  contract=baseline.contract, rungs=ladder, launch=launch,
                                  run_dir=folder / f"sweep-{config}", run_id=context.run.run_id,
                                  context_key=baseline.context_key, fingerprint=fingerprint)
        except (ServerError, BenchInputError, MeasurementOvertime) as exc:
            context.log.warning("sweep on the validation's %s server failed, concurrency_sweep will launch its own: %s",
                                config, str(exc).splitlines()[0])
            failed.append(config)
            return
        rows.extend(sweep_rows(config, results))
    return sweep


def validate_stack(context, target: Target, slots: list[Host], bench: BenchmarkClient, store: ResultStore,
                   baseline: BaselineResult, keepers: list[Variant],
                   label_prefix: str = "validate", tree_commit: str | None = None,
                   sweep_ladder: list[int] | None = None, find_capacity: bool = False) -> Validation:
    """Base and stack on fresh servers, pair by pair (core/planning/validation_plan.py: at once on two
    of the run's `slots` where it holds two); the last pair sweeps `sweep_ladder` after its rounds,
    then (`find_capacity`, an SLO target's) finds each side's capacity within the SLO.

    A tree target serves the base at the run's base commit and the stack at `tree_commit`: from
    one checkout, so its two sides at two commits take turns.
    """
    run_tree = baseline.run_tree
    base_commit = run_tree.base_commit if run_tree else None
    commits = {"base": base_commit, "stack": tree_commit or base_commit}
    specs = {"base": baseline.spec, "stack": stack_spec(target, keepers, baseline.spec)}
    # Every row a side's server measures names its config, so the report labels it by what it ran.
    fingerprints = {"base": BASELINE_FINGERPRINT, "stack": config_fingerprint(keepers)}
    done = Validation()
    rows: dict[str, list[dict]] = {"baseline": [], "stack": []}
    failed: list[str] = []  # the configs whose sweep failed: then none of the rows stand

    holds = TreeHolds(run_tree)  # the two sides at one commit share its checkout

    def measure(planned: ValidationLaunch) -> MeasuredConfig:
        host, config = slots[planned.slot], "baseline" if planned.side == "base" else "stack"
        folder = step_dir(host, context.partition_key, context.run.run_id,
                          f"{label_prefix}-{planned.pair}-{planned.side}")
        with holds.held(commits[planned.side]) as tree:
            spec = specs[planned.side].model_copy(update={"framework_tree": tree})
            after: list = []  # what the last pair's servers do once their rounds are over
            if sweep_ladder and planned.pair == VALIDATION_PAIRS:
                after.append(sweep_after_rounds(context, host, bench, store, baseline, spec, folder, config,
                                                sweep_ladder, rows[config], failed, fingerprints[planned.side]))
            if find_capacity and planned.pair == VALIDATION_PAIRS:  # after the sweep, on the same server
                after.append(capacity_after_rounds(context, target, host, bench, store, baseline, spec, folder,
                                                   config, done.capacity, fingerprints[planned.side]))
            return run_measurement(host=host, bench=bench, store=store, target=context.partition_key,
                                   kind="validation", spec=spec, contract=baseline.contract, run_dir=folder,
                                   run_id=context.run.run_id, context_key=baseline.context_key,
                                   fingerprint=fingerprints[planned.side],
                                   after_rounds=_in_turn(after) if after else None)

    waves = validation_waves(VALIDATION_PAIRS, len(slots), together=commits["base"] == commits["stack"])
    for wave in waves:
        if wave[0].side == "base":
            context.log.info("%s: pair %d of %d, %s, each on a fresh server", label_prefix, wave[0].pair,
                             VALIDATION_PAIRS, "the baseline then the stack" if len(wave) == 1
                             else f"{len(wave) // 2} pair(s) at once, a side per slot")
        for planned, measured in zip(wave, _at_once(measure, wave)):
            _record(done, planned.side, measured)
            context.log.info("%s pair %d %s: %.1f output tok/s%s", label_prefix, planned.pair, planned.side,
                             measured.measurement.output_throughput,
                             f" on {measured.launch.slot_text()}" if measured.launch.slot_text() else "")
    if sweep_ladder and not failed:
        done.sweep_rows = rows["baseline"] + rows["stack"]
    return done


def _at_once(measure, wave: list[ValidationLaunch]) -> list[MeasuredConfig]:
    """Each launch of the wave on its own slot at the same time; every one ends before an error is raised."""
    if len(wave) == 1:
        return [measure(wave[0])]
    with ThreadPoolExecutor(max_workers=len(wave), thread_name_prefix="validate") as pool:
        futures = [pool.submit(measure, planned) for planned in wave]
    return [future.result() for future in futures]


def _record(done: Validation, side: str, measured: MeasuredConfig) -> None:
    launches, goodputs = (done.base, done.base_goodputs) if side == "base" else (done.top, done.top_goodputs)
    launches.append(measured.measurement.repeats_throughputs())
    if counted := goodputs_if_measured(measured.measurement):
        goodputs.append(counted)
    if side == "stack":
        done.top_argv = measured.launch.argv
        done.top_latency.append(measured.measurement.latency)


def _capacity_asked(target: Target) -> bool:
    return target.slo is not None and target.slo.capacity_probes > 0


def _in_turn(steps: list):
    def run(launch) -> None:
        for step in steps:
            step(launch)
    return run


def baseline_capacity(context, target: Target, host: Host, bench: BenchmarkClient, store: ResultStore,
                      baseline: BaselineResult) -> dict[str, Capacity | None]:
    """Nothing kept: one launch of the baseline for its capacity, which is the stack's too."""
    folder = step_dir(host, context.partition_key, context.run.run_id, "capacity-baseline")
    run_tree = baseline.run_tree
    spec = baseline.spec.model_copy(update={"framework_tree": served_at(run_tree, run_tree.base_commit if run_tree
                                                                        else None)})
    found = run_on_server(host, spec, folder, lambda launch: measure_capacity(
        context, target, host, bench, store, baseline, spec, launch, folder, "baseline", BASELINE_FINGERPRINT))
    return {"baseline": found, "stack": found}


def replayed_validation(store: ResultStore, name: str, baseline: BaselineResult, accepted: AcceptedPatches,
                        ladder: list[int]) -> tuple[Validation, str] | None:
    """The same keepers validated before in the same context (docs/design.md, invariant 1): (its launches, its run).

    A run that replays its whole climb from the ledger would otherwise launch the four
    validation servers again to measure what the store already holds.
    """
    stored = store.latest_stack(name)
    if stored is None or stored["context_key"] != baseline.context_key:
        return None
    result = stored["result"]
    same = stored["keepers"] == [k.model_dump(mode="json") for k in accepted.keepers]
    if not (same and result.get("validated") and result.get("tree_commit") == accepted.tree_commit):
        return None
    rows = result.get("sweep_rows") if result.get("sweep_ladder") == ladder else None
    validation = Validation(base=result["base_launches"], top=result["stack_launches"],
                            base_goodputs=result.get("base_goodputs", []), top_goodputs=result.get("stack_goodputs", []),
                            top_argv=result["launch_argv"],
                            top_latency=result.get("stack_latency", []), sweep_rows=rows,
                            capacity=_stored_capacity(result.get("capacity_at_slo")))
    return validation, result.get("validated_in_run") or stored["run_id"]


def _stored_capacity(stored: dict | None) -> dict[str, Capacity | None]:
    if not stored:
        return {}
    known = CapacityAtSlo.model_validate(stored)
    return {side: Capacity(load=load, unit=known.unit, probes=probes, at_ceiling=side in known.at_ceiling,
                           broke_at=broke)
            for side, load, probes, broke in (("baseline", known.baseline, known.baseline_probes, known.baseline_broke_at),
                                              ("stack", known.stack, known.stack_probes, known.stack_broke_at))
            if load is not None}


def release_check(context, target: Target, slots: list[Host], bench: BenchmarkClient, store: ResultStore,
                  baseline: BaselineResult,
                  others: list[Launches]) -> ReleaseCheck | None:
    """On a release run: does the stack validated before still hold on the new release?"""
    release = baseline.release
    if release is None or not release.previous_stack or not release.previous_stack["keepers"]:
        return None
    previous = [Variant.model_validate(v) for v in release.previous_stack["keepers"]]
    checked = validate_stack(context, target, slots, bench, store, baseline, previous, "release-check")
    gain, low, high = validated_gain(*compared(checked, target.objective), others)
    earlier = release.previous_stack["result"]
    before, before_low, before_high = (float(earlier[key]) for key in
                                       ("validated_gain_pct", "validated_gain_ci_low", "validated_gain_ci_high"))
    holds, sentence = stack_verdict((before, before_low, before_high), gain, low, high)
    (context.log.info if holds else context.log.warning)("%s==%s: %s", release.package, release.version, sentence)
    return ReleaseCheck(release=f"{release.package}=={release.version}", holds=holds, summary=sentence,
                        gain_pct=gain, ci_low=low, ci_high=high, previous_gain_pct=before,
                        previous_ci_low=before_low, previous_ci_high=before_high)


def stack_result(target: Target, baseline: BaselineResult, trials: TrialsResult, accepted: AcceptedPatches,
                 validation: Validation, run_id: str, ladder: list[int], validated_in_run: str | None) -> StackResult:
    keepers = accepted.keepers
    base, top, top_argv = validation.base, validation.top, validation.top_argv
    stack = composition(target, keepers)
    validated = bool(keepers)
    latencies = validation.top_latency
    if validated:
        gain, low, high = validated_gain(*compared(validation, target.objective), list(trials.climb.evidence.values()))
        final = statistics.fmean(repeats_of(top))
        final_goodput = statistics.fmean(repeats_of(validation.top_goodputs)) if validation.top_goodputs else None
    else:
        gain = low = high = 0.0
        final = baseline.measurement.output_throughput
        final_goodput = mean_goodput(baseline.measurement)
        top_argv = baseline.launch.argv
        latencies = [baseline.measurement.latency]  # nothing kept: the stack is the baseline's config
    return StackResult(keepers=keepers, conflicts=[c.describe() for c in stack.conflicts],
                       final_argv=final_command(target, top_argv), launch_argv=top_argv, final_env=stack.env,
                       validated=validated, base_launches=base, stack_launches=top, final_output_throughput=final,
                       validated_gain_pct=gain, validated_gain_ci_low=low, validated_gain_ci_high=high,
                       stop_reason=trials.climb.stop_reason, tree_commit=accepted.tree_commit,
                       patches=[p.name for p in accepted.patches], run_id=run_id,
                       validated_in_run=validated_in_run if validated else None,
                       sweep_ladder=ladder if validation.sweep_rows is not None else None,
                       sweep_rows=validation.sweep_rows, stack_latency=latencies,
                       slo=slo_verdict(target.slo, latencies) if target.slo else None,
                       capacity_at_slo=capacity_result(target, validation.capacity.get("baseline"),
                                                       validation.capacity.get("stack"))
                       if _capacity_asked(target) else None,
                       objective=target.objective, base_goodputs=validation.base_goodputs,
                       stack_goodputs=validation.top_goodputs, final_goodput=final_goodput)


def compared(validation: Validation, objective: Objective) -> tuple[Launches, Launches]:
    """(the stack's launches, the baseline's) in the objective's values: what the validated gain compares."""
    if objective == "goodput":
        if not validation.top_goodputs or len(validation.top_goodputs) != len(validation.top):
            raise ValueError("the validation's launches counted no goodput, so the goodput objective cannot be judged")
        return validation.top_goodputs, validation.base_goodputs
    return validation.top, validation.base


def build_stack_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="exploit",
              dagster_type=StackResult, check_specs=check_specs("optimization_stack", STACK_CHECKS, partitions),
              description="The keepers composed; the gain validated interleaved on fresh servers.")
    def optimization_stack(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet,
                           bench: BenchmarkClient, store: ResultStore, baseline: BaselineResult,
                           trials: TrialsResult, accepted_patches: AcceptedPatches,
                           ) -> Iterator[dg.Output | dg.AssetCheckResult]:
        target = catalog.run_target(context.partition_key, context.run.run_id, store)
        slots = hosts.slot_hosts(target)  # the validation's pairs serve both sides at once on two of them
        validation, validated_in = Validation(), context.run.run_id
        ladder = target.sweep_ladder()
        replay = replayed_validation(store, context.partition_key, baseline, accepted_patches, ladder)
        with recorded_stops(context, store, "optimization_stack"):
            if replay is not None:
                validation, validated_in = replay
                context.log.info("validation replayed from the ledger: these keepers were validated in this "
                                 "context by run %s", validated_in)
            elif accepted_patches.keepers:
                validation = validate_stack(context, target, slots, bench, store, baseline, accepted_patches.keepers,
                                            tree_commit=accepted_patches.tree_commit, sweep_ladder=ladder,
                                            find_capacity=_capacity_asked(target))
            elif _capacity_asked(target):
                validation.capacity = baseline_capacity(context, target, slots[0], bench, store, baseline)
            result = stack_result(target, baseline, trials, accepted_patches, validation, context.run.run_id, ladder,
                                  validated_in)
            result.release_check = release_check(context, target, slots, bench, store, baseline,
                                                 list(trials.climb.evidence.values()))
        store.record_stack(target=context.partition_key, context_key=baseline.context_key, run_id=context.run.run_id,
                           keepers=[k.model_dump(mode="json") for k in result.keepers],
                           result=result.model_dump(mode="json", exclude={"keepers"}))
        filed = file_keepers(store, trials, result, context.partition_key, context.run.run_id)
        if filed:
            context.log.info("recipe memory: %d keeper(s) filed for %s", len(filed), filed[0].klass.text())
        secrets = run_secrets(result.final_env, result.launch_argv)
        yield dg.Output(result, metadata={
            "final_output_throughput": rounded(result.final_output_throughput, "tok/s"),
            "validated_gain_pct": rounded(result.validated_gain_pct, "%"),
            "validated_gain_ci_low": rounded(result.validated_gain_ci_low, "%"),
            "validated_gain_ci_high": rounded(result.validated_gain_ci_high, "%"), "validated": result.validated,
            "final_argv": argv_text(result.final_argv, secrets),
            "final_env": dg.MetadataValue.json(secrets.env(result.final_env)), "stop_reason": result.stop_reason,
            "conflicts": dg.MetadataValue.json(result.conflicts),
            "tree_commit": dg.MetadataValue.text(result.tree_commit or "none (no framework_tree)"),
            "patches": dg.MetadataValue.json(result.patches),
            "validated_in_run": dg.MetadataValue.text(result.validated_in_run or "none (nothing to validate)"),
            "recipes_filed": len(filed), "objective": result.objective,
            **({"final_goodput": rounded(result.final_goodput, "req/s")} if result.final_goodput is not None else {}),
            **({"slo": dg.MetadataValue.json(result.slo.model_dump(mode="json"))} if result.slo else {}),
            **({"capacity_at_slo": dg.MetadataValue.json(result.capacity_at_slo.model_dump(mode="json"))}
               if result.capacity_at_slo else {}),
        })
        yield validated_gain_interval_excludes_zero(result)

    return optimization_stack
