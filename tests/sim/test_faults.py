"""The sim's fault flags against the real benchmark client: each misbehaviour ends the
round with its own error class (a ServerError the climb records as FAILED), never a hang
or a silent partial measurement."""

from __future__ import annotations

import socket
import time

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.serving import REQUEST_ERROR_CLASSES, ServerError
from hyperloom_assets.resources.bench.runner import RoundFailed, measure
from hyperloom_assets.sim.engine_args import FAULTS
from tests.sim.conftest import LLAMA_8B

WORKLOAD = Workload(kind="random", isl=64, osl=16, concurrency=2, num_prompts=8)
FAST = ["--gpu", "H100", "--time-scale", "20"]
EXPECTED = {"exit": "server_gone", "stall": "stalled", "http-500": "http_error",
            "malformed-chunk": "malformed_stream", "wrong-shape-chunk": "malformed_stream",
            "endless-line": "oversized_stream", "drop-connection": "connection_dropped"}


def test_every_fault_has_its_expected_class() -> None:
    assert set(EXPECTED) == set(FAULTS)
    assert set(EXPECTED.values()) <= set(REQUEST_ERROR_CLASSES)


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_a_fault_mid_run_fails_the_round_with_its_class(sim_server, fault) -> None:
    # Four requests served well (the warm-up's two and two of the repeat), then the fault.
    url, log = sim_server(LLAMA_8B, *FAST, "--fault", fault, "--fault-after-requests", "4")
    started = time.monotonic()
    with pytest.raises(RoundFailed) as caught:
        measure(url, str(LLAMA_8B), WORKLOAD, vocab_size=128256, warmups=2, sock_read_timeout_s=3.0)
    error = caught.value
    assert isinstance(error, ServerError) and error.error_class == EXPECTED[fault], str(error)
    assert str(error).startswith(f"{EXPECTED[fault]}: ") and "of 8 repeat 1 requests failed" in str(error), \
        "a partial round is a failure, counted"
    assert time.monotonic() - started < 30, "the stall is bounded by the client's read timeout"
    assert f"sim fault {fault}: request 5" in log.read_text()
    if fault == "exit":
        with pytest.raises(ConnectionRefusedError):  # the process is gone, its port closed
            socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=2).close()
