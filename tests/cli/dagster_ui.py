"""`dagster dev` and headless Chromium for the browser test, each torn down on every path.

`dagster dev` starts through the one launcher (its own session, so one group signal
reaches the webserver, the daemon, the code servers and every run worker they fork)
and stops through the one teardown. A sim server is started by a run worker in a
session of its own, outside that group: what guards it is its pidfile under
DAGSTER_HOME, which the run's own teardown removes.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
from playwright.sync_api import Page, sync_playwright

from hyperloom_assets.resources.hosts.preflight import allocate_port
from hyperloom_assets.resources.hosts.process_group import launch, read_pidfiles, teardown
from hyperloom_assets.resources.hosts.reaper import reap_orphans
from tests.conftest import wait_healthy

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package; scripts/setup.sh installs it
# Known to work as root on these machines; without the background-networking flags the
# closed network refuses Chromium's own connections and slows every page.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DEV_READY_S = 90.0


@contextmanager
def dagster_dev(home: Path, targets: Path, state: Path) -> Iterator[str]:
    """`dagster dev` on a free port over this DAGSTER_HOME and targets folder; yields its URL."""
    port = allocate_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "HYPERLOOM_TARGETS_DIR": str(targets)}
    argv = [sys.executable, "-m", "dagster", "dev", "-m", "hyperloom_assets.definitions",
            "-h", "127.0.0.1", "-p", str(port)]
    log = state / "dagster-dev.log"
    server = launch(argv, env, log, state / "pids")
    try:
        wait_healthy(server.popen, port, log, timeout_s=DEV_READY_S, path="/server_info")
        yield f"http://127.0.0.1:{port}"
    finally:
        teardown(server, term_wait_s=20.0)
        sim_pids = home / "hyperloom" / "pids"
        outlived = [record.pid for _, record in read_pidfiles(sim_pids)]
        reap_orphans(sim_pids, term_wait_s=5.0)
    assert outlived == [], f"sim servers outlived dagster dev: {outlived}"


@contextmanager
def chromium_page(profile: Path) -> Iterator[Page]:
    """A page in headless Chromium with a fresh profile; no Chromium of it outlives the block."""
    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: `make setup` installs Debian's chromium package"
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 1000})
            try:
                yield context.pages[0] if context.pages else context.new_page()
            finally:
                context.close()
    finally:
        kill_profile_processes(profile)


def kill_profile_processes(profile: Path) -> None:
    """Chromium's processes all carry the profile folder in their argv; kill any left."""
    marker = str(profile)
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or []):
            left.append(proc)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=5)


@contextmanager
def screenshot_on_failure(page: Page, path: Path) -> Iterator[None]:
    try:
        yield
    except BaseException as exc:
        try:
            page.screenshot(path=str(path), full_page=True)
            exc.add_note(f"screenshot of the page: {path}")
        except Exception as shot_error:  # the page may be gone; the first error is what matters
            exc.add_note(f"no screenshot: {shot_error}")
        raise
