"""A run stopped mid-trial, through `dagster job execute` on the sim: terminated (SIGTERM,
what the UI's Terminate and Ctrl-C also deliver as an interrupt) or killed outright
(SIGKILL, its server left running). Either way the next run resumes from the ledger: one
climb is stopped both ways in turn, then finished."""

from __future__ import annotations

import re
import signal
import time

import dagster as dg
import psutil
import pytest

from benchmarks.support.job_runs import (
    DEADLINE_S,
    SLOW_TARGET,
    climb_launches,
    execute,
    instance_of,
    kept,
    launches_after,
    materialize_climb,
    materialized,
    runs_of,
    start,
    stop_mid_trial,
    store_of,
    wait_gone,
    wait_mid_trial,
    wait_profiling,
    write_targets,
)
from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from tests.conftest import reap_leftovers

pytestmark = pytest.mark.cli

# SLOW_TARGET at twice its time scale: this test waits on log lines, not on time, and a
# launch still measures for seconds after its server is up, room for the signal.
_SCALE = SLOW_TARGET["server_args"].index("--time-scale") + 1
FASTER = {"server_args": [*SLOW_TARGET["server_args"][:_SCALE], "8", *SLOW_TARGET["server_args"][_SCALE + 1:]]}
REPLAYED = re.compile(r"trial 1 [^\n]*: launch 1 \(variant\)[^\n]*replayed from the ledger")


def signalled_mid_run(signum: int, home, targets, log, wait) -> str:
    """optimize_job, sent `signum` once `wait(process, log, home)` finds its server up: the
    server is gone within 20 s and the run fails. Returns the run's log."""
    process = start("optimize_job", home, targets, log)
    _, torn_down_s = stop_mid_trial(process, lambda: wait(process, log, home), lambda: process.send_signal(signum))
    assert torn_down_s < 20, f"the server outlived signal {signum} by {torn_down_s:.1f} s"
    assert process.returncode != 0
    return log.read_text()


@pytest.mark.stop_reason("cancelled", case="sigint")
def test_ctrl_c_while_profiling_tears_the_baseline_server_down_and_records_cancelled(tmp_path, home) -> None:
    targets = write_targets(tmp_path / "targets", profile=True)
    text = signalled_mid_run(signal.SIGINT, home, targets, tmp_path / "run.log", wait_profiling)
    assert "stop reason: cancelled: terminated during baseline" in text
    assert [row["stop_reason"] for row in store_of(home).stops("sim")] == ["cancelled"]
    assert read_pidfiles(home / "hyperloom" / "pids") == []


@pytest.mark.stop_reason("cancelled", case="ui_terminate")
def test_terminate_from_dagster_stops_a_run_started_by_dagster_job_execute(tmp_path, home) -> None:
    # What the UI's Terminate does: the run launcher marks the run CANCELING; a run started
    # from the command line has no code server to interrupt it, so the host's watch does.
    targets = write_targets(tmp_path / "targets")
    log = tmp_path / "run.log"
    process = start("optimize_job", home, targets, log)

    def terminate() -> None:
        with instance_of(home) as instance:
            instance.run_launcher.terminate(instance.get_runs()[0].run_id)

    server, torn_down_s = stop_mid_trial(process, lambda: wait_mid_trial(process, log, home, trial=1), terminate)
    run_id = runs_of(home)[0].run_id
    assert torn_down_s < 20, f"the server outlived the Terminate by {torn_down_s:.1f} s"
    with instance_of(home) as instance:
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED
    assert "stop reason: cancelled: terminated during trials" in log.read_text()
    assert [row["stop_reason"] for row in store_of(home).stops("sim")] == ["cancelled"]


@pytest.mark.stop_reason("cancelled", case="sigterm")
def test_sigterm_then_sigkill_mid_trial_each_next_run_resumes_and_ends_with_the_uninterrupted_stack(
        tmp_path, home) -> None:
    """One climb stopped twice: SIGTERM mid-trial 1 (torn down, recorded cancelled), then its
    re-execution SIGKILLed in the same trial (no teardown, its server an orphan), then a
    third run that releases the dead run, reaps the orphan, replays the ledger and ends
    with the keepers an uninterrupted climb of the same target keeps."""
    reference_home = tmp_path / "reference_home"
    write_instance_config(reference_home)
    # The same climb uninterrupted, on the same target at the same --time-scale: the planner
    # reads the servers' telemetry, sampled in wall-clock time.
    # Up to its trials: their KEEPs are the stack's keepers (the validation measures them).
    # Named, not "*trials": framework_tree and server_config are external, never materialized.
    reference = materialize_climb(reference_home, write_targets(tmp_path / "reference_targets", **FASTER),
                                  tmp_path / "reference.log", "sim",
                                  select="baseline,roofline,profile,candidates,trials")
    assert reference.wait(timeout=DEADLINE_S) == 0, (tmp_path / "reference.log").read_text()[-4000:]
    targets = write_targets(tmp_path / "targets", **FASTER)

    text = signalled_mid_run(signal.SIGTERM, home, targets, tmp_path / "terminated.log", wait_mid_trial)
    assert "stop reason: cancelled: terminated during trials" in text, "the log says why"
    store = store_of(home)
    assert [row["stop_reason"] for row in store.stops("sim")] == ["cancelled"], "and so does the result store"
    assert not materialized(home, "final_report"), "a cancelled run has no report"
    context = store.measurements("sim", "baseline")[0]["context_key"]
    assert len(store.trials(context)) == 0, "trial 1 was stopped between its launches"
    assert [row["record"]["role"] for row in store.looks(context)][:1] == ["variant"], \
        "trial 1's finished launch is in the ledger"

    killed_log = tmp_path / "killed.log"
    process = start("optimize_job", home, targets, killed_log)
    # SIGKILL: no teardown, no log line, no run status
    server, _ = stop_mid_trial(process, lambda: wait_mid_trial(process, killed_log, home), process.kill,
                               wait_teardown=False)
    assert REPLAYED.search(killed_log.read_text()), "the re-execution after SIGTERM resumed from the ledger"
    time.sleep(1)
    assert psutil.Process(server).is_running(), "the killed run's server is left running: an orphan"
    killed_run = runs_of(home)[-1].run_id
    looks = store.looks(context)

    resumed = execute("optimize_job", "sim", home, targets, timeout_s=DEADLINE_S)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE, "reaped"
    assert f"the run worker of run {killed_run}" in resumed.stderr
    with instance_of(home) as instance:
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.FAILURE, \
            "the dead run is marked failed, and its pool slot freed (else the next run would wait forever)"
    assert REPLAYED.search(resumed.stderr)
    assert climb_launches(store, runs_of(home)[-1].run_id) == launches_after(store.trials(context), len(looks)), \
        "only what was interrupted, and what came after it, is measured again"
    assert materialized(home, "final_report")
    names = [keeper["name"] for keeper in store.latest_stack("sim")["keepers"]]
    assert names == kept(store_of(reference_home), "sim")
    assert names, "a stack with keepers, so the comparison says something"
    assert reap_leftovers(reference_home) == []
