"""target_change_sensor: one optimize_job run per changed target, observations for the UI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from hyperloom_assets.core.config.identity import server_config_version
from hyperloom_assets.core.config.targets import parse_target
from tests.sensors.conftest import defs_with_sensors, run_keys, tick, write_target

SENSOR = "target_change_sensor"


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def make_tree(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    (path / "engine.py").write_text("VERSION = 1\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "first")
    return path


def test_first_tick_records_observations_and_asks_for_nothing(tmp_path, host, store, instance) -> None:
    folder = tmp_path / "targets"
    path = write_target(folder, "sim-a")
    write_target(folder, "sim-b", server_args=["--gpu", "H200"])
    defs = defs_with_sensors(folder, host, store)

    result = tick(defs, SENSOR, instance, None)

    assert run_keys(result) == []
    by_asset = {(e.asset_key.path[-1], e.partition): e.tags[DATA_VERSION_TAG] for e in result.asset_events}
    assert set(by_asset) == {(a, p) for a in ("framework_tree", "server_config") for p in ("sim-a", "sim-b")}
    target, _ = parse_target(path, check_paths=False)
    assert by_asset[("server_config", "sim-a")] == server_config_version(target)
    assert by_asset[("framework_tree", "sim-a")] == "dist:hyperloom-assets==0.1.0"
    assert set(json.loads(result.cursor)["targets"]) == {"sim-a", "sim-b"}


def test_server_args_edit_asks_for_one_run_then_nothing(tmp_path, host, store, instance) -> None:
    folder = tmp_path / "targets"
    write_target(folder, "sim-a")
    write_target(folder, "sim-b")
    defs = defs_with_sensors(folder, host, store)
    first = tick(defs, SENSOR, instance, None)

    write_target(folder, "sim-a", server_args=["--gpu", "H100", "--max-num-seqs", "8"])
    edited = tick(defs, SENSOR, instance, first.cursor)

    assert len(edited.run_requests) == 1
    request = edited.run_requests[0]
    key = json.loads(edited.cursor)["targets"]["sim-a"]["key"]
    assert request.partition_key == "sim-a"
    assert request.run_key == f"target-change:sim-a:{key}:1"
    assert request.tags["hyperloom/trigger"] == "target_change"
    assert {e.partition for e in edited.asset_events} == {"sim-a"}

    again = tick(defs, SENSOR, instance, edited.cursor)
    assert run_keys(again) == [] and not again.asset_events
    assert again.skip_reason.skip_message == "no target changed"


def test_return_to_an_earlier_config_gets_a_fresh_run_key(tmp_path, host, store, instance) -> None:
    folder = tmp_path / "targets"
    write_target(folder, "sim-a")
    defs = defs_with_sensors(folder, host, store)
    cursor = tick(defs, SENSOR, instance, None).cursor
    seen = []
    for args in (["--gpu", "H200"], ["--gpu", "H100"], ["--gpu", "H200"]):
        write_target(folder, "sim-a", server_args=args)
        result = tick(defs, SENSOR, instance, cursor)
        cursor = result.cursor
        seen += run_keys(result)
    assert len(seen) == 3 and len(set(seen)) == 3


def test_new_commit_and_uncommitted_edit_each_ask_for_one_run(tmp_path, host, store, instance) -> None:
    tree = make_tree(tmp_path / "engine-src")
    folder = tmp_path / "targets"
    write_target(folder, "sim-git", framework_tree=str(tree))
    defs = defs_with_sensors(folder, host, store)
    first = tick(defs, SENSOR, instance, None)
    head = git(tree, "rev-parse", "HEAD")
    assert json.loads(first.cursor)["targets"]["sim-git"]["framework_tree"] == f"git:{head}"

    (tree / "engine.py").write_text("VERSION = 2\n")
    git(tree, "commit", "-q", "-am", "second")
    committed = tick(defs, SENSOR, instance, first.cursor)
    assert len(committed.run_requests) == 1
    assert committed.run_requests[0].partition_key == "sim-git"
    observed = {e.asset_key.path[-1]: e.tags[DATA_VERSION_TAG] for e in committed.asset_events}
    assert observed["framework_tree"] == f"git:{git(tree, 'rev-parse', 'HEAD')}"

    assert run_keys(tick(defs, SENSOR, instance, committed.cursor)) == []

    (tree / "engine.py").write_text("VERSION = 3\n")
    dirty = tick(defs, SENSOR, instance, committed.cursor)
    assert len(dirty.run_requests) == 1
    assert "+dirty:" in json.loads(dirty.cursor)["targets"]["sim-git"]["framework_tree"]


def test_bad_files_are_skipped_by_name_while_the_others_are_evaluated(tmp_path, host, store, instance) -> None:
    folder = tmp_path / "targets"
    write_target(folder, "sim-a")
    write_target(folder, "sim-b")
    defs = defs_with_sensors(folder, host, store)
    cursor = tick(defs, SENSOR, instance, None).cursor

    (folder / "sim-b.yaml").write_text("engine: [unclosed\n")
    broken = tick(defs, SENSOR, instance, cursor)
    assert run_keys(broken) == []
    assert str(folder / "sim-b.yaml") in broken.skip_reason.skip_message

    schema = yaml.safe_load((folder / "sim-a.yaml").read_text()) | {"engine": "tgi"}
    (folder / "sim-b.yaml").write_text(yaml.safe_dump(schema))
    write_target(folder, "sim-a", server_args=["--gpu", "H200"])
    mixed = tick(defs, SENSOR, instance, broken.cursor)
    assert [r.partition_key for r in mixed.run_requests] == ["sim-a"]
    # sim-b keeps its last good key: fixing it back to the same content asks for nothing.
    write_target(folder, "sim-b")
    assert run_keys(tick(defs, SENSOR, instance, mixed.cursor)) == []


def test_file_added_after_load_says_reload_and_missing_tree_names_the_file(tmp_path, host, store, instance) -> None:
    folder = tmp_path / "targets"
    write_target(folder, "sim-a", framework_tree=str(tmp_path / "no-such-tree"))
    defs = defs_with_sensors(folder, host, store)
    write_target(folder, "sim-late")
    (folder / "...yaml").write_text((folder / "sim-late.yaml").read_text())  # its stem, `..`, is no name

    result = tick(defs, SENSOR, instance, None)

    message = result.skip_reason.skip_message
    assert f"{folder / 'sim-late.yaml'} is not a partition yet: reload the code location" in message
    assert f"{folder / '...yaml'} skipped: its name '..' is not a target name" in message
    assert f"{folder / 'sim-a.yaml'} skipped: framework_tree" in message
    assert json.loads(result.cursor)["targets"] == {}


def test_unreadable_folder_is_a_skip_naming_it(tmp_path, host, store, instance) -> None:
    folder = tmp_path / "targets"
    write_target(folder, "sim-a")
    defs = defs_with_sensors(folder, host, store)
    cursor = tick(defs, SENSOR, instance, None).cursor
    (folder / "sim-a.yaml").unlink()
    folder.rmdir()

    result = tick(defs, SENSOR, instance, cursor)

    assert run_keys(result) == []
    assert f"targets folder {folder} unreadable" in result.skip_reason.skip_message
    assert "sim-a" in json.loads(result.cursor)["targets"], "an unreadable folder forgets nothing"


def test_the_sensors_observations_make_exactly_the_edited_targets_baseline_stale(tmp_path, host, store,
                                                                                instance) -> None:
    """framework_tree and server_config are external assets: what the sensor records are their versions."""
    import dagster as dg
    from dagster._core.definitions.data_version import StaleStatus
    from dagster._utils.test.data_versions import get_stale_status_resolver

    from hyperloom_assets.assets.observations import build_observations

    folder = tmp_path / "targets"
    write_target(folder, "sim-a")
    write_target(folder, "sim-b")
    defs = defs_with_sensors(folder, host, store)
    specs = [spec for spec in defs.assets if isinstance(spec, dg.AssetSpec)]
    assert {spec.key.path[-1] for spec in specs} == {"framework_tree", "server_config"}, "declared as AssetSpecs"
    parts = specs[0].partitions_def

    # The real baseline launches a server; this one has its deps, so the versions it records are the same.
    @dg.asset(partitions_def=parts, deps=[spec.key for spec in specs])
    def baseline() -> None:
        return None

    graph = dg.Definitions(assets=[*build_observations(parts), baseline])

    def record(result: dg.SensorResult) -> dg.SensorResult:
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
        return result

    first = record(tick(defs, SENSOR, instance, None))
    for partition in ("sim-a", "sim-b"):
        assert graph.resolve_implicit_global_asset_job_def().execute_in_process(
            partition_key=partition, instance=instance, asset_selection=[baseline.key]).success
    write_target(folder, "sim-a", server_args=["--gpu", "H200"])
    record(tick(defs, SENSOR, instance, first.cursor))

    resolver = get_stale_status_resolver(instance, list(graph.resolve_asset_graph().assets_defs))
    status = {p: resolver.get_status(dg.AssetKey("baseline"), p) for p in ("sim-a", "sim-b")}
    assert status == {"sim-a": StaleStatus.STALE, "sim-b": StaleStatus.FRESH}
