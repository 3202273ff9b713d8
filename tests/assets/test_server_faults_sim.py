"""Servers that misbehave after they were ready, and a port taken between preflight and
launch, through the real assets on sim servers: each misbehaviour is a trial FAILED with
its error class (or a baseline attempt retried on a fresh server), and no server is left."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from hyperloom_assets.assets.trials import run_climb
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.sim.launch_script import SCRIPT_ENV
from benchmarks.support.sim_climbs import FAST, QUIET, baseline_and_roofline, climb_context, variant, write_target
from tests.assets.test_faults_sim import instance  # noqa: F401 - a fixture

# Past the warm-up (4 requests) and into the first repeat (16): the fault lands mid-round.
MID_ROUND = "10"


def leftover_servers(host) -> list:
    return read_pidfiles(Path(host.state_path()) / "pids")


# A stalled trial is stopped at the overtime limit (twice the baseline's measuring) before
# the client's read timeout: KILLED_OVERTIME. Without a limit (a baseline) it is `stalled`.
# "bad-env": the trial's env (as a proposal may give it) is one no process can take: its
# launch is refused before anything starts, where Popen's ValueError once failed the step.
@pytest.mark.parametrize(("fault", "outcome", "error_class"), [
    ("exit", "FAILED", "server_gone"), ("http-500", "FAILED", "http_error"),
    ("drop-connection", "FAILED", "connection_dropped"), ("malformed-chunk", "FAILED", "malformed_stream"),
    ("stall", "KILLED_OVERTIME", "overtime"), ("bad-env", "FAILED", "launch_refused")])
def test_a_trial_whose_server_misbehaves_mid_round_gets_a_clear_outcome(tmp_path, host, store, instance, monkeypatch,
                                                                        fault, outcome, error_class) -> None:
    write_target(tmp_path / "targets", FAST + ["--max-num-seqs", "4"], QUIET, max_trials=2)
    baseline, roofline = baseline_and_roofline(tmp_path / "targets", host, store, instance)
    target = TargetCatalog(folder=str(tmp_path / "targets")).target("sim")
    broken = variant("one-misbehaving-server", "--max-num-seqs", "8")
    if fault == "bad-env":
        broken = broken.model_copy(update={"set_env": {"VLLM_X=Y": "1"}})
    else:
        script = tmp_path / "launches.txt"
        script.write_text(f"{fault}@{MID_ROUND}\n")  # the first trial's server misbehaves mid-round; the rest do not
        monkeypatch.setenv(SCRIPT_ENV, str(script))
    # A sure loss, decided at its first launch (REVERT, or KILLED_OVERTIME at four times
    # slower): a variant under review would relaunch the best beside it, and a best whose
    # 0.1 s rounds meet a scheduling hiccup past twice the baseline's is a FAILED trial.
    fine = variant("one-at-a-time", "--max-num-seqs", "1")
    bench = BenchmarkClient(stall_timeout_s=3.0)
    result = run_climb(climb_context(fault), target, host, bench, store, baseline, roofline, [broken, fine])

    first, second = result.climb.trials
    assert (first.outcome, first.error_class) == (outcome, error_class), first.decision.reason
    if fault == "bad-env":
        assert first.decision.reason.startswith("launch_refused: ") and "'VLLM_X=Y'" in first.decision.reason
        assert first.env.get("VLLM_X=Y") == "1", "the refused env is kept with the trial"
    elif outcome == "FAILED":
        assert first.decision.reason.startswith(f"{error_class}: ") and "requests failed" in first.decision.reason
    if fault != "bad-env":  # a refused launch has no argv: nothing was started
        assert first.argv and "8" in first.argv, "the failed launch's argv is kept"
    row = next(row for row in store.measurements("sim", "trial") if row["fingerprint"] == first.fingerprint)
    assert row["measurement"] is None and row["error"].startswith(f"{error_class}: ")
    assert second.outcome != "FAILED", "the climb goes on after a misbehaving server"
    assert leftover_servers(host) == [], "the misbehaving server is torn down"


@pytest.mark.stop_reason("baseline_failed", case="three_failures")
def test_a_baseline_whose_server_answers_500_is_retried_on_fresh_servers_until_the_third_failure(
        tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", FAST + ["--fault", "http-500", "--fault-after-requests", MID_ROUND])
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance,
                                                                   raise_on_error=False)
    assert not done.success
    error = str(next(e for e in done.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)
    assert "baseline_failed: after 3 consecutive failed attempt(s): http_error: " in error
    assert [row["outcome"] for row in store.baseline_attempts("sim")] == ["http_error"] * 3
    logs = {row["log_path"] for row in store.measurements("sim", "baseline")}
    assert len(logs) == 3, "each attempt on a fresh server"
    assert leftover_servers(host) == []


def test_a_port_taken_between_preflight_and_launch_is_retried_on_another_port(tmp_path, host, store, instance,
                                                                              monkeypatch, caplog) -> None:
    # The race made real: once preflight has found the port free, another process binds
    # and listens on it before the engine does; the engine's bind then fails for real.
    squatters: list[socket.socket] = []
    real_start = host_side.start

    def start_after_a_squatter(argv, *args, **kwargs):
        if not squatters:
            port = int(argv[argv.index("--port") + 1])
            squatter = socket.socket()
            squatter.bind((host_side.SERVE_HOST, port))
            squatter.listen()
            squatters.append(squatter)
        return real_start(argv, *args, **kwargs)

    monkeypatch.setattr(host_side, "start", start_after_a_squatter)
    write_target(tmp_path / "targets", FAST + ["--max-num-seqs", "16"])
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    caplog.set_level(logging.WARNING)
    try:
        done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance)
    finally:
        for squatter in squatters:
            squatter.close()
    assert done.success and len(squatters) == 1
    assert "was taken between preflight and launch; launching again on another port" in caplog.text, \
        "the retry says why"
    assert [row["outcome"] for row in store.baseline_attempts("sim")] == ["ok"], \
        "a taken port is the host's race, not a failed attempt of the config"
    assert leftover_servers(host) == []
