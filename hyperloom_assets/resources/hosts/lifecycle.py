"""The one serving lifecycle, over a transport: the local host's and every SSH host's.

`serve_on(transport, ...)` is the measurement protocol's launch half (docs/design.md, steps
1-3 and 5-6): reap orphans and preflight, launch in a process group with a pidfile,
wait for readiness, bring the server log into the run folder, read the launch evidence,
and tear down on every exit path. The steps themselves run on the host
(host_side.py); a transport only carries them there: in-process for this machine
(LocalTransport), over ssh for a remote one (resources/hosts/ssh.py). Whatever goes
wrong before the server is ready surfaces as a ServerError after the teardown.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Protocol

import dagster as dg

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.spec import EngineSpec, Installed
from hyperloom_assets.core.fleet.slots import Slot
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerError, ServerSpec, launch_problems
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.engine_origin import served_engine_path
from hyperloom_assets.resources.hosts.engines import identity, server_argv
from hyperloom_assets.resources.hosts.process_group import (
    PidRecord,
    ServerProcess,
    TeardownResult,
    teardown,
)
from hyperloom_assets.resources.hosts.signals import signals_deferred

log = dg.get_dagster_logger("hyperloom.host")

StillStarting = Callable[[float], None]


class Transport(Protocol):
    """Carries the host-side steps to one host and its files back."""

    def prepare(self, spec: ServerSpec, python: Path) -> host_side.Prepared: ...
    def start(self, argv: list[str], spec: ServerSpec, log_path: str, server_cpus: list[int] | None) -> object: ...
    def wait_ready(self, started: object, spec: ServerSpec, port: int, log_path: str, timeout_s: float,
                   argv: list[str], still_starting: StillStarting) -> None: ...
    def stop(self, started: object) -> TeardownResult: ...
    def host_dir(self, run_dir: Path) -> str: ...
    def fetch(self, host_dir: str, run_dir: Path) -> None: ...


class LocalTransport:
    """This machine: the steps in-process; the server is our child, the run folder is the host's."""

    def __init__(self, pid_dir: Path, check_foreign_processes: bool, term_wait_s: float, client_cpus: str = "auto",
                 slot: Slot | None = None):
        self.pid_dir, self.check_foreign, self.term_wait_s = pid_dir, check_foreign_processes, term_wait_s
        self.client_cpus, self.slot = client_cpus, slot

    def prepare(self, spec: ServerSpec, python: Path) -> host_side.Prepared:
        return host_side.prepare(self.pid_dir, spec.engine, python, self.check_foreign, spec.env, spec.unset_env,
                                 self.term_wait_s, self.client_cpus, self.slot)

    def start(self, argv: list[str], spec: ServerSpec, log_path: str, server_cpus: list[int] | None) -> ServerProcess:
        tree = str(spec.framework_tree) if spec.framework_tree else None
        return host_side.start(argv, spec.env, spec.unset_env, Path(log_path), self.pid_dir, spec.engine, tree,
                               server_cpus, self.slot)

    def wait_ready(self, started: ServerProcess, spec: ServerSpec, port: int, log_path: str, timeout_s: float,
                   argv: list[str], still_starting: StillStarting) -> None:
        host_side.wait_ready(started.popen.poll, spec.engine, port, Path(log_path), timeout_s, argv, still_starting)

    def stop(self, started: ServerProcess) -> TeardownResult:
        return teardown(started, term_wait_s=self.term_wait_s)

    def host_dir(self, run_dir: Path) -> str:
        return str(run_dir)

    def fetch(self, host_dir: str, run_dir: Path) -> None:
        return None  # the host's files are already in the run folder


def pid_record(started: object) -> PidRecord:
    """The pidfile record of a started server: our child's, or what an SSH host's agent sent back."""
    if isinstance(started, ServerProcess):
        return started.record
    return PidRecord.model_validate(started["record"])


def _refuse_missing(host: str, engine: EngineSpec, installed: Installed | None, python: Path) -> None:
    """An interpreter without the engine, or with a namesake, would only crash the launch."""
    if installed is None:
        raise ServerError("environment_unavailable", f"host {host!r}: {python} has no {engine.name} engine "
                          f"(none of {', '.join(d.name for d in engine.distributions)} is installed there)")
    if not installed.genuine:
        raise ServerError("preflight", f"host {host!r}: {python} has {installed.identity(engine)}; install the "
                                       f"{engine.name} engine into the serving environment")


def _launch_plan(transport: Transport, host: str, spec: ServerSpec, python: Path) -> tuple[host_side.Prepared, list[str]]:
    prepared = transport.prepare(spec, python)
    if prepared.reaped or prepared.survivors:
        log.warning("host %r: reaped orphan servers %s; survivors %s", host, prepared.reaped, prepared.survivors)
    if prepared.problems:
        raise ServerError("preflight", f"host {host!r} is not free: " + "; ".join(prepared.problems))
    engine = engine_for(spec.engine)
    _refuse_missing(host, engine, prepared.installed, python)
    return prepared, server_argv(engine, python, spec.model, prepared.port, spec.server_args, prepared.installed)


def refuse_unlaunchable(host: str, spec: ServerSpec) -> None:
    """ServerError(launch_refused) before the host is touched when no process could start from `spec`:
    whichever path made it (the target's env, its search space, a proposal), it fails its own
    measurement with the reason, where Popen would raise a bare ValueError out of the step."""
    problems = launch_problems(spec)
    if problems:
        raise ServerError("launch_refused", f"host {host!r}: nothing launched: " + "; ".join(problems))


PORT_ATTEMPTS = 3  # launches on fresh ports when the one preflight gave was taken before the engine bound it


@contextmanager
def serve_on(transport: Transport, host: str, spec: ServerSpec, python: Path, run_dir: Path,
             label: str | None = None) -> Iterator[LaunchRecord]:
    """A ready server for `spec` on the transport's host, torn down when the block ends; `label` names it in the log."""
    refuse_unlaunchable(host, spec)
    engine, run_dir, name = engine_for(spec.engine), Path(run_dir), label or spec.engine
    host_dir = transport.host_dir(run_dir)
    for attempt in range(1, PORT_ATTEMPTS + 1):
        prepared, argv = _launch_plan(transport, host, spec, python)
        cpus = prepared.cpus
        started = transport.start(argv, spec, f"{host_dir}/server.log", cpus.server_cpus if cpus else None)
        try:
            ready_s = _wait_ready(transport, host, spec, prepared, started, argv, name, run_dir)
            break
        except BaseException as error:
            with signals_deferred():  # a teardown cut short by a repeated cancel would leave the server behind
                _teardown(transport, host, started, host_dir, run_dir)
            if not (isinstance(error, ServerError) and error.error_class == "port_in_use" and attempt < PORT_ATTEMPTS):
                raise
            log.warning("%s: port %d was taken between preflight and launch; launching again on another port "
                        "(attempt %d of %d)", name, prepared.port, attempt + 1, PORT_ATTEMPTS)
    try:
        log_path = run_dir / "server.log"
        log_text = log_path.read_text(errors="replace")
        engine_path = served_engine_path(spec, engine, log_text, argv)  # a tree launch that ran other code fails here
        yield LaunchRecord(
            argv=argv, env=dict(spec.env), base_url=f"http://{host_side.SERVE_HOST}:{prepared.port}",
            served_model=engine.served_model(spec.model, spec.server_args), log_path=log_path,
            ready_s=ready_s, evidence=engine.parse_evidence(log_text),
            engine_version=identity(engine, prepared.installed), engine_path=engine_path, cpus=cpus,
            devices=prepared.devices, host=host,
        )
    finally:
        with signals_deferred():
            _teardown(transport, host, started, host_dir, run_dir)


def _wait_ready(transport: Transport, host: str, spec: ServerSpec, prepared: host_side.Prepared, started: object,
                argv: list[str], name: str, run_dir: Path) -> float:
    """Seconds from the start until the server answered; ServerError when it never did."""
    began = time.monotonic()
    timeout_s = spec.startup_timeout_s or prepared.startup_timeout_s
    host_dir = transport.host_dir(run_dir)
    log.info("%s: starting %s server on host %r (pid %d, port %d); ready within %.0f s or it fails",
             name, spec.engine, host, pid_record(started).pid, prepared.port, timeout_s)
    if prepared.devices is not None:
        log.info("%s: server sees devices %s of host %r (its slot)", name, prepared.devices, host)
    if prepared.cpus is not None:
        log.info("%s: server on CPUs %s, benchmark client on CPUs %s (%s)", name, prepared.cpus.server_cpus,
                 prepared.cpus.client_cpus, prepared.cpus.reason)
    try:
        transport.wait_ready(started, spec, prepared.port, f"{host_dir}/server.log", timeout_s, argv,
                             lambda waited_s: log.info("%s: server still starting after %.0f s", name, waited_s))
    finally:
        transport.fetch(host_dir, run_dir)
    ready_s = time.monotonic() - began
    log.info("%s: server ready in %.1f s", name, ready_s)
    return ready_s


def _teardown(transport: Transport, host: str, started: object, host_dir: str, run_dir: Path) -> None:
    result = transport.stop(started)
    try:
        transport.fetch(host_dir, run_dir)
    except ServerError as error:  # the log stays on the host; the teardown itself is what matters here
        log.warning("host %r: server log not fetched after teardown: %s", host, error)
    summary = {"pgid": pid_record(started).pgid, "teardown_s": round(result.elapsed_s, 3),
               "signalled": result.signalled, "killed": result.killed, "survivors": result.survivors}
    try:
        (run_dir / "teardown.json").write_text(json.dumps(summary, indent=2))
    except OSError:
        pass
    if result.survivors:
        log.warning("server pids %s survived teardown on host %r", result.survivors, host)
