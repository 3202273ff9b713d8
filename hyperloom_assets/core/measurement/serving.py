"""What a server launch is asked for and how it can fail. Pure code.

The host resource (`resources/hosts/local.py`) turns a ServerSpec into a running server;
every failure it raises is a ServerError whose `error_class` is one of ERROR_CLASSES,
carrying the log tail, so trials can record FAILED with a class and assets can fail
with a message that says what happened.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hyperloom_assets.core.models import Strict

# environment_unavailable: the host or its engine could not be had (ssh refused, denied,
# a host key mismatch, a timeout; a python without the engine). It says nothing about
# the config, so it is never a failed trial: the run stops with that reason.
# port_in_use: the engine could not bind the port preflight gave it (taken in between);
# the host retries on another port and raises it only when every try met a taken port.
# launch_refused: the launch's own inputs cannot start a process (an env name that is not a
# name, a NUL byte in a value or an argument); nothing was started.
LAUNCH_ERROR_CLASSES = ("argv_invalid", "crash", "timeout", "preflight", "prefix_cache_off",
                        "environment_unavailable", "port_in_use", "engine_not_from_tree", "launch_refused")
# A server that was ready and then misbehaved: the benchmark client's requests failed.
# server_gone: connections refused (it exited or stopped listening); connection_dropped:
# a stream cut mid-way; stalled: no bytes for the client's read timeout; http_error: a
# non-200 status; malformed_stream: a chunk that is not JSON, or JSON of the wrong shape
# (not an object, `choices` not a list, `usage` not an object); oversized_stream: a stream
# line longer than the client reads (resources/bench/stream.py, MAX_LINE_BYTES);
# bad_response: a stream without tokens or whose usage disagrees with what was asked.
REQUEST_ERROR_CLASSES = ("server_gone", "connection_dropped", "stalled", "http_error", "malformed_stream",
                         "oversized_stream", "bad_response")
ERROR_CLASSES = LAUNCH_ERROR_CLASSES + REQUEST_ERROR_CLASSES

# What POSIX calls a portable environment variable name; anything else (`VLLM_X=Y`, an empty
# name, a space) either cannot be set at all (Popen raises) or sets a variable the engine never reads.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_problems(env: Mapping[str, str], unset_env: Iterable[str] = ()) -> list[str]:
    """Why `env` (set) and `unset_env` (removed) cannot be a process's environment; [] when they can."""
    problems = [f"env name {name!r} is not an environment variable name (expected {ENV_NAME.pattern})"
                for name in [*env, *unset_env] if not ENV_NAME.fullmatch(name)]
    problems += [f"env {name}: its value holds a NUL byte" for name, value in env.items() if "\0" in value]
    return problems


def launch_problems(spec: ServerSpec) -> list[str]:
    """Why `spec` cannot be started as a process, checked before anything is: its env, and a NUL
    byte (which no argv, path or environment can carry) in its args, model or interpreter."""
    problems = env_problems(spec.env, spec.unset_env)
    problems += [f"server_args[{index}] holds a NUL byte" for index, arg in enumerate(spec.server_args) if "\0" in arg]
    problems += [f"{field} holds a NUL byte" for field, path in (("model", spec.model), ("python", spec.python),
                                                                  ("framework_tree", spec.framework_tree))
                 if path is not None and "\0" in str(path)]
    return problems


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

    def __init__(self, elapsed_s: float, limit_s: float, why: str = ""):
        self.elapsed_s, self.limit_s, self.why = elapsed_s, limit_s, why
        set_by = f" ({why})" if why else ""
        super().__init__(f"measuring passed its limit of {limit_s:.1f} s{set_by}; stopped after {elapsed_s:.1f} s")
