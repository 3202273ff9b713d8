"""The Pareto frontier of a run's measurements: each stored row placed per GPU against per
user and named by its config, dominated points off the frontier, bursts never on it, and the
recommendation the frontier point within the SLO with the most throughput per GPU."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.config.targets import TargetSlo
from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.decisions.rule import Decision, Outcome
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.metrics import latency_of
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.report.markdown import _pareto
from hyperloom_assets.core.report.pareto import config_names, frontier, without_port
from hyperloom_assets.core.report.tables import pareto_table

BASE_ARGV = ["vllm", "serve", "m", "--port", "8001", "--max-num-seqs", "4"]
STACK_ARGV = ["vllm", "serve", "m", "--port", "8123", "--max-num-seqs", "16"]


def row(i: int, kind: str, tok_s: float, tpot_ms: float, concurrency: int = 8, argv=None, fingerprint=None,
        burst: bool = False) -> dict:
    step = tpot_ms / 1000
    records = [RequestRecord(ok=True, prompt_tokens=8, output_tokens=5, ttft_s=0.05, e2el_s=0.05 + 4 * step,
                             itl_s=[] if burst else [step] * 4) for _ in range(100)]
    latency = latency_of(records)
    return {"id": i, "kind": kind, "fingerprint": fingerprint, "argv": argv or BASE_ARGV,
            "measurement": {"output_throughput": tok_s, "tpot_p50_ms": latency.tpot_ms.p50,
                            "workload": {"concurrency": concurrency}, "latency": latency.model_dump(mode="json")}}


def trial(name: str, fingerprint: str, outcome: Outcome) -> TrialRecord:
    return TrialRecord(index=1, name=name, fingerprint=fingerprint, against="baseline", measurements=1, launches=[],
                       variant=Variant(name=name, provenance="seed_grid", reason="t"),
                       decision=Decision(outcome=outcome, reason="t"))


def test_ports_do_not_make_two_launches_different_configs() -> None:
    assert without_port(BASE_ARGV) == without_port([*BASE_ARGV[:4], "9999", *BASE_ARGV[5:]])
    assert without_port(["serve", "--port=8001", "--x"]) == ["serve", "--x"]


def test_trials_are_named_by_the_keepers_before_them() -> None:
    names = config_names([trial("cap", "a1", Outcome.KEEP), trial("chunk", "b2", Outcome.REVERT),
                          trial("eager", "c3", Outcome.KEEP)])
    assert names == {"a1": "cap", "b2": "cap + chunk", "c3": "cap + eager"}


def test_the_frontier_the_bursts_and_the_pick_within_the_slo() -> None:
    rows = [row(1, "baseline", 400, 10),                              # slow and interactive: on the frontier
            row(2, "trial", 900, 40, fingerprint="a1"),               # fast, TPOT 40 ms: outside the SLO
            row(3, "validation", 380, 12),                            # dominated by the baseline's own point
            row(4, "validation", 700, 20, argv=STACK_ARGV),           # the stack: within the SLO
            row(5, "sweep", 2000, 20, concurrency=64, argv=STACK_ARGV, burst=True)]  # no per-token TPOT
    found = frontier(rows, BASE_ARGV, {"a1": "cap"}, devices=2, slo=TargetSlo(tpot_ms=30, percentile=90))
    by_id = {p.measurement_id: p for p in found.points}
    assert [p.config for p in found.points] == ["baseline", "cap", "baseline", "stack", "stack"]
    assert by_id[4].tok_s_per_gpu == 350 and by_id[4].tok_s_per_user == pytest.approx(50.0)
    assert [p.measurement_id for p in found.frontier] == [2, 4, 1], "ordered by per-user rate"
    assert by_id[3].on_frontier is False
    assert by_id[5].on_frontier is False and by_id[5].tok_s_per_user is None and "one burst" in by_id[5].why_off
    assert by_id[2].meets_slo is False and by_id[4].meets_slo is True
    assert found.recommended.measurement_id == 4, "the fastest per GPU of the frontier within the SLO"
    assert found.slo_user_floor == pytest.approx(1000 / 30)
    table = pareto_table(found)
    assert [r["recommended"] for r in table.rows] == [False, False, False, True, False]
    text = "\n".join(_pareto(_inputs(found)))
    assert "Recommended for the SLO: **stack** at concurrency 8: 350.0 tok/s per GPU at 50.0 tok/s per user" in text
    assert "1 without a per-token TPOT left off it" in text


def test_without_an_slo_nothing_is_recommended() -> None:
    found = frontier([row(1, "baseline", 400, 10)], BASE_ARGV, {}, devices=1)
    assert found.recommended is None and found.points[0].meets_slo is None and found.points[0].on_frontier


def _inputs(found):
    class Inputs:  # the section reads only these two fields
        pareto = found
        pareto_plot = "pareto_frontier.png"
    return Inputs()
