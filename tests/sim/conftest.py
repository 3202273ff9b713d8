"""Fixtures for the sim tests: real `hyperloom sim-serve` processes, always torn down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hyperloom_assets.resources.hosts.preflight import allocate_port
from tests.conftest import wait_healthy

REPO = Path(__file__).resolve().parents[2]
LLAMA_8B = REPO / "models" / "llama-3-8b"


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


@pytest.fixture
def sim_server(tmp_path: Path) -> Iterator[Callable[..., tuple[str, Path]]]:
    """Start `hyperloom sim-serve MODEL --port P ARGS...`; returns (base_url, log path)."""
    processes: list[subprocess.Popen] = []

    def start(model: Path, *args: str) -> tuple[str, Path]:
        port = allocate_port()
        log = tmp_path / f"sim-{port}.log"
        argv = [sys.executable, "-m", "hyperloom_assets.cli", "sim-serve", "--model", str(model),
                "--port", str(port), *args]
        with log.open("w") as handle:
            process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        processes.append(process)
        wait_healthy(process, port, log, timeout_s=20.0)
        return f"http://127.0.0.1:{port}", log

    try:
        yield start
    finally:
        for process in processes:
            _stop(process)
