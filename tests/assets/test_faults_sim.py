"""Rules the report names, running for real on sim servers: the stack rebench evicts a
keeper won on lucky launches, a slow variant is stopped at the overtime limit, and a
failed baseline attempt is retried on a fresh server until the third failure."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest

from hyperloom_assets.assets.trials import run_climb
from hyperloom_assets.core.decisions.rule import OVERTIME_FACTOR
from hyperloom_assets.core.report.markdown import render_markdown
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.sim.launch_script import SCRIPT_ENV
from benchmarks.support.sim_climbs import FAST, QUIET, SCALE_10, baseline_and_roofline, climb_context, variant, write_target
from tests.unit.test_report import inputs as report_inputs

@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


@pytest.mark.stop_reason("no_more_candidates", case="plan_spent")
def test_a_keep_won_on_lucky_launches_is_evicted_by_the_stack_rebench(tmp_path, host, store, instance,
                                                                      monkeypatch) -> None:
    # The climb measures a variant on top of the stack already, so "two knobs that help
    # alone and hurt together" never passes its own KEEP test here; what the rebench
    # catches is a KEEP the trial's own launches were lucky to win. Real launches differ
    # (two vLLM CPU launches of one config differed by 25%); the sim's barely do, so the
    # luck is scripted (sim/launch_script.py): the no-op variant's two launches run 50%
    # fast. Look 1 cannot keep (no launch-level interval yet); the baseline is relaunched
    # plain and look 2 keeps; then the whole new stack's fresh launch runs 10% slow.
    write_target(tmp_path / "targets", SCALE_10 + ["--max-num-seqs", "4"], QUIET, max_trials=2)
    baseline, roofline = baseline_and_roofline(tmp_path / "targets", host, store, instance)
    script = tmp_path / "launches.txt"
    script.write_text("+50\n0\n+50\n-10\n")
    monkeypatch.setenv(SCRIPT_ENV, str(script))
    target = TargetCatalog(folder=str(tmp_path / "targets")).target("sim")
    noop = variant("quiet-stats", "--disable-log-stats")
    result = run_climb(climb_context("rebench"), target, host, BenchmarkClient(), store, baseline, roofline, [noop])

    trial = result.climb.trials[0]
    assert (trial.measurements, len(trial.best_launches)) == (2, 1), trial.decision.reason
    assert trial.outcome == "KEEP_UNSTABLE", trial.decision.reason
    assert trial.decision.reason.startswith("stack_unstable: a fresh launch of the whole stack is only")
    assert trial.rebenches == 1 and len(trial.rebench_launches) == 1
    assert result.climb.keepers == [] and result.climb.stop_reason == "no_more_candidates"
    assert result.climb.evidence[trial.fingerprint] == trial.launches + trial.rebench_launches, \
        "the rebench's launch joins the evidence like any launch"
    stored = [row for row in store.measurements("sim") if row["run_id"] == "rebench"]
    assert len(stored) == trial.launch_count and all(row["measurement"] for row in stored)
    assert store.trials(baseline.context_key)[0]["outcome"] == "KEEP_UNSTABLE"
    report = render_markdown(report_inputs(trials=[trial], keepers=[]))
    assert "Evicted (KEEP_UNSTABLE): quiet-stats" in report


@pytest.mark.stop_reason("budget_exhausted", case="max_trials")
def test_a_really_slow_variant_is_stopped_at_the_overtime_limit(tmp_path, host, store, instance) -> None:
    # A sequence cap of 1 under 16 concurrent requests decodes one request at a time: its
    # measuring would take about 16 times the baseline's, and it is stopped at 2 times.
    write_target(tmp_path / "targets", SCALE_10 + ["--max-num-seqs", "16"])
    baseline, roofline = baseline_and_roofline(tmp_path / "targets", host, store, instance)
    limit = OVERTIME_FACTOR * baseline.measuring_s
    target = TargetCatalog(folder=str(tmp_path / "targets")).target("sim")
    slow = variant("one-at-a-time", "--max-num-seqs", "1")
    started = time.monotonic()
    result = run_climb(climb_context("overtime"), target, host, BenchmarkClient(), store, baseline, roofline, [slow])
    wall_s = time.monotonic() - started

    trial = result.climb.trials[0]
    assert trial.outcome == "KILLED_OVERTIME", trial.decision.reason
    assert trial.launches == [] and trial.measurements == 1
    row = next(row for row in store.measurements("sim", "trial") if row["run_id"] == "overtime")
    assert row["measurement"] is None and row["error"].startswith("overtime: measuring passed")
    # Bounded by the limit plus a start (about a second) and a teardown, far under the ~16x
    # the variant would have needed, and nowhere near the client's 600 s socket timeout.
    assert wall_s < limit + 15, f"the trial took {wall_s:.1f} s against a limit of {limit:.1f} s"
    assert wall_s < 8 * baseline.measuring_s
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "the stopped server is torn down"


def test_a_failed_baseline_attempt_is_retried_on_a_fresh_server(tmp_path, host, store, instance, monkeypatch) -> None:
    write_target(tmp_path / "targets", FAST + ["--max-num-seqs", "16"])
    script = tmp_path / "launches.txt"
    script.write_text("crash\n")  # the first launch dies at startup, as a flaky engine might
    monkeypatch.setenv(SCRIPT_ENV, str(script))
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance)
    assert done.success
    assert [row["outcome"] for row in store.baseline_attempts("sim")] == ["crash", "ok"]
    rows = store.measurements("sim", "baseline")
    assert [row["error"] is None for row in rows] == [False, True], "each attempt on a fresh server, each recorded"
    assert rows[0]["log_path"] != rows[1]["log_path"]


@pytest.mark.stop_reason("baseline_failed", case="three_failures")
@pytest.mark.stop_reason("baseline_failed", case="duplicate")
def test_three_consecutive_baseline_failures_stop_the_run_and_an_identical_run_is_dropped(
        tmp_path, host, store, instance) -> None:
    # 5% of an H100 cannot hold the weights: every launch exits at startup (a crash, not an argv error).
    write_target(tmp_path / "targets", FAST + ["--gpu-memory-utilization", "0.05"])
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    job = defs.resolve_job_def("baseline_job")
    failed = job.execute_in_process(partition_key="sim", instance=instance, raise_on_error=False)
    assert not failed.success
    error = str(next(e for e in failed.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)
    assert "baseline_failed: after 3 consecutive failed attempt(s): crash" in error
    assert [row["outcome"] for row in store.baseline_attempts("sim")] == ["crash"] * 3
    assert len(store.measurements("sim", "baseline")) == 3
    assert [row["stop_reason"] for row in store.stops("sim")] == ["baseline_failed"]

    again = job.execute_in_process(partition_key="sim", instance=instance, raise_on_error=False)
    assert not again.success
    error = str(next(e for e in again.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)
    assert "dropped as a duplicate" in error
    assert len(store.measurements("sim", "baseline")) == 3, "a duplicate is dropped without a launch"


def run_trials(folder: Path, host, store, instance) -> dg.ExecuteInProcessResult:
    defs = build_defs(folder, host=host, store=store)
    assert defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance).success
    trials_job = dg.define_asset_job("trials_only", selection=["profile", "candidates", "trials"]).resolve(
        asset_graph=defs.resolve_asset_graph())
    return trials_job.execute_in_process(partition_key="sim", instance=instance)


@pytest.mark.parametrize("budget, reason", [
    # From a sequence cap of 4 under 16 streams the first candidate lifts the cap: +200%.
    pytest.param({"target_gain_pct": 50, "max_trials": 6}, "target_reached",
                 marks=pytest.mark.stop_reason("target_reached", case="running_estimate"), id="target_reached"),
    pytest.param({"time_budget_min": 0.001, "max_trials": 6}, "time_exhausted",
                 marks=pytest.mark.stop_reason("time_exhausted", case="time_budget"), id="time_exhausted"),
])
def test_the_climb_stops_for_the_reason_its_budget_gives(tmp_path, host, store, instance, budget, reason) -> None:
    write_target(tmp_path / "targets", SCALE_10 + ["--max-num-seqs", "4"], **budget)
    done = run_trials(tmp_path / "targets", host, store, instance)
    trials = done.asset_value("trials")
    assert trials.climb.stop_reason == reason
    if reason == "target_reached":
        assert trials.climb.best_gain_pct() >= 50, "the climb's running estimate, as the description says"
        assert len(trials.climb.trials) < 6, "it stopped before the trials ran out"
    else:
        assert len(trials.climb.trials) == 1, "the deadline is checked before the next trial starts"
    assert [row["stop_reason"] for row in store.stops("sim")] == [reason]
