"""Per-request latency percentiles: the four metrics at p50/p90/p95/p99 per round and pooled
over a launch's rounds, in the engine's time for a sim, the warning when a stream came as
one burst so that TPOT and interactivity are not per-token, and the SLO verdict on them."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.config.targets import TargetSlo
from hyperloom_assets.core.measurement.engine_time import to_engine_time
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.metrics import latency_of, repeat_metrics, summarize
from hyperloom_assets.core.measurement.slo_verdict import prompts_for_bound, slo_verdict
from hyperloom_assets.core.report.markdown import measurement_warnings, run_measurement_warnings, slo_text
from hyperloom_assets.core.report.tables import sweep_rows


def streamed(ttft_s: float, step_s: float, tokens: int = 5) -> RequestRecord:
    """A request whose tokens arrived one per chunk, `step_s` apart."""
    return RequestRecord(ok=True, prompt_tokens=8, output_tokens=tokens, ttft_s=ttft_s,
                         e2el_s=ttft_s + step_s * (tokens - 1), itl_s=[step_s] * (tokens - 1))


def burst(ttft_s: float, tokens: int = 5) -> RequestRecord:
    """A request whose whole output arrived in one chunk, 10 microseconds of parsing apart."""
    return RequestRecord(ok=True, prompt_tokens=8, output_tokens=tokens, ttft_s=ttft_s, e2el_s=ttft_s + 1e-5, itl_s=[])


def test_percentiles_of_each_metric_from_the_requests() -> None:
    records = [streamed(ttft_s=0.01 * i, step_s=0.002 * i) for i in range(1, 101)]
    latency = latency_of(records + [RequestRecord(ok=False, prompt_tokens=8, error="x")])
    assert latency.ttft_ms.count == 100 and latency.tpot_ms.count == 100 and latency.itl_ms.count == 400
    assert latency.ttft_ms.p50 == pytest.approx(505.0) and latency.ttft_ms.p99 == pytest.approx(990.1)
    assert latency.ttft_ms.p90 == pytest.approx(901.0) and latency.ttft_ms.p95 == pytest.approx(950.5)
    assert latency.tpot_ms.p99 == pytest.approx(198.02)
    assert latency.e2el_ms.p50 == pytest.approx(505.0 + 4 * 101.0)
    assert latency.warnings() == []
    # 100 requests bound p90 and p95 (the 96th and 99th smallest), not p99, which needs 299.
    assert latency.ttft_ms.p90_upper == pytest.approx(960.0) and latency.ttft_ms.p95_upper == pytest.approx(990.0)
    assert latency.ttft_ms.p99_upper is None and latency.itl_ms.p99_upper is not None
    assert latency_of([RequestRecord(ok=False, prompt_tokens=8, error="x")]) is None


def test_a_round_reports_them_and_a_launch_pools_its_rounds_requests() -> None:
    fast = [streamed(0.01, 0.001) for _ in range(50)]
    slow = [streamed(0.10, 0.010) for _ in range(50)]
    rounds = [repeat_metrics(fast, 1.0), repeat_metrics(slow, 1.0)]
    assert rounds[0].latency.ttft_ms.p99 == pytest.approx(10.0) and rounds[0].ttft_p99_ms == pytest.approx(10.0)
    pooled = summarize(rounds, fast + slow)
    assert pooled.latency.ttft_ms.count == 100
    assert pooled.latency.ttft_ms.p99 == pytest.approx(100.0), "the launch's p99 is of its requests, not a mean of rounds"
    assert pooled.ttft_p99_ms == pytest.approx(100.0), "the flat p99 is the pooled one, as vLLM's (issue 47, point 8)"
    assert [r.ttft_p99_ms for r in pooled.repeats] == pytest.approx([10.0, 100.0]), "each round keeps its own"
    assert summarize(rounds).latency is None, "no records, no pooled percentiles"


def test_a_sims_percentiles_are_in_its_engines_time() -> None:
    records = [streamed(0.01, 0.001) for _ in range(40)]
    wall = summarize([repeat_metrics(records, 1.0)], records)
    engine = to_engine_time(wall, 20.0)
    assert engine.latency.tpot_ms.p99 == pytest.approx(20.0) and engine.latency.tpot_ms.count == 40
    assert engine.repeats[0].latency.ttft_ms.p50 == pytest.approx(200.0)
    assert engine.latency.tpot_ms.p90_upper == pytest.approx(20.0) and engine.latency.tpot_ms.p99_upper is None


def test_streams_that_came_as_one_burst_are_flagged_in_the_run_the_sweep_and_the_report() -> None:
    records = [burst(0.05) for _ in range(6)] + [streamed(0.05, 0.01) for _ in range(4)]
    m = summarize([repeat_metrics(records, 1.0)], records)
    assert m.latency.bursts == 6 and m.latency.streams == 10
    [warning] = m.latency.warnings()
    assert "6 of 10 streams arrived as one burst" in warning and "not per-token" in warning
    assert measurement_warnings("baseline", m) == [f"baseline: {warning}"]
    assert sweep_rows("baseline", [(8, m)])[0]["latency_warning"] == warning
    row = {"run_id": "r", "measurement": m.model_dump(mode="json"), "kind": "sweep", "id": 7, "fingerprint": None}
    assert run_measurement_warnings([row, {**row, "id": 8}], "r")[-1].startswith("2 later measurement(s) of this run "
                                                                                 "(sweep 7, sweep 8): most streams")
    few = [burst(0.05) for _ in range(4)] + [streamed(0.05, 0.01) for _ in range(6)]
    assert latency_of(few).warnings() == [], "under half of the streams: TPOT still mostly per-token"


def test_chunks_flushed_together_are_flagged_by_the_floor_in_the_engines_time() -> None:
    """The demo's baseline sweep: every token its own chunk, all 4 microseconds apart."""
    flushed = latency_of([streamed(0.6, 4e-6, tokens=32) for _ in range(10)])
    assert flushed.bursts == 0
    [warning] = flushed.warnings()
    assert "TPOT p50 0.004 ms is under any decode step (0.1 ms)" in warning
    # A sim at time scale 100 with 5 ms steps streams 0.05 ms apart on the wall clock:
    # in its engine's time, where warnings are read, that is a real decode step.
    records = [streamed(0.01, 5e-5, tokens=32) for _ in range(10)]
    sped_up = summarize([repeat_metrics(records, 1.0)], records)
    assert sped_up.latency.warnings() and to_engine_time(sped_up, 100.0).latency.warnings() == []


def test_an_slo_is_met_only_when_every_launchs_bound_holds() -> None:
    slo = TargetSlo(ttft_ms=600.0, tpot_ms=50.0, percentile=90)
    quick = latency_of([streamed(ttft_s=0.005 * i, step_s=0.01) for i in range(1, 101)])  # TTFT p90 bound 480 ms
    slow = latency_of([streamed(ttft_s=0.007 * i, step_s=0.01) for i in range(1, 101)])  # 672 ms
    met = slo_verdict(slo, [quick])
    assert met.met and met.ttft_upper_ms == pytest.approx(480.0) and met.ttft_ms == pytest.approx(450.5)
    assert met.e2e_ms is None and met.launches == 1
    missed = slo_verdict(slo, [quick, slow])
    assert not missed.met and missed.ttft_upper_ms == pytest.approx(672.0), "the worst launch decides"
    assert "ttft_ms p90 upper bound 672 ms > 600 ms" in missed.why
    few = slo_verdict(TargetSlo(tpot_ms=50.0), [latency_of([streamed(0.01, 0.01) for _ in range(100)])])
    assert not few.met and "a p99 bound needs 299" in few.why, "100 requests cannot show a p99 with confidence"
    assert not slo_verdict(slo, [None]).met
    said = slo_text(slo, missed, met)
    assert said.startswith("SLO (p90, 95% upper bounds, launch by launch: TTFT <= 600 ms, TPOT <= 50 ms): the baseline "
                           "does not (ttft_ms p90 upper bound 672 ms > 600 ms")
    assert said.endswith("; the final config meets it.")


def test_an_slo_asks_enough_prompts_per_launch_for_its_bound() -> None:
    assert prompts_for_bound(99, 3) == 100 and prompts_for_bound(99, 2) == 150 and prompts_for_bound(90, 1) == 29
    with pytest.raises(ValueError, match="at least one of"):
        TargetSlo(percentile=99)
    with pytest.raises(ValueError):
        TargetSlo(ttft_ms=100, percentile=75)
