"""A run works from the target file as it was when the run started: an edit made while
`dagster job execute` runs (each step resolves the target when it starts) changes
nothing in that run, and the next run reads the edit."""

from __future__ import annotations

import re
import time

import pytest
import yaml

from benchmarks.support.job_runs import DEADLINE_S, SLOW_TARGET, runs_of, start, store_of, write_targets

pytestmark = pytest.mark.cli


def wait_for(pattern: str, log, process) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not re.search(pattern, log.read_text()):
        assert process.poll() is None, f"the run ended before {pattern!r}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"never saw {pattern!r}"
        time.sleep(0.1)


def test_editing_the_target_file_mid_run_changes_nothing_in_that_run(tmp_path, home) -> None:
    # Faster than SLOW_TARGET: this run is never stopped, and the edit lands mid-baseline at any speed.
    fast = list(SLOW_TARGET["server_args"])
    fast[fast.index("--time-scale") + 1] = "20"
    targets = write_targets(tmp_path / "targets", max_trials=1, server_args=fast)
    log = tmp_path / "run.log"
    process = start("optimize_job", home, targets, log)
    try:
        wait_for(r"baseline: repeat-1", log, process)  # mid-baseline: every later step is still to come
        # A host no hosts file names: a step that read the live file (profile once did) fails on it.
        edited = {**SLOW_TARGET, "max_trials": 1, "server_args": SLOW_TARGET["server_args"] + ["--seed", "7"],
                  "sweep_concurrencies": [2, 8], "host": "gpu-elsewhere"}
        (targets / "sim.yaml").write_text(yaml.safe_dump(edited))
        process.wait(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
    text = log.read_text()
    assert process.returncode == 0, text[-4000:]
    assert re.search(r"rung 1 of 1 \(concurrency 4\)", text), "the sweep ran the ladder the run started with"
    assert "(concurrency 8)" not in text
    run_id = runs_of(home)[0].run_id
    launched = [row["argv"] for row in store_of(home).measurements("sim") if row["run_id"] == run_id]
    assert len(launched) >= 4, "baseline, trial, validation and sweep launches"
    assert not any("--seed" in argv for argv in launched), "no launch of the run took the edited server_args"
    assert "'--seed', '7'" not in store_of(home).run_target(run_id, "sim", lambda: "")
