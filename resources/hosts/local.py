"""GPU hosts as resources: the local host serves on this machine.

`LocalHost.serve(spec, run_dir)` is the measurement protocol's launch half (DESIGN.md,
steps 1-3 and 5-6): reap orphans, preflight, launch in a process group, wait for
`/health`, read the launch evidence, and tear down on every exit path. Whatever goes
wrong before the server is ready surfaces as a ServerError after the teardown.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import dagster as dg

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.spec import EngineSpec, Installed
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.resources.hosts.engine_origin import served_engine_path, tree_launch_env
from hyperloom_assets.resources.hosts.engines import identity, installed_in, server_argv
from hyperloom_assets.resources.hosts.preflight import (
    GpuToolOutputError,
    allocate_port,
    busy_gpus,
    find_serving_processes,
    port_free,
    read_gpu_memory,
)
from hyperloom_assets.resources.hosts.process_group import ServerProcess, launch, reap_orphans, teardown

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 40
HEALTH_POLL_S = 0.5
SERVE_HOST = "127.0.0.1"


def pool_name(host_name: str) -> str:
    """The concurrency pool of a host: one serving launch at a time (dagster.yaml sets 1)."""
    return f"gpu_host_{host_name}"


def default_state_dir() -> Path:
    home = os.environ.get("DAGSTER_HOME")
    return Path(home) / "hyperloom" if home else Path.cwd() / ".cache" / "hyperloom"


def server_env(spec: ServerSpec, inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """The inherited environment minus spec.unset_env plus spec.env (and, from a tree, its PYTHONPATH)."""
    env = dict(os.environ if inherited is None else inherited)
    for name in spec.unset_env:
        env.pop(name, None)
    env.update(spec.env)
    if spec.framework_tree is not None:
        env.update(tree_launch_env(spec, engine_for(spec.engine), env))
    return env


def log_tail(log_path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class LocalHost(dg.ConfigurableResource):
    """This machine as a serving host."""

    name: str = "local"
    state_dir: str | None = None  # default: $DAGSTER_HOME/hyperloom, else ./.cache/hyperloom
    check_foreign_processes: bool = True
    teardown_term_wait_s: float = 15.0

    def state_path(self) -> Path:
        return Path(self.state_dir) if self.state_dir else default_state_dir()

    def pid_dir(self) -> Path:
        return self.state_path() / "pids"

    def pool(self) -> str:
        return pool_name(self.name)

    def python_executable(self, spec: ServerSpec) -> Path:
        return Path(spec.python) if spec.python else Path(sys.executable)

    def gpu_names(self) -> list[str]:
        reading = read_gpu_memory()
        return [gpu.name for gpu in reading[1]] if reading else []

    def engine_identity(self, spec: ServerSpec) -> str | None:
        """`distribution version` of the spec's engine in its serving environment."""
        engine = engine_for(spec.engine)
        return identity(engine, installed_in(engine, self.python_executable(spec)))

    def preflight(self, port: int) -> None:
        """Raise ServerError("preflight") naming whatever makes this host unfit to serve."""
        problems = []
        if self.check_foreign_processes:
            problems += [f"foreign serving process {proc.describe()}" for proc in find_serving_processes()]
        if not port_free(port, SERVE_HOST):
            problems.append(f"port {port} is in use")
        try:
            reading = read_gpu_memory()
        except (GpuToolOutputError, OSError, ValueError) as error:
            problems.append(f"GPU memory unreadable: {error}")
            reading = None
        if reading:
            tool, gpus = reading
            problems += [f"GPU {gpu.index} ({gpu.name}) has {gpu.used_mib:.0f} of {gpu.total_mib:.0f} MiB "
                         f"in use ({tool})" for gpu in busy_gpus(gpus)]
        if problems:
            raise ServerError("preflight", f"host {self.name!r} is not free: " + "; ".join(problems))

    @contextmanager
    def serve(self, spec: ServerSpec, run_dir: Path) -> Iterator[LaunchRecord]:
        engine = engine_for(spec.engine)
        python = self.python_executable(spec)
        report = reap_orphans(self.pid_dir(), term_wait_s=self.teardown_term_wait_s)
        if report.reaped or report.survivors:
            log.warning("reaped orphan servers %s; survivors %s", report.reaped, report.survivors)
        port = allocate_port(SERVE_HOST)
        self.preflight(port)
        installed = installed_in(engine, python)
        _refuse_namesake(engine, installed, python)
        argv = server_argv(engine, python, spec.model, port, spec.server_args, installed)
        env = server_env(spec)
        run_dir = Path(run_dir)
        log_path = run_dir / "server.log"
        try:
            server = launch(argv, env, log_path, self.pid_dir())
        except OSError as error:
            raise ServerError("crash", f"could not start {argv[0]}: {error}", argv=argv) from error
        started = time.monotonic()
        try:
            timeout_s = spec.startup_timeout_s or engine.startup.timeout_s(env)
            _wait_ready(server, engine, f"http://{SERVE_HOST}:{port}", log_path, timeout_s, argv)
            ready_s = time.monotonic() - started
            log_text = log_path.read_text(errors="replace")
            engine_path = served_engine_path(spec, engine, log_text, argv)
            yield LaunchRecord(
                argv=argv, env=dict(spec.env), base_url=f"http://{SERVE_HOST}:{port}",
                served_model=engine.served_model(spec.model, spec.server_args), log_path=log_path,
                ready_s=ready_s, evidence=engine.parse_evidence(log_text), engine_version=identity(engine, installed),
                engine_path=engine_path,
            )
        finally:
            self._teardown(server, run_dir)

    def _teardown(self, server: ServerProcess, run_dir: Path) -> None:
        result = teardown(server, term_wait_s=self.teardown_term_wait_s)
        summary = {"pgid": server.record.pgid, "teardown_s": round(result.elapsed_s, 3),
                   "signalled": result.signalled, "killed": result.killed, "survivors": result.survivors}
        try:
            (run_dir / "teardown.json").write_text(json.dumps(summary, indent=2))
        except OSError:
            pass
        if result.survivors:
            log.warning("server pids %s survived teardown on host %r", result.survivors, self.name)


def _refuse_namesake(engine: EngineSpec, installed: Installed | None, python: Path) -> None:
    """A distribution with the engine's name that is another project would only crash the launch."""
    if installed is not None and not installed.genuine:
        raise ServerError("preflight", f"{python} has {installed.identity(engine)}; install the {engine.name} "
                                       "engine into the serving environment")


def _health_ok(base_url: str, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}{path}", timeout=2.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _startup_failure(log_text: str, engine: EngineSpec, exited: bool) -> tuple[str, str] | None:
    """(error class, message) once the log or the process says startup failed."""
    argv_error = engine.argv_error(log_text)
    if argv_error and exited:
        return "argv_invalid", f"the engine rejected its arguments ({argv_error!r})"
    fatal = engine.fatal(log_text)
    if fatal:
        return "crash", f"fatal marker in the server log: {fatal!r}"
    if exited:
        return "crash", "the server exited before it was ready"
    return None


def _wait_ready(server: ServerProcess, engine: EngineSpec, base_url: str, log_path: Path,
                timeout_s: float, argv: list[str]) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        exit_code = server.popen.poll()
        if exit_code is None and _health_ok(base_url, engine.health_path):
            return
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
        failure = _startup_failure(log_text, engine, exited=exit_code is not None)
        if failure:
            error_class, message = failure
            if exit_code is not None:
                message += f" (exit code {exit_code})"
            raise ServerError(error_class, message, log_tail(log_path), argv)
        if time.monotonic() >= deadline:
            raise ServerError("timeout", f"not ready within {timeout_s:.0f} s", log_tail(log_path), argv)
        time.sleep(HEALTH_POLL_S)
