"""Host leases (docs/design.md, invariant 9) with real processes: a live holder blocks, a dead one of this
scope is reclaimed, another scope's needs an operator, and runs take and free the lease."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml
from dagster._core.instance.ref import InstanceRef
from dagster._core.test_utils import create_run_for_test

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.core.fleet.leases import Holder, Verdict
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.owner_scope import current_scope, process_start, this_holder
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.store.leases import LEASE_EVENTS, HostLeased, HostLeases
from hyperloom_assets.resources.store.results import ResultStore
from tests.conftest import SIM_MODEL

SIM_ARGS = ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"]


@pytest.fixture
def sqlite_store(tmp_path) -> ResultStore:
    return ResultStore(url=f"sqlite:///{tmp_path / 'results.db'}")


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def holder_of(process: subprocess.Popen, run_id: str) -> Holder:
    return Holder(scope=current_scope(), run_id=run_id, pid=process.pid, pid_start=process_start(process.pid),
                  worker="this-box")


def write_sim_target(folder: Path, name: str = "sim-a", **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "server_args": SIM_ARGS, "repeats": 1,
        "workload": {"kind": "random", "isl": 128, "osl": 16, "concurrency": 4, "num_prompts": 8}, **extra}))


def test_a_live_holder_blocks_naming_who_and_since_when(sqlite_store) -> None:
    leases, live = HostLeases(sqlite_store), sleeper()
    try:
        assert leases.acquire("gpu-a", holder_of(live, "run-live")) is None
        with pytest.raises(HostLeased) as blocked:
            leases.acquire("gpu-a", this_holder("run-next"))
        assert blocked.value.verdict is Verdict.BLOCKED
        assert f"run run-live (pid {live.pid} on this-box" in str(blocked.value) and " since 20" in str(blocked.value)
    finally:
        live.kill()
        live.wait()


def test_a_dead_holder_of_this_scope_is_reclaimed_with_a_warning_and_a_reused_pid_is_not_alive(sqlite_store) -> None:
    leases, gone = HostLeases(sqlite_store), sleeper()
    dead = holder_of(gone, "run-killed")
    gone.kill()
    gone.wait()
    leases.acquire("gpu-a", dead)
    warning = leases.acquire("gpu-a", this_holder("run-next"))
    assert "reclaimed the lease of dead run run-killed" in warning
    assert leases.read("gpu-a").holder.run_id == "run-next"
    # A live pid whose start time differs is another process: the holder is gone.
    live = sleeper()
    try:
        reused = holder_of(live, "run-old").model_copy(update={"pid_start": 1.0})
        leases.acquire("gpu-b", reused)
        assert "run-old" in leases.acquire("gpu-b", this_holder("run-next"))
    finally:
        live.kill()
        live.wait()
    assert [e["action"] for e in leases.events("gpu-a")] == ["taken", "reclaimed"]


def test_another_scopes_expired_lease_is_never_taken_silently(sqlite_store) -> None:
    leases = HostLeases(sqlite_store, clock=lambda: time.time() - 3600)
    foreign = Holder(scope="other-boot/pidns:1/pid1:1", run_id="run-far", pid=4242, pid_start=1.0, worker="elsewhere")
    leases.acquire("gpu-a", foreign, ttl_s=60)  # heartbeat an hour ago
    with pytest.raises(HostLeased) as blocked:
        HostLeases(sqlite_store).acquire("gpu-a", this_holder("run-next"))
    assert blocked.value.verdict is Verdict.NEEDS_RECOVERY
    assert "hyperloom recover gpu-a --confirm-scope-gone" in str(blocked.value)


def test_held_leases_heartbeat_and_are_released_on_an_exception(sqlite_store) -> None:
    leases, me = HostLeases(sqlite_store), this_holder("run-beat")
    with pytest.raises(RuntimeError, match="boom"):
        with leases.hold("gpu-a", me, ttl_s=0.4):
            first = leases.read("gpu-a").heartbeat_at
            time.sleep(0.5)
            assert leases.read("gpu-a").heartbeat_at > first, "the lease heartbeats while held"
            raise RuntimeError("boom")
    assert leases.read("gpu-a") is None
    assert [e["action"] for e in leases.events("gpu-a")] == ["taken", "released"]


def test_a_holder_whose_lease_was_recovered_records_it_lost_and_says_who_has_it(sqlite_store) -> None:
    leases, me, warnings = HostLeases(sqlite_store), this_holder("run-beat"), []
    with leases.hold("gpu-a", me, ttl_s=0.4, on_warning=warnings.append):
        assert leases.recover_scope(me.scope, by={"user": "op"}, detail="confirmed gone") == ["gpu-a"]
        leases.acquire("gpu-a", this_holder("run-next"))
        deadline = time.monotonic() + 5
        while not warnings and time.monotonic() < deadline:
            time.sleep(0.05)
    assert warnings and "no longer held (now held by run run-next" in warnings[0], warnings
    events = leases.events("gpu-a")
    assert [e["action"] for e in events] == ["taken", "recovered", "taken", "lost"]
    assert "run-beat" in events[-1]["holder"] and "now held by run run-next" in events[-1]["detail"]
    assert leases.read("gpu-a").holder.run_id == "run-next", "the lost holder's exit frees nothing of the next run"


@pytest.mark.stop_reason("environment_unavailable", case="lease")
def test_a_run_takes_and_frees_its_hosts_lease_and_a_leased_host_refuses_it(tmp_path, host, sqlite_store) -> None:
    write_sim_target(tmp_path / "targets")
    defs = build_defs(tmp_path / "targets", host=host, store=sqlite_store)
    job = defs.resolve_job_def("baseline_job")
    leases, live = HostLeases(sqlite_store), sleeper()
    try:
        leases.acquire("local", holder_of(live, "run-live"))
        with dg.instance_for_test() as instance:
            refused = job.execute_in_process(partition_key="sim-a", instance=instance, raise_on_error=False)
        assert not refused.success
        assert sqlite_store.measurements("sim-a") == [], "refused before any launch"
        stops = sqlite_store.stops("sim-a")
        assert [(s["stop_reason"], s["run_id"]) for s in stops] == [("environment_unavailable", refused.run_id)]
        assert "run-live" in stops[0]["detail"], "the stop names the run that holds the host"
    finally:
        live.kill()
        live.wait()
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(partition_key="sim-a", instance=instance)
        assert result.success
        assert result.dagster_run.tags["hyperloom/host"] == "local", "runs carry their host's tag"
        logs = [e.message for e in instance.all_logs(result.run_id)]
    assert any("reclaimed the lease of dead run run-live" in m for m in logs), "the reclaim is a warning in the run"
    assert leases.read("local") is None, "released when the run ended"
    actions = [e["action"] for e in leases.events("local")]
    assert actions == ["taken", "reclaimed", "released"], actions
    holder = Holder.model_validate_json(leases.events("local")[-1]["holder"])
    assert holder.run_id == result.run_id and holder.pid == os.getpid()


def recover(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "recover", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def orphan_server(pid_dir: Path) -> int:
    """A 'server' whose launcher exited: what a killed run leaves behind."""
    code = ("import sys; from pathlib import Path; from hyperloom_assets.resources.hosts.process_group import launch; "
            "s = launch([sys.executable, '-c', 'import time; time.sleep(120)'], {}, Path(sys.argv[1]) / 'o.log', "
            "Path(sys.argv[1])); print(s.record.pid)")
    return int(subprocess.run([sys.executable, "-c", code, str(pid_dir)], check=True, capture_output=True,
                              text=True).stdout)


def test_recover_shows_then_releases_reaps_and_records_and_refuses_this_scope(tmp_path) -> None:
    home = tmp_path / "home"
    write_instance_config(home)
    store = ResultStore(url=f"sqlite:///{home / 'hyperloom' / 'results.db'}")
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        run = create_run_for_test(instance, job_name="optimize_job", status=dg.DagsterRunStatus.STARTED)
    far = Holder(scope="other-boot/pidns:1/pid1:1", run_id=run.run_id, pid=4242, pid_start=1.0, worker="elsewhere")
    HostLeases(store, clock=lambda: time.time() - 3600).acquire("local", far, ttl_s=60)
    orphan = orphan_server(home / "hyperloom" / "pids")

    shown = recover(home, "local")
    assert shown.returncode == 0, shown.stderr
    assert f"mark run {run.run_id} (STARTED) canceled" in shown.stdout and "would:" in shown.stdout
    assert HostLeases(store).read("local") is not None and psutil.pid_exists(orphan), "nothing done without the flag"

    done = recover(home, "local", "--confirm-scope-gone")
    assert done.returncode == 0, done.stdout + done.stderr
    assert HostLeases(store).read("local") is None
    assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE
    assert read_pidfiles(home / "hyperloom" / "pids") == []
    event = HostLeases(store).events("local")[-1]
    assert event["action"] == "recovered" and '"user": "' in event["by"] and "STARTED" in event["detail"]
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED

    HostLeases(store).acquire("local", this_holder("run-here"))
    mine = recover(home, "local", "--confirm-scope-gone")
    assert mine.returncode == 2 and "in this owner scope" in mine.stderr
    assert HostLeases(store).read("local") is not None, "the current scope is refused"


def test_recover_refuses_a_fresh_heartbeat(tmp_path) -> None:
    home = tmp_path / "home"
    write_instance_config(home)
    store = ResultStore(url=f"sqlite:///{home / 'hyperloom' / 'results.db'}")
    far = Holder(scope="other-boot/pidns:1/pid1:1", run_id="r", pid=4242, pid_start=1.0, worker="elsewhere")
    HostLeases(store).acquire("local", far, ttl_s=600)
    fresh = recover(home, "local", "--confirm-scope-gone")
    assert fresh.returncode == 2 and "looks alive" in fresh.stderr
    assert HostLeases(store).read("local") is not None
