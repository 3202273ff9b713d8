"""`target_change_sensor`: a new commit, an uncommitted edit or a target-file edit re-runs that target.

Each tick, for every target file: the `framework_tree` and `server_config` data versions
(the same functions `baseline` records its identity with), recorded as observations of
those external assets, this sensor being the only thing that observes them, so the UI
shows the target's `baseline` and everything downstream stale; and one `optimize_job`
run for the target's partition when their combined key changed since the last tick.

The first sight of a target (sensor just turned on, cursor reset, file just became a
partition) records its observations and its key but asks for no run: turning the sensor
on must not launch every target's optimization on a shared host. Whether such a target
is stale is visible in the UI (its baseline's inputs differ from the observed versions).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from hyperloom_assets.assets.observations import FRAMEWORK_TREE, SERVER_CONFIG
from hyperloom_assets.core.config.identity import server_config_version
from hyperloom_assets.core.config.names import SAFE_NAME_RULE, is_safe_name
from hyperloom_assets.core.config.targets import parse_target, target_name
from hyperloom_assets.core.hashing import text_hash
from hyperloom_assets.core.releases.run import TRIGGER_TAG
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.releases.identity import framework_identity

SENSOR_NAME = "target_change_sensor"
POLL_SECONDS_ENV = "HYPERLOOM_TARGET_POLL_SECONDS"
DEFAULT_POLL_SECONDS = 60


def poll_seconds(env_name: str, default: int) -> int:
    """A tick interval from the environment; a bad value falls back to the default."""
    try:
        return max(1, int(os.environ.get(env_name, default)))
    except ValueError:
        return default


def change_key(framework_version: str, server_version: str) -> str:
    return text_hash(f"{framework_version}|{server_version}")


def read_cursor(text: str | None) -> dict[str, dict]:
    """Per target: key, both versions and how many changes have asked for a run."""
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    targets = data.get("targets") if isinstance(data, dict) else None
    return {name: entry for name, entry in (targets or {}).items() if isinstance(entry, dict)}


def observations(name: str, framework_version: str, server_version: str) -> list[dg.AssetObservation]:
    return [
        dg.AssetObservation(asset_key=FRAMEWORK_TREE, partition=name, tags={DATA_VERSION_TAG: framework_version}),
        dg.AssetObservation(asset_key=SERVER_CONFIG, partition=name, tags={DATA_VERSION_TAG: server_version}),
    ]


def list_target_files(folder: Path) -> tuple[list[Path], str | None]:
    """The folder's target files, or a reason naming the folder when it cannot be read."""
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".yaml" and p.is_file()), None
    except OSError as exc:
        return [], f"targets folder {folder} unreadable: {exc.strerror or exc}"


def observe_target(path: Path) -> tuple[tuple[str, str] | None, str | None]:
    """(framework_tree version, server_config version) of one file, or a reason naming the file."""
    target, problems = parse_target(path, check_paths=False)
    if target is None:
        return None, f"target file {path} skipped: " + "; ".join(f"{p.field}: {p.expected}" for p in problems)
    try:
        framework_version = framework_identity(target.engine, target.framework_tree)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return None, f"target file {path} skipped: framework_tree {target.framework_tree}: {exc}"
    return (framework_version, server_config_version(target)), None


def evaluate_targets(context: dg.SensorEvaluationContext, folder: Path, partition_keys: set[str]) -> dg.SensorResult:
    previous = read_cursor(context.cursor)
    files, folder_problem = list_target_files(folder)
    reasons = [folder_problem] if folder_problem else []
    # A target that could not be evaluated this tick keeps its last key; a removed file's goes.
    present = {target_name(path) for path in files}
    cursor = dict(previous) if folder_problem else {name: entry for name, entry in previous.items() if name in present}
    events: list[dg.AssetObservation] = []
    requests: list[dg.RunRequest] = []
    for path in files:
        name = target_name(path)
        if not is_safe_name(name):  # never a partition: reloading would not add it
            reasons.append(f"target file {path} skipped: its name {name!r} is not a target name ({SAFE_NAME_RULE})")
            continue
        if name not in partition_keys:
            reasons.append(f"target file {path} is not a partition yet: reload the code location to add {name!r}")
            continue
        versions, problem = observe_target(path)
        if versions is None:
            reasons.append(problem)
            continue
        key = change_key(*versions)
        last = previous.get(name, {})
        if last.get("key") == key:
            continue
        changes = int(last.get("changes", 0)) + (1 if last else 0)
        cursor[name] = {"key": key, "framework_tree": versions[0], "server_config": versions[1], "changes": changes}
        events += observations(name, *versions)
        if not last:
            context.log.info(f"target {name}: first seen with key {key}; recorded, no run asked")
            continue
        # The change count keeps a return to an earlier config from reusing (and being
        # deduplicated by) that config's old run key.
        requests.append(dg.RunRequest(run_key=f"target-change:{name}:{key}:{changes}", partition_key=name,
                                      tags={TRIGGER_TAG: "target_change"}))
        context.log.info(f"target {name}: key {last.get('key')} -> {key}; asking for optimize_job")
    for reason in reasons:
        context.log.warning(reason)
    skip = None if requests else ("; ".join(reasons) or "no target changed")
    return dg.SensorResult(run_requests=requests, skip_reason=skip, asset_events=events,
                           cursor=json.dumps({"targets": cursor}, sort_keys=True))


def build_target_change_sensor(partitions: dg.StaticPartitionsDefinition, job) -> dg.SensorDefinition:
    partition_keys = set(partitions.get_partition_keys())

    @dg.sensor(name=SENSOR_NAME, job=job, minimum_interval_seconds=poll_seconds(POLL_SECONDS_ENV, DEFAULT_POLL_SECONDS),
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="Observes each target's framework_tree and server_config; a changed target gets one "
                           "optimize_job run for its partition.")
    def target_change_sensor(context: dg.SensorEvaluationContext, catalog: TargetCatalog) -> dg.SensorResult:
        return evaluate_targets(context, catalog.path(), partition_keys)

    return target_change_sensor
