"""LocalHost.serve against the real vLLM CPU engine: late, orphaned, then rejected.

A server that comes up, reports its evidence and leaves nothing is asked of the one
launch of tests/real_engine/test_vllm_default_layout.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.resources.hosts.process_group import group_members, read_pidfiles

pytestmark = pytest.mark.real_engine

CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def _spec(model: Path, server_args: list[str], **extra) -> ServerSpec:
    return ServerSpec(engine="vllm", model=model, server_args=server_args, env=CPU_ENV, **extra)


def test_server_not_ready_in_time_is_torn_down(host, tiny_model, tmp_path):
    started = time.monotonic()
    with pytest.raises(ServerError) as caught:
        with host.serve(_spec(tiny_model, ["--enforce-eager"], startup_timeout_s=3.0), tmp_path / "run"):
            pytest.fail("ready in 3 s")
    assert caught.value.error_class == "timeout"
    assert time.monotonic() - started < 30.0
    teardown = json.loads((tmp_path / "run" / "teardown.json").read_text())
    assert teardown["survivors"] == [] and teardown["signalled"]
    assert group_members(teardown["pgid"]) == []
    assert read_pidfiles(host.pid_dir()) == []


ORPHAN_MAKER = """
import sys, time
from pathlib import Path
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.resources.hosts.local import LocalHost
host = LocalHost(state_dir=sys.argv[1], check_foreign_processes=False)
spec = ServerSpec(engine="vllm", model=Path(sys.argv[2]), server_args=["--enforce-eager"],
                  env={"VLLM_CPU_KVCACHE_SPACE": "1"})
with host.serve(spec, Path(sys.argv[3])):
    time.sleep(600)
"""


def test_server_left_by_a_killed_run_is_reaped_by_the_next_launch(host, tiny_model, tmp_path):
    run = subprocess.Popen([sys.executable, "-c", ORPHAN_MAKER, str(host.state_path()), str(tiny_model),
                            str(tmp_path / "killed-run")], start_new_session=True)
    try:
        log = tmp_path / "killed-run" / "server.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and "non-default args" in log.read_text(errors="replace")):
            assert time.monotonic() < deadline and run.poll() is None, "the orphan-to-be never started"
            time.sleep(0.2)
        os.kill(run.pid, signal.SIGKILL)  # the run dies without tearing down its server
        run.wait()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    (pidfile, record), = read_pidfiles(host.pid_dir())
    orphans = group_members(record.pgid)
    assert orphans and psutil.Process(record.pid).is_running()

    with pytest.raises(ServerError) as caught:  # the next launch; it fails fast, after reaping
        with host.serve(_spec(tiny_model, ["--no-such-flag"]), tmp_path / "next-run"):
            pytest.fail("ready")
    error = caught.value
    assert error.error_class == "argv_invalid"
    assert "unrecognized arguments: --no-such-flag" in error.log_tail, "the log's tail says why"
    assert error.argv[-1] == "--no-such-flag"

    assert group_members(record.pgid) == []
    assert not pidfile.exists()
    assert all(not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE for proc in orphans)
