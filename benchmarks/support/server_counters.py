"""The server's own view of a client's run: vLLM's Prometheus counters before and after it.

A client's token counts and durations can be wrong in ways the client cannot see; the
server counts the prompt and generated tokens it processed and times each request from
arrival to finish. Read /metrics before and after a run and the difference is what the
server did for that run (its warm-up requests included: callers divide by the request
count the server reports).
"""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

# Counters, and the _sum/_count of the per-request histograms, summed over label sets.
SERIES = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:request_queue_time_seconds_sum",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_decode_time_seconds_sum",
)


def read_counters(base_url: str) -> dict[str, float]:
    """The SERIES from the server's /metrics, each summed over its label sets (0 when absent, and all 0
    from a server without /metrics, such as the echo control)."""
    totals = dict.fromkeys(SERIES, 0.0)
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=10) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return totals
        raise
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals


def run_view(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the server did between two readings: token totals, requests, and per-request means."""
    delta = {name: after[name] - before[name] for name in SERIES}
    requests = delta["vllm:request_success_total"]

    def per_request(name: str, scale: float = 1.0) -> float:
        return scale * delta[name] / requests if requests else 0.0

    return {
        "requests": requests,
        "prompt_tokens": delta["vllm:prompt_tokens_total"],
        "generation_tokens": delta["vllm:generation_tokens_total"],
        "prompt_tokens_per_req": per_request("vllm:prompt_tokens_total"),
        "generation_tokens_per_req": per_request("vllm:generation_tokens_total"),
        "e2e_mean_ms": per_request("vllm:e2e_request_latency_seconds_sum", 1000),
        "ttft_mean_ms": per_request("vllm:time_to_first_token_seconds_sum", 1000),
        "queue_mean_ms": per_request("vllm:request_queue_time_seconds_sum", 1000),
        "prefill_mean_ms": per_request("vllm:request_prefill_time_seconds_sum", 1000),
        "decode_mean_ms": per_request("vllm:request_decode_time_seconds_sum", 1000),
    }
