"""The climb's wiring against real sim servers: a crashing candidate is FAILED with its
error class and the next candidate runs; a worse one is reverted; a better one is kept.
(A/A against noise is the decision rule's business: tests/unit/test_climb.py and
benchmarks/noise.py, where the noise is controlled rather than the machine's.)"""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace

import dagster as dg
import yaml

from hyperloom_assets.assets.trials import run_climb
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from tests.conftest import SIM_MODEL


def variant(name: str, *args: str) -> Variant:
    return Variant(name=name, add_args=list(args), provenance="seed_grid", reason="test")


def test_a_crash_is_failed_the_next_runs_a_worse_one_reverts(tmp_path, host, store) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL),
        "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"],
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
        "repeats": 3, "max_trials": 3, "target_gain_pct": 1000}))
    defs = build_defs(folder, host=host, store=store)
    with dg.instance_for_test() as instance:
        done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance)
        baseline, roofline = done.asset_value("baseline"), done.asset_value("roofline")
    events: list = []
    context = SimpleNamespace(partition_key="sim", run=SimpleNamespace(run_id="climb-test"),
                              log=logging.getLogger("climb-test"), log_event=events.append)
    plan = [variant("crash", "--bogus-knob", "1"), variant("worse", "--max-num-seqs", "3"),
            variant("cap", "--max-num-seqs", "16")]
    target = TargetCatalog(folder=str(folder)).target("sim")
    result = run_climb(context, target, host, BenchmarkClient(), store, baseline, roofline, plan)
    trials = result.climb.trials
    assert [(t.name, t.outcome) for t in trials] == [("crash", "FAILED"), ("worse", "REVERT"), ("cap", "KEEP")]
    assert trials[0].error_class == "argv_invalid"
    assert trials[0].telemetry is None and all(t.telemetry.engine == "vllm" for t in trials[1:]), "sim-serve's /metrics"
    assert [k.name for k in result.climb.keepers] == ["cap"]
    assert len(events) == 3, "each trial is an event of its own"
    assert [row["outcome"] for row in store.trials(baseline.context_key)] == ["FAILED", "REVERT", "KEEP"]


def test_launch_noise_from_earlier_runs_lets_the_first_look_decide(tmp_path, host, store) -> None:
    from hyperloom_assets.assets.trials import target_noise_key

    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL),
        "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4"],
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
        "repeats": 3, "max_trials": 1, "target_gain_pct": 1000}))
    defs = build_defs(folder, host=host, store=store)
    with dg.instance_for_test() as instance:
        done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance)
        baseline, roofline = done.asset_value("baseline"), done.asset_value("roofline")
    target = TargetCatalog(folder=str(folder)).target("sim")
    key = target_noise_key(target, baseline.framework_version)
    store.record_launch_noise(noise_key=key, target="sim", run_id="earlier",
                              launch_means={f"c{i}": [100.0, 103.0, 98.0] for i in range(5)})
    context = SimpleNamespace(partition_key="sim", run=SimpleNamespace(run_id="with-history"),
                              log=logging.getLogger("climb-test"), log_event=lambda event: None)
    result = run_climb(context, target, host, BenchmarkClient(), store, baseline, roofline,
                       [variant("cap", "--max-num-seqs", "16")])
    trial = result.climb.trials[0]
    assert result.launch_noise_dof == 10
    assert trial.outcome == "KEEP" and trial.measurements == 1 and trial.best_launches == [], "kept on its first look"
    assert trial.launch_count == 2, "its one launch, then the stack's rebench on a fresh server"
    history = store.launch_noise_history(key, timedelta(days=1))
    assert len(history) == 6 and len(history[-1]) == 2, "the keeper's launch and its rebench: one config twice"
