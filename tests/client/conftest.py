"""A real HTTP server for the client's tests: benchmarks/support/echo_server.py in its own
process group, started through the project's launcher and torn down on every path."""

import sys
from collections.abc import Callable, Iterator

import pytest

from benchmarks.support.peers import running_server
from hyperloom_assets.resources.hosts.preflight import allocate_port  # noqa: E402


@pytest.fixture
def echo_server(tmp_path) -> Iterator[Callable[..., str]]:
    """Start echo servers with the given flags; returns each one's base URL."""
    stack = []

    def start(*flags: str) -> str:
        port = allocate_port()
        base_url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "benchmarks.support.echo_server", "--port", str(port), *flags]
        server = running_server(argv, base_url, tmp_path / f"echo-{port}.log", timeout_s=30)
        server.__enter__()
        stack.append(server)
        return base_url

    try:
        yield start
    finally:
        for server in reversed(stack):
            server.__exit__(None, None, None)
