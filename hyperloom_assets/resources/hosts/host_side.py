"""The serving lifecycle's steps as they run on the serving host itself. No Dagster here.

The local host calls these in-process; an SSH host runs the same functions on the
remote machine through `hyperloom host-agent` (agent.py). Each step is whole on the
host: reap orphans and preflight, start a server in its own process group with a
pidfile, wait for readiness watching the log and the process, tear it down.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterable, Mapping

import psutil

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.spec import EngineSpec, Installed
from hyperloom_assets.core.fleet.serving_env import serving_env
from hyperloom_assets.core.fleet.slots import Slot, device_env
from hyperloom_assets.core.measurement.serving import CpuPlacement, ServerError
from hyperloom_assets.core.models import Strict
from hyperloom_assets.resources.hosts.cpu_pinning import AUTO, bound_within, host_placement, pin_process
from hyperloom_assets.resources.hosts.engine_origin import tree_launch_env
from hyperloom_assets.resources.hosts.engines import installed_in
from hyperloom_assets.resources.hosts.preflight import (
    GpuToolOutputError,
    allocate_port,
    busy_gpus,
    find_serving_processes,
    port_free,
    read_gpu_memory,
)
from hyperloom_assets.resources.hosts.process_group import (ServerProcess, launch, new_scratch_dir, read_pidfiles,
                                                          remove_scratch)
from hyperloom_assets.resources.hosts.reaper import reap_orphans

LOG_TAIL_LINES = 40
STILL_STARTING_NOTE_S = 30.0
HEALTH_POLL_S = 0.5
# A sim answers within a few tenths of a second of its start, a real engine after many
# seconds: the first seconds are polled finely, so a fast server never waits out a whole
# slow poll (a sim climb launches a dozen servers), and a slow one is not polled hard.
FAST_POLL_S, FAST_POLL_FOR_S = 0.05, 2.0
# What every engine's server prints when its port was taken after preflight found it free:
# the OS's EADDRINUSE, as Python words it (uvicorn, aiohttp and vLLM's own socket alike).
BIND_FAILURE = re.compile(r"address already in use", re.IGNORECASE)
SERVE_HOST = "127.0.0.1"
PORT_TRIES = 5


class Prepared(Strict):
    """What the host found before a launch: a free port, what stops it, what it serves."""

    port: int
    problems: list[str]
    reaped: list[int]
    survivors: list[int]
    installed: Installed | None
    startup_timeout_s: float
    cpus: CpuPlacement | None = None  # the server's and the client's CPUs; None: shared
    devices: list[int] | None = None  # the slot's devices, all the server sees; None: every device


def server_env(engine: str | None, env: Mapping[str, str], unset_env: list[str],
               inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a server of `engine` may inherit of this host's environment (the allowlist of
    core/fleet/serving_env.py: never the run's credentials), minus unset_env, plus env."""
    prefixes = engine_for(engine).inherited_prefixes() if engine is not None else ()
    return serving_env(os.environ if inherited is None else inherited, prefixes, env, unset_env)


def log_tail(log_path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def preflight_problems(port: int, check_foreign_processes: bool, devices: list[int] | None = None,
                       neighbours: Iterable[int] = ()) -> list[str]:
    """Whatever makes this host unfit to serve now: a foreign server, the port, busy GPUs.

    Within a slot only the slot's `devices` must be free, and this tool's servers on the
    other slots (`neighbours`: their pids) are not foreign: their runs lease their devices."""
    problems = []
    if check_foreign_processes:
        problems += [f"foreign serving process {proc.describe()}" for proc in find_serving_processes(neighbours)]
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
                     f"in use ({tool})" for gpu in busy_gpus(gpus) if devices is None or gpu.index in devices]
    return problems


TOPOLOGY_QUERY = ["nvidia-smi", "topo", "-m"]  # AMD hosts: no matrix read yet, slots take the lowest ids


def slot_facts() -> dict:
    """What a slot is planned from (core/fleet/slots.py): the GPU tool that answered (its vendor),
    its `topo -m` matrix where it has one, and the CPUs this process may use."""
    try:
        reading = read_gpu_memory()
    except (GpuToolOutputError, OSError, ValueError):
        reading = None
    topology = None
    if reading and reading[0] == "nvidia-smi":
        try:
            topology = subprocess.run(TOPOLOGY_QUERY, capture_output=True, text=True, timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            topology = None  # slots are still made, from the lowest free ids
    return {"gpu_tool": reading[0] if reading else None, "topology": topology,
            "allowed_cpus": sorted(os.sched_getaffinity(0))}


def neighbour_servers(pid_dir: Path) -> list[int]:
    """This tool's servers on the host (its pidfiles) and their children: on a slotted host,
    the other slots' servers."""
    pids = []
    for _, record in read_pidfiles(pid_dir):
        pids.append(record.pid)
        try:
            pids += [child.pid for child in psutil.Process(record.pid).children(recursive=True)]
        except psutil.Error:
            continue
    return pids


def free_port(tries: int = PORT_TRIES) -> int:
    """A port free now. The kernel's pick is free when it answers, but a launch prepared at the same
    moment on another slot may have been handed it too and bound it since: that is no problem of
    the host, so another is taken (preflight still finds a port that stays taken)."""
    port = allocate_port(SERVE_HOST)
    for _ in range(tries - 1):
        if port_free(port, SERVE_HOST):
            break
        port = allocate_port(SERVE_HOST)
    return port


def prepare(pid_dir: Path, engine: str, python: Path, check_foreign_processes: bool, env: Mapping[str, str],
            unset_env: list[str], term_wait_s: float, client_cpus: str = AUTO, slot: Slot | None = None) -> Prepared:
    """Reap our orphans (docs/design.md, invariant 8), take a port, preflight, find the engine, place the CPUs
    (within the slot's, on a host that declares its GPUs: core/fleet/slots.py)."""
    report = reap_orphans(pid_dir, term_wait_s=term_wait_s)
    port = free_port()
    spec = engine_for(engine)
    problems = (preflight_problems(port, check_foreign_processes, list(slot.devices), neighbour_servers(pid_dir))
                if slot else preflight_problems(port, check_foreign_processes))
    return Prepared(port=port, problems=problems, reaped=report.reaped,
                    survivors=report.survivors, installed=installed_in(spec, python),
                    startup_timeout_s=spec.startup.timeout_s(server_env(engine, env, unset_env)),
                    cpus=host_placement(client_cpus, list(slot.cpus) if slot and slot.cpus else None),
                    devices=list(slot.devices) if slot else None)


def start(argv: list[str], env: Mapping[str, str], unset_env: list[str], log_path: Path, pid_dir: Path,
          engine: str | None = None, framework_tree: str | None = None,
          server_cpus: list[int] | None = None, slot: Slot | None = None) -> ServerProcess:
    """Launch argv in its own process group, its log in log_path, its pidfile in pid_dir, on server_cpus,
    seeing only the slot's devices (their variable wins over the operator's env: slots never share one),
    its engine's own thread binding kept on server_cpus (cpu_pinning.bound_within).

    With a `framework_tree`, the server imports `engine` from that checkout (its import
    root and the origin reporter go on its PYTHONPATH: engine_origin.py)."""
    launch_env = {**server_env(engine, env, unset_env), **(device_env(slot.vendor, slot.devices) if slot else {})}
    spec = engine_for(engine) if engine is not None else None
    if spec is not None:
        launch_env = {**dict(spec.serve_env), **launch_env}
    if framework_tree is not None and spec is not None:
        launch_env = tree_launch_env(spec, Path(framework_tree), launch_env)
    launch_env = bound_within(launch_env, spec, server_cpus)
    scratch_names = [name for name in (spec.scratch_env if spec else ()) if name not in launch_env]
    scratch = new_scratch_dir() if scratch_names else None
    launch_env.update({name: str(scratch) for name in scratch_names})
    try:
        server = launch(argv, launch_env, log_path, pid_dir, scratch_dir=scratch)
    except OSError as error:
        remove_scratch(scratch)
        raise ServerError("crash", f"could not start {argv[0]}: {error}", argv=argv) from error
    except ValueError as error:  # Popen's word on inputs no process can take (a NUL, a name with `=`)
        remove_scratch(scratch)
        raise ServerError("launch_refused", f"could not start {argv[0]}: {error}", argv=argv) from error
    if server_cpus:
        pin_process(server.popen.pid, server_cpus)
    return server


def _health_ok(base_url: str, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}{path}", timeout=2.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def control_post(url: str, timeout_s: float) -> dict:
    """POST with an empty body to a server's control route (a profiler's start or stop), from the
    serving host; `{"status", "body"}`, or `{"error"}` when it could not be reached."""
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return {"status": response.status, "body": response.read(4096).decode(errors="replace")}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read(4096).decode(errors="replace")}
    except (urllib.error.URLError, OSError, ValueError) as error:
        return {"error": str(getattr(error, "reason", error))}


def _startup_failure(log_text: str, engine: EngineSpec, exited: bool) -> tuple[str, str] | None:
    """(error class, message) once the log or the process says startup failed."""
    argv_error = engine.argv_error(log_text)
    if argv_error and exited:
        return "argv_invalid", f"the engine rejected its arguments ({argv_error!r})"
    if BIND_FAILURE.search(log_text):
        return "port_in_use", "the engine could not bind its port: address already in use"
    fatal = engine.fatal(log_text)
    if fatal:
        return "crash", f"fatal marker in the server log: {fatal!r}"
    if exited:
        return "crash", "the server exited before it was ready"
    return None


def wait_ready(exit_status: Callable[[], int | str | None], engine: str, port: int, log_path: Path,
               timeout_s: float, argv: list[str], still_starting: Callable[[float], None] | None = None) -> None:
    """Until /health answers; ServerError with the log tail when the log or the process says it died.

    `exit_status`: None while the server runs, else its exit code (or a word, when the
    process is not our child and its code cannot be read). `still_starting(waited_s)` is
    called every STILL_STARTING_NOTE_S, so a slow start is never silent for long.
    """
    spec, base_url = engine_for(engine), f"http://{SERVE_HOST}:{port}"
    started = time.monotonic()
    deadline, next_note = started + timeout_s, started + STILL_STARTING_NOTE_S
    while True:
        status = exit_status()
        if status is None and _health_ok(base_url, spec.health_path):
            return
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
        failure = _startup_failure(log_text, spec, exited=status is not None)
        if failure:
            error_class, message = failure
            if status is not None:
                message += f" (exit code {status})"
            raise ServerError(error_class, message, log_tail(log_path), argv)
        now = time.monotonic()
        if now >= deadline:
            raise ServerError("timeout", f"not ready within {timeout_s:.0f} s", log_tail(log_path), argv)
        if still_starting is not None and now >= next_note:
            still_starting(now - started)
            next_note = now + STILL_STARTING_NOTE_S
        time.sleep(FAST_POLL_S if now - started < FAST_POLL_FOR_S else HEALTH_POLL_S)
