"""Launch, teardown and the orphan reaper on real process groups."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hyperloom_assets.resources.hosts.agent import handle
from hyperloom_assets.resources.hosts.process_group import (
    MARKER_ENV,
    PIDFILE_SUFFIX,
    PidRecord,
    RefusedSignal,
    boot_id,
    group_members,
    launch,
    new_scratch_dir,
    remove_scratch,
    start_ticks,
    teardown,
    terminate_group,
)
from hyperloom_assets.resources.hosts.reaper import ReapReport, reap_orphans, stop_recorded
from hyperloom_assets.resources.hosts.signals import signals_deferred

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
# A leader that forks two sleeping children into its own group, then sleeps itself.
FAMILY = [sys.executable, "-c",
          "import subprocess, sys, time\n"
          "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']) for _ in range(2)]\n"
          "print('children', [k.pid for k in kids], flush=True)\n"
          "time.sleep(60)\n"]
TERM_IGNORER = [sys.executable, "-c",
                "import signal, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print('ready', flush=True)\n"
                "time.sleep(60)\n"]


def _wait_for(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def launched():
    """Servers launched by a test; whatever is still running at the end is killed."""
    servers = []
    yield servers
    for server in servers:
        for proc in group_members(server.record.pgid):
            proc.kill()
        server.popen.kill()
        server.popen.wait()


def _orphanize(pidfile: Path) -> None:
    """Make the pidfile's owner a process that no longer exists (a killed run)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    record = PidRecord.model_validate_json(pidfile.read_text())
    pidfile.write_text(record.model_copy(update={"owner_pid": gone.pid, "owner_create_time": 1.0}).model_dump_json())


def test_launch_records_a_pidfile_and_teardown_stops_the_whole_group(tmp_path, launched):
    server = launch(FAMILY, os.environ, tmp_path / "run" / "server.log", tmp_path / "pids")
    launched.append(server)
    assert _wait_for(lambda: "children" in (tmp_path / "run" / "server.log").read_text())
    record = PidRecord.model_validate_json(server.pidfile.read_text())
    assert record.pid == record.pgid == server.popen.pid != os.getpgrp()
    assert record.cmdline == FAMILY and record.owner_pid == os.getpid()
    members = [proc.pid for proc in group_members(record.pgid)]
    assert len(members) == 3

    result = teardown(server, term_wait_s=15.0)

    assert sorted(result.signalled) == sorted(members)
    assert result.survivors == [] and not result.killed
    assert not any(_alive(pid) for pid in members)
    assert not server.pidfile.exists()


def _ignored_signals(pid: int) -> int:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigIgn"))
    return int(line.split()[1], 16)


def _bit(signum: int) -> int:
    return 1 << (signum - 1)


def test_a_launcher_that_ignores_term_still_starts_servers_that_obey_it(tmp_path, launched):
    """A run worker started as a background job or under nohup ignores TERM (and INT,
    QUIT), and an ignored signal survives fork and exec; its servers must not inherit it,
    or teardown waits out the TERM and KILLs every server without its own handler."""
    inherited = {signal.SIGINT: signal.SIG_IGN, signal.SIGQUIT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN}
    saved = {signum: signal.signal(signum, disposition) for signum, disposition in inherited.items()}
    # Not a Python server: Python ignores PIPE and XFSZ itself once it starts, so reading a
    # Python server's SigIgn races with its start-up (and lost under load).
    sleeper = [shutil.which("sleep"), "60"]
    try:
        server = launch(sleeper, os.environ, tmp_path / "server.log", tmp_path / "pids")
    finally:
        for signum, disposition in saved.items():
            signal.signal(signum, disposition)
    launched.append(server)
    assert server.record.cmdline == sleeper  # the server itself, not the trampoline before it
    ignored = _ignored_signals(server.popen.pid)
    for signum in (*inherited, signal.SIGPIPE):
        assert not ignored & _bit(signum), f"{signum!r} ignored in the server: SigIgn {ignored:016x}"

    result = teardown(server, term_wait_s=10.0)

    assert not result.killed and result.elapsed_s < 5.0 and not _alive(server.popen.pid)


def test_a_missing_executable_fails_the_launch_itself(tmp_path):
    with pytest.raises(FileNotFoundError):
        launch(["no-such-engine-binary"], os.environ, tmp_path / "server.log", tmp_path / "pids")
    assert list((tmp_path / "pids").iterdir()) == []


def test_teardown_kills_what_ignores_term(tmp_path, launched):
    server = launch(TERM_IGNORER, os.environ, tmp_path / "server.log", tmp_path / "pids")
    launched.append(server)
    assert _wait_for(lambda: "ready" in (tmp_path / "server.log").read_text())
    result = teardown(server, term_wait_s=0.5)
    assert result.killed and result.survivors == []
    assert not _alive(server.popen.pid)
    assert not server.pidfile.exists()


def test_reaper_tears_down_an_orphaned_server(tmp_path, launched):
    pid_dir = tmp_path / "pids"
    server = launch(FAMILY, os.environ, tmp_path / "server.log", pid_dir)
    launched.append(server)
    assert _wait_for(lambda: "children" in (tmp_path / "server.log").read_text())
    members = [proc.pid for proc in group_members(server.record.pgid)]
    _orphanize(server.pidfile)

    report = reap_orphans(pid_dir, term_wait_s=5.0)

    assert report.reaped == [server.popen.pid] and report.survivors == []
    assert not any(_alive(pid) for pid in members)
    assert not server.pidfile.exists()


def test_reaper_finds_children_that_outlived_their_leader(tmp_path, launched):
    pid_dir = tmp_path / "pids"
    leaver = [sys.executable, "-c",
              "import subprocess, sys\n"
              "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print('child', kid.pid, flush=True)\n"]
    server = launch(leaver, os.environ, tmp_path / "server.log", pid_dir)
    launched.append(server)
    server.popen.wait()  # the leader is gone for good; its child holds the group
    child = int((tmp_path / "server.log").read_text().split()[-1])
    assert _alive(child)
    _orphanize(server.pidfile)

    report = reap_orphans(pid_dir, term_wait_s=5.0)

    assert report.reaped == [server.popen.pid]
    assert _wait_for(lambda: not _alive(child), 5.0)


def test_reaper_leaves_a_server_whose_launcher_still_runs(tmp_path, launched):
    pid_dir = tmp_path / "pids"
    server = launch(SLEEPER, os.environ, tmp_path / "server.log", pid_dir)
    launched.append(server)
    report = reap_orphans(pid_dir)
    assert report.live_owner == [server.popen.pid] and report.reaped == []
    assert _alive(server.popen.pid) and server.pidfile.exists()


def test_a_launcher_killed_while_its_server_execs_leaves_a_pidfile_the_reaper_tears_down(tmp_path):
    # The launcher dies (SIGKILL) while it waits for its server's exec to land, before the
    # pidfile it writes after: the one it wrote at once names the server all the same.
    pid_dir = tmp_path / "pids"
    code = ("import os, signal, sys; from pathlib import Path\n"
            "from hyperloom_assets.resources.hosts import process_group\n"
            "process_group._exec_identity = lambda pid, argv: os.kill(os.getpid(), signal.SIGKILL)\n"
            f"process_group.launch({SLEEPER!r}, dict(os.environ), Path({str(tmp_path / 'server.log')!r}), "
            f"Path({str(pid_dir)!r}))\n")
    launcher = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert launcher.returncode == -signal.SIGKILL
    pidfiles = list(pid_dir.glob(f"*{PIDFILE_SUFFIX}"))
    server = int(pidfiles[0].name.split(".")[0]) if pidfiles else None
    try:
        assert server is not None and _wait_for(lambda: psutil.Process(server).cmdline() == SLEEPER), \
            "the server, orphaned before its launcher's last write, is named by a pidfile"
        report = reap_orphans(pid_dir, term_wait_s=5.0)
        assert report.reaped == [server] and not pidfiles[0].exists()
        assert _wait_for(lambda: not _alive(server), 5.0)
    finally:
        if server is not None and _alive(server):
            os.kill(server, signal.SIGKILL)


def test_a_reaper_leaves_the_pidfile_of_a_live_launcher_whose_server_has_not_exec_d_yet(tmp_path, launched):
    pid_dir = tmp_path / "pids"
    server = launch(SLEEPER, os.environ, tmp_path / "server.log", pid_dir, scratch_dir=new_scratch_dir())
    launched.append(server)
    # Its record as the launcher writes it at once, while the trampoline still runs.
    server.pidfile.write_text(server.record.model_copy(update={"cmdline": ["python", "-I", "-S"]}).model_dump_json())
    report = reap_orphans(pid_dir)
    assert report.live_owner == [server.popen.pid] and report.stale == []
    assert server.pidfile.exists() and Path(server.record.scratch_dir).is_dir(), \
        "another launch's reaper never takes a launching server's pidfile and scratch folder for stale"


def test_reaper_never_signals_a_reused_pid(tmp_path, launched):
    """A pidfile whose pid now belongs to another process: not signalled, pidfile dropped."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    stranger = subprocess.Popen(SLEEPER, start_new_session=True)
    try:
        now = psutil.Process(stranger.pid)
        for cmdline, create_time in ((["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"], now.create_time()),
                                     (now.cmdline(), now.create_time() - 3600.0)):
            record = PidRecord(pid=stranger.pid, pgid=stranger.pid, cmdline=cmdline, create_time=create_time,
                               owner_pid=999_999_999, owner_create_time=1.0)
            pidfile = pid_dir / f"{stranger.pid}{PIDFILE_SUFFIX}"
            pidfile.write_text(record.model_dump_json())

            report = reap_orphans(pid_dir, term_wait_s=1.0)

            assert report.stale == [stranger.pid] and report.reaped == []
            assert not pidfile.exists()
            assert stranger.poll() is None and _alive(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()


def test_reaper_refuses_to_signal_its_own_process_group(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    me = psutil.Process()
    record = PidRecord(pid=me.pid, pgid=os.getpgrp(), cmdline=me.cmdline(), create_time=me.create_time(),
                       owner_pid=999_999_999, owner_create_time=1.0)
    pidfile = pid_dir / f"{me.pid}{PIDFILE_SUFFIX}"
    pidfile.write_text(record.model_dump_json())

    report = reap_orphans(pid_dir, term_wait_s=1.0)

    assert report.refused == [me.pid] and report.reaped == []
    assert pidfile.exists()  # kept for a reaper that is not in that group
    with pytest.raises(RefusedSignal):
        terminate_group(os.getpgrp())


def test_reaper_reads_only_its_own_pidfiles(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    foreign = pid_dir / "nginx.pid"
    foreign.write_text(str(os.getpid()))
    broken = pid_dir / f"123{PIDFILE_SUFFIX}"
    broken.write_text("{not json")
    report = reap_orphans(pid_dir)
    assert report.reaped == report.stale == report.refused == []
    assert foreign.exists() and broken.exists()


def test_teardown_of_a_server_that_already_exited(tmp_path):
    server = launch([sys.executable, "-c", "pass"], os.environ, tmp_path / "server.log", tmp_path / "pids")
    server.popen.wait()
    result = teardown(server, term_wait_s=1.0)
    assert result.survivors == [] and result.signalled == []
    assert not server.pidfile.exists()


def test_signals_are_held_while_a_teardown_runs_then_delivered() -> None:
    # A cancelled run is interrupted again and again; the teardown in between must finish.
    # Python's own SIGINT handler, whatever this process inherited: a shell that starts
    # pytest in the background (`pytest &`) hands it SIGINT ignored, and an ignored signal
    # is rightly never delivered.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # a teardown's wait: the signal must not cut it short
                done.append("teardown")
        assert done == ["teardown"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "the handler is restored"
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_launchs_scratch_folder_goes_with_its_group_at_teardown_and_at_the_reap(tmp_path, launched):
    """vLLM leaves its IPC sockets where VLLM_RPC_BASE_PATH says; the launch's folder for them is removed."""
    pid_dir = tmp_path / "pids"
    stopped = launch(SLEEPER, os.environ, tmp_path / "a.log", pid_dir, scratch_dir=new_scratch_dir())
    orphan = launch(SLEEPER, os.environ, tmp_path / "b.log", pid_dir, scratch_dir=new_scratch_dir())
    launched += [stopped, orphan]
    folders = [Path(PidRecord.model_validate_json(s.pidfile.read_text()).scratch_dir) for s in (stopped, orphan)]
    for folder in folders:
        (folder / "a-socket-left-behind").write_text("")
    teardown(stopped, term_wait_s=5.0)
    assert not folders[0].exists() and folders[1].exists()
    _orphanize(orphan.pidfile)
    assert reap_orphans(pid_dir, term_wait_s=5.0).reaped == [orphan.popen.pid]
    assert not folders[1].exists()


def test_only_a_folder_named_as_a_scratch_folder_is_ever_removed(tmp_path):
    (tmp_path / "operator-data").mkdir()
    remove_scratch(tmp_path / "operator-data")
    assert (tmp_path / "operator-data").exists()


def _stranger(env: dict[str, str] | None = None) -> subprocess.Popen:
    """A harmless process group this tool never started: `sleep` in its own session."""
    return subprocess.Popen([shutil.which("sleep"), "60"], start_new_session=True, env=env)


def _stop_stranger(stranger: subprocess.Popen) -> None:
    stranger.kill()
    stranger.wait()


def _foreign_record(leader_pid: int, pgid: int, cmdline: list[str], create_time: float, **fields) -> PidRecord:
    return PidRecord(pid=leader_pid, pgid=pgid, cmdline=cmdline, create_time=create_time, owner_pid=999_999_999,
                     owner_create_time=1.0, start_ticks=start_ticks(leader_pid), **fields)


def test_a_launch_puts_its_marker_in_the_servers_environment_and_records_it_with_the_boot(tmp_path):
    printer = [sys.executable, "-c", f"import os; print(os.environ[{MARKER_ENV!r}])"]
    server = launch(printer, {"PATH": os.environ["PATH"]}, tmp_path / "server.log", tmp_path / "pids")
    server.popen.wait(timeout=30)
    teardown(server, term_wait_s=1.0)
    record = server.record
    assert record.marker and (tmp_path / "server.log").read_text().strip() == record.marker
    assert record.boot_id == boot_id() == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    again = launch(SLEEPER, {}, tmp_path / "again.log", tmp_path / "pids")
    teardown(again, term_wait_s=5.0)
    assert again.record.marker != record.marker, "each launch its own marker"


def test_a_pidfile_from_another_boot_is_dropped_without_signalling_what_its_pids_name_now(tmp_path):
    """After a reboot the pidfile's pid and group are anyone's; here a stranger that even carries
    the marker and whose start ticks and cmdline match: the agent's reap signals nothing of it."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    stranger = _stranger({**os.environ, MARKER_ENV: "the-marker"})
    try:
        proc = psutil.Process(stranger.pid)
        record = _foreign_record(stranger.pid, stranger.pid, proc.cmdline(), proc.create_time(),
                                 boot_id="another-boot", marker="the-marker")
        pidfile = pid_dir / f"{stranger.pid}{PIDFILE_SUFFIX}"
        pidfile.write_text(record.model_dump_json())

        report = ReapReport(**handle("reap", {"pid_dir": str(pid_dir), "term_wait_s": 1.0})["ok"])

        assert report.other_boot == [stranger.pid] and report.reaped == []
        assert not pidfile.exists() and stranger.poll() is None and _alive(stranger.pid)
        assert stop_recorded(record, pidfile, term_wait_s=1.0).signalled == [], "an SSH host's stop neither"
        assert stranger.poll() is None
    finally:
        _stop_stranger(stranger)


def test_a_group_that_started_after_the_pidfile_but_lacks_its_marker_is_never_signalled(tmp_path):
    """The server's leader and group are gone; the group id now names a stranger's group, started since."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stranger = _stranger()
    try:
        started = psutil.Process(stranger.pid).create_time()
        record = _foreign_record(gone.pid, stranger.pid, SLEEPER, started - 1.0, boot_id=boot_id(), marker="ours")
        pidfile = pid_dir / f"{gone.pid}{PIDFILE_SUFFIX}"
        pidfile.write_text(record.model_dump_json())

        report = reap_orphans(pid_dir, term_wait_s=1.0)

        assert report.stale == [gone.pid] and report.reaped == [] and not pidfile.exists()
        assert stranger.poll() is None and _alive(stranger.pid)
        assert stop_recorded(record, pidfile, term_wait_s=1.0).signalled == [] and stranger.poll() is None
    finally:
        _stop_stranger(stranger)


def test_the_reaper_signals_the_marked_members_of_an_orphan_and_no_other_member_of_its_group(tmp_path, launched):
    pid_dir = tmp_path / "pids"
    family = [sys.executable, "-c",
              "import os, subprocess, sys, time\n"
              f"bare = {{k: v for k, v in os.environ.items() if k != {MARKER_ENV!r}}}\n"
              "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env=env)\n"
              "        for env in (None, bare)]\n"
              "print('children', *[k.pid for k in kids], flush=True)\n"
              "time.sleep(60)\n"]
    server = launch(family, os.environ, tmp_path / "server.log", pid_dir)
    launched.append(server)
    assert _wait_for(lambda: "children" in (tmp_path / "server.log").read_text())
    marked, bare = (int(pid) for pid in (tmp_path / "server.log").read_text().split()[1:3])
    _orphanize(server.pidfile)
    try:
        report = reap_orphans(pid_dir, term_wait_s=5.0)

        assert report.reaped == [server.popen.pid] and not server.pidfile.exists()
        assert _wait_for(lambda: not _alive(marked) and not _alive(server.popen.pid), 5.0)
        assert _alive(bare), "a member without the marker is never signalled"
    finally:
        if _alive(bare):
            os.kill(bare, signal.SIGKILL)


def test_an_older_pidfile_without_a_marker_is_kept_and_its_group_left_running(tmp_path, launched):
    pid_dir = tmp_path / "pids"
    server = launch(SLEEPER, os.environ, tmp_path / "server.log", pid_dir)
    launched.append(server)
    _orphanize(server.pidfile)
    older = PidRecord.model_validate_json(server.pidfile.read_text()).model_dump(exclude={"boot_id", "marker"})
    server.pidfile.write_text(json.dumps(older))

    report = reap_orphans(pid_dir, term_wait_s=1.0)

    assert report.unmarked == [server.popen.pid] and report.reaped == report.stale == []
    assert _alive(server.popen.pid) and server.pidfile.exists(), "kept, with a warning, for the operator"
