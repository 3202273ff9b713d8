"""Issue 47, points 1, 8 and 9, in pure code: goodput counted in the engine's time, percentiles
pooled over a launch's requests as `vllm bench serve` pools them, and SLOs at the median or
the mean with their own bounds and round sizes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom, t

from hyperloom_assets.core.config.targets import Slo, TargetSlo, load_target
from hyperloom_assets.core.measurement.capacity import probe_prompts
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.metrics import latency_of, repeat_metrics, summarize
from hyperloom_assets.core.measurement.slo_statistic import MEAN_MIN_SAMPLES, min_samples
from hyperloom_assets.core.measurement.slo_verdict import prompts_for_bound, slo_verdict


def request(ttft_s: float, e2el_s: float, tokens: int = 5) -> RequestRecord:
    step = (e2el_s - ttft_s) / (tokens - 1)
    return RequestRecord(ok=True, prompt_tokens=8, output_tokens=tokens, ttft_s=ttft_s, e2el_s=e2el_s,
                         itl_s=[step] * (tokens - 1))


# --- point 1: goodput in the engine's time ----------------------------------------------

def test_goodput_holds_a_sped_up_servers_requests_to_limits_in_its_engines_time() -> None:
    # A sim at time scale 20: 25 ms on the client's clock is 500 ms of its engine's, 100 ms is 2,000 ms.
    records = [request(0.025, 0.05), request(0.100, 0.2)]
    assert repeat_metrics(records, 1.0, Slo(ttft_ms=600)).goodput == 2.0, "on a real engine's clock both pass"
    assert repeat_metrics(records, 1.0, Slo(ttft_ms=600, time_scale=20)).goodput == 1.0, "2,000 ms > 600 ms"
    assert repeat_metrics(records, 1.0, Slo(tpot_ms=200, time_scale=20)).goodput == 1.0, \
        "TPOT 6.25 ms x 20 = 125 ms for the first, 25 ms x 20 = 500 ms for the second"
    assert repeat_metrics(records, 1.0, Slo(e2e_ms=1500, time_scale=20)).goodput == 1.0, "1,000 ms and 4,000 ms"


def test_the_clock_stays_out_of_a_real_engines_dumps_and_out_of_target_files() -> None:
    assert Slo(ttft_ms=5).model_dump(mode="json") == {"ttft_ms": 5.0, "tpot_ms": None, "e2e_ms": None}, \
        "signatures and the target's identity hash read as before"
    assert Slo.model_validate(Slo(ttft_ms=5, time_scale=20).model_dump(mode="json")).time_scale == 20, \
        "a sim's scale travels to a client on another host"
    with pytest.raises(ValueError, match="time_scale"):
        TargetSlo(ttft_ms=5, time_scale=20)


# --- point 8: percentiles pooled as vLLM pools them ------------------------------------

def test_a_measurements_percentiles_are_the_pooled_requests_not_a_mean_of_rounds() -> None:
    rng = np.random.default_rng(7)
    fast = [request(float(x), float(x) + 0.04) for x in rng.uniform(0.01, 0.02, 60)]
    slow = [request(float(x), float(x) + 0.4) for x in rng.exponential(0.3, 40) + 0.05]  # a heavier, shorter round
    rounds = [repeat_metrics(fast, 1.0), repeat_metrics(slow, 1.0)]
    m = summarize(rounds, fast + slow)
    ttfts = [r.ttft_s * 1000 for r in fast + slow]
    pooled_p99 = float(np.percentile(ttfts, 99))  # vllm/benchmarks/serve.py: np.percentile(ttfts, 99)
    mean_of_rounds = (rounds[0].ttft_p99_ms + rounds[1].ttft_p99_ms) / 2
    assert abs(pooled_p99 - mean_of_rounds) > 100, "the two readings differ here, so the test can tell them apart"
    assert m.ttft_p99_ms == pytest.approx(pooled_p99) and m.ttft_p50_ms == pytest.approx(np.median(ttfts))
    assert m.e2el_p50_ms == pytest.approx(np.median([r.e2el_s * 1000 for r in fast + slow]))
    tpots = [(r.e2el_s - r.ttft_s) / (r.output_tokens - 1) * 1000 for r in fast + slow]
    assert m.tpot_p50_ms == pytest.approx(np.median(tpots))
    assert m.itl_p50_ms == pytest.approx(np.median([g * 1000 for r in fast + slow for g in r.itl_s]))
    flat = json.loads(json.dumps(m.flat()))  # `hyperloom bench --json-out`
    assert flat["ttft_p99_ms"] == pytest.approx(pooled_p99) == pytest.approx(flat["latency"]["ttft_ms"]["p99"])
    assert [r["ttft_p99_ms"] for r in flat["repeats"]] == pytest.approx(
        [np.percentile(ttfts[:60], 99), np.percentile(ttfts[60:], 99)]), "each repeat keeps its own"


# --- point 9: the median and the mean -------------------------------------------------

def test_median_and_mean_slos_load_from_a_target_file(tmp_path: Path) -> None:
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "config.json").write_text(json.dumps({"vocab_size": 100}))
    (tmp_path / "targets").mkdir()
    base = "engine: vllm\nmodel: models/m\nworkload: {kind: random, isl: 16, osl: 8, concurrency: 2}\n"
    for name, statistic in (("median", "50"), ("mean", "mean")):
        (tmp_path / "targets" / f"{name}.yaml").write_text(base + f"slo: {{tpot_ms: 40, percentile: {statistic}}}\n")
    assert load_target(tmp_path / "targets", "median").slo.percentile == 50
    assert load_target(tmp_path / "targets", "mean").slo.percentile == "mean"


def test_an_unknown_statistic_is_refused_naming_the_field_and_what_is_allowed() -> None:
    with pytest.raises(ValueError) as refused:
        TargetSlo(ttft_ms=100, percentile=75)
    [error] = refused.value.errors()
    assert error["loc"] == ("percentile",) and error["msg"] == "Input should be 50, 90, 95, 99 or 'mean'"


def test_a_median_slo_is_held_to_its_order_statistic_bound() -> None:
    ttfts = [0.010 * i for i in range(1, 11)]  # 10, 20, ..., 100 ms
    latency = latency_of([request(x, x + 0.04) for x in ttfts])
    # The least k with P(Bin(10, 0.5) <= k - 1) >= 0.95 is 9: the 9th smallest, 90 ms, bounds the median.
    assert binom.cdf(7, 10, 0.5) < 0.95 <= binom.cdf(8, 10, 0.5)
    assert latency.ttft_ms.p50 == pytest.approx(55.0) and latency.ttft_ms.p50_upper == pytest.approx(90.0)
    met = slo_verdict(TargetSlo(ttft_ms=90, percentile=50), [latency])
    assert met.met and met.ttft_ms == pytest.approx(55.0) and met.ttft_upper_ms == pytest.approx(90.0)
    assert met.short() == "met at p50: TTFT 55 ms (bound 90)" and "holds at p50" in met.why
    missed = slo_verdict(TargetSlo(ttft_ms=80, percentile=50), [latency])
    assert not missed.met and "ttft_ms p50 upper bound 90 ms > 80 ms (measured 55)" in missed.why, \
        "the median (55 ms) is within 80 ms, its bound is not"
    few = slo_verdict(TargetSlo(ttft_ms=1000, percentile=50), [latency_of([request(0.01, 0.05)] * 4)])
    assert not few.met and "a launch had 4 samples, a p50 bound needs 5" in few.why


def test_a_mean_slo_is_held_to_its_skew_corrected_t_bound() -> None:
    rng = np.random.default_rng(3)
    e2e_s = list(rng.exponential(0.2, MEAN_MIN_SAMPLES) + 0.1)
    latency = latency_of([request(0.01, x) for x in e2e_s])
    ms = np.asarray(e2e_s) * 1000
    n, mean, sd = len(ms), ms.mean(), ms.std(ddof=1)
    skew, q = np.mean((ms - mean) ** 3) / sd ** 3, t.ppf(0.95, n - 1)
    bound = mean + sd / math.sqrt(n) * (q + skew * (2 * q * q + 1) / (6 * math.sqrt(n)))
    assert latency.e2el_ms.mean == pytest.approx(mean) and latency.e2el_ms.mean_upper == pytest.approx(bound)
    assert bound > mean + q * sd / math.sqrt(n), "right-skewed latency: wider than plain t"
    verdict = slo_verdict(TargetSlo(e2e_ms=float(bound) + 1, percentile="mean"), [latency])
    assert verdict.met and verdict.e2e_ms == pytest.approx(mean) and verdict.percentile == "mean"
    assert verdict.short().startswith("met at mean: E2E")
    assert not slo_verdict(TargetSlo(e2e_ms=float(bound) - 1, percentile="mean"), [latency]).met, \
        "the measured mean is within the limit, its upper bound is not"
    short = latency_of([request(0.01, x) for x in e2e_s[:MEAN_MIN_SAMPLES - 1]])
    few = slo_verdict(TargetSlo(e2e_ms=10_000, percentile="mean"), [short])
    assert not few.met and f"a launch had {MEAN_MIN_SAMPLES - 1} samples, a mean bound needs {MEAN_MIN_SAMPLES}" \
        in few.why


def test_rounds_are_sized_for_each_statistics_bound() -> None:
    assert [min_samples(s) for s in (50, 90, 95, 99, "mean")] == [5, 29, 59, 299, MEAN_MIN_SAMPLES]
    assert prompts_for_bound(50, 3) == 2 and prompts_for_bound("mean", 3) == math.ceil(MEAN_MIN_SAMPLES / 3)
    assert probe_prompts(4, "concurrency", "mean", 10) >= MEAN_MIN_SAMPLES
    assert probe_prompts(4, "request_rate", 50, 10) == 10
