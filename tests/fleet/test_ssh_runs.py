"""Runs on an SSH host through the graph: a baseline served and measured there, and a host
that cannot be had is `environment_unavailable`, before any launch, never a failed trial."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.store.leases import HostLeases
from tests.conftest import SIM_MODEL

SIM = ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"]


def repo(tmp_path: Path, hosts: dict, targets: dict[str, dict]) -> Path:
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    folder = tmp_path / "targets"
    folder.mkdir(exist_ok=True)
    for name, extra in targets.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({
            "engine": "sim", "model": str(SIM_MODEL), "server_args": SIM, "repeats": 1, "max_trials": 2,
            "workload": {"kind": "random", "isl": 128, "osl": 16, "concurrency": 4, "num_prompts": 8}, **extra}))
    return folder


def step_failure(result) -> str:
    return str(next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)


@pytest.mark.stop_reason("environment_unavailable", case="ssh_mid_climb")
def test_a_baseline_on_an_ssh_host_then_the_host_gone_stops_the_trials(sshd, tmp_path, host, store) -> None:
    workdir = tmp_path / "remote"
    folder = repo(tmp_path, {"gpu-ssh": sshd.host_entry(workdir, sys.executable)}, {"sim-ssh": {"host": "gpu-ssh"}})
    defs = build_defs(folder, host=host, store=store)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim-ssh", instance=instance)
        assert result.success
        assert result.dagster_run.tags["hyperloom/host"] == "gpu-ssh"
        baseline = store.measurements("sim-ssh", "baseline")[0]
        assert baseline["measurement"]["completed"] == 8
        run_dir = Path(baseline["log_path"]).parent
        assert (run_dir / "server.log").is_file() and list(run_dir.glob("*.jsonl")), "log and records came back"
        assert read_pidfiles(workdir / "pids") == [] and not any((workdir / "runs").iterdir())
        assert HostLeases(store).read("gpu-ssh") is None

        # The profile, on a launch of its own there (baseline_job launched the baseline plain): its trace came back.
        profile_job = dg.define_asset_job("profile_only", selection=["profile"]).resolve(
            asset_graph=defs.resolve_asset_graph())
        profile = profile_job.execute_in_process(partition_key="sim-ssh", instance=instance).asset_value("profile")
        assert profile.taken, profile.reason
        assert Path(profile.trace_path).is_file() and Path(profile.trace_path).stat().st_size > 0
        assert read_pidfiles(workdir / "pids") == [] and not any((workdir / "runs").iterdir())

        # The host stops answering: the trials step fails as environment_unavailable, no trial recorded.
        repo(tmp_path, {"gpu-ssh": sshd.host_entry(workdir, sys.executable, port=1)}, {})
        trials_job = dg.define_asset_job("trials_only", selection=["profile", "candidates", "trials"]).resolve(
            asset_graph=defs.resolve_asset_graph())
        gone = trials_job.execute_in_process(partition_key="sim-ssh", instance=instance, raise_on_error=False)
    assert not gone.success
    assert "environment_unavailable" in step_failure(gone) and "host 'gpu-ssh': ssh connection refused" in step_failure(gone)
    assert store.trials(baseline["context_key"]) == [], "never a failed trial"


@pytest.mark.stop_reason("environment_unavailable", case="ssh_at_baseline")
@pytest.mark.stop_reason("environment_unavailable", case="no_engine")
def test_an_unreachable_host_or_a_python_without_the_engine_fails_before_any_launch(tmp_path, host, store) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "id").write_text("not a key")
    (keys / "known_hosts").write_text("")
    folder = repo(tmp_path, {
        "gpu-off": {"kind": "ssh", "address": "127.0.0.1", "port": 1, "identity_file": "keys/id",
                    "known_hosts": "keys/known_hosts", "python": sys.executable, "workdir": str(tmp_path / "w")},
        "bare": {"kind": "local", "python": "/usr/bin/python3"}},
        {"sim-off": {"host": "gpu-off"}, "vllm-bare": {"host": "bare", "engine": "vllm", "server_args": []}})
    defs = build_defs(folder, host=host, store=store)
    job = defs.resolve_job_def("baseline_job")
    for name, expected in (("sim-off", "host 'gpu-off': ssh connection refused"),
                           ("vllm-bare", "host 'bare': /usr/bin/python3 has no vllm engine")):
        with dg.instance_for_test() as instance:
            result = job.execute_in_process(partition_key=name, instance=instance, raise_on_error=False)
        assert not result.success
        text = step_failure(result)
        assert text.count("environment_unavailable") >= 1 and expected in text, text
        assert store.baseline_attempts(name) == [], "the host's fault is not an attempt of the config"
        assert all(row["measurement"] is None for row in store.measurements(name))
    assert not list((Path(host.state_path()) / "pids").glob("*.json"))
