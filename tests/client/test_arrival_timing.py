"""A rate round's requests against their arrival schedule (issue 47, point 2): each session's
first request records when it was due; a capacity probe (workload.latency_from "arrival")
times TTFT and E2E from then, so the wait for one of the client's concurrency slots counts,
while an ordinary round times them from the send, as `vllm bench serve --max-concurrency`
does; and the round says how far its client fell behind the offered rate."""

from pathlib import Path

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.resources.bench.client import measure

# One slot and 40 ms a request (4 tokens, 10 ms apart) serve 25 req/s; 200 are offered.
WORKLOAD = Workload(kind="random", isl=8, osl=4, concurrency=1, num_prompts=16, request_rate=200.0, seed=3)


def _records(folder: Path) -> list[RequestRecord]:
    return [RequestRecord.model_validate_json(line)
            for line in (folder / "requests-repeat-1.jsonl").read_text().splitlines()]


def test_a_probe_times_its_requests_from_their_arrival_and_an_ordinary_round_from_their_send(echo_server,
                                                                                             tmp_path) -> None:
    url = echo_server("--token-delay-ms", "10")
    by_send, by_arrival = tmp_path / "send", tmp_path / "arrival"
    sent = measure(url, "echo", WORKLOAD, vocab_size=100, warmups=0, records_dir=by_send)
    probed = measure(url, "echo", WORKLOAD.model_copy(update={"latency_from": "arrival"}), vocab_size=100,
                     warmups=0, records_dir=by_arrival)

    for records in (_records(by_send), _records(by_arrival)):
        assert all(r.arrival_s is not None and r.start_s >= r.arrival_s for r in records)
        assert max(r.start_s - r.arrival_s for r in records) > 0.3, "the later arrivals waited for the one slot"
    # From the send, a request takes its own 40 ms whatever it waited; from its arrival, the wait too.
    assert max(r.e2el_s for r in _records(by_send)) < 0.3
    assert all(r.e2el_s >= r.start_s - r.arrival_s for r in _records(by_arrival))
    assert probed.latency.e2el_ms.p50 > 3 * sent.latency.e2el_ms.p50
    assert probed.workload["latency_from"] == "arrival" and "latency_from" not in sent.workload

    arrivals = sent.repeats[0].arrivals
    assert arrivals.offered_rate == 200.0 and arrivals.sessions == 16
    assert arrivals.achieved_rate < 0.5 * arrivals.offered_rate, arrivals
    assert arrivals.queue_end > arrivals.queue_start + 4, arrivals


def test_a_closed_loop_round_has_no_arrival_schedule(echo_server, tmp_path) -> None:
    workload = Workload(kind="random", isl=8, osl=2, concurrency=2, num_prompts=4)
    m = measure(echo_server(), "echo", workload, vocab_size=100, warmups=0, records_dir=tmp_path)
    assert m.repeats[0].arrivals is None and all(r.arrival_s is None for r in _records(tmp_path))
