"""The release path for real: a loopback index serves the sim engine's wheel, the sensor sees the
new version, an env is built with pip from that index, and the sim server starts from it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from hyperloom_assets.resources.hosts.preflight import allocate_port
from hyperloom_assets.resources.releases.envs import MARKER, EnvironmentUnavailable, ReleaseEnvironments
from tests.conftest import SIM_MODEL, wait_healthy
from tests.sensors.conftest import defs_with_sensors, write_target
from tests.sensors.sim_wheel import DISTRIBUTION, MODULE, build_sim_wheel
from tests.sensors.test_release_sensor import seen_then_released


@pytest.fixture
def serve_from(tmp_path):
    """Start `<python> -m hyperloom_sim_engine ...` in its own process group; always torn down."""
    processes: list[subprocess.Popen] = []

    def start(python: Path, *args: str) -> tuple[int, Path]:
        port = allocate_port()
        log = tmp_path / f"sim-{port}.log"
        argv = [str(python), "-m", MODULE, "--model", str(SIM_MODEL), "--port", str(port), *args]
        with log.open("w") as handle:
            processes.append(subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=tmp_path,
                                              start_new_session=True))
        wait_healthy(processes[-1], port, log)
        return port, log

    try:
        yield start
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=5)


def test_release_seen_env_built_and_server_answers(index, tmp_path, host, store, instance, serve_from) -> None:
    write_target(tmp_path / "targets", "sim-a")
    defs = defs_with_sensors(tmp_path / "targets", host, store)
    request = seen_then_released(index, tmp_path, defs, instance).run_requests[0]
    package, version = request.tags["hyperloom/release_package"], request.tags["hyperloom/release_version"]
    assert (package, version) == (DISTRIBUTION, "0.2.0")

    envs = ReleaseEnvironments(root=str(tmp_path / "envs"), install_deps=False)
    python = envs.python_for(package, version)
    assert (envs.env_dir(package, version) / MARKER).is_file()
    assert any(path.startswith(f"/simple/{DISTRIBUTION}") for path in index.requests), "pip used the loopback index"
    probe = subprocess.run([str(python), "-c", "import importlib.metadata as m, hyperloom_sim_engine as e; "
                            f"print(m.version('{DISTRIBUTION}'), e.__file__)"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert probe[0] == "0.2.0" and probe[1].startswith(str(envs.env_dir(package, version)))

    started = time.monotonic()
    assert envs.python_for(package, version) == python
    assert time.monotonic() - started < 1.0, "a ready env is reused, not rebuilt"

    port, log = serve_from(python, "--gpu", "H100", "--time-scale", "50")
    body = json.dumps({"model": str(SIM_MODEL), "prompt": "hello", "max_tokens": 4, "ignore_eos": True}).encode()
    completion = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(completion, timeout=30) as reply:
        answer = json.loads(reply.read())
    assert answer["usage"]["completion_tokens"] == 4
    assert "Application startup complete" in log.read_text()


def test_missing_release_raises_with_pips_words_and_half_built_env_is_rebuilt(index, tmp_path) -> None:
    index.publish(DISTRIBUTION, "0.2.0", build_sim_wheel(tmp_path / "wheels", "0.2.0"))
    envs = ReleaseEnvironments(root=str(tmp_path / "envs"), install_deps=False)

    with pytest.raises(EnvironmentUnavailable) as failure:
        envs.python_for(DISTRIBUTION, "9.9.9")
    assert (failure.value.package, failure.value.version) == (DISTRIBUTION, "9.9.9")
    assert "pip install exited" in failure.value.reason
    assert "No matching distribution" in failure.value.reason
    assert not (envs.env_dir(DISTRIBUTION, "9.9.9") / MARKER).exists()

    half_built = envs.env_dir(DISTRIBUTION, "0.2.0")
    (half_built / "bin").mkdir(parents=True)
    (half_built / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    python = envs.python_for(DISTRIBUTION, "0.2.0")
    assert (half_built / MARKER).is_file()
    subprocess.run([str(python), "-c", "import hyperloom_sim_engine, hyperloom_assets.sim.cli"], check=True)

    with pytest.raises(EnvironmentUnavailable, match="does not parse"):
        envs.python_for(DISTRIBUTION, "not a version")
