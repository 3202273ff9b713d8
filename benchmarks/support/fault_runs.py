"""The fault matrix's rows that need a whole `dagster job execute` (or `dagster asset
materialize`) run: stopped mid-trial by SIGTERM, by Dagster's Terminate or by SIGKILL,
each resumed by the next run; and a target file edited while its run goes on."""

from __future__ import annotations

import re
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import yaml

from benchmarks.support.fault_scenarios import leaked_servers, row, tiny_target_yaml
from benchmarks.support.job_runs import (
    DEADLINE_S, SLOW_TARGET, climb_launches, execute, instance_of, materialize_climb, runs_of,
    start, stop_mid_trial, store_of, wait_gone, wait_mid_trial, write_targets)
from hyperloom_assets.cli.instance_config import write_instance_config


def _ledger(home: Path, target: str) -> tuple[str, set[str], list[dict]]:
    store = store_of(home)
    context = store.measurements(target, "baseline")[0]["context_key"]
    return context, {row["fingerprint"] for row in store.trials(context)}, store.looks(context)


LOOK_LINE = re.compile(r"trial (\d+) [^\n]*: launch (\d+) \((\w+)\)([^\n]*)")


def _resume_counts(home: Path, target: str, before: tuple[str, set[str], list[dict]], resumed_run: str,
                   resume_log: str) -> tuple[int, int, str]:
    """(launches measured twice, records lost, a note) once the resumed run finished.

    Measured twice: a launch the resumed run measured although the ledger held it before
    the stop (a finished trial's, or a recorded look of the interrupted one), read from the
    run log's launch lines. Lost: a trial or a look recorded before the stop that the
    resumed run neither kept nor replayed."""
    context, trials_before, looks_before = before
    interrupted = len(trials_before) + 1  # the trial in progress at the stop (its looks are looks_before)
    measured = [(int(t), int(k)) for t, k, _, rest in LOOK_LINE.findall(resume_log) if "replayed" not in rest]
    replayed = [(int(t), int(k)) for t, k, _, rest in LOOK_LINE.findall(resume_log) if "replayed" in rest]
    twice = sum(1 for t, k in measured if t < interrupted or (t == interrupted and k <= len(looks_before)))
    trials = store_of(home).trials(context)
    lost = len(trials_before - {t["fingerprint"] for t in trials})
    lost += max(0, len(looks_before) - sum(1 for t, _ in replayed if t == interrupted))
    stored = climb_launches(store_of(home), resumed_run, target)
    return twice, lost, f"the resumed run measured {len(measured)} launch(es) (stored: {stored}) and replayed " \
                        f"{len(replayed)}"


def stopped_sim_run(how: str) -> dict:
    """SIGTERM, SIGINT (Ctrl-C), Terminate or SIGKILL mid-trial 2 on the sim, then the next run resumes."""
    with tempfile.TemporaryDirectory(prefix="hyperloom-faults-") as folder:
        root = Path(folder)
        home, targets = root / "home", write_targets(root / "targets")
        write_instance_config(home)
        log = root / "first.log"
        process = start("optimize_job", home, targets, log)
        stops: dict[str, Callable[[], None]] = {
            "SIGTERM": lambda: process.send_signal(signal.SIGTERM), "SIGKILL": process.kill,
            "SIGINT": lambda: process.send_signal(signal.SIGINT),
            "Terminate": lambda: _terminate(home)}
        server, torn_down_s = stop_mid_trial(process, lambda: wait_mid_trial(process, log, home), stops[how],
                                             wait_teardown=how != "SIGKILL")
        stopped_reason = ",".join(r["stop_reason"] for r in store_of(home).stops("sim")) or "(none: killed)"
        before = _ledger(home, "sim")
        started = time.monotonic()
        resumed = start("optimize_job", home, targets, root / "resumed.log")
        recover_s = torn_down_s
        if recover_s is None:  # SIGKILL: the orphan runs until the next run reaps it
            wait_gone(server, DEADLINE_S)
            recover_s = time.monotonic() - started
        code = resumed.wait(timeout=DEADLINE_S)
        text = (root / "resumed.log").read_text()
        twice, lost, note = _resume_counts(home, "sim", before, runs_of(home)[-1].run_id, text)
        leaked = leaked_servers(home / "hyperloom" / "pids") + int(psutil.pid_exists(server) and
                                                                   psutil.Process(server).status() != "zombie")
        return row(f"{how} mid-trial, then resume", "sim",
                   f"{stopped_reason}; resumed run {'succeeded' if code == 0 else 'FAILED'}", leaked, twice, lost,
                   recover_s, f"{len(before[1])} trial(s) and {len(before[2])} launch(es) recorded before the stop; "
                   f"{note}")


def _terminate(home: Path) -> None:
    with instance_of(home) as instance:
        instance.run_launcher.terminate(instance.get_runs()[0].run_id)


def target_edited_mid_run() -> dict:
    with tempfile.TemporaryDirectory(prefix="hyperloom-faults-") as folder:
        root = Path(folder)
        home, targets = root / "home", write_targets(root / "targets", max_trials=1)
        write_instance_config(home)
        log = root / "run.log"
        process = start("optimize_job", home, targets, log)
        while not re.search(r"trial 1 [^\n]*: launch 1", log.read_text()) and process.poll() is None:
            time.sleep(0.1)
        edited = {**SLOW_TARGET, "max_trials": 1, "server_args": SLOW_TARGET["server_args"] + ["--seed", "7"],
                  "sweep_concurrencies": [2, 8]}
        (targets / "sim.yaml").write_text(yaml.safe_dump(edited))
        code = process.wait(timeout=DEADLINE_S)
        text = log.read_text()
        launched = [r["argv"] for r in store_of(home).measurements("sim")]
        took_edit = sum("--seed" in argv for argv in launched) + ("(concurrency 8)" in text)
        return row("target file edited mid-run", "sim", f"run {'succeeded' if code == 0 else 'FAILED'}; "
                   f"{took_edit} launch(es) or rung(s) took the edit", leaked_servers(home / "hyperloom" / "pids"),
                   detail=f"{len(launched)} launches, all with the server_args the run started with"
                   if not took_edit else "the edit leaked into the run")


def vllm_killed_and_resumed(tiny_model: Path) -> dict:
    """The climb's worker SIGKILLed mid-trial on vLLM CPU, then resumed (the suite shows it on the sim)."""
    with tempfile.TemporaryDirectory(prefix="hyperloom-faults-") as folder:
        root = Path(folder)
        home, targets = root / "home", root / "targets"
        write_instance_config(home)
        targets.mkdir()
        (targets / "tiny.yaml").write_text(tiny_target_yaml(tiny_model))
        done = execute("baseline_job", "tiny", home, targets, timeout_s=900)
        assert done.returncode == 0, done.stderr[-3000:]
        process = materialize_climb(home, targets, root / "killed.log", "tiny")
        server, _ = stop_mid_trial(process, lambda: wait_mid_trial(process, root / "killed.log", home, trial=1,
                                                                   deadline_s=600), process.kill, wait_teardown=False)
        before = _ledger(home, "tiny")
        started = time.monotonic()
        resumed = materialize_climb(home, targets, root / "resumed.log", "tiny")
        gone_s = wait_gone(server, 600)
        recover_s = time.monotonic() - started if gone_s < 600 else float("inf")
        code = resumed.wait(timeout=1200)
        with instance_of(home) as instance:
            resumed_run = instance.get_runs()[0].run_id
        text = (root / "resumed.log").read_text()
        twice, lost, note = _resume_counts(home, "tiny", before, resumed_run, text)
        trial = store_of(home).trials(before[0])[-1]
        note += f"; trial 1 {trial['outcome']}: {trial['record']['decision']['reason'][:120]}"
        leaked = leaked_servers(home / "hyperloom" / "pids") + int(gone_s >= 600)
        return row("SIGKILL mid-trial, then resume", "vllm", f"(none: killed); resumed run "
                   f"{'succeeded' if code == 0 else 'FAILED'}", leaked, twice, lost, recover_s,
                   f"{len(before[2])} launch(es) of trial 1 recorded before the kill; {note}")
