"""A server that misbehaves on the wire, against the real client: each misbehaviour is a
failed request of its class (the round a RoundFailed, so a trial records FAILED), never an
exception out of the client, a buffer without end or a measurement without end."""

from __future__ import annotations

import time

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.serving import REQUEST_ERROR_CLASSES
from hyperloom_assets.resources.bench.client import BenchmarkClient, BenchOvertime, RoundFailed, measure
from hyperloom_assets.resources.bench.stream import MAX_LINE_BYTES

ONE = Workload(kind="random", isl=8, osl=4, concurrency=1, num_prompts=1)
GUARD_S = 20.0  # a client that fails to stop on its own is stopped here (BenchOvertime), never hangs the suite

EXPECTED = {
    "chunk-list": ("malformed_stream", "a JSON list, not an object"),
    "chunk-number": ("malformed_stream", "a JSON int, not an object"),
    "usage-list": ("malformed_stream", "'usage' is a JSON list, not an object"),
    "endless-line": ("oversized_stream", f"a stream line longer than {MAX_LINE_BYTES} bytes"),
    "endless-error": ("http_error", "HTTP 500: {\"message\": \"aaaa"),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_a_misbehaving_stream_is_a_failed_request_of_its_class(echo_server, kind) -> None:
    error_class, words = EXPECTED[kind]
    assert error_class in REQUEST_ERROR_CLASSES
    url = echo_server("--misbehave", kind)
    started = time.monotonic()
    with pytest.raises(RoundFailed) as caught:
        measure(url, "echo", ONE, vocab_size=100, warmups=0, timeout_s=GUARD_S)
    assert caught.value.error_class == error_class and words in str(caught.value), str(caught.value)
    assert time.monotonic() - started < 5.0, "ended by the client's own cap, not by the guard"


def test_a_measurement_without_a_limit_of_its_callers_is_bounded_by_the_clients_cap(echo_server) -> None:
    # No timeout_s (the baseline's and the validation's case): a trickling server is still stopped.
    url = echo_server("--token-delay-ms", "200")
    workload = Workload(kind="random", isl=8, osl=200, concurrency=1, num_prompts=2)
    started = time.monotonic()
    with pytest.raises(BenchOvertime, match=r"passed its limit of 1\.0 s \(the client's max_measurement_s\)"):
        measure(url, "echo", workload, vocab_size=100, warmups=0, max_total_s=1.0)
    assert time.monotonic() - started < 6.0


def test_the_host_agents_bench_keeps_the_clients_cap_without_a_callers_limit(echo_server, tmp_path) -> None:
    # An SSH host measures through this op; a baseline passes no timeout_s, and the cap still holds there.
    from hyperloom_assets.resources.hosts.agent import handle

    reply = handle("bench", {"base_url": echo_server("--token-delay-ms", "200"), "served_model": "echo",
                             "workload": ONE.model_copy(update={"osl": 200}).model_dump(mode="json"),
                             "vocab_size": 100, "repeats": 1, "warmups": 0, "num_prompts": None,
                             "records_dir": str(tmp_path), "max_model_len": None, "timeout_s": None,
                             "stall_timeout_s": 600.0, "max_measurement_s": 0.5})
    assert set(reply) == {"overtime"}, reply
    assert reply["overtime"]["limit_s"] == 0.5 and reply["overtime"]["why"] == "the client's max_measurement_s"


def test_an_ssh_hosts_measurement_sends_the_cap_and_waits_no_longer_than_it(tmp_path, monkeypatch) -> None:
    from hyperloom_assets.resources.hosts.ssh import OP_TIMEOUT_S, SshHost, SshTransport

    calls: list[tuple[str, dict, float]] = []

    def call(self, op, request, timeout_s=OP_TIMEOUT_S, on_progress=None):
        calls.append((op, request, timeout_s))
        raise BenchOvertime(90.0, 90.0, "the client's max_measurement_s")  # what the agent replies at the cap

    monkeypatch.setattr(SshTransport, "call", call)
    host = SshHost(name="gpu", state_dir=str(tmp_path), config={
        "kind": "ssh", "address": "gpu.internal", "identity_file": str(tmp_path / "key"),
        "known_hosts": str(tmp_path / "known"), "python": "python3", "workdir": "/srv/hyperloom"})
    bench = BenchmarkClient(max_measurement_s=90.0)
    for caller_limit, waited in ((None, 90.0), (30.0, 30.0), (500.0, 90.0)):
        with pytest.raises(BenchOvertime):
            host.measure(bench, "http://127.0.0.1:1", "echo", ONE, 100, repeats=1, timeout_s=caller_limit)
        op, request, timeout_s = calls[-1]
        assert op == "bench" and request["max_measurement_s"] == 90.0 and request["timeout_s"] == caller_limit
        assert timeout_s == waited + OP_TIMEOUT_S, "the ssh call ends soon after the measurement's limit, never 24 h"
