"""The Pareto frontier of a run's measurements: each stored row placed per GPU against per
user and named by the config it measured (by fingerprint, whatever step measured it),
dominated points off the frontier, bursts never on it, and the recommendation the point
within the SLO with the most throughput per GPU, on the frontier of the points within it."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.config.targets import TargetSlo
from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.decisions.rule import Decision, Outcome
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.metrics import latency_of
from hyperloom_assets.core.planning.fingerprints import BASELINE_FINGERPRINT
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.report.markdown import _pareto
from hyperloom_assets.core.report.pareto import ConfigNames, config_names, frontier
from hyperloom_assets.core.report.plots import pareto_title
from hyperloom_assets.core.report.tables import pareto_table

BASE_ARGV = ["vllm", "serve", "m", "--port", "8001", "--max-num-seqs", "4"]
STACK_ARGV = ["vllm", "serve", "m", "--port", "8123", "--max-num-seqs", "16"]
STACK = "5t5t5t5t5t5t5t5t"  # the final stack's fingerprint


def row(i: int, kind: str, tok_s: float, tpot_ms: float, concurrency: int = 8, argv=None, fingerprint=None,
        burst: bool = False, ttft_ms: float = 50.0) -> dict:
    step, ttft = tpot_ms / 1000, ttft_ms / 1000
    records = [RequestRecord(ok=True, prompt_tokens=8, output_tokens=5, ttft_s=ttft, e2el_s=ttft + 4 * step,
                             itl_s=[] if burst else [step] * 4) for _ in range(100)]
    latency = latency_of(records)
    return {"id": i, "kind": kind, "fingerprint": fingerprint, "argv": argv or BASE_ARGV,
            "measurement": {"output_throughput": tok_s, "tpot_p50_ms": latency.tpot_ms.p50,
                            "workload": {"concurrency": concurrency}, "latency": latency.model_dump(mode="json")}}


def trial(name: str, fingerprint: str, outcome: Outcome) -> TrialRecord:
    return TrialRecord(index=1, name=name, fingerprint=fingerprint, against="baseline", measurements=1, launches=[],
                       variant=Variant(name=name, provenance="seed_grid", reason="t"),
                       decision=Decision(outcome=outcome, reason="t"))


def test_trials_are_named_by_the_keepers_before_them() -> None:
    names = config_names([trial("cap", "a1", Outcome.KEEP), trial("chunk", "b2", Outcome.REVERT),
                          trial("eager", "c3", Outcome.KEEP)])
    assert names == {"a1": "cap", "b2": "cap + chunk", "c3": "cap + eager"}


def test_the_frontier_the_bursts_and_the_pick_within_the_slo() -> None:
    rows = [row(1, "baseline", 400, 10),                              # slow and interactive: on the frontier
            row(2, "trial", 900, 40, fingerprint="a1"),               # fast, TPOT 40 ms: outside the SLO
            row(3, "validation", 380, 12, fingerprint=BASELINE_FINGERPRINT),  # dominated by the baseline's own point
            row(4, "validation", 700, 20, argv=STACK_ARGV, fingerprint=STACK),  # the stack: within the SLO
            row(5, "sweep", 2000, 20, concurrency=64, argv=STACK_ARGV, fingerprint=STACK, burst=True)]  # no TPOT
    found = frontier(rows, ConfigNames(stack=STACK, trials={"a1": "cap"}), devices=2,
                     slo=TargetSlo(tpot_ms=30, percentile=90))
    by_id = {p.measurement_id: p for p in found.points}
    assert [p.config for p in found.points] == ["baseline", "cap", "baseline", "stack", "stack"]
    assert by_id[4].tok_s_per_gpu == 350 and by_id[4].tok_s_per_user == pytest.approx(50.0)
    assert [p.measurement_id for p in found.frontier] == [2, 4, 1], "ordered by per-user rate"
    assert by_id[3].on_frontier is False
    assert by_id[5].on_frontier is False and by_id[5].tok_s_per_user is None and "one burst" in by_id[5].why_off
    assert by_id[2].meets_slo is False and by_id[4].meets_slo is True
    assert [p.measurement_id for p in found.slo_frontier] == [4, 1], "within the SLO, the burst left off"
    assert found.recommended.measurement_id == 4, "the fastest per GPU within the SLO: 350 per GPU, against 200"
    assert found.slo_user_floor == pytest.approx(1000 / 30)
    table = pareto_table(found)
    assert [r["recommended"] for r in table.rows] == [False, False, False, True, False]
    assert [r["on_slo_frontier"] for r in table.rows] == [True, False, False, True, False]
    assert [r["fingerprint"] for r in table.rows] == [BASELINE_FINGERPRINT, "a1", BASELINE_FINGERPRINT, STACK, STACK]
    text = "\n".join(_pareto(_inputs(found)))
    assert "Recommended for the SLO: **stack** at concurrency 8: 350.0 tok/s per GPU at 50.0 tok/s per user" in text
    assert "1 without a per-token TPOT left off it" in text


def test_without_an_slo_nothing_is_recommended() -> None:
    found = frontier([row(1, "baseline", 400, 10)], ConfigNames(), devices=1)
    assert found.recommended is None and found.points[0].meets_slo is None and found.points[0].on_frontier
    assert not found.points[0].on_slo_frontier and found.slo_frontier == []


def test_the_pick_is_the_fastest_within_the_slo_though_a_point_outside_it_dominates_it() -> None:
    # The SLO limits TTFT, which is no axis: A breaks it and dominates B, which meets it.
    # Picked off the frontier of every point, the report would recommend C at a ninth of B.
    slo = TargetSlo(ttft_ms=500, tpot_ms=30, percentile=90)
    rows = [row(1, "trial", 1000, 10, fingerprint="aa", ttft_ms=2000),  # A: 1,000 tok/s, TTFT 2 s
            row(2, "trial", 900, 12, fingerprint="bb"),                  # B: 900 tok/s within the SLO
            row(3, "trial", 100, 5, fingerprint="cc")]                   # C: 100 tok/s within it, most per user
    found = frontier(rows, ConfigNames(trials={"aa": "A", "bb": "B", "cc": "C"}), devices=1, slo=slo)
    by_name = {p.config: p for p in found.points}
    assert by_name["A"].meets_slo is False and by_name["B"].meets_slo and by_name["C"].meets_slo
    assert [p.config for p in found.frontier] == ["A", "C"], "B is dominated by A among every point"
    assert [p.config for p in found.slo_frontier] == ["B", "C"]
    assert found.recommended.config == "B" and found.recommended.tok_s_per_gpu == 900
    assert "Recommended for the SLO: **B** at concurrency 8: 900.0 tok/s per GPU" in "\n".join(_pareto(_inputs(found)))


def test_each_point_is_named_by_the_config_it_measured_whatever_step_measured_it() -> None:
    # Store-like rows: the baseline's launch carries the profiler's flag, so no other launch of its
    # config has its argv; every later launch of it (the best's relaunch, a validation pair's
    # base side, its sweep and capacity rounds) is the baseline, by its fingerprint.
    profiled = [*BASE_ARGV, "--profiler-config", "{}"]
    rows = [row(1, "baseline", 400, 10, argv=profiled),
            row(2, "best_relaunch", 405, 10),                                  # the climb records no fingerprint
            row(3, "trial", 700, 20, argv=STACK_ARGV, fingerprint="a1"),       # the keeper's trial: the stack's config
            row(4, "trial", 650, 18, fingerprint="b2"),                        # a reverted trial on top of it
            row(5, "best_relaunch", 690, 20, argv=STACK_ARGV, fingerprint="a1"),
            row(6, "validation", 395, 10, fingerprint=BASELINE_FINGERPRINT),  # a pair's base side
            row(7, "validation", 710, 20, argv=STACK_ARGV, fingerprint="a1"),
            row(8, "sweep", 800, 30, concurrency=32, fingerprint=BASELINE_FINGERPRINT),  # the baseline's sweep
            row(9, "sweep", 2850, 12, concurrency=32, argv=STACK_ARGV, fingerprint="a1"),
            row(10, "capacity", 420, 11, fingerprint=BASELINE_FINGERPRINT),
            row(11, "validation", 700, 20, argv=STACK_ARGV)]                   # stored before rows named their config
    names = ConfigNames(stack="a1", trials=config_names([trial("cap", "a1", Outcome.KEEP),
                                                         trial("chunk", "b2", Outcome.REVERT)]))
    found = frontier(rows, names, devices=1)
    assert [p.config for p in found.points] == ["baseline", "baseline", "stack", "cap + chunk", "stack", "baseline",
                                                "stack", "baseline", "stack", "baseline", "unrecorded"]
    assert [r["config"] for r in pareto_table(found).rows if r["kind"] == "sweep"] == ["baseline", "stack"]


def test_the_plot_speaks_of_an_slo_only_when_the_target_has_one() -> None:
    point = [row(1, "baseline", 400, 10)]
    assert "SLO" not in pareto_title(frontier(point, ConfigNames(), devices=1))
    assert "outside the SLO" in pareto_title(frontier(point, ConfigNames(), devices=1, slo=TargetSlo(tpot_ms=30)))


def _inputs(found):
    class Inputs:  # the section reads only these two fields
        pareto = found
        pareto_plot = "pareto_frontier.png"
    return Inputs()
