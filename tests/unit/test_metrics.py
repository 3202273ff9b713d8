"""Round metrics from synthetic request streams, checked against hand-computed values."""

import pytest

from hyperloom_assets.core.config.targets import Slo
from hyperloom_assets.core.measurement.measurement import RepeatMetrics, RequestRecord
from hyperloom_assets.core.measurement.metrics import repeat_metrics, summarize


def _records() -> list[RequestRecord]:
    # A: 5 tokens, TTFT 0.1 s, last token at 0.5 s; B: 3 tokens, TTFT 0.2 s, last at 0.4 s.
    a = RequestRecord(ok=True, prompt_tokens=10, output_tokens=5, ttft_s=0.1, e2el_s=0.5, itl_s=[0.1] * 4)
    b = RequestRecord(ok=True, prompt_tokens=20, output_tokens=3, ttft_s=0.2, e2el_s=0.4, itl_s=[0.05, 0.15])
    failed = RequestRecord(ok=False, prompt_tokens=30, error="HTTP 500")
    return [a, b, failed]


def test_repeat_metrics_of_a_synthetic_stream():
    m = repeat_metrics(_records(), duration_s=2.0)
    assert m.output_throughput == pytest.approx(4.0)  # 8 streamed tokens / 2 s; the failure adds none
    assert m.request_throughput == pytest.approx(1.0)
    assert m.ttft_p50_ms == pytest.approx(150.0)
    assert m.tpot_p50_ms == pytest.approx(100.0)  # A: 0.4/4, B: 0.2/2
    assert m.itl_p50_ms == pytest.approx(100.0)  # pooled gaps 0.05, 0.1 x4, 0.15
    assert m.e2el_p50_ms == pytest.approx(450.0)
    assert (m.completed, m.failed) == (2, 1)
    assert (m.total_input_tokens, m.total_output_tokens) == (30, 8)
    assert m.goodput is None


def test_goodput_counts_requests_meeting_the_slo():
    assert repeat_metrics(_records(), 2.0, slo=Slo(ttft_ms=120.0)).goodput == pytest.approx(0.5)  # only A
    assert repeat_metrics(_records(), 2.0, slo=Slo(tpot_ms=50.0)).goodput == 0.0
    assert repeat_metrics(_records(), 2.0, slo=Slo(ttft_ms=1000.0, tpot_ms=1000.0)).goodput == pytest.approx(1.0)
    assert repeat_metrics(_records(), 2.0, slo=Slo(e2e_ms=450.0)).goodput == pytest.approx(0.5)  # only B, 400 ms


def _repeat(throughput: float) -> RepeatMetrics:
    return RepeatMetrics(output_throughput=throughput, request_throughput=1.0, ttft_p50_ms=10.0, ttft_p99_ms=20.0,
                         tpot_p50_ms=5.0, itl_p50_ms=5.0, e2el_p50_ms=100.0, completed=10, duration_s=1.0)


def test_summarize_means_interval_and_convergence():
    m = summarize([_repeat(100.0), _repeat(110.0), _repeat(120.0)], seed=3)
    assert m.output_throughput == pytest.approx(110.0)
    # stdev 10; half-width 4.302653 * 10 / sqrt(3) = 24.8414
    assert m.output_throughput_ci_low == pytest.approx(110 - 24.8414, abs=1e-3)
    assert m.output_throughput_ci_high == pytest.approx(110 + 24.8414, abs=1e-3)
    assert m.converged is False  # spread 20/110 = 18% > 3%
    assert m.seed == 3 and len(m.repeats) == 3
    assert summarize([_repeat(100.0), _repeat(101.0)]).converged is True
    assert m.interactivity == pytest.approx(200.0)  # 1000 / TPOT p50 of 5 ms


def test_summarize_refuses_no_repeats():
    with pytest.raises(ValueError):
        summarize([])


def test_flat_json_has_metric_names_at_top_level_and_repeats():
    flat = summarize([_repeat(100.0), _repeat(110.0)]).flat()
    for name in ("output_throughput", "output_throughput_ci_low", "ttft_p50_ms", "e2el_p50_ms", "completed"):
        assert name in flat
    assert [r["output_throughput"] for r in flat["repeats"]] == [100.0, 110.0]
