"""Fixtures for the sim tests: real `hyperloom sim-serve` processes, always torn down."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LLAMA_8B = REPO / "models" / "llama-3-8b"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
        except ProcessLookupError:
            pass


def _wait_ready(process: subprocess.Popen, port: int, log: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"sim-serve exited with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"sim-serve not ready within {timeout_s}s:\n{log.read_text()}")


@pytest.fixture
def sim_server(tmp_path: Path) -> Iterator[Callable[..., tuple[str, Path]]]:
    """Start `hyperloom sim-serve MODEL --port P ARGS...`; returns (base_url, log path)."""
    processes: list[subprocess.Popen] = []

    def start(model: Path, *args: str) -> tuple[str, Path]:
        port = free_port()
        log = tmp_path / f"sim-{port}.log"
        argv = [sys.executable, "-m", "hyperloom_assets.cli", "sim-serve", "--model", str(model),
                "--port", str(port), *args]
        with log.open("w") as handle:
            process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        processes.append(process)
        _wait_ready(process, port, log)
        return f"http://127.0.0.1:{port}", log

    try:
        yield start
    finally:
        for process in processes:
            _stop(process)
