"""The search-quality benchmark's pure pieces: intervals, TPE's tuned start-up, the noise on
everything a launch reports, the history prior, SLO scoring and a search_space's grid."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from benchmarks.support.intervals import median_interval, paired_difference
from benchmarks.support.launch_noise import Noise, noisy_latency, noisy_telemetry
from benchmarks.support.offline_climb import SimScenario
from benchmarks.support.quality_summary import summarise
from benchmarks.support.search_space import Launches, Logged, Space, pick_at
from benchmarks.support.searchers import history_prior
from benchmarks.support.sim_grid import config_key, grid_families, grid_points
from benchmarks.support.tpe_tuning import choose_startup, startup_candidates
from hyperloom_assets.core.config.search_space import SearchSpace
from hyperloom_assets.core.config.targets import TargetSlo, Workload
from hyperloom_assets.core.planning.planner import PlanEvidence
from hyperloom_assets.sim.predict import predict

MODEL = Path(__file__).resolve().parents[2] / "models" / "llama-3-8b"
WORKLOAD = Workload(kind="random", isl=128, osl=32, concurrency=16, num_prompts=96)
NOISE = Noise(launch_sd=0.05, repeat_sd=0.03)
CAPS = ["4", "8", "64"]


def scenario(**fields) -> SimScenario:
    return SimScenario(**{"name": "small", "model": MODEL, "gpu": "H100", "server_args": ["--max-num-seqs", "4"],
                          "workload": WORKLOAD, **fields})


def small_space(slo: TargetSlo | None = None) -> Space:
    """Three caps of a small 8B, their truths the sim's (a few hundredths of a second each)."""
    s = scenario(slo=slo)
    points = [[*s.target().server_args[:6], "--max-num-seqs", cap] for cap in CAPS]
    truth = {config_key(s, argv): predict(MODEL, "H100", argv, WORKLOAD, repeats=1) for argv in points}
    return Space(scenario=s, families={}, points=points, truth=truth, keys=list(truth))


def test_the_bootstrap_interval_is_fixed_by_its_seed_and_holds_the_median() -> None:
    shares = [0.2, 0.9, 0.5, 0.7, 0.95, 0.6, 0.8, 0.4]
    first, again = median_interval(shares), median_interval(shares)
    assert first == again
    assert first["low"] <= first["median"] <= first["high"] and first["median"] == pytest.approx(0.65)
    assert median_interval([0.5] * 20) == {"median": 0.5, "low": 0.5, "high": 0.5}


def test_a_paired_difference_resamples_seeds_together() -> None:
    a = [0.1, 0.5, 0.9, 0.3, 0.7]
    same = paired_difference(a, a)
    assert (same["diff"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
    shifted = paired_difference([v + 0.1 for v in a], a)
    assert shifted["diff"] == pytest.approx(0.1) and shifted["low"] == pytest.approx(0.1)
    with pytest.raises(ValueError):
        paired_difference(a, a[:3])


def test_behind_lists_the_budgets_below_tuned_tpe_with_their_interval() -> None:
    shares = {"planner+history": {5: [0.5] * 10, 10: [1.0] * 10}, "planner": {5: [0.9] * 10, 10: [1.0] * 10},
              "tpe": {5: [0.6] * 10, 10: [0.6] * 10}, "tpe-tuned": {5: [0.8] * 10, 10: [0.9] * 10}}
    row = summarise(shares)
    assert row["behind_tuned_tpe"] == [{"searcher": "planner+history", "against": "tpe-tuned", "budget": 5,
                                        "diff": -0.3, "low": -0.3, "high": -0.3, "clearly": True}]
    assert row["ahead_of_tpe"]["planner+history"] == {5: False, 10: True}
    assert row["vs_tuned_tpe"]["planner"]["tpe-tuned"][10]["diff"] == pytest.approx(0.1)


def test_tuned_start_up_counts_leave_tpe_half_the_budget_and_ties_go_to_the_larger() -> None:
    assert startup_candidates(5) == [2, 3]
    assert startup_candidates(10) == [2, 3, 5]
    assert startup_candidates(40) == [2, 3, 5, 10, 20]
    assert choose_startup({2: [0.5, 0.7], 3: [0.9, 0.9], 5: [0.8, 0.8]}) == 3
    assert choose_startup({2: [0.9], 5: [0.9]}) == 5


def test_launch_noise_reaches_latency_and_telemetry_and_is_common_to_searchers() -> None:
    space = small_space()
    argv = space.points[2]
    truth = space.truth[space.key(argv)]
    one, other = Launches(space, NOISE, seed=3, budget=5), Launches(space, NOISE, seed=3, budget=5)
    first, same = one.measurement(argv), other.measurement(argv)
    assert first == same, "the same seed, point and nth launch: the same numbers for every searcher"
    assert one.measurement(argv) != first, "the second launch of a point is a fresh draw"
    ratio = first.latency.tpot_ms.p95 / truth.latency.tpot_ms.p95
    assert ratio != pytest.approx(1.0, abs=1e-9)
    assert first.latency.ttft_ms.p50 / truth.latency.ttft_ms.p50 == pytest.approx(ratio)
    assert first.latency.tpot_ms.p95_upper / truth.latency.tpot_ms.p95_upper == pytest.approx(ratio)
    assert first.tpot_p50_ms / truth.tpot_p50_ms == pytest.approx(ratio)
    assert first.telemetry.running_mean != truth.telemetry.running_mean
    assert first.telemetry.decode_s != truth.telemetry.decode_s


def test_noisy_telemetry_keeps_counts_whole_percentages_bounded_and_missing_fields_missing() -> None:
    truth = small_space().truth
    telemetry = next(iter(truth.values())).telemetry.model_copy(update={"kv_usage_pct_max": 99.9, "prefix_hits": 12_000,
                                                                       "waiting_max": None})
    loud = Noise(launch_sd=0.5, repeat_sd=0.5)
    for seed in range(20):
        t = noisy_telemetry(telemetry, random.Random(seed), loud)
        assert 0 <= t.kv_usage_pct_max <= 100 and t.waiting_max is None
        assert isinstance(t.preemptions, int) and t.prefix_hits <= t.prefix_queries
    assert noisy_telemetry(telemetry, random.Random(1), Noise(0.0, 0.0)) == telemetry
    latency = next(iter(truth.values())).latency
    assert noisy_latency(latency, 1.0) == latency and noisy_latency(None, 2.0) is None


def test_the_history_prior_pools_earlier_launches_of_other_points() -> None:
    space = small_space()
    prior = history_prior(space, NOISE, seed=4)
    assert prior is not None and prior.dof >= 6
    assert history_prior(space, NOISE, seed=4) == prior and history_prior(space, NOISE, seed=5) != prior
    assert 0.01 < prior.variance ** 0.5 < 0.2, prior


def test_under_an_slo_the_best_is_the_best_feasible_point_and_a_broken_pick_scores_zero() -> None:
    free = small_space()
    tpot = {argv[-1]: free.truth[free.key(argv)].latency.tpot_ms.p95 for argv in free.points}
    limit = (tpot["8"] + tpot["64"]) / 2
    assert tpot["4"] < limit < tpot["64"], tpot
    space = small_space(TargetSlo(tpot_ms=limit, percentile=95))
    fast, middle = space.points[2], space.points[1]
    assert space.best == space.value(middle) < space.best_unconstrained
    assert space.share(fast) == 0.0 and space.share(middle) == pytest.approx(1.0)
    assert space.excess(space.truth[space.key(fast)])[0] > 0
    log = [Logged("base", space.points[0], 1.0), Logged("fast", fast, 9.0, meets=False), Logged("mid", middle, 5.0)]
    assert pick_at(log, 3) == middle and pick_at(log, 2) == space.points[0]


def test_a_search_space_is_searched_as_the_planner_lays_it_over_the_grid() -> None:
    only = scenario(search_space=SearchSpace(args={"--max-num-seqs": [16, 64], "--async-scheduling": [True]}, only=True))
    families, refused = grid_families(only, PlanEvidence())
    assert list(families) == ["--max-num-seqs", "--async-scheduling"] and not refused
    assert [v.provenance for v in families["--async-scheduling"]] == ["search_space"]
    assert len(grid_points(only, families)) == 6
    beside = scenario(search_space=SearchSpace(args={"--async-scheduling": [True]}))
    wide, _ = grid_families(beside, PlanEvidence())
    assert "--async-scheduling" in wide and "--max-num-batched-tokens" in wide
    assert any(v.provenance == "ablation" for v in wide["--max-num-seqs"])
    atom = SimScenario(name="atom", model=MODEL, gpu="MI300X", flavor="atom", workload=WORKLOAD,
                       server_args=["--max-num-seqs", "16"],
                       search_space=SearchSpace(args={"--block-size": [32], "--cudagraph-mode": ["PIECEWISE"]}))
    found, _ = grid_families(atom, PlanEvidence())
    assert {"--block-size", "--cudagraph-mode", "--level"} <= set(found)


def test_the_page_shows_intervals_the_difference_from_tuned_tpe_and_the_behind_list() -> None:
    import json

    from benchmarks.support.page_sections import search_quality

    shares = {"planner+history": {5: [0.5, 0.6, 0.55]}, "planner": {5: [0.5, 0.6, 0.55]}, "tpe": {5: [0.4] * 3},
              "tpe-tuned": {5: [0.8, 0.9, 0.85]}, "random": {5: [0.3] * 3}}
    row = json.loads(json.dumps({"scenario": "s", **summarise(shares)}))  # as read back from the file
    header, rows = search_quality({"budgets": [5], "scenarios": [row]})
    assert header[2] == "planner+history median share [95%]" and "tpe-tuned median share [95%]" in header
    assert rows[0][2].startswith("0.550 [") and rows[0][-2].startswith("-0.300 [")
    assert rows[0][-1] == "tpe-tuned (interval below 0)"


def test_a_calibrated_scenario_takes_its_gpus_packaged_profile_for_its_flavor_or_none() -> None:
    from benchmarks.support.calibrated_scenarios import calibrated, uncalibrated
    from hyperloom_assets.sim.calibration import PROFILES_DIR, load_profile

    on_h100 = calibrated(scenario())
    assert on_h100.calibration_profile == "h100-vllm.yaml"
    assert on_h100.sim_calibration == load_profile(PROFILES_DIR / "h100-vllm.yaml").parameters
    assert uncalibrated(on_h100) == scenario(), "the twin is the scenario as it was"
    for other in (scenario(gpu="B200"), scenario(flavor="sglang")):
        assert calibrated(other) == other, "no packaged profile: the perf model's constants"


def test_the_continued_planner_is_held_against_gp_too_and_the_wide_space_has_eight_knobs() -> None:
    from benchmarks.support.quality_scenarios import wide_scenarios

    shares = {"planner+continuation": {80: [0.9] * 4}, "planner+history": {80: [0.8] * 4}, "tpe": {80: [0.7] * 4},
              "tpe-tuned": {80: [0.85] * 4}, "gp": {80: [0.95] * 4}}
    row = summarise(shares)
    assert [(b["searcher"], b["against"]) for b in row["behind_tuned_tpe"]] == [
        ("planner+continuation", "gp"), ("planner+history", "tpe-tuned"), ("planner+history", "gp")]
    families, refused = grid_families(wide_scenarios()[0], PlanEvidence())
    assert len(families) >= 8 and not refused
