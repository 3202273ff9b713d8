"""Resume after a hard kill on vLLM CPU: the climb's run worker is SIGKILLed mid-trial with
its vLLM server up; the next materialization releases the dead run, reaps the server,
replays the trial's finished launches and measures only the rest. Lean: a baseline, then
one trial on a tiny workload, each launch `--enforce-eager` (about 30 s to ready)."""

from __future__ import annotations

import re

import dagster as dg
import psutil
import pytest

from benchmarks.support.job_runs import (
    climb_launches,
    execute,
    instance_of,
    materialize_climb,
    stop_mid_trial,
    store_of,
    wait_gone,
    wait_mid_trial,
)
from tests.conftest import write_tiny_target

pytestmark = [pytest.mark.real_engine, pytest.mark.cli]

def test_a_climb_killed_mid_trial_on_vllm_resumes_and_measures_only_the_rest(tmp_path, home, tiny_model) -> None:
    # A cap of 2 under 16 streams: the first variant lifts it for a gain of several times,
    # so its first look (no interval yet) asks for another and the trial has a middle to stop
    # in; a cap of 2 under 4 streams gained too little and was reverted at its first look.
    targets = write_tiny_target(tmp_path / "targets", tiny_model, repeats=1, max_trials=1,
                                server_args=["--max-num-seqs", "2", "--enforce-eager", "--max-model-len", "512"],
                                workload={"kind": "random", "isl": 64, "osl": 32, "concurrency": 16,
                                          "num_prompts": 32})
    done = execute("baseline_job", "tiny", home, targets, timeout_s=900)
    assert done.returncode == 0, done.stderr[-4000:]

    killed_log = tmp_path / "killed.log"
    process = materialize_climb(home, targets, killed_log, "tiny")
    server, _ = stop_mid_trial(process, lambda: wait_mid_trial(process, killed_log, home, trial=1, deadline_s=600),
                               process.kill, wait_teardown=False)
    assert psutil.Process(server).is_running(), "the vLLM server outlived its run worker"
    store = store_of(home)
    context = store.measurements("tiny", "baseline")[0]["context_key"]
    looks = store.looks(context)
    assert [row["record"]["role"] for row in looks][:1] == ["variant"]
    with instance_of(home) as instance:
        killed_run = instance.get_runs()[0].run_id

    resumed_log = tmp_path / "resumed.log"
    resumed = materialize_climb(home, targets, resumed_log, "tiny", select="candidates,trials")
    assert resumed.wait(timeout=1200) == 0, resumed_log.read_text()[-4000:]
    text = resumed_log.read_text()
    assert wait_gone(server, 5) < 5, "the orphan vLLM server was reaped"
    assert f"the run worker of run {killed_run}" in text
    with instance_of(home) as instance:
        assert instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.FAILURE
        resumed_run = instance.get_runs()[0].run_id
    assert re.search(r"trial 1 [^\n]*: launch 1 \(variant\)[^\n]*replayed from the ledger", text)
    trial = store.trials(context)[0]["record"]
    assert climb_launches(store, resumed_run, "tiny") == trial["measurements"] + len(trial["best_launches"]) + \
        trial["rebenches"] - len(looks), "only the interrupted launch and those after it were measured"
    assert [row for row in store.measurements("tiny", "baseline") if row["run_id"] == resumed_run] == []
