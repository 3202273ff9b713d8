"""Server processes: the one launcher, the one teardown, pidfiles; the reaper is reaper.py.

A server runs in its own process group (its own session), so one signal reaches the
engine and every worker it forks. Each launch leaves a pidfile (pid, pgid, cmdline,
creation time and the launching process) in this tool's pid folder, removed only once
teardown has confirmed the whole group gone. A pidfile also records the boot it was
written in and a random marker the launch put in the server's environment (MARKER_ENV),
which every process of the server inherits, so that a process can be proved this
launch's before anything signals it (docs/design.md, invariant 8).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import psutil
from pydantic import ValidationError

from hyperloom_assets.core.models import Strict

log = logging.getLogger(__name__)

PIDFILE_SUFFIX = ".server.json"
MARKER_ENV = "HYPERLOOM_LAUNCH_MARKER"
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
# psutil rounds creation times; a real restart under the same pid differs by far more.
CREATE_TIME_SLACK_S = 0.05


class PidRecord(Strict):
    pid: int
    pgid: int
    cmdline: list[str]
    create_time: float
    owner_pid: int
    owner_create_time: float
    # Start times in clock ticks since boot (/proc/PID/stat): exact from any process.
    # psutil's wall-clock creation time moves with the clock (boot time is "now minus
    # uptime"), so two processes can disagree on it; pidfiles are read by the reaper of
    # a later run and by an SSH host's agent. None in pidfiles written before this field.
    start_ticks: int | None = None
    owner_start_ticks: int | None = None
    log_path: str | None = None
    # The launch's own scratch folder (engine IPC sockets), removed once the group is gone.
    scratch_dir: str | None = None
    # The boot it was written in, and the launch's marker in its server's environment
    # (MARKER_ENV). None in pidfiles written before them: the reaper signals nothing of those.
    boot_id: str | None = None
    marker: str | None = None


@dataclass
class ServerProcess:
    popen: subprocess.Popen
    record: PidRecord
    pidfile: Path


@dataclass
class TeardownResult:
    elapsed_s: float
    signalled: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)
    killed: bool = False  # SIGKILL was needed


class RefusedSignal(RuntimeError):
    """Signalling this group would signal the caller itself."""


def _pidfile(pid_dir: Path, pid: int) -> Path:
    return pid_dir / f"{pid}{PIDFILE_SUFFIX}"


def _write_pidfile(path: Path, record: PidRecord) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(record.model_dump_json(indent=2))
    partial.replace(path)


SCRATCH_PREFIX = "hyperloom-srv-"


def new_scratch_dir() -> Path:
    """A launch's scratch folder, short enough for a Unix socket path (108 bytes) beneath it."""
    return Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))


def remove_scratch(scratch_dir: str | Path | None) -> None:
    """Delete a launch's scratch folder; only ever one this module named."""
    if scratch_dir and Path(scratch_dir).name.startswith(SCRATCH_PREFIX):
        shutil.rmtree(scratch_dir, ignore_errors=True)


def forget_pidfile(record: PidRecord, pidfile: Path) -> None:
    """A server whose group is gone: its scratch folder and its pidfile go."""
    remove_scratch(record.scratch_dir)
    pidfile.unlink(missing_ok=True)


# Ignored dispositions and blocked signals survive fork and exec. A run worker started
# with TERM ignored (a background job of a non-interactive shell, nohup, some
# supervisors) would hand that to every server, and a server without its own TERM
# handler would then outlive teardown's TERM and wait for the KILL. This trampoline
# starts the server as if from a clean shell: these signals at their defaults, none
# blocked. PIPE and XFSZ are the ones Python itself ignores.
_DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for name in ('SIGINT', 'SIGQUIT', 'SIGTERM', 'SIGPIPE', 'SIGXFSZ'):\n"
    "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_SETMASK, ())\n"
    "os.execv(sys.argv[1], sys.argv[2:])\n"
)


def _resolved(argv: list[str], env: Mapping[str, str]) -> str:
    """argv[0] as a path, found on the server's PATH as Popen would; FileNotFoundError if not."""
    found = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "no such executable", argv[0])
    return found


def boot_id() -> str | None:
    """The kernel's id of this boot; None where the kernel does not say."""
    try:
        return BOOT_ID_FILE.read_text().strip() or None
    except OSError:
        return None


def launch(argv: list[str], env: Mapping[str, str], log_path: Path, pid_dir: Path,
           scratch_dir: Path | None = None) -> ServerProcess:
    """Start argv in a new session (its own process group), logging to log_path, its
    environment `env` plus this launch's marker (MARKER_ENV), which the pidfile records."""
    pid_dir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    trampoline = [sys.executable, "-I", "-S", "-c", _DEFAULT_SIGNALS, _resolved(argv, env), *argv]
    marker = secrets.token_hex(16)
    with open(log_path, "wb") as log_file:
        popen = subprocess.Popen(
            trampoline, start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=log_file, stderr=subprocess.STDOUT, env={**env, MARKER_ENV: marker},
        )
    me = psutil.Process()
    record = PidRecord(
        pid=popen.pid, pgid=popen.pid, cmdline=list(argv), create_time=time.time(),
        owner_pid=me.pid, owner_create_time=me.create_time(), log_path=str(log_path),
        start_ticks=start_ticks(popen.pid), owner_start_ticks=start_ticks(me.pid),
        scratch_dir=str(scratch_dir) if scratch_dir else None, boot_id=boot_id(), marker=marker,
    )
    pidfile = _pidfile(pid_dir, popen.pid)
    # Recorded at once, as the argv its exec lands on: a launcher killed while it waits for
    # the exec (seconds on a loaded host) leaves an orphan the next reaper finds.
    _write_pidfile(pidfile, record)
    cmdline, create_time = _exec_identity(popen.pid, argv)
    record = record.model_copy(update={"cmdline": cmdline, "create_time": create_time})
    _write_pidfile(pidfile, record)
    return ServerProcess(popen=popen, record=record, pidfile=pidfile)


EXEC_SETTLE_S = 5.0


def _exec_identity(pid: int, argv: list[str]) -> tuple[list[str], float]:
    """The child's cmdline and creation time once its exec has landed.

    Popen can return while the child is still inside exec, when /proc shows an empty
    cmdline; a pidfile with that cmdline never matches the live server, so the reaper
    would take it for a reused pid and leave an orphan running.
    """
    deadline = time.monotonic() + EXEC_SETTLE_S
    while True:
        try:
            child = psutil.Process(pid)
            cmdline, create_time = child.cmdline(), child.create_time()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return list(argv), time.time()  # exited already: teardown finds nothing to do
        if cmdline == list(argv) or (cmdline and time.monotonic() >= deadline):
            return cmdline, create_time
        if time.monotonic() >= deadline:
            return list(argv), create_time
        time.sleep(0.01)


def is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int, leader: psutil.Process | None = None) -> list[psutil.Process]:
    """Every live process in the group, plus the leader's descendants that left it."""
    members: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and is_alive(proc):
                members[proc.pid] = proc
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    if leader is not None and is_alive(leader):
        try:
            for child in leader.children(recursive=True):
                if is_alive(child):
                    members.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
    return list(members.values())


def carries_marker(proc: psutil.Process, marker: str) -> bool:
    """Was this process started with the launch's marker in its environment (inherited by every child)?"""
    try:
        return proc.environ().get(MARKER_ENV) == marker
    except psutil.Error:  # gone, a zombie, or not ours to read: not ours to signal either
        return False


def marked(procs: list[psutil.Process], marker: str | None) -> list[psutil.Process]:
    return procs if marker is None else [proc for proc in procs if carries_marker(proc, marker)]


def _signal_all(pgid: int, members: list[psutil.Process], signum: int, whole_group: bool = True) -> None:
    if whole_group:
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in members:
        try:
            proc.send_signal(signum)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def _wait_gone(pgid: int, procs: list[psutil.Process], timeout_s: float,
               marker: str | None = None) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while True:
        # wait_procs reaps our own children, so they never linger as zombies.
        psutil.wait_procs(procs, timeout=0.2)
        remaining = [proc for proc in procs if is_alive(proc)]
        late = [proc for proc in marked(group_members(pgid), marker) if proc.pid not in {p.pid for p in remaining}]
        remaining += late
        if not remaining or time.monotonic() >= deadline:
            return remaining
        procs = remaining


def own_group(pgid: int) -> bool:
    return pgid <= 1 or pgid == os.getpgrp()


def terminate_group(pgid: int, leader: psutil.Process | None = None, term_wait_s: float = 15.0,
                    kill_wait_s: float = 5.0, marker: str | None = None) -> TeardownResult:
    """TERM the group, wait, KILL what is left, and confirm with psutil that it is gone.

    With a `marker`, only the members that carry it are signalled, each on its own (a
    server this process did not start: its group id alone proves nothing)."""
    if own_group(pgid):
        raise RefusedSignal(f"refusing to signal process group {pgid} (this process's own group or init)")
    started = time.monotonic()
    members = marked(group_members(pgid, leader), marker)
    result = TeardownResult(elapsed_s=0.0, signalled=sorted(proc.pid for proc in members))
    if members:
        _signal_all(pgid, members, signal.SIGTERM, whole_group=marker is None)
        remaining = _wait_gone(pgid, members, term_wait_s, marker)
        if remaining:
            result.killed = True
            _signal_all(pgid, remaining, signal.SIGKILL, whole_group=marker is None)
            remaining = _wait_gone(pgid, remaining, kill_wait_s, marker)
        result.survivors = sorted(proc.pid for proc in remaining)
    result.elapsed_s = time.monotonic() - started
    return result


def teardown(server: ServerProcess, term_wait_s: float = 15.0, kill_wait_s: float = 5.0) -> TeardownResult:
    """Stop a server this process launched; keep its pidfile only if something survived."""
    try:
        leader: psutil.Process | None = psutil.Process(server.popen.pid)
    except psutil.NoSuchProcess:
        leader = None
    result = terminate_group(server.record.pgid, leader, term_wait_s, kill_wait_s)
    try:
        server.popen.wait(timeout=1.0)  # reap the leader if it is our zombie
    except subprocess.TimeoutExpired:
        pass
    if result.survivors:
        log.warning("server group %d survived SIGKILL: pids %s; pidfile %s kept for the next reap",
                    server.record.pgid, result.survivors, server.pidfile)
    else:
        forget_pidfile(server.record, server.pidfile)
    return result


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: the start in clock ticks since boot; None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2:].split()[19])  # the comm field (2) may hold spaces
    except (OSError, ValueError, IndexError):
        return None


def _same_start(proc: psutil.Process, ticks: int | None, create_time: float) -> bool:
    if ticks is not None:
        return start_ticks(proc.pid) == ticks
    return abs(proc.create_time() - create_time) <= CREATE_TIME_SLACK_S


def recorded_leader(record: PidRecord) -> psutil.Process | None:
    """The live leader if it is still the process the pidfile names, else None."""
    try:
        proc = psutil.Process(record.pid)
        same = _same_start(proc, record.start_ticks, record.create_time)
        return proc if same and proc.cmdline() == record.cmdline and is_alive(proc) else None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def process_alive(pid: int, create_time: float, ticks: int | None = None) -> bool:
    """Is the process that had this pid and start (ticks, else creation time) still running (never a reused pid)?"""
    try:
        proc = psutil.Process(pid)
        return is_alive(proc) and _same_start(proc, ticks, create_time)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def read_pidfiles(pid_dir: Path) -> list[tuple[Path, PidRecord]]:
    """This tool's pidfiles; anything else in the folder is not ours and is left alone."""
    found = []
    for path in sorted(pid_dir.glob(f"*{PIDFILE_SUFFIX}")) if pid_dir.is_dir() else []:
        try:
            found.append((path, PidRecord.model_validate_json(path.read_text())))
        except (OSError, ValidationError, ValueError):
            log.warning("ignoring unreadable pidfile %s", path)
    return found
