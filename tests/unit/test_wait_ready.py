"""Waiting for a server's /health: a server up within a fraction of a second is seen at once."""

from __future__ import annotations

import http.server
import threading
import time

from hyperloom_assets.resources.hosts.host_side import FAST_POLL_S, HEALTH_POLL_S, SERVE_HOST, wait_ready
from hyperloom_assets.resources.hosts.preflight import allocate_port


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_a_server_that_answers_soon_after_its_start_is_not_kept_waiting_for_the_slow_poll(tmp_path) -> None:
    """A sim answers within a few tenths of a second, and a climb launches a dozen of them:
    a whole slow poll (HEALTH_POLL_S) after each was a third of a sim test's wall time."""
    port = allocate_port(SERVE_HOST)
    up: list[float] = []

    def serve_soon() -> None:
        time.sleep(0.05)
        server = http.server.HTTPServer((SERVE_HOST, port), _Health)
        up.append(time.monotonic())
        server.handle_request()
        server.server_close()

    thread = threading.Thread(target=serve_soon)
    thread.start()
    wait_ready(lambda: None, "sim", port, tmp_path / "server.log", timeout_s=10, argv=["sim"])
    answered = time.monotonic()
    thread.join(timeout=5)
    late_by = answered - up[0]
    assert late_by < (FAST_POLL_S + HEALTH_POLL_S) / 2, f"seen {late_by:.2f} s after it answered"
