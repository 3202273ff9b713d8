"""The benchmark client against a real streaming HTTP server (the echo server)."""

import asyncio
import gc
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Slo, Workload
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.workloads import PlannedRequest, build_plan, theoretical_prefix_hit_pct
from hyperloom_assets.resources.bench import runner
from hyperloom_assets.resources.bench.client import (
    BenchInputError,
    BenchmarkClient,
    BenchOvertime,
    BenchRunError,
    measure,
)
from hyperloom_assets.resources.bench.heap import heap_frozen
from hyperloom_assets.resources.bench.runner import round_seed
from hyperloom_assets.resources.bench.stream import KEEPALIVE_S, completions_url, open_session, send_request

EXAMPLE_TRACE = Path(__file__).resolve().parents[2] / "examples" / "agentic_small.jsonl"


def _records(path: Path) -> list[RequestRecord]:
    return [RequestRecord.model_validate_json(line) for line in path.read_text().splitlines()]


def _max_overlap(records: list[RequestRecord]) -> int:
    events = sorted([(r.start_s, 1) for r in records] + [(r.start_s + r.e2el_s, -1) for r in records])
    live = peak = 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    return peak


def test_random_workload_measures_every_request(echo_server, tmp_path):
    url = echo_server("--token-delay-ms", "1")
    workload = Workload(kind="random", isl=48, osl=16, concurrency=4, num_prompts=20)
    m = measure(url, "echo", workload, vocab_size=2048, repeats=2, warmups=3, records_dir=tmp_path)
    assert len(m.repeats) == 2 and m.completed == 20
    assert all(r.failed == 0 and r.total_output_tokens == 20 * 16 and r.total_input_tokens == 20 * 48
               for r in m.repeats)
    assert m.output_throughput > 0 and m.output_throughput_ci_low <= m.output_throughput <= m.output_throughput_ci_high
    assert m.workload["num_prompts"] == 20 and m.workload["warmups"] == 3 and m.workload["vocab_size"] == 2048
    assert m.theoretical_prefix_hit_pct is None and m.source == "hyperloom"
    # Per-request percentiles, pooled over both rounds' requests; each token its own chunk.
    assert m.latency.ttft_ms.count == 40 and m.latency.itl_ms.count == 40 * 15
    assert 0 < m.latency.tpot_ms.p50 <= m.latency.tpot_ms.p90 <= m.latency.tpot_ms.p99
    assert m.latency.bursts == 0 and m.latency.warnings() == []
    assert all(r.latency.ttft_ms.count == 20 for r in m.repeats)
    records = _records(tmp_path / "requests-repeat-1.jsonl")
    assert len(records) == 20 and all(r.ok and r.output_tokens == 16 and len(r.itl_s) == 15 for r in records)
    assert len(_records(tmp_path / "requests-warmup.jsonl")) == 3
    assert len(json.loads((tmp_path / "client-load.json").read_text())) == 2


def test_timings_include_the_server_delays(echo_server, tmp_path):
    url = echo_server("--ttft-ms", "80", "--token-delay-ms", "10")
    workload = Workload(kind="random", isl=8, osl=6, concurrency=2, num_prompts=4)
    m = measure(url, "echo", workload, vocab_size=100, warmups=0, records_dir=tmp_path)
    assert 80 <= m.ttft_p50_ms < 1000
    assert 10 <= m.tpot_p50_ms < 200 and 10 <= m.itl_p50_ms < 200
    record = _records(tmp_path / "requests-repeat-1.jsonl")[0]
    # e2el ends at the last token, as vLLM's client times it: TTFT plus the five gaps
    assert record.e2el_s == pytest.approx(record.ttft_s + sum(record.itl_s), abs=1e-6)


def test_empty_text_chunks_are_tokens_as_vllm_bench_serve_counts_them(echo_server, tmp_path):
    # vLLM streams "" while its detokenizer holds back a partial UTF-8 character (common
    # on a random-weight byte-level model); its own client times such chunks like any other.
    workload = Workload(kind="random", isl=8, osl=6, concurrency=2, num_prompts=4)
    url = echo_server("--ttft-ms", "60", "--token-delay-ms", "40", "--held-back-every", "3")
    m = measure(url, "echo", workload, vocab_size=100, warmups=0, records_dir=tmp_path)
    record = _records(tmp_path / "requests-repeat-1.jsonl")[0]
    # The first chunk (empty) starts TTFT; skipping it would add a 40 ms gap to TTFT.
    assert 0.06 <= record.ttft_s < 0.095 and len(record.itl_s) == 5
    assert m.repeats[0].total_output_tokens == 4 * 6
    # A request whose every chunk is held back still streamed all its tokens.
    m = measure(echo_server("--held-back-every", "1"), "echo", workload, vocab_size=100, warmups=0)
    assert (m.completed, m.repeats[0].failed, m.repeats[0].total_output_tokens) == (4, 0, 24)


def test_concurrency_limit_is_respected_and_reached(echo_server, tmp_path):
    url = echo_server("--token-delay-ms", "5")
    workload = Workload(kind="random", isl=8, osl=10, concurrency=3, num_prompts=12)
    measure(url, "echo", workload, vocab_size=100, warmups=0, records_dir=tmp_path)
    assert _max_overlap(_records(tmp_path / "requests-repeat-1.jsonl")) == 3


def test_agentic_sessions_run_turns_in_order_after_think_time(echo_server, tmp_path):
    url = echo_server("--token-delay-ms", "1")
    workload = Workload(kind="agentic", trace=EXAMPLE_TRACE, concurrency=4)
    m = measure(url, "echo", workload, vocab_size=2048, warmups=2, records_dir=tmp_path, max_model_len=4096)
    assert m.completed == 32
    assert m.theoretical_prefix_hit_pct == pytest.approx(theoretical_prefix_hit_pct(build_plan(workload, 2048)))
    assert len(m.workload["trace_sha1"]) == 40
    records = _records(tmp_path / "requests-repeat-1.jsonl")
    assert _max_overlap(records) <= 4
    by_session: dict[str, list[RequestRecord]] = {}
    for r in records:
        by_session.setdefault(r.session_id, []).append(r)
    assert len(by_session) == 8
    for turns in by_session.values():
        turns.sort(key=lambda r: r.turn)
        assert [r.turn for r in turns] == [0, 1, 2, 3]
        for earlier, later in zip(turns, turns[1:]):
            assert later.start_s >= earlier.start_s + earlier.e2el_s + 0.019  # think_ms 20 in the trace; timers round


def test_poisson_arrivals_spread_the_starts(echo_server, tmp_path):
    url = echo_server()
    workload = Workload(kind="random", isl=8, osl=2, concurrency=50, num_prompts=20, request_rate=20.0, seed=1)
    m = measure(url, "echo", workload, vocab_size=100, warmups=0, records_dir=tmp_path)
    starts = [r.start_s for r in _records(tmp_path / "requests-repeat-1.jsonl")]
    assert max(starts) > 0.2  # all-at-once would start every request within a few ms
    assert m.repeats[0].duration_s > max(starts)


def test_short_answer_is_an_error_not_a_silent_success(echo_server):
    url = echo_server("--short-by", "2")
    workload = Workload(kind="random", isl=8, osl=6, concurrency=2, num_prompts=4)
    with pytest.raises(BenchRunError, match="completion_tokens=4, requested 6"):
        measure(url, "echo", workload, vocab_size=100, warmups=1)
    with pytest.raises(BenchRunError, match="repeat 1"):
        measure(url, "echo", workload, vocab_size=100, warmups=0)


def test_prompt_token_mismatch_and_missing_usage_are_errors(echo_server):
    workload = Workload(kind="random", isl=8, osl=4, concurrency=1, num_prompts=2)
    with pytest.raises(BenchRunError, match="prompt_tokens=9, sent 8"):
        measure(echo_server("--prompt-skew", "1"), "echo", workload, vocab_size=100, warmups=0)
    with pytest.raises(BenchRunError, match="no usage"):
        measure(echo_server("--no-usage"), "echo", workload, vocab_size=100, warmups=0)


def test_wrong_model_name_fails_at_warmup(echo_server):
    workload = Workload(kind="random", isl=8, osl=4, concurrency=1, num_prompts=2)
    with pytest.raises(BenchRunError, match="warm-up.*HTTP 404"):
        measure(echo_server(), "not-the-model", workload, vocab_size=100)


def test_too_long_prompt_is_refused_before_any_request():
    # Nothing listens on port 9: a request would fail with a connection error, not this.
    workload = Workload(kind="random", isl=4000, osl=200, concurrency=1, num_prompts=2)
    with pytest.raises(BenchInputError, match="needs 4200 tokens.*max model length 4096"):
        measure("http://127.0.0.1:9", "m", workload, vocab_size=100, max_model_len=4096)


def test_bad_trace_is_refused_before_any_request(tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"session_id": "s", "turns": [{"user_tokens": 0, "output_tokens": 4}]}\n')
    workload = Workload(kind="agentic", trace=trace, concurrency=1)
    with pytest.raises(ValueError, match="bad.jsonl: line 1"):
        measure("http://127.0.0.1:9", "m", workload, vocab_size=100)


def test_tiny_vocab_is_refused():
    workload = Workload(kind="random", isl=4, osl=4, concurrency=1, num_prompts=1)
    with pytest.raises(BenchInputError, match="vocab_size"):
        measure("http://127.0.0.1:9", "m", workload, vocab_size=10)


def test_every_round_sends_fresh_prompts():
    # Re-sent prompts would hit the server's prefix cache and flatter repeat 2.
    workload = Workload(kind="random", isl=16, osl=4, concurrency=1, num_prompts=3, seed=9)
    seeds = {round_seed(9, label) for label in ("warmup", "repeat-1", "repeat-2")}
    assert len(seeds) == 3 and round_seed(9, "repeat-1") == round_seed(9, "repeat-1")
    plans = [build_plan(workload.model_copy(update={"seed": s}), 100) for s in seeds]
    assert len({tuple(p[0][0].prompt_ids) for p in plans}) == 3


def test_slo_goodput_and_resource_delegation(echo_server):
    url = echo_server("--ttft-ms", "30")
    workload = Workload(kind="random", isl=8, osl=4, concurrency=2, num_prompts=4, slo=Slo(ttft_ms=5))
    m = BenchmarkClient().measure(url, "echo", workload, 100, repeats=1, warmups=0)
    assert m.goodput == 0.0  # every TTFT is over 30 ms, the SLO asks 5


def test_a_measurement_past_its_time_limit_is_cancelled_mid_round(echo_server):
    # 200 tokens at 50 ms each, one request at a time: the round would take 20 s; the
    # limit stops it at 0.5 s (the bounds leave room for a loaded machine).
    url = echo_server("--token-delay-ms", "50")
    workload = Workload(kind="random", isl=8, osl=200, concurrency=1, num_prompts=2)
    started = time.monotonic()
    with pytest.raises(BenchOvertime, match="passed its limit of 0.5 s") as stopped:
        measure(url, "echo", workload, vocab_size=100, warmups=0, timeout_s=0.5)
    assert 0.5 <= stopped.value.elapsed_s < 5.0 and time.monotonic() - started < 8.0


def test_the_limit_is_overtime_by_the_loops_own_timer_not_a_second_clock(echo_server, monkeypatch):
    # uvloop's timers run on its millisecond clock and may fire a fraction of a millisecond
    # before time.monotonic() says the limit has passed; judged by that second clock, such
    # an overtime came out as a bare TimeoutError now and then. Here the second clock says
    # no time passed at all: the limit that fired is still an overtime.
    class StoppedClock:
        perf_counter = staticmethod(time.perf_counter)

        @staticmethod
        def monotonic() -> float:
            return 0.0

    monkeypatch.setattr(runner, "time", StoppedClock)
    url = echo_server("--token-delay-ms", "50")
    workload = Workload(kind="random", isl=8, osl=200, concurrency=1, num_prompts=2)
    with pytest.raises(BenchOvertime, match="passed its limit of 0.5 s") as stopped:
        measure(url, "echo", workload, vocab_size=100, warmups=0, timeout_s=0.5)
    assert 0.5 <= stopped.value.elapsed_s < 5.0


def test_progress_reports_each_round_and_a_heartbeat_inside_a_long_one(echo_server, monkeypatch):
    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.2)
    url = echo_server("--token-delay-ms", "20")
    workload = Workload(kind="random", isl=8, osl=40, concurrency=2, num_prompts=4)  # about 1.6 s a round
    seen: list[runner.RoundProgress] = []
    measure(url, "echo", workload, vocab_size=100, repeats=2, warmups=1, progress=seen.append)
    finished = [p.label for p in seen if p.metrics is not None]
    assert finished == ["warm-up", "repeat-1", "repeat-2"]
    beats = [p for p in seen if p.metrics is None]
    assert any(p.label == "repeat-1" and p.total == 4 for p in beats), "a long round says how far it got"


class Interrupted(BaseException):
    """What Dagster's handler raises in a step when its run is terminated (not a KeyboardInterrupt)."""


def raise_interrupted(_signum, _frame):
    raise Interrupted()


def test_an_interrupt_during_a_round_stops_it_at_once_and_reaches_the_caller(echo_server):
    # Raised inside uvloop's loop, an interrupt other than KeyboardInterrupt is logged and
    # dropped ("Exception in callback"), and the round, 20 s here, would run on.
    url = echo_server("--token-delay-ms", "50")
    workload = Workload(kind="random", isl=8, osl=200, concurrency=1, num_prompts=2)
    previous = signal.signal(signal.SIGINT, raise_interrupted)
    try:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        started = time.monotonic()
        with pytest.raises(Interrupted):
            measure(url, "echo", workload, vocab_size=100, warmups=0)
        assert time.monotonic() - started < 5.0
        assert signal.getsignal(signal.SIGINT) is raise_interrupted, "the caller's handler is back"
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_host_agents_bench_keeps_the_time_limit_and_replies_overtime(echo_server, tmp_path):
    # An SSH host measures through this op; its reply is what the control node raises again as BenchOvertime.
    from hyperloom_assets.resources.hosts.agent import handle

    url = echo_server("--token-delay-ms", "50")
    workload = Workload(kind="random", isl=8, osl=200, concurrency=1, num_prompts=2)
    reply = handle("bench", {"base_url": url, "served_model": "echo", "workload": workload.model_dump(mode="json"),
                             "vocab_size": 100, "repeats": 1, "warmups": 0, "num_prompts": None,
                             "records_dir": str(tmp_path), "max_model_len": None, "timeout_s": 0.5,
                             "stall_timeout_s": 600.0})
    assert set(reply) == {"overtime"} and reply["overtime"]["limit_s"] == 0.5
    assert 0.5 <= reply["overtime"]["elapsed_s"] < 5.0


def test_the_host_agents_bench_keeps_the_clients_stall_timeout(echo_server, tmp_path):
    # An SSH host's BenchmarkClient(stall_timeout_s=...) holds on the host as it does here.
    from hyperloom_assets.resources.hosts.agent import handle

    url = echo_server("--ttft-ms", "3000")
    workload = Workload(kind="random", isl=8, osl=4, concurrency=1, num_prompts=1)
    started = time.monotonic()
    reply = handle("bench", {"base_url": url, "served_model": "echo", "workload": workload.model_dump(mode="json"),
                             "vocab_size": 100, "repeats": 1, "warmups": 0, "num_prompts": None,
                             "records_dir": str(tmp_path), "max_model_len": None, "timeout_s": None,
                             "stall_timeout_s": 0.5})
    assert reply["server_error"]["error_class"] == "stalled" and "Timeout on reading" in reply["server_error"]["message"]
    assert time.monotonic() - started < 2.5, "the stream was given up after 0.5 s of silence, not 3 s"


def test_a_server_without_a_metrics_page_measures_without_telemetry(echo_server, tmp_path):
    base_url = echo_server()
    workload = Workload(kind="random", isl=32, osl=8, concurrency=4, num_prompts=8)
    measured = measure(base_url, "echo", workload, vocab_size=1000, repeats=1)
    assert measured.completed == 8 and measured.telemetry is None


def _connections_for(base_url: str, requests: int, gap_s: float) -> int:
    """Requests one after another, `gap_s` apart, on one session: how many TCP connections the server saw."""
    request = PlannedRequest(prompt_ids=[1, 2, 3], output_tokens=2)

    async def in_turn() -> int:
        async with open_session() as session:
            for _ in range(requests):
                record = await send_request(session, completions_url(base_url), "echo", request, time.perf_counter())
                assert record.ok, record.error
                await asyncio.sleep(gap_s)
            async with session.get(base_url + "/echo/connections") as response:
                return (await response.json())["connections"]

    return asyncio.run(in_turn())


def test_a_read_stream_hands_its_connection_back_to_the_pool(echo_server):
    # Stopping at [DONE] left the body's last chunk unread now and then, and aiohttp closed
    # that connection instead of pooling it.
    assert _connections_for(echo_server(), requests=30, gap_s=0.01) == 1


def test_a_connection_idle_past_the_keepalive_budget_is_not_reused(echo_server):
    # vLLM's server closes an idle connection after 5 s; reusing one it is closing just then
    # failed a request ("Can not write request body"), so the client retires them sooner.
    assert _connections_for(echo_server(), requests=2, gap_s=KEEPALIVE_S + 0.5) == 2


def test_the_heap_is_frozen_while_requests_are_timed_and_thawed_after(echo_server):
    # A full collection of a long-lived process's heap inside a round would read as the server's latency.
    url = echo_server("--token-delay-ms", "1")
    workload = Workload(kind="random", isl=8, osl=4, concurrency=2, num_prompts=4)
    seen: list[int] = []
    assert gc.get_freeze_count() == 0
    measure(url, "echo", workload, vocab_size=100, repeats=2, warmups=1,
            progress=lambda p: seen.append(gc.get_freeze_count()))
    assert len(seen) >= 3 and all(count > 0 for count in seen), seen
    assert gc.get_freeze_count() == 0, "thawed once the measurement ends"


def test_a_measurement_inside_a_frozen_block_leaves_the_thaw_to_that_block():
    with heap_frozen():
        frozen = gc.get_freeze_count()
        with heap_frozen():
            pass
        assert gc.get_freeze_count() == frozen > 0
    assert gc.get_freeze_count() == 0
