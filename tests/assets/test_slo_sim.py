"""A target's latency SLO through a whole run on the sim: enough prompts per launch for the
percentile's bound (said in the run), the SLO verdict with its percentiles and bounds on
the baseline and on the validated stack, and the goodput objective from the trials to the
report."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.assets.trials import target_noise_key
from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.releases.identity import framework_identity
from hyperloom_assets.sim.predict import predict
from tests.conftest import SIM_MODEL


def earlier_noise(folder: Path, store) -> None:
    """Earlier runs' launch noise (a CV about 5%), so that a trial decides at its first look: at time
    scale 10 one relaunch of the best read 589 tok/s against 740, and three looks could not decide."""
    key = target_noise_key(TargetCatalog(folder=str(folder)).target("sim"), framework_identity("sim", None))
    store.record_launch_noise(noise_key=key, target="sim", run_id="earlier",
                              launch_means={f"c{i}": [100.0, 106.0, 95.0] for i in range(5)})


def test_the_baseline_and_the_stack_carry_the_slo_verdict_and_goodput_is_the_objective(tmp_path, host,
                                                                                     store) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL),
        "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "2"],
        "workload": {"kind": "random", "isl": 128, "osl": 16, "concurrency": 16, "num_prompts": 16},
        "repeats": 2, "max_trials": 1, "target_gain_pct": 1000, "profile": False, "sweep_concurrencies": [16],
        "search_space": {"args": {"--max-num-seqs": [16]}, "only": True},
        # Generous limits (simulated H100 ms): both configs meet them; the verdict's rules are unit-tested.
        "slo": {"ttft_ms": 60000, "e2e_ms": 120000, "percentile": 95}, "objective": "goodput"}))
    earlier_noise(folder, store)  # goodput's own, under its own key
    defs = build_defs(folder, host=host, store=store)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance)
        assert result.success
        base = instance.fetch_materializations(dg.AssetKey("baseline"), limit=1).records[0].asset_materialization
        stack = instance.fetch_materializations(dg.AssetKey("optimization_stack"), limit=1).records[0] \
            .asset_materialization
        report = instance.fetch_materializations(dg.AssetKey("final_report"), limit=1).records[0] \
            .asset_materialization
        logs = [e.message for e in instance.all_logs(result.run_id) if e.user_message]
    contract = result.asset_value("baseline").contract
    assert contract.num_prompts == 156, ("16 asked, 156 per round so that 2 rounds give a p95 verdict its power: "
                                         "311 requests (slo_power.requests_for_power)")
    assert contract.workload.slo.ttft_ms == 60000, "each round's goodput counts under the SLO"
    assert any("slo: 156 prompts per round (312 per launch over 2 repeats)" in m and "311 read a config at 80%" in m
               for m in logs)
    verdict = base.metadata["slo"].value
    assert verdict["met"] is True and verdict["percentile"] == 95 and verdict["launches"] == 1, verdict
    assert 0 < verdict["ttft_ms"] <= verdict["ttft_upper_ms"] <= 60000 and verdict["tpot_ms"] is None, verdict
    assert base.metadata["latency"].value["ttft_ms"]["count"] == 312
    assert verdict["requests"] == 312 and verdict["requests_for_power"] == 311, verdict
    final = stack.metadata["slo"].value
    assert final["met"] is True and final["launches"] == 2 and final["e2e_upper_ms"] <= 120000, final
    text = Path(report.metadata["report_path"].value).read_text()
    # Every request meets limits this generous, so goodput is the request rate: a 16th of the tok/s.
    trial = result.asset_value("trials").climb.trials[0]
    assert trial.objective == "goodput" and trial.mean == pytest.approx(trial.output_throughput / 16, rel=0.05), \
        "the climb compared goodputs"
    assert stack.metadata["objective"].value == "goodput" and stack.metadata["final_goodput"].value > 0
    assert trial.outcome == "KEEP" and trial.measurements == 1, trial.decision.reason
    stored = result.asset_value("optimization_stack")
    assert len(stored.stack_goodputs) == 2 and stack.metadata["final_goodput"].value == pytest.approx(
        stored.final_output_throughput / 16, rel=0.05), "the validated gain is of goodput"
    assert "good req/s** (the objective, goodput" in text and "| goodput gain |" in text, text
    assert ("SLO (p95, 95% upper bounds, launch by launch: TTFT <= 60000 ms, E2E <= 120000 ms): the baseline meets "
            "it; the final config meets it.") in text


# Simulated H100, 1024-token prompts at 64 concurrent streams (sim-predict, no noise): a cap of 64
# gives 945 tok/s at TPOT p95 59 ms and a cap of 32 887 tok/s at 30 ms, both over the SLO's
# 25 ms; the 512-token prefill chunk gives 891 tok/s at 16 ms, and the best config within the
# SLO (the chunk with either cap) 899 tok/s. Without the SLO the climb keeps the cap of 64.
# TTFT grows with the streams queued (sim-predict p95: 2407 ms at 64 streams and 10323 at 256 for
# the baseline, 1858 and 8176 for the chunked stack). Served over HTTP at time scale 10 a launch
# lasts under a second of wall time, so a few hundred wall milliseconds of lag on these 2 cores
# read as seconds of simulated TTFT (5459 ms against 1858 predicted, seen once): the TTFT limit
# of 7000 leaves room for that at 64 streams and is broken short of four times 64 either way.
SPACE = {"args": {"--max-num-seqs": [32, 64], "--max-num-batched-tokens": [512]}, "only": True}
TIGHT = {"engine": "sim", "model": str(SIM_MODEL),
         "server_args": ["--gpu", "H100", "--time-scale", "10", "--max-num-seqs", "16"],
         "workload": {"kind": "random", "isl": 1024, "osl": 32, "concurrency": 64, "num_prompts": 192},
         "repeats": 2, "max_trials": 3, "target_gain_pct": 1000, "profile": False, "sweep_concurrencies": [16],
         "search_space": SPACE, "slo": {"tpot_ms": 25, "ttft_ms": 7000, "percentile": 95, "capacity_probes": 4}}


def predicted(args: list[str]) -> tuple[float, float]:
    """(output tok/s, TPOT p95 ms) of the sim's own model for the target's workload, in simulated time."""
    m = predict(SIM_MODEL, "H100", args, Workload(**TIGHT["workload"]), repeats=2)
    return m.output_throughput, m.latency.tpot_ms.p95


def test_only_configs_within_the_slo_are_kept_and_the_stack_is_near_the_best_of_them(tmp_path, host, store) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump(TIGHT))
    earlier_noise(folder, store)
    defs = build_defs(folder, host=host, store=store)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance)
        assert result.success
        stack = instance.fetch_materializations(dg.AssetKey("optimization_stack"), limit=1).records[0] \
            .asset_materialization
        report = instance.fetch_materializations(dg.AssetKey("final_report"), limit=1).records[0] \
            .asset_materialization
    report_text = Path(report.metadata["report_path"].value).read_text()
    climb = result.asset_value("trials").climb
    rows = [(t.name, t.outcome, t.slo.short() if t.slo else None) for t in climb.trials]
    assert all(t.slo is not None for t in climb.trials if t.measurements), rows
    assert all(t.slo.met for t in climb.trials if t.outcome == "KEEP"), rows
    # The planner reads the sim's telemetry, so the order varies: the cap of 64 on the baseline's
    # config breaks the SLO; on top of the kept chunk it meets it (TPOT 16 ms) and may be kept.
    alone = [t for t in climb.trials if t.name == "--max-num-seqs=64" and t.against == "baseline"]
    assert all(t.outcome == "REVERT" and t.decision.reason.startswith("slo_missed") for t in alone), rows
    assert all(t.outcome == "REVERT" and t.decision.reason.startswith("slo_missed")
               for t in climb.trials if t.slo and not t.slo.met), rows
    assert stack.metadata["slo"].value["met"] is True, stack.metadata["slo"].value
    base_args = TIGHT["server_args"][4:]
    final_args = [*base_args, *[a for k in climb.keepers for a in k.add_args]]
    best_within = max(predicted([*base_args, *cap, *chunk])[0]
                      for cap in ([], ["--max-num-seqs", "32"], ["--max-num-seqs", "64"])
                      for chunk in ([], ["--max-num-batched-tokens", "512"])
                      if predicted([*base_args, *cap, *chunk])[1] <= 25)
    assert predicted(final_args)[0] >= 0.9 * best_within and predicted(final_args)[1] <= 25, (final_args, rows)
    capacity = stack.metadata["capacity_at_slo"].value
    assert capacity["unit"] == "concurrency" and capacity["at_ceiling"] == [], capacity
    assert 0 < capacity["baseline"] < 256 and 0 < capacity["stack"] < 256, capacity
    assert f"the baseline serves {capacity['baseline']:g} concurrent streams within it" in report_text, report_text
    assert f"the stack {capacity['stack']:g}" in report_text, report_text
    # Every measurement on one plane, the trials that broke the SLO and the capacity probes included;
    # the pick is the most throughput per GPU of the points that meet the SLO (with a per-token TPOT),
    # read off the rows alone, whatever either frontier holds.
    pick = report.metadata["recommended"].value
    frontier = report.metadata["pareto_frontier"].value.records
    assert pick["meets_slo"] is True and pick["config"] in ("stack", "--max-num-batched-tokens=512"), pick
    assert any(r.data["kind"] == "capacity" for r in frontier) and any(r.data["meets_slo"] == "no" for r in frontier)
    best = max((r.data for r in frontier if r.data["meets_slo"] == "yes" and r.data["tok_s_per_user"] is not None),
               key=lambda r: r["tok_s_per_gpu"])
    assert best["measurement_id"] == pick["measurement_id"] and best["recommended"] is True, (best, pick)
    # Each point is named by the config it measured, whatever step measured it: the baseline's later
    # launches (a validation pair's base side, its sweep and capacity rounds) are the baseline's.
    named = {(r.data["kind"], r.data["config"]) for r in frontier}
    assert {("validation", "baseline"), ("sweep", "baseline"), ("capacity", "baseline")} <= named, named
    assert not climb.keepers or {("validation", "stack"), ("sweep", "stack"), ("capacity", "stack")} <= named, named
    assert all(r.data["config"] != "unrecorded" for r in frontier), named
    assert any(r.data["kind"] == "trial" and r.data["meets_slo"] == "no" for r in frontier)
    assert f"Recommended for the SLO: **{pick['config']}** at concurrency {pick['concurrency']}" in report_text
    assert Path(report.metadata["plot_pareto"].value).stat().st_size > 0
