"""Fixtures every tier shares: the tiny model, a private host, a private store, and the check
behind `@pytest.mark.stop_reason("reason", case="case")`: a test so marked must leave that
stop reason in a result store under its tmp_path, with a detail that shows the case
(tests/unit/test_stop_reasons.py checks every case of every reason has such a test)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperloom_assets.cli.instance_config import write_instance_config
from hyperloom_assets.core.decisions.history import launch_noise_key
from hyperloom_assets.core.decisions.stop_reasons import matches_case
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.process_group import read_pidfiles, terminate_group
from hyperloom_assets.resources.releases.identity import framework_identity
from hyperloom_assets.resources.store.results import ResultStore

REPO = Path(__file__).resolve().parent.parent
SIM_MODEL = REPO / "models" / "llama-3-8b"
# vLLM CPU's env for the tiny model, with the model worker in its engine core's process (vLLM's
# own VLLM_ENABLE_V1_MULTIPROCESSING=0; the API server still spawns the engine core): one
# process fewer imports vLLM, so a launch is ready sooner, which counts for every launch of
# the real-engine tier. The tests whose point is vLLM's
# default process layout, its threads, metrics page or profiler keep the default:
# test_server_lifecycle, test_vllm_default_layout, test_profile_vllm.
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny Llama, generated afresh (deterministic, about 2 s)."""
    folder = tmp_path_factory.mktemp("models") / "tiny-llama"
    subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "tiny-model", str(folder)], check=True,
                   capture_output=True)
    return folder


@pytest.fixture
def host(tmp_path) -> LocalHost:
    """A local host with a private state folder; any server it leaves is killed afterwards.

    Foreign-process preflight is off here because other test sessions on this machine
    may be serving at the same time; tests/unit/test_preflight.py covers it.
    """
    state = tmp_path / "state"
    yield LocalHost(state_dir=str(state), check_foreign_processes=False, teardown_term_wait_s=15.0)
    reap_pid_dir(state / "pids")


def earlier_launch_noise(store: ResultStore, target: str, host: str, engine: str, model: Path,
                         tree: Path | None = None) -> None:
    """Launch noise as earlier runs of this engine and model on this host leave it (a launch
    CV about 8%, vLLM CPU's on these 2 cores), so a first look can decide: a real-engine test
    whose point is not the climb's second look saves a pair of launches per decisive trial."""
    key = launch_noise_key(host, engine, framework_identity(engine, tree), str(model))
    store.record_launch_noise(noise_key=key, target=target, run_id="earlier",
                              launch_means={f"config-{i}": [100.0, 108.0, 93.0] for i in range(5)})


def reap_pid_dir(pids: Path) -> list[int]:
    """Tear down every server the pidfiles in `pids` name; returns their pids."""
    left = read_pidfiles(pids)
    for path, record in left:
        terminate_group(record.pgid, term_wait_s=5.0)
        path.unlink(missing_ok=True)
    return [record.pid for _, record in left]


def reap_leftovers(home: Path) -> list[int]:
    """Tear down every server a DAGSTER_HOME's pidfiles name; returns their pids."""
    return reap_pid_dir(home / "hyperloom" / "pids")


@pytest.fixture
def home(tmp_path) -> Path:
    """A temporary DAGSTER_HOME with the instance config `make setup` writes (the CLI tiers)."""
    folder = tmp_path / "dagster_home"
    write_instance_config(folder)
    yield folder
    assert reap_leftovers(folder) == [], "a server outlived the run"


@pytest.fixture
def store(tmp_path) -> ResultStore:
    return ResultStore(url=f"sqlite:///{tmp_path / 'results.db'}")


@pytest.fixture
def read_only_store(tmp_path, store) -> ResultStore:
    """`store`'s data through a store that may only read: SQLite opens the file read-only
    (a real refusal, even for root). tests/fleet overrides it with a Postgres role."""
    return ResultStore(url=f"sqlite:///file:{tmp_path / 'results.db'}?mode=ro&uri=true")


def recorded_stops(folder: Path, stores: Sequence[ResultStore] = ()) -> list[tuple[str, str]]:
    """Every (stop reason, detail) the test's stores recorded: the SQLite ones under `folder` (the
    tests' stores and DAGSTER_HOMEs) and any other it used (tests/fleet's `store` is on Postgres)."""
    urls = {f"sqlite:///{db}" for db in folder.rglob("results.db")} | {store.url for store in stores}
    return [(row["stop_reason"], row["detail"] or "") for url in sorted(urls) for row in ResultStore(url=url).stops()]


def unmet_stop_marks(marks: list[tuple[str, str | None]], recorded: list[tuple[str, str]]) -> list[str]:
    """The marks no recorded stop meets: the reason, and the case's evidence in its detail when a case is named."""
    return [f"{reason}/{case}" if case else reason for reason, case in marks
            if not any(got == reason and (case is None or matches_case(reason, case, detail))
                       for got, detail in recorded)]


@pytest.fixture(autouse=True)
def _marked_stop_reasons_are_recorded(request):
    marks = [(reason, marker.kwargs.get("case")) for marker in request.node.iter_markers("stop_reason")
             for reason in marker.args]
    if not marks:
        yield
        return
    folder = request.getfixturevalue("tmp_path")  # asked for here, so they outlive this check
    stores = [request.getfixturevalue("store")] if "store" in request.fixturenames else []
    yield
    if not getattr(request.node, "rep_call", None) or not request.node.rep_call.passed:
        return
    recorded = recorded_stops(folder, stores)
    unmet = unmet_stop_marks(marks, recorded)
    assert not unmet, f"marked stop_reason {unmet} but the run recorded {recorded}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call":
        item.rep_call = outcome.get_result()


def wait_healthy(process: subprocess.Popen, port: int, log: Path, timeout_s: float = 30.0, path: str = "/health") -> None:
    """Until a server started by a test answers `path` (/health); its log in the error otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"server not ready within {timeout_s} s:\n{log.read_text()}")
