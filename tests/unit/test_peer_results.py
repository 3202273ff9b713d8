"""Peers' result files read into our Measurement."""

import json
from pathlib import Path

import pytest

from hyperloom_assets.core.measurement.peer_results import (
    PeerResultError,
    combine_runs,
    read_aiperf_json,
    read_peer_result,
    read_sglang_results,
    read_vllm_result,
)

PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"


def test_vllm_bench_serve_result():
    m = read_vllm_result(PEERS / "vllm_bench_serve_random.json")
    raw = json.loads((PEERS / "vllm_bench_serve_random.json").read_text())
    assert m.source == "vllm-bench-serve"
    assert m.output_throughput == raw["output_throughput"]
    assert m.ttft_p50_ms == raw["median_ttft_ms"] and m.ttft_p99_ms == raw["p99_ttft_ms"]
    assert m.tpot_p50_ms == raw["median_tpot_ms"] and m.itl_p50_ms == raw["median_itl_ms"]
    assert m.e2el_p50_ms == raw["median_e2el_ms"]
    assert m.completed == raw["completed"] == 16
    assert m.repeats[0].total_output_tokens == 16 * 32
    assert m.workload["max_concurrency"] == 4


def test_vllm_result_without_e2el_percentiles_uses_its_latencies(tmp_path):
    raw = json.loads((PEERS / "vllm_bench_serve_random.json").read_text())
    for key in [k for k in raw if k.endswith("_e2el_ms")]:
        del raw[key]
    raw["latencies"] = [0.1, 0.2, 0.3, 0.4]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(raw))
    assert read_vllm_result(path).e2el_p50_ms == pytest.approx(250.0)


def test_vllm_result_missing_a_key_names_file_and_key(tmp_path):
    raw = json.loads((PEERS / "vllm_bench_serve_random.json").read_text())
    del raw["median_tpot_ms"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(PeerResultError, match=r"r\.json: no 'median_tpot_ms'"):
        read_vllm_result(path)


def test_sglang_runs_and_their_combination():
    runs = read_sglang_results(PEERS / "sglang_bench_serving.jsonl")
    assert [r.output_throughput for r in runs] == [562.6, 575.3]
    assert runs[0].e2el_p50_ms == 198.4 and runs[0].ttft_p99_ms == 109.5
    assert runs[0].source == "sglang-bench-serving" and runs[0].workload["random_input_len"] == 128
    combined = combine_runs(runs)
    assert combined.output_throughput == pytest.approx((562.6 + 575.3) / 2)
    assert len(combined.repeats) == 2 and combined.output_throughput_ci_low < 562.6
    assert read_peer_result(PEERS / "sglang_bench_serving.jsonl") == combined


def test_sglang_bad_line_names_the_line(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text((PEERS / "sglang_bench_serving.jsonl").read_text() + "{oops\n")
    with pytest.raises(PeerResultError, match="line 3: not JSON"):
        read_sglang_results(path)


@pytest.mark.parametrize("name", ["profile_export_aiperf.json", "profile_export_aiperf_toplevel.json"])
def test_aiperf_export(name):
    m = read_aiperf_json(PEERS / name)
    assert m.source == "aiperf"
    assert m.output_throughput == 1274.65
    assert m.ttft_p50_ms == pytest.approx(787.54, abs=0.01) and m.ttft_p99_ms == pytest.approx(4119.33)
    assert m.tpot_p50_ms == pytest.approx(51.98)  # AIPerf's inter_token_latency is vLLM's TPOT
    assert m.e2el_p50_ms == pytest.approx(5799.9, abs=0.01)
    assert m.completed == 200
    assert m.repeats[0].duration_s == pytest.approx(15.1966, abs=1e-3)  # "sec" converted
    assert read_peer_result(PEERS / name) == m


def test_aiperf_failed_requests_are_counted():
    assert read_aiperf_json(PEERS / "profile_export_aiperf_toplevel.json").repeats[0].failed == 81


def test_aiperf_missing_metric_names_it(tmp_path):
    raw = json.loads((PEERS / "profile_export_aiperf.json").read_text())
    del raw["records"]["time_to_first_token"]["p99"]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(PeerResultError, match="time_to_first_token.p99"):
        read_aiperf_json(path)


def test_unreadable_files(tmp_path):
    with pytest.raises(PeerResultError, match="cannot read"):
        read_peer_result(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(PeerResultError, match="expected a JSON object"):
        read_peer_result(tmp_path / "list.json")
