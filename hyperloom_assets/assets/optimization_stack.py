"""The `optimization_stack` asset: the keepers composed, the gain validated.

The climb says what helped on the way; the stack is validated against the baseline on
fresh servers, interleaved (base, stack, base, stack), so the headline gain has its own
interval that the climb's selection cannot inflate.
"""

import shlex
import statistics
from collections.abc import Iterator

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.assets.checks import STACK_CHECKS, check_specs, validated_gain_interval_excludes_zero
from hyperloom_assets.assets.stops import recorded_stops
from hyperloom_assets.core.decisions.rule import validated_gain
from hyperloom_assets.core.measurement.stats import Launches, repeats_of
from hyperloom_assets.core.planning.stack import composition, final_command, stack_spec
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.releases.run import ReleaseCheck, stack_verdict
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.results import AcceptedPatches, BaselineResult, StackResult, TrialsResult
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.measure import run_measurement
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.resources.trees.workspace import served_at

VALIDATION_PAIRS = 2


def validate_stack(context, target, host, bench, store, baseline: BaselineResult, keepers: list[Variant],
                   label_prefix: str = "validate", tree_commit: str | None = None):
    """Base, stack, base, stack on fresh servers; returns each side's launches and the stack's argv.

    A tree target serves the base at the run's base commit and the stack at `tree_commit`.
    """
    run_tree = baseline.run_tree
    base_spec, top_spec = baseline.spec, stack_spec(target, keepers, baseline.spec)
    base_commit = run_tree.base_commit if run_tree else None
    commits = {"base": base_commit, "stack": tree_commit or base_commit}
    base: Launches = []
    top: Launches = []
    top_argv: list[str] = []
    for pair in range(1, VALIDATION_PAIRS + 1):
        context.log.info("%s: pair %d of %d, the baseline then the stack, each on a fresh server", label_prefix,
                         pair, VALIDATION_PAIRS)
        for label, spec, launches in (("base", base_spec, base), ("stack", top_spec, top)):
            spec = spec.model_copy(update={"framework_tree": served_at(run_tree, commits[label])})
            folder = step_dir(host, context.partition_key, context.run.run_id, f"{label_prefix}-{pair}-{label}")
            measured = run_measurement(host=host, bench=bench, store=store, target=context.partition_key,
                                       kind="validation", spec=spec, contract=baseline.contract, run_dir=folder,
                                       run_id=context.run.run_id, context_key=baseline.context_key)
            launches.append(measured.measurement.repeats_throughputs())
            if label == "stack":
                top_argv = measured.launch.argv
            context.log.info("%s pair %d %s: %.1f output tok/s", label_prefix, pair, label,
                             measured.measurement.output_throughput)
    return base, top, top_argv


def release_check(context, target, host, bench, store, baseline: BaselineResult,
                  others: list[Launches]) -> ReleaseCheck | None:
    """On a release run: does the stack validated before still hold on the new release?"""
    release = baseline.release
    if release is None or not release.previous_stack or not release.previous_stack["keepers"]:
        return None
    previous = [Variant.model_validate(v) for v in release.previous_stack["keepers"]]
    base, top, _ = validate_stack(context, target, host, bench, store, baseline, previous, "release-check")
    gain, low, high = validated_gain(top, base, others)
    before = float(release.previous_stack["result"]["validated_gain_pct"])
    holds, sentence = stack_verdict(before, gain, low, high)
    (context.log.info if holds else context.log.warning)("%s==%s: %s", release.package, release.version, sentence)
    return ReleaseCheck(release=f"{release.package}=={release.version}", holds=holds, summary=sentence,
                        gain_pct=gain, ci_low=low, ci_high=high, previous_gain_pct=before)


def stack_result(target, baseline: BaselineResult, trials: TrialsResult, accepted: AcceptedPatches,
                 base: Launches, top: Launches, top_argv: list[str]) -> StackResult:
    keepers = accepted.keepers
    stack = composition(target, keepers)
    validated = bool(keepers)
    if validated:
        gain, low, high = validated_gain(top, base, list(trials.climb.evidence.values()))
        final = statistics.fmean(repeats_of(top))
    else:
        gain = low = high = 0.0
        final = baseline.measurement.output_throughput
        top_argv = baseline.launch.argv
    return StackResult(keepers=keepers, conflicts=[c.describe() for c in stack.conflicts],
                       final_argv=final_command(target, top_argv), launch_argv=top_argv, final_env=stack.env,
                       validated=validated, base_launches=base, stack_launches=top, final_output_throughput=final,
                       validated_gain_pct=gain, validated_gain_ci_low=low, validated_gain_ci_high=high,
                       stop_reason=trials.climb.stop_reason, tree_commit=accepted.tree_commit,
                       patches=[p.name for p in accepted.patches])


def build_stack_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="exploit",
              dagster_type=StackResult, check_specs=check_specs("optimization_stack", STACK_CHECKS, partitions),
              description="The keepers composed; the gain validated interleaved on fresh servers.")
    def optimization_stack(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet,
                           bench: BenchmarkClient, store: ResultStore, baseline: BaselineResult,
                           trials: TrialsResult, accepted_patches: AcceptedPatches,
                           ) -> Iterator[dg.Output | dg.AssetCheckResult]:
        target = catalog.run_target(context.partition_key, context.run.run_id, store)
        host = hosts.for_target(target)
        base, top, argv = [], [], []
        with recorded_stops(context, store, "optimization_stack"):
            if accepted_patches.keepers:
                base, top, argv = validate_stack(context, target, host, bench, store, baseline, accepted_patches.keepers,
                                                 tree_commit=accepted_patches.tree_commit)
            result = stack_result(target, baseline, trials, accepted_patches, base, top, argv)
            result.release_check = release_check(context, target, host, bench, store, baseline,
                                                 list(trials.climb.evidence.values()))
        store.record_stack(target=context.partition_key, context_key=baseline.context_key, run_id=context.run.run_id,
                           keepers=[k.model_dump(mode="json") for k in result.keepers],
                           result=result.model_dump(mode="json", exclude={"keepers"}))
        yield dg.Output(result, metadata={
            "final_output_throughput": rounded(result.final_output_throughput, "tok/s"),
            "validated_gain_pct": rounded(result.validated_gain_pct, "%"),
            "validated_gain_ci_low": rounded(result.validated_gain_ci_low, "%"),
            "validated_gain_ci_high": rounded(result.validated_gain_ci_high, "%"), "validated": result.validated,
            "final_argv": dg.MetadataValue.text(shlex.join(result.final_argv)),
            "final_env": dg.MetadataValue.json(result.final_env), "stop_reason": result.stop_reason,
            "conflicts": dg.MetadataValue.json(result.conflicts),
            "tree_commit": dg.MetadataValue.text(result.tree_commit or "none (no framework_tree)"),
            "patches": dg.MetadataValue.json(result.patches),
        })
        yield validated_gain_interval_excludes_zero(result)

    return optimization_stack
