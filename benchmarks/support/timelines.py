"""A client run's dispatch timeline: when each request was sent, got its first token, ended.

Two clients that agree on tokens can still disagree on throughput through the duration
they divide by. The timeline says where a run's time went: the span from the first send
to the last byte, what the reported duration adds around it, how fast the concurrency
slots filled at the start and how long a freed slot waited for its next request.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def summarize(starts: list[float], ttfts: list[float], e2els: list[float], duration_s: float,
              concurrency: int, output_tokens: int) -> dict[str, float]:
    """starts in seconds on any clock; ttfts and e2els in seconds from each start."""
    origin = min(starts)
    order = sorted(range(len(starts)), key=lambda i: starts[i])
    sends = [starts[i] - origin for i in order]
    ends = sorted(starts[i] - origin + e2els[i] for i in range(len(starts)))
    span = max(ends)
    # The k-th request past the first `concurrency` takes the slot the k-th finished request freed.
    refills = [send - end for send, end in zip(sends[concurrency:], ends)]
    return {
        "duration_s": duration_s,
        "span_s": span,
        "outside_span_s": duration_s - span,
        "fill_ms": 1000 * sends[min(concurrency, len(sends)) - 1],
        "refill_mean_ms": 1000 * statistics.fmean(refills) if refills else 0.0,
        "ttft_mean_ms": 1000 * statistics.fmean(ttfts),
        "e2el_mean_ms": 1000 * statistics.fmean(e2els),
        "output_throughput_over_span": output_tokens / span if span else 0.0,
    }


def ours(records_path: Path, duration_s: float, concurrency: int) -> dict[str, float]:
    """From our client's per-request JSONL (successful requests)."""
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    ok = [r for r in records if r["ok"]]
    return summarize([r["start_s"] for r in ok], [r["ttft_s"] for r in ok], [r["e2el_s"] for r in ok], duration_s,
                     concurrency, sum(r["output_tokens"] for r in ok))


def vllms(raw: dict, concurrency: int) -> dict[str, float]:
    """From `vllm bench serve --save-detailed` JSON: e2el is TTFT plus the inter-token gaps."""
    done = [i for i, error in enumerate(raw["errors"]) if not error]
    e2els = [raw["ttfts"][i] + sum(raw["itls"][i]) for i in done]
    return summarize([raw["start_times"][i] for i in done], [raw["ttfts"][i] for i in done], e2els, raw["duration"],
                     concurrency, sum(raw["output_lens"][i] for i in done))
