"""Resume after a hard kill on vLLM CPU: the climb's run worker is SIGKILLed mid-trial with
its vLLM server up; the next materialization releases the dead run, reaps the server,
replays the trial's finished launches and measures only the rest. Lean: a baseline, then
one trial on a tiny workload, each launch `--enforce-eager` (about 30 s to ready)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from benchmarks.support.job_runs import climb_launches, execute, instance_of, stop_mid_trial, store_of, wait_gone
from tests.conftest import write_tiny_target

pytestmark = [pytest.mark.real_engine, pytest.mark.cli]

# Only the climb, in the run worker's own process (the implicit asset job's default
# executor would put the step in a child process, and a kill of the parent would miss it).
CLIMB = ["--select", "candidates,trials", "--partition", "tiny",
         "--config-json", json.dumps({"execution": {"config": {"in_process": {}}}})]


def materialize(home: Path, targets: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets)}
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "dagster", "asset", "materialize", "-m",
                                 "hyperloom_assets.definitions", *CLIMB], env=env, stdout=out,
                                stderr=subprocess.STDOUT, cwd=home)


def wait_for_second_server(process: subprocess.Popen, log: Path, home: Path) -> int:
    """Until trial 1's first launch is recorded and the next server is ready; that server's pid."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the climb ended early:\n{log.read_text()[-3000:]}"
        text = log.read_text()
        first = re.search(r"trial 1 [^\n]*: launch 1 \(variant\)", text)
        assert not re.search(r"trial 1 [^\n]*: (KEEP|REVERT|KEEP_UNSTABLE|FAILED|KILLED_OVERTIME) \(", text)
        if first and "server ready" in text[first.end():]:
            alive = [r.pid for _, r in read_pidfiles(home / "hyperloom" / "pids") if psutil.pid_exists(r.pid)]
            if alive:
                return alive[0]
        time.sleep(0.5)
    raise AssertionError(f"trial 1 never reached its second launch:\n{log.read_text()[-3000:]}")


def test_a_climb_killed_mid_trial_on_vllm_resumes_and_measures_only_the_rest(tmp_path, home, tiny_model) -> None:
    targets = write_tiny_target(tmp_path / "targets", tiny_model, repeats=1, max_trials=1,
                                server_args=["--max-num-seqs", "2", "--enforce-eager", "--max-model-len", "512"])
    done = execute("baseline_job", "tiny", home, targets, timeout_s=900)
    assert done.returncode == 0, done.stderr[-4000:]

    killed_log = tmp_path / "killed.log"
    process = materialize(home, targets, killed_log)
    server, _ = stop_mid_trial(process, lambda: wait_for_second_server(process, killed_log, home), process.kill,
                               wait_teardown=False)
    assert psutil.Process(server).is_running(), "the vLLM server outlived its run worker"
    store = store_of(home)
    context = store.measurements("tiny", "baseline")[0]["context_key"]
    looks = store.looks(context)
    assert [row["record"]["role"] for row in looks][:1] == ["variant"]
    with instance_of(home) as instance:
        killed_run = instance.get_runs()[0].run_id

    resumed_log = tmp_path / "resumed.log"
    resumed = materialize(home, targets, resumed_log)
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
