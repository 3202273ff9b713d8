"""The `baseline` asset: one launch, a discarded warm-up, N repeats, a profile, teardown, guards.

Everything that can be checked before a launch is (target file, trace, context length,
a retry identical to a run that gave up); the prefix-cache guard reads the engine's own
launch account before a single request is measured. A failed attempt is retried on a
fresh server, at most three in a row (guards.py says which failures stop at once).
"""

from collections.abc import Iterator

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.assets.baseline_beside import launched_beside
from hyperloom_assets.assets.checks import (
    BASELINE_CHECKS,
    baseline_client_not_saturated,
    baseline_converged,
    check_specs,
)
from hyperloom_assets.assets.metadata import argv_text, run_secrets
from hyperloom_assets.assets.stops import baseline_failure, recorded_stops
from hyperloom_assets.assets.workload_contract import say_slo_prompts, workload_contract
from hyperloom_assets.core.accuracy.agreement import PromptOutput
from hyperloom_assets.core.config.identity import server_config_version
from hyperloom_assets.core.config.targets import Target, TargetSlo
from hyperloom_assets.core.decisions import guards
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.core.measurement.slo_verdict import slo_verdict
from hyperloom_assets.core.patches.run_tree import RunTree
from hyperloom_assets.core.planning.fingerprints import context_key, workload_signature
from hyperloom_assets.core.releases.run import ReleaseRun, release_from_tags
from hyperloom_assets.core.report.precision import Unit, rounded
from hyperloom_assets.core.results import BaselineResult, ProfileResult
from hyperloom_assets.resources.accuracy.launch_gate import answers_on
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.engine_origin import check_tree_imports
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.host_side import server_env
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.hosts.space_check import space_problems
from hyperloom_assets.resources.measure import MeasuredConfig, MeasurementOvertime, run_measurement
from hyperloom_assets.resources.profiling import ServerProfile
from hyperloom_assets.resources.releases.envs import EnvironmentUnavailable, ReleaseEnvironments
from hyperloom_assets.resources.releases.identity import framework_identity
from hyperloom_assets.resources.releases.ledger import ReleaseLedger
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.resources.trees.git import GitError
from hyperloom_assets.resources.trees.workspace import TreeRefused, open_run_tree


PROFILE, TRIALS = dg.AssetKey("profile"), dg.AssetKey("trials")

def check_search_space(target: Target, host: Host, release: ReleaseRun | None, file: str) -> None:
    """The target's search_space through the engine's parser that will serve it, before any launch."""
    refused = space_problems(target, host, file, release.python if release else None)
    if refused:
        raise baseline_failure("baseline_failed", "bad target file: " + "; ".join(str(p) for p in refused),
                               problems=[str(p) for p in refused])


def check_not_duplicate(store: ResultStore, name: str, attempt: str) -> None:
    """Refuse a run identical (args, env, engine) to the last run, if that run gave up on its baseline."""
    rows = store.baseline_attempts(name)
    if not rows or rows[-1]["outcome"] == "ok" or rows[-1]["fingerprint"] != attempt:
        return
    last_run = rows[-1]["run_id"]
    outcomes = [row["outcome"] for row in rows if row["run_id"] == last_run]
    if guards.gave_up(outcomes):
        raise baseline_failure("baseline_failed", "dropped as a duplicate: identical args, env and engine to run "
                               f"{last_run}, which gave up on its baseline ({', '.join(outcomes)}); change something first")


def prefix_cache_guard(target: Target):
    def check(launch: LaunchRecord) -> None:
        refusal = guards.prefix_cache_refusal(target.engine, target.server_args, launch.evidence,
                                              target.workload.kind, launch.engine_version)
        if refusal is not None:
            raise ServerError("prefix_cache_off", refusal.message(), argv=launch.argv)
    return check


UNITS: dict[str, Unit] = {
    "output_throughput": "tok/s", "output_throughput_ci_low": "tok/s", "output_throughput_ci_high": "tok/s",
    "request_throughput": "req/s", "ttft_p50_ms": "ms", "ttft_p99_ms": "ms", "tpot_p50_ms": "ms", "itl_p50_ms": "ms",
    "e2el_p50_ms": "ms"}


def baseline_metadata(result: BaselineResult, slo: TargetSlo | None = None) -> dict:
    m = result.measurement
    metadata = {key: rounded(float(getattr(m, key)), unit) for key, unit in UNITS.items()}
    secrets = run_secrets(result.spec.env, result.launch.argv)
    metadata.update(
        completed=float(m.completed), repeats=len(m.repeats),
        launch_evidence=dg.MetadataValue.json(secrets.value(result.launch.evidence or {"record": "unknown"})),
        argv=argv_text(result.launch.argv, secrets), env=dg.MetadataValue.json(secrets.env(result.spec.env)),
        converged=m.converged, client_saturated=m.client_saturated,
        server_log=dg.MetadataValue.path(str(result.launch.log_path)),
        ready_s=rounded(result.launch.ready_s, "s"), context_key=result.context_key,
        cpu_placement=dg.MetadataValue.json(result.launch.cpus.model_dump() if result.launch.cpus
                                            else {"placement": "server and client share every CPU"}),
    )
    predictor = engine_for(result.spec.engine).predictor_of(result.spec.server_args)
    if predictor is not None:  # a stand-in engine: what predicted these numbers
        metadata["predicted_by"] = dg.MetadataValue.text(predictor)
    if result.run_tree is not None:
        metadata.update(engine_path=dg.MetadataValue.text(result.launch.engine_path or "unknown"),
                        framework_tree_commit=dg.MetadataValue.text(result.run_tree.base_commit),
                        framework_tree_branch=dg.MetadataValue.text(result.run_tree.branch),
                        unserved_files=dg.MetadataValue.json(result.run_tree.unserved))
    if m.theoretical_prefix_hit_pct is not None:
        metadata["theoretical_prefix_hit_pct"] = rounded(float(m.theoretical_prefix_hit_pct), "%")
    if m.telemetry is not None:  # the engine's own /metrics over the measured rounds
        metadata["telemetry"] = dg.MetadataValue.json(m.telemetry.model_dump(mode="json"))
    if m.latency is not None:  # per-request percentiles over the launch's measured requests
        metadata["latency"] = dg.MetadataValue.json(m.latency.model_dump(mode="json"))
        metadata["latency_warnings"] = dg.MetadataValue.json(m.latency.warnings())
    if slo is not None:
        metadata["slo"] = dg.MetadataValue.json(slo_verdict(slo, [m.latency]).model_dump(mode="json"))
    return metadata


def prepare_release(tags, name: str, envs: ReleaseEnvironments, store: ResultStore) -> ReleaseRun | None:
    """For a release-triggered run: the release's environment, built if needed."""
    release = release_from_tags(tags)
    if release is None:
        return None
    package, version = release
    try:
        python = envs.python_for(package, version)
    except EnvironmentUnavailable as exc:
        ReleaseLedger(store).record(name, package, version, "environment_unavailable", exc.reason)
        raise baseline_failure("environment_unavailable", str(exc), package=package, version=version) from exc
    return ReleaseRun(package=package, version=version, python=python, previous_stack=store.latest_stack(name))


class BaselineStop(Exception):
    """The baseline gave up: the stop reason, the last failure and how many attempts failed."""

    def __init__(self, stop_reason: str, error: ServerError, failures: int):
        self.stop_reason, self.error, self.failures = stop_reason, error, failures
        super().__init__(str(error))


def profiler_refusal(profile: ServerProfile | None, exc: ServerError) -> str | None:
    """The engine's complaint, when it rejected the profiler's own flags (a release without them)."""
    if profile is None or profile.profiler is None or exc.error_class != "argv_invalid":
        return None
    # argparse's own complaint ("prog: error: unrecognized arguments: ..."), not its usage
    # lines, which name every flag the engine has.
    complaints = [line.strip() for line in exc.log_tail.splitlines() if "error:" in line]
    return next((line for line in complaints if any(flag in line for flag in profile.profiler.flags())), None)


def profile_rides_on_baseline(context, engine: str) -> bool:
    """Does the baseline's server carry the profiler? When this run materializes `profile` and the
    engine's idle profiler is shown to leave the measured rounds alone (Profiler.free_when_idle)."""
    profiler = engine_for(engine).profiler
    if profiler is None or not profiler.free_when_idle:
        return False
    return _materializes(context, PROFILE)


def _materializes(context, asset: dg.AssetKey) -> bool:
    """Does this run materialize `asset` (a `trials` run may need the accuracy gate's reference)?"""
    selected = context.run.asset_selection or context.job_def.asset_layer.selected_asset_keys
    return asset in selected


class _AfterRounds:
    """What the baseline's server is asked once its measured rounds are over: the accuracy
    gate's prompts first (in a run that climbs), then the profile (where it rides along)."""

    def __init__(self, check, profile: ServerProfile | None):
        self.check, self.profile = check, profile
        self.gate_answers: list[PromptOutput] | None = None

    def __call__(self, launch: LaunchRecord) -> None:
        if self.check is not None:
            self.gate_answers = answers_on(self.check, launch)
        if self.profile is not None:
            self.profile.capture(launch)


def _baseline_measurement(**kwargs) -> MeasuredConfig:
    """run_measurement; a baseline past its time limit (the client's own: resources/measure.py) is a
    failed attempt like a server that never got ready, `timeout`, retried on a fresh server."""
    try:
        return run_measurement(**kwargs)
    except MeasurementOvertime as exc:
        raise ServerError("timeout", str(exc), argv=exc.argv) from exc


def attempt_baseline(context, target: Target, spec: ServerSpec, contract: WorkloadContract, host: Host,
                     bench: BenchmarkClient,
                     store: ResultStore, attempt: str, key: str):
    """Measure the baseline, retrying a failed attempt on a fresh server until guards say stop.

    In a run that profiles, on an engine whose idle profiler is shown free, the server carries
    the profiler, idle through the measured rounds and profiled after them, so the profile
    costs no launch of its own. In a run that climbs, the server is asked the accuracy gate's
    prompts after its rounds: the reference a risky keeper is judged against, without a launch.
    Returns the measurement, the profile (None when the run does not profile) and the gate's
    answers (None when the run does not climb); an engine that refuses the profiler's flags is
    measured again without them.
    """
    name, run_id = context.partition_key, context.run.run_id
    failures = 0
    profiling, refused = target.profile and profile_rides_on_baseline(context, spec.engine), None
    check = target.accuracy_check() if _materializes(context, TRIALS) else None
    while True:
        step = "baseline" if failures == 0 else f"baseline-attempt-{failures + 1}"
        folder = step_dir(host, name, run_id, step + ("-unprofiled" if refused else ""))
        profile = ServerProfile(host, bench, spec, contract, folder) if profiling and not refused else None
        after_rounds = _AfterRounds(check, profile)
        try:
            measured = _baseline_measurement(host=host, bench=bench, store=store, target=name, kind="baseline",
                                       spec=profile.launch_spec() if profile else spec, contract=contract,
                                       run_dir=folder, run_id=run_id, context_key=key,
                                       check_launch=prefix_cache_guard(target), after_rounds=after_rounds)
        except ServerError as exc:
            complaint = profiler_refusal(profile, exc)
            if complaint is not None:
                refused = f"the server refused the profiler's flags: {complaint}"
                context.log.warning("baseline: %s; measuring it again without the profiler", refused)
                continue
            said = run_secrets(spec.env, spec.server_args).text(str(exc))  # a log tail may quote a secret
            # A busy or unreachable host says nothing about the config, so it is not an attempt of it.
            if exc.error_class not in ("preflight", "environment_unavailable"):
                failures += 1
                store.record_baseline_attempt(target=name, fingerprint=attempt, outcome=exc.error_class,
                                              detail=said, run_id=run_id)
            stop = guards.after_failure(exc.error_class, failures)
            if stop is None:
                context.log.warning("baseline attempt %d of %d failed (%s); retrying on a fresh server: %s", failures,
                                    guards.MAX_CONSECUTIVE_BASELINE_FAILURES, exc.error_class, said.splitlines()[0])
                continue
            raise BaselineStop(stop, exc, failures) from exc
        store.record_baseline_attempt(target=name, fingerprint=attempt, outcome="ok", run_id=run_id)
        if profile is not None:
            return measured, profile.result(), after_rounds.gate_answers
        if refused is None:
            return measured, None, after_rounds.gate_answers
        return measured, ProfileResult(engine=spec.engine, taken=False, reason=refused,
                                       source=engine_for(spec.engine).profile_source()), after_rounds.gate_answers


def prepare_run_tree(target: Target, name: str, host: Host, spec: ServerSpec) -> RunTree | None:
    """The run's worktree at the operator's HEAD; the tree's engine must import from it, before any launch."""
    if target.framework_tree is None:
        return None
    try:
        run_tree = open_run_tree(target.framework_tree, host.state_path(), name)
        check_tree_imports(engine_for(target.engine), run_tree.worktree, host.python_executable(spec), server_env(spec.engine, spec.env, spec.unset_env))
    except GitError as exc:
        raise baseline_failure("baseline_failed", f"framework_tree {target.framework_tree}: {exc.stderr}") from exc
    except TreeRefused as exc:
        raise baseline_failure("baseline_failed", str(exc)) from exc
    except ServerError as exc:
        raise baseline_failure("baseline_failed", str(exc), error_class=exc.error_class) from exc
    return run_tree


def measure_baseline(context, target: Target, contract: WorkloadContract, host: Host,
                     bench: BenchmarkClient, store: ResultStore,
                     release: ReleaseRun | None, beside: Host | None = None) -> BaselineResult:
    """`beside`: another slot of the run, where the baseline is launched a second time at once
    (baseline_beside.py); None where the run holds one slot or does not climb."""
    name, run_id = context.partition_key, context.run.run_id
    framework_version = release.identity if release else framework_identity(target.engine, target.framework_tree)
    config_version = server_config_version(target)
    attempt = f"{config_version}/{framework_version}"
    check_not_duplicate(store, name, attempt)
    spec = ServerSpec(engine=target.engine, model=target.model, server_args=target.server_args, env=target.env,
                      python=release.python if release else None)
    run_tree = prepare_run_tree(target, name, host, spec)
    if run_tree is not None:
        spec = spec.model_copy(update={"framework_tree": run_tree.worktree})
    signature = workload_signature(contract.workload, target.model, contract.num_prompts, contract.warmups)
    key = context_key(name, signature, framework_version, config_version)
    try:
        with launched_beside(context, beside, bench, store, spec, contract, key):
            measured, profile, gate_answers = attempt_baseline(context, target, spec, contract, host, bench, store,
                                                               attempt, key)
    except BaselineStop as stop:
        said = run_secrets(spec.env, spec.server_args).text(str(stop.error))
        if release is not None:
            ReleaseLedger(store).record(name, release.package, release.version, "failed", said, run_id=run_id)
        attempts = f"after {stop.failures} consecutive failed attempt(s): " if stop.failures > 1 else ""
        raise baseline_failure(stop.stop_reason, attempts + said, error_class=stop.error.error_class,
                               consecutive_failures=stop.failures) from stop.error
    return BaselineResult(target=name, spec=spec, measurement=measured.measurement, launch=measured.launch,
                          contract=contract, measurement_id=measured.measurement_id, measuring_s=measured.measuring_s,
                          framework_version=framework_version, config_version=config_version, context_key=key,
                          run_id=run_id, release=release, run_tree=run_tree, profile=profile,
                          gate_answers=gate_answers)


def build_baseline_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="baseline",
              deps=["framework_tree", "server_config"], dagster_type=BaselineResult,
              check_specs=check_specs("baseline", BASELINE_CHECKS, partitions),
              description="One launch, a discarded warm-up, N repeats: the anchor and the workload contract.")
    def baseline(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet, bench: BenchmarkClient,
                 store: ResultStore, envs: ReleaseEnvironments) -> Iterator[dg.Output | dg.AssetCheckResult]:
        target = catalog.run_target(context.partition_key, context.run.run_id, store)
        host = hosts.for_target(target)
        with recorded_stops(context, store, "baseline"):
            contract = workload_contract(target)  # bad input fails before a release env or a server
            if target.slo is not None:
                say_slo_prompts(context.log, target, contract)
            release = prepare_release(context.run.tags, context.partition_key, envs, store)
            check_search_space(target, host, release, str(catalog.path() / f"{context.partition_key}.yaml"))
            slots = hosts.slot_hosts(target)
            beside = slots[1] if len(slots) > 1 and _materializes(context, TRIALS) else None
            result = measure_baseline(context, target, contract, host, bench, store, release, beside)
        context.log.info("baseline %s: %.1f output tok/s [%.1f, %.1f]", result.target, result.measurement.output_throughput,
                         result.measurement.output_throughput_ci_low, result.measurement.output_throughput_ci_high)
        yield dg.Output(result, metadata=baseline_metadata(result, target.slo))
        yield baseline_converged(result.measurement)
        yield baseline_client_not_saturated(result.measurement)

    return baseline
