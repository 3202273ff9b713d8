"""Peers' benchmark results read into our Measurement, so numbers can be set side by side.

Pure code. Three shapes, each taken from the tool's own source:
- `vllm bench serve --save-result`: one JSON object (vllm/benchmarks/serve.py, the
  `result` dict plus `mean_/median_/pNN_<metric>_ms` keys per --percentile-metrics).
- `python -m sglang.bench_serving --output-file`: JSONL, one run per line
  (python/sglang/bench_serving.py, the `result = {...}` dict appended to the file).
- AIPerf's `profile_export_aiperf.json`: metric records keyed by tag, each with `unit`,
  `avg` and percentiles (aiperf/exporters/json_exporter.py; older releases nest them
  under `records`, newer ones put them at the top level).
A key a format must have and lacks raises PeerResultError naming the file and key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hyperloom_assets.core.measurement.measurement import Measurement, RepeatMetrics
from hyperloom_assets.core.measurement.metrics import summarize
from hyperloom_assets.core.measurement.stats import percentile


class PeerResultError(ValueError):
    """A peer's result file we cannot read; the message names the file and the key."""


def _need(data: dict, key: str, path: Path) -> Any:
    if data.get(key) is None:
        raise PeerResultError(f"{path}: no {key!r} in the result")
    return data[key]


def _ms_from_samples(data: dict, key: str, samples_key: str, pct: float, path: Path, scale: float = 1000.0) -> float:
    """A percentile the tool wrote, else computed from the per-request samples it kept."""
    if data.get(key) is not None:
        return float(data[key])
    samples = [s for s in data.get(samples_key) or [] if s and s > 0]
    if not samples:
        raise PeerResultError(f"{path}: no {key!r} and no {samples_key!r} samples to compute it from")
    return percentile(samples, pct) * scale


def _vllm_repeat(data: dict, path: Path) -> RepeatMetrics:
    goodput = data.get("request_goodput")
    return RepeatMetrics(
        output_throughput=float(_need(data, "output_throughput", path)),
        request_throughput=float(_need(data, "request_throughput", path)),
        ttft_p50_ms=float(_need(data, "median_ttft_ms", path)),
        ttft_p99_ms=_ms_from_samples(data, "p99_ttft_ms", "ttfts", 99, path),
        tpot_p50_ms=float(_need(data, "median_tpot_ms", path)),
        itl_p50_ms=float(_need(data, "median_itl_ms", path)),
        # e2el percentiles only exist with --percentile-metrics ...,e2el; `latencies` is always kept.
        e2el_p50_ms=_ms_from_samples(data, "median_e2el_ms", "latencies", 50, path),
        completed=int(_need(data, "completed", path)),
        failed=int(data.get("failed") or 0),
        duration_s=float(_need(data, "duration", path)),
        total_input_tokens=int(data.get("total_input_tokens") or 0),
        total_output_tokens=int(data.get("total_output_tokens") or 0),
        goodput=float(goodput) if goodput is not None else None,
    )


def _vllm_workload(data: dict) -> dict[str, Any]:
    keys = ("model_id", "backend", "num_prompts", "max_concurrency", "request_rate", "burstiness")
    return {k: data[k] for k in keys if k in data}


def read_vllm_result(path: Path) -> Measurement:
    """A `vllm bench serve --save-result` JSON file."""
    data = _load_json(path)
    return summarize([_vllm_repeat(data, path)], workload=_vllm_workload(data), source="vllm-bench-serve")


def _sglang_repeat(data: dict, path: Path) -> RepeatMetrics:
    return RepeatMetrics(
        output_throughput=float(_need(data, "output_throughput", path)),
        request_throughput=float(_need(data, "request_throughput", path)),
        ttft_p50_ms=float(_need(data, "median_ttft_ms", path)),
        ttft_p99_ms=float(_need(data, "p99_ttft_ms", path)),
        tpot_p50_ms=float(_need(data, "median_tpot_ms", path)),
        itl_p50_ms=float(_need(data, "median_itl_ms", path)),
        e2el_p50_ms=float(_need(data, "median_e2e_latency_ms", path)),
        completed=int(_need(data, "completed", path)),
        duration_s=float(_need(data, "duration", path)),
        total_input_tokens=int(data.get("total_input_tokens") or 0),
        total_output_tokens=int(data.get("total_output_tokens") or 0),
    )


def read_sglang_results(path: Path) -> list[Measurement]:
    """Every run of a `sglang.bench_serving` JSONL file, in file order."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise PeerResultError(f"{path}: cannot read ({exc.strerror})") from exc
    results = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PeerResultError(f"{path}: line {number}: not JSON ({exc.msg})") from exc
        where = Path(f"{path}: line {number}")
        keys = ("backend", "dataset_name", "request_rate", "max_concurrency", "random_input_len", "random_output_len")
        results.append(summarize([_sglang_repeat(data, where)], workload={k: data.get(k) for k in keys},
                                 source="sglang-bench-serving"))
    if not results:
        raise PeerResultError(f"{path}: no runs in the file")
    return results


_TO_MS = {"ms": 1.0, "sec": 1000.0, "s": 1000.0, "us": 1e-3, "ns": 1e-6}


def _aiperf_metric(records: dict, tag: str, stat: str, path: Path, ms: bool = False) -> float:
    record = records.get(tag)
    if not isinstance(record, dict) or record.get(stat) is None:
        raise PeerResultError(f"{path}: no {tag}.{stat} in the AIPerf export")
    value = float(record[stat])
    if ms:
        unit = record.get("unit", "ms")
        if unit not in _TO_MS:
            raise PeerResultError(f"{path}: {tag} has unit {unit!r}, expected a time unit")
        value *= _TO_MS[unit]
    return value


def read_aiperf_json(path: Path) -> Measurement:
    """AIPerf's `profile_export_aiperf.json`.

    AIPerf's `inter_token_latency` is per request (latency - TTFT) / (OSL - 1), which is
    vLLM's TPOT; vLLM's pooled chunk gaps are AIPerf's `inter_chunk_latency` when it is
    exported, else the TPOT median stands in for the ITL median.
    """
    data = _load_json(path)
    records = data["records"] if isinstance(data.get("records"), dict) else data
    tpot = _aiperf_metric(records, "inter_token_latency", "p50", path, ms=True)
    chunk = records.get("inter_chunk_latency")
    itl = _aiperf_metric(records, "inter_chunk_latency", "p50", path, ms=True) if isinstance(chunk, dict) else tpot
    errors = records.get("error_request_count")
    repeat = RepeatMetrics(
        output_throughput=_aiperf_metric(records, "output_token_throughput", "avg", path),
        request_throughput=_aiperf_metric(records, "request_throughput", "avg", path),
        ttft_p50_ms=_aiperf_metric(records, "time_to_first_token", "p50", path, ms=True),
        ttft_p99_ms=_aiperf_metric(records, "time_to_first_token", "p99", path, ms=True),
        tpot_p50_ms=tpot, itl_p50_ms=itl,
        e2el_p50_ms=_aiperf_metric(records, "request_latency", "p50", path, ms=True),
        completed=int(_aiperf_metric(records, "request_count", "avg", path)),
        failed=int(errors["avg"]) if isinstance(errors, dict) and errors.get("avg") is not None else 0,
        duration_s=_aiperf_metric(records, "benchmark_duration", "avg", path, ms=True) / 1000,
        total_input_tokens=int(records["total_isl"]["avg"]) if isinstance(records.get("total_isl"), dict) else 0,
        total_output_tokens=int(records["total_osl"]["avg"]) if isinstance(records.get("total_osl"), dict) else 0,
    )
    loadgen = ((data.get("input_config") or {}).get("loadgen") or {})
    return summarize([repeat], workload={k: loadgen[k] for k in ("concurrency", "request_rate", "request_count")
                                         if k in loadgen}, source="aiperf")


def combine_runs(runs: list[Measurement]) -> Measurement:
    """Several single-run results of one configuration as the repeats of one Measurement."""
    if not runs:
        raise PeerResultError("no runs to combine")
    return summarize([r for run in runs for r in run.repeats], workload=runs[0].workload, source=runs[0].source)


def read_peer_result(path: Path) -> Measurement:
    """Any of the three formats, recognized by its keys; several SGLang runs become repeats."""
    if path.suffix == ".jsonl":
        return combine_runs(read_sglang_results(path))
    data = _load_json(path)
    if "output_token_throughput" in (data.get("records") or data):
        return read_aiperf_json(path)
    if "median_e2e_latency_ms" in data:
        return read_sglang_results(path)[0]
    return read_vllm_result(path)


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise PeerResultError(f"{path}: cannot read ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise PeerResultError(f"{path}: not JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise PeerResultError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data
