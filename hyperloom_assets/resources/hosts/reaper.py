"""Servers this process did not start: the orphan reaper, and an SSH host's stop of a recorded server.

The reaper (docs/design.md, invariant 8) reads only this tool's pidfiles (process_group.py
writes them). It signals a group only when its leader is still the process the pidfile
names (same cmdline and start; a reused pid is never signalled), only when the process that
launched it is gone (a live owner's server is not an orphan), never a pidfile of another
boot, and only the processes whose /proc/PID/environ carries the pidfile's launch marker,
one by one: a group id a dead server left can be a stranger's by now.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hyperloom_assets.resources.hosts.process_group import (
    CREATE_TIME_SLACK_S, PidRecord, TeardownResult, boot_id, forget_pidfile, group_members, is_alive, marked,
    own_group, process_alive, read_pidfiles, recorded_leader, terminate_group)

log = logging.getLogger(__name__)


@dataclass
class ReapReport:
    reaped: list[int] = field(default_factory=list)  # leader pids whose groups were torn down
    stale: list[int] = field(default_factory=list)  # pidfiles of gone or reused pids, removed
    live_owner: list[int] = field(default_factory=list)  # servers whose launcher still runs
    refused: list[int] = field(default_factory=list)  # would have signalled our own group
    survivors: list[int] = field(default_factory=list)  # still alive after SIGKILL; pidfile kept
    other_boot: list[int] = field(default_factory=list)  # pidfiles of an earlier boot, removed
    unmarked: list[int] = field(default_factory=list)  # older pidfiles (no marker) of a live group: kept, unsignalled


def _owner_alive(record: PidRecord) -> bool:
    return process_alive(record.owner_pid, record.owner_create_time, record.owner_start_ticks)


def _other_boot(record: PidRecord) -> bool:
    return record.boot_id is not None and record.boot_id != boot_id()


def reap_orphans(pid_dir: Path, term_wait_s: float = 15.0, kill_wait_s: float = 5.0) -> ReapReport:
    """Tear down servers left behind by earlier runs whose launching process is gone: the
    processes that carry their launch's marker, in this boot (docs/design.md, invariant 8)."""
    report = ReapReport()
    for path, record in read_pidfiles(pid_dir):
        if _other_boot(record):  # its pids and group ids name other processes now
            report.other_boot.append(record.pid)
            forget_pidfile(record, path)
            continue
        if _owner_alive(record):  # its launcher's to tear down, even while its exec has not landed
            report.live_owner.append(record.pid)
            continue
        _reap_one(path, record, report, term_wait_s, kill_wait_s)
    return report


def _reap_one(path: Path, record: PidRecord, report: ReapReport, term_wait_s: float, kill_wait_s: float) -> None:
    leader = recorded_leader(record)
    if leader is None and not _group_outlived_leader(record):
        report.stale.append(record.pid)
        forget_pidfile(record, path)
        return
    if own_group(record.pgid):
        log.warning("reaper refused to signal its own process group %d (pidfile %s)", record.pgid, path)
        report.refused.append(record.pid)
        return
    if record.marker is None:  # an older pidfile: nothing proves the group is still that server's
        log.warning("pidfile %s has no launch marker: group %d is left running and the pidfile kept; "
                    "stop it by hand if it is this tool's server", path, record.pgid)
        report.unmarked.append(record.pid)
        return
    if not marked(group_members(record.pgid, leader), record.marker):
        report.stale.append(record.pid)  # what holds the group id now is not the server
        forget_pidfile(record, path)
        return
    result = terminate_group(record.pgid, leader, term_wait_s, kill_wait_s, record.marker)
    if result.survivors:
        log.warning("orphan group %d survived SIGKILL: pids %s; pidfile %s kept",
                    record.pgid, result.survivors, path)
        report.survivors.extend(result.survivors)
    else:
        report.reaped.append(record.pid)
        forget_pidfile(record, path)


def _group_outlived_leader(record: PidRecord) -> bool:
    """The leader is gone but members of its group live on.

    While any member holds the group id, the kernel cannot hand the leader's pid to a
    new process, so a live group under a dead leader's pid is still that server's.
    """
    if psutil.pid_exists(record.pid) and _alive_pid(record.pid):
        return False  # the pid lives but is not our leader: reused, never signalled
    return any(_started_after(proc, record.create_time) for proc in group_members(record.pgid))


def _alive_pid(pid: int) -> bool:
    try:
        return is_alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def _started_after(proc: psutil.Process, moment: float) -> bool:
    try:
        return proc.create_time() >= moment - CREATE_TIME_SLACK_S
    except psutil.NoSuchProcess:
        return False


def stop_recorded(record: PidRecord, pidfile: Path, term_wait_s: float = 15.0, kill_wait_s: float = 5.0) -> TeardownResult:
    """Teardown of a server this process did not start (an SSH host's, launched by an
    earlier agent call): the processes of the pidfile's group that carry its marker (of an
    older pidfile without one, the group of its leader), in the boot it was started in."""
    if _other_boot(record):
        forget_pidfile(record, pidfile)
        return TeardownResult(elapsed_s=0.0)
    result = terminate_group(record.pgid, recorded_leader(record), term_wait_s, kill_wait_s, record.marker)
    if result.survivors:
        log.warning("server group %d survived SIGKILL: pids %s; pidfile %s kept for the next reap",
                    record.pgid, result.survivors, pidfile)
    else:
        forget_pidfile(record, pidfile)
    return result


def recorded_exit(record: PidRecord) -> str | None:
    """None while the recorded leader runs; 'unknown' (its code is its parent's to read) once gone."""
    return None if recorded_leader(record) is not None else "unknown"
