"""This process's owner scope (docs/design.md, invariant 9) and whether a holder's pid still runs.

The scope is unique per container and boot: the kernel's boot id, the inode of this
process's PID namespace, and the start time of that namespace's PID 1 (a namespace
inode can be reused after its container is gone; its PID 1 start time cannot repeat
within a boot).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import psutil

from hyperloom_assets.core.fleet.leases import Holder
from hyperloom_assets.resources.hosts.process_group import start_ticks

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _pid1_start_ticks() -> str:
    return str(start_ticks(1))


def current_scope() -> str:
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    pid_ns = os.stat("/proc/self/ns/pid").st_ino
    return f"{boot_id}/pidns:{pid_ns}/pid1:{_pid1_start_ticks()}"


def process_start(pid: int) -> float | None:
    """When the process started, in seconds since boot; None when there is no such process."""
    ticks = start_ticks(pid)
    return None if ticks is None else ticks / CLOCK_TICKS


def pid_alive(pid: int, start: float) -> bool:
    """The pid runs and is the same process (its start time matches), not a reused pid."""
    now = process_start(pid)
    if now is None or abs(now - start) > 0.5 / CLOCK_TICKS:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def this_holder(run_id: str) -> Holder:
    pid = os.getpid()
    return Holder(scope=current_scope(), run_id=run_id, pid=pid, pid_start=process_start(pid),
                  worker=socket.gethostname())


def _pid_namespace_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def scope_evidence(holder: Holder) -> tuple[bool | None, str]:
    """(alive, why) for a holder in another scope, from what this machine can see.

    alive is True when the holder's pid namespace still has processes we can see (its
    container runs), False when its scope provably ended (a reboot of this machine, or
    its namespace recreated), None when nothing here can tell (another machine, or a
    sibling container whose processes are hidden from us).
    """
    try:
        boot_id, pid_ns, pid1 = holder.scope.split("/")
        namespace = int(pid_ns.removeprefix("pidns:"))
    except ValueError:
        return None, f"scope {holder.scope!r} is not in this version's format"
    mine = current_scope().split("/")
    here = holder.worker == socket.gethostname()
    if boot_id != mine[0]:
        if here:
            return False, f"{holder.worker} has rebooted since (boot id {boot_id} is gone)"
        return None, f"pid {holder.pid} on {holder.worker} (another machine) cannot be checked from here"
    if pid_ns == mine[1] and pid1 != mine[2]:
        return False, "its PID namespace was recreated since (its PID 1 started later)"
    members = [proc.pid for proc in psutil.process_iter() if _pid_namespace_of(proc.pid) == namespace]
    if members:
        return True, f"processes of its PID namespace {namespace} still run here (pids {members[:5]})"
    return None, f"no process of its PID namespace {namespace} is visible from here"
