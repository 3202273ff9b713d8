"""What a server launch is asked for and how it can fail. Pure code.

The host resource (`resources/hosts/local.py`) turns a ServerSpec into a running server;
every failure it raises is a ServerError whose `error_class` is one of ERROR_CLASSES,
carrying the log tail, so trials can record FAILED with a class and assets can fail
with a message that says what happened.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from hyperloom_assets.core.models import Strict

# environment_unavailable: the host or its engine could not be had (ssh refused, denied,
# a host key mismatch, a timeout; a python without the engine). It says nothing about
# the config, so it is never a failed trial: the run stops with that reason.
# port_in_use: the engine could not bind the port preflight gave it (taken in between);
# the host retries on another port and raises it only when every try met a taken port.
LAUNCH_ERROR_CLASSES = ("argv_invalid", "crash", "timeout", "preflight", "prefix_cache_off",
                        "environment_unavailable", "port_in_use", "engine_not_from_tree")
# A server that was ready and then misbehaved: the benchmark client's requests failed.
# server_gone: connections refused (it exited or stopped listening); connection_dropped:
# a stream cut mid-way; stalled: no bytes for the client's read timeout; http_error: a
# non-200 status; malformed_stream: a chunk that is not JSON; bad_response: a stream
# without tokens or whose usage disagrees with what was asked.
REQUEST_ERROR_CLASSES = ("server_gone", "connection_dropped", "stalled", "http_error", "malformed_stream",
                         "bad_response")
ERROR_CLASSES = LAUNCH_ERROR_CLASSES + REQUEST_ERROR_CLASSES


class ServerSpec(Strict):
    engine: str  # vllm | sglang | atom | sim
    model: Path
    server_args: list[str] = []
    env: dict[str, str] = {}  # set on top of the inherited environment
    unset_env: list[str] = []  # removed from the inherited environment
    python: Path | None = None  # the interpreter that serves; default: this venv's
    startup_timeout_s: float | None = None  # default: the engine's, longer when cold
    framework_tree: Path | None = None  # serve the engine's code from this checkout, not the venv's


class CpuPlacement(Strict):
    """Which CPUs the server and the benchmark client were given on a CPU-only host."""
    server_cpus: list[int]
    client_cpus: list[int]
    reason: str  # "auto: ..." or "host config client_cpus=..."


class LaunchRecord(Strict):
    """What was launched and what the engine says it ran with."""
    argv: list[str]
    env: dict[str, str]
    base_url: str
    served_model: str
    log_path: Path
    ready_s: float
    evidence: dict[str, Any] | None = None  # None: the launch record was unreadable
    engine_version: str | None = None
    engine_path: str | None = None  # the file the server said its engine package came from
    cpus: CpuPlacement | None = None  # None: server and client share every CPU
    devices: list[int] | None = None  # its slot's devices (core/fleet/slots.py); None: the host's every device
    host: str | None = None  # the host of the hosts file that served it (None: recorded before hosts were)

    @property
    def argv_text(self) -> str:
        return shlex.join(self.argv)

    def slot_text(self) -> str | None:
        """Where a launch on a slot ran, `host:devices` (`gpu-a:0,1`); None off a slot (the target's host whole)."""
        if self.devices is None:
            return None
        return f"{self.host or '?'}:{','.join(str(device) for device in self.devices)}"


class ServerError(RuntimeError):
    """A launch that did not give a ready server, or a ready server whose requests failed;
    either way the server is torn down by the time a caller of the host sees it."""

    def __init__(self, error_class: str, message: str, log_tail: str = "", argv: list[str] | None = None):
        assert error_class in ERROR_CLASSES, error_class
        self.error_class = error_class
        self.message = message
        self.log_tail = log_tail
        self.argv = argv or []
        detail = f"\n--- server log tail ---\n{log_tail}" if log_tail else ""
        super().__init__(f"{error_class}: {message}{detail}")


class BenchOvertime(RuntimeError):
    """The measurement ran past its time limit; the round in flight was cancelled (on any host)."""

    def __init__(self, elapsed_s: float, limit_s: float):
        self.elapsed_s, self.limit_s = elapsed_s, limit_s
        super().__init__(f"measuring passed its limit of {limit_s:.1f} s; stopped after {elapsed_s:.1f} s")
