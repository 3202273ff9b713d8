"""The anytime continuation on sim servers: once the rule plan is spent, the climb goes on with Optuna's
TPE over the plan's knobs, and each new trial says where it came from."""

from __future__ import annotations

import dagster as dg
import pytest

from hyperloom_assets.assets.trials import run_climb
from hyperloom_assets.core.report.tables import trials_table
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from benchmarks.support.sim_climbs import FAST, QUIET, baseline_and_roofline, climb_context, variant, write_target


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def test_the_continuation_takes_the_run_past_where_the_rule_plan_stopped(tmp_path, host, store, instance) -> None:
    # One planned variant; the budget allows two trials. Without the continuation the run stops
    # after the first with no_more_candidates (tests/assets/test_faults_sim.py); with it the trial
    # after it is the sampler's, judged by the same rules, with its provenance.
    write_target(tmp_path / "targets", FAST + ["--max-num-seqs", "4", "--enforce-eager"], QUIET, max_trials=2,
                 continuation="tpe")
    baseline, roofline = baseline_and_roofline(tmp_path / "targets", host, store, instance)
    target = TargetCatalog(folder=str(tmp_path / "targets")).target("sim")
    planned = variant("quiet-stats", "--disable-log-stats")
    result = run_climb(climb_context("continued"), target, host, BenchmarkClient(), store, baseline, roofline,
                       [planned])

    trials = result.climb.trials
    assert len(trials) == 2 and result.climb.stop_reason == "budget_exhausted", result.climb.stop_reason
    rows = trials_table(trials).rows  # the report's trials table
    assert [row["provenance"] for row in rows] == ["rules", "continuation:tpe"]
    for trial in trials[1:]:
        assert trial.name.startswith("continuation:tpe: ") and trial.launch_count >= 1, trial.decision.reason
        assert "warm-started with" in trial.variant.reason
    assert trials[0].argv != trials[1].argv, "the continuation launches a config of its own"
    stored = [row for row in store.trials(baseline.context_key)]
    assert [row["variant"]["sampler"] for row in stored] == [None, "tpe"], "the store keeps where each came from"
