"""Slot leases on a host that declares its GPUs (core/fleet/slots.py, resources/hosts/slot_leases.py),
with real processes: a slot's devices are leased all or none, runs get disjoint slots, a run waits
for a slot a live run holds, and two runs on one host serve at once on devices no other launch uses."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from hyperloom_assets.core.fleet.leases import Holder
from hyperloom_assets.resources.hosts.host_side import neighbour_servers, preflight_problems
from hyperloom_assets.resources.hosts.owner_scope import current_scope, process_start, this_holder
from hyperloom_assets.resources.hosts.process_group import launch, teardown
from hyperloom_assets.resources.hosts.slot_leases import hold_slot
from hyperloom_assets.resources.store.leases import HostLeased, HostLeases
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.sim.devices import DEVICES_DIR_ENV, read_claims
from tests.conftest import SIM_MODEL, reap_pid_dir
from tests.fleet.test_leases import holder_of, sleeper, sqlite_store  # noqa: F401 - the fixture

CPUS = [0, 1, 2, 3, 4, 5, 6, 7]


class FourGpuHost:
    """What hold_slot asks of a host: its name and its slot facts (a CPU-only host here)."""
    name = "gpu-a"

    def slot_facts(self) -> dict:
        return {"gpu_tool": None, "topology": None, "allowed_cpus": CPUS}


def test_a_slots_devices_are_leased_all_or_none_naming_the_device_held(sqlite_store) -> None:
    leases, live = HostLeases(sqlite_store), sleeper()
    try:
        leases.acquire_all(["gpu-a/gpu2", "gpu-a/gpu3"], holder_of(live, "run-live"))
        with pytest.raises(HostLeased) as blocked:
            leases.acquire_all(["gpu-a/gpu1", "gpu-a/gpu2"], this_holder("run-next"))
        assert "device gpu2 of host 'gpu-a' is leased by run run-live" in str(blocked.value)
        assert leases.read("gpu-a/gpu1") is None, "what it took before the held device is released"
        assert sorted(lease.host for lease in leases.of_host("gpu-a")) == ["gpu-a/gpu2", "gpu-a/gpu3"]
    finally:
        live.kill()
        live.wait()


def test_runs_get_disjoint_slots_and_one_waits_for_a_slot_a_live_run_frees(sqlite_store) -> None:
    leases, host, gpus = HostLeases(sqlite_store), FourGpuHost(), [0, 1, 2, 3]
    first, second = this_holder("run-1"), this_holder("run-2")
    with hold_slot(leases, host, gpus, 2, first) as one, hold_slot(leases, host, gpus, 2, second) as two:
        assert (one.devices, two.devices) == ((0, 1), (2, 3))
        assert set(one.cpus).isdisjoint(two.cpus) and one.cpus == (0, 1, 2, 3)
        with pytest.raises(HostLeased, match=r"no free slot of 1 device\(s\) on host 'gpu-a': device gpu0"):
            with hold_slot(leases, host, gpus, 1, this_holder("run-3"), wait_s=0):
                pass
        got, waits = [], []

        def third() -> None:
            with hold_slot(leases, host, gpus, 2, this_holder("run-3"), wait_s=30, on_wait=waits.append) as slot:
                got.append(slot.devices)

        waiting = threading.Thread(target=third)
        waiting.start()
        time.sleep(1.0)
        assert got == [] and "waiting up to 30 s for 2 free device(s)" in waits[0]
    waiting.join(timeout=30)  # the first two slots ended with the block
    assert len(got) == 1 and got[0] in ((0, 1), (2, 3))
    assert leases.of_host("gpu-a") == [], "every device lease released"


def test_a_dead_holders_devices_are_free_to_this_scope(sqlite_store) -> None:
    leases, gone = HostLeases(sqlite_store), sleeper()
    dead = Holder(scope=current_scope(), run_id="run-killed", pid=gone.pid, pid_start=process_start(gone.pid),
                  worker="this-box")
    gone.kill()
    gone.wait()
    leases.acquire_all(["gpu-a/gpu0", "gpu-a/gpu1"], dead)
    warnings = []
    with hold_slot(leases, FourGpuHost(), [0, 1], 2, this_holder("run-next"), on_warning=warnings.append) as slot:
        assert slot.devices == (0, 1) and len(warnings) == 2 and "run-killed" in warnings[0]


def test_this_tools_server_on_another_slot_is_a_neighbour_not_a_foreign_server(tmp_path) -> None:
    pids = tmp_path / "pids"
    argv = [sys.executable, "-m", "hyperloom_assets.cli", "sim-serve", "--gpu", "H100", "--model", str(SIM_MODEL),
            "--port", "0", "--time-scale", "50"]
    server = launch(argv, dict(os.environ), tmp_path / "server.log", pids)
    try:
        time.sleep(0.5)
        foreign = preflight_problems(1, check_foreign_processes=True)
        assert any(f"pid {server.popen.pid}:" in problem for problem in foreign), foreign
        beside = preflight_problems(1, check_foreign_processes=True, devices=[0], neighbours=neighbour_servers(pids))
        assert not any(f"pid {server.popen.pid}:" in problem for problem in beside), beside
    finally:
        teardown(server, term_wait_s=5)


RUN = """
import sys
from pathlib import Path
import dagster as dg
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.store.results import ResultStore
targets, state, url, name = sys.argv[1:5]
defs = build_defs(Path(targets), host=LocalHost(state_dir=state, check_foreign_processes=False), store=ResultStore(url=url))
with dg.instance_for_test() as instance:
    done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key=name, instance=instance,
                                                                   raise_on_error=False)
sys.exit(0 if done.success else 1)
"""


def test_two_runs_on_one_host_serve_at_once_on_slots_no_other_launch_uses(tmp_path, store) -> None:
    """Two baseline runs of TP-2 sim targets on a host that declares 4 GPUs: both go at once, each
    on a slot of its own. The sim holds its devices as a GPU would (sim/devices.py): a device two
    launches shared would fail the second with CUDA's out-of-memory words, and fail its run."""
    targets, devices = tmp_path / "targets", tmp_path / "devices"
    targets.mkdir()
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"box": {"kind": "local", "gpus": [0, 1, 2, 3]}}))
    for name in ("sim-a", "sim-b", "sim-alone"):
        (targets / f"{name}.yaml").write_text(yaml.safe_dump({
            "engine": "sim", "model": str(SIM_MODEL), "host": "box", "repeats": 2,
            "server_args": ["--gpu", "H100", "--tp", "2", "--time-scale", "1", "--max-num-seqs", "4"],
            # Rounds of about 3 s each: each baseline's server lives past the other run's start.
            "workload": {"kind": "random", "isl": 128, "osl": 64, "concurrency": 4, "num_prompts": 32}}))
    env = {**os.environ, DEVICES_DIR_ENV: str(devices), "HYPERLOOM_HOSTS_FILE": str(tmp_path / "hosts.yaml")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    def start(name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", RUN, str(targets), str(tmp_path / "state"), store.url, name],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    runs = [start("sim-a"), start("sim-b")]
    try:
        outputs = [run.communicate(timeout=300)[0] for run in runs]
        runs.append(start("sim-alone"))  # the same config again, alone on the host: the A/A's serial side
        outputs.append(runs[-1].communicate(timeout=300)[0])
    finally:
        for run in runs:
            run.kill()
        reap_pid_dir(tmp_path / "state" / "pids")
    assert [run.returncode for run in runs] == [0, 0, 0], "\n".join(out[-3000:] for out in outputs)
    leases = HostLeases(store)
    events = sorted(leases.events("box/gpu0") + leases.events("box/gpu2"), key=lambda e: e["at"])
    taken = [e for e in events if e["action"] == "taken"][:2]  # the two runs at once; the third came after
    released = [e for e in events if e["action"] == "released" and e["holder"] in {t["holder"] for t in taken}]
    assert len(taken) == 2 and len({e["holder"] for e in taken}) == 2, "one slot each, by two runs"
    assert max(e["at"] for e in taken) < min(e["at"] for e in released), "the two runs held their slots at once"
    held = dict(list({claim["pid"]: claim for claim in read_claims(devices) if claim["event"] == "held"}.items())[:2])
    freed = {claim["pid"]: claim["at"] for claim in read_claims(devices) if claim["event"] == "freed"}
    assert sorted(tuple(claim["devices"]) for claim in held.values()) == [(0, 1), (2, 3)], held
    assert max(claim["at"] for claim in held.values()) < min(freed.values()), "the two servers served at once"
    assert leases.of_host("box") == [], "every device lease released"
    # A/A: the same config measured on two slots at once and alone agrees within the launch noise, so a
    # parallel run's comparisons read the config, not its neighbours (the sim's clock is its own).
    a, b, alone = (store.measurements(name)[0]["measurement"]["output_throughput"]
                   for name in ("sim-a", "sim-b", "sim-alone"))
    print(f"A/A output tok/s: {a:.1f} and {b:.1f} at once, {alone:.1f} alone")
    assert abs(a / b - 1) < 0.03 and abs((a + b) / 2 / alone - 1) < 0.03, (a, b, alone)
