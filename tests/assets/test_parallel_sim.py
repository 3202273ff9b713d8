"""parallel_trials on a pool of two sim hosts that declare 2 GPUs each: one optimize run holds 3 slots
across them, launches the baseline on two of them at once, and measures its trials at once, each
launch on devices no other launch of the run holds at that moment (the sim fails a launch on a held
device, as a GPU would), says where each trial ran, and keeps the raised cap a serial run keeps. A pool whose members serve with another install is refused."""

from __future__ import annotations

import dagster as dg
import yaml

from hyperloom_assets.core.decisions.climb_state import BASELINE
from hyperloom_assets.core.decisions.parallel import relaunch_key
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.sim.devices import DEVICES_DIR_ENV, read_claims
from tests.conftest import SIM_MODEL


def pool_of_two(tmp_path, monkeypatch, python_b: str | None = None):
    # Both stand-ins serve on this machine and share its emulated devices (sim/devices.py), so their
    # device ids differ here as two real hosts' would not: a launch on gpu-b holds device 2 or 3.
    gpu_b = {"kind": "local", "gpus": [2, 3], **({"python": python_b} if python_b else {})}
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"gpu-a": {"kind": "local", "gpus": [0, 1]}, "gpu-b": gpu_b,
                                                         "gpu-pool": {"kind": "pool", "hosts": ["gpu-a", "gpu-b"]}}))
    monkeypatch.setenv("HYPERLOOM_HOSTS_FILE", str(tmp_path / "hosts.yaml"))
    monkeypatch.setenv(DEVICES_DIR_ENV, str(tmp_path / "devices"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path / "devices"


def write_target(tmp_path):
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "host": "gpu-pool", "parallel_trials": 3,
        # A cap of 4 under 16 streams: raising it pays several times the launch noise. A slow sim
        # clock (time scale 2) keeps three servers and their clients from starving each other of
        # these 2 cores, where the numbers would read the CPU rather than the model.
        "server_args": ["--gpu", "H100", "--time-scale", "2", "--max-num-seqs", "4"],
        "search_space": {"args": {"--max-num-seqs": [16, 32], "--max-num-batched-tokens": [4096]}, "only": True},
        "workload": {"kind": "random", "isl": 256, "osl": 32, "concurrency": 16, "num_prompts": 32},
        "repeats": 2, "max_trials": 4, "target_gain_pct": 1000, "profile": False, "sweep_concurrencies": [16]}))
    return folder


# Up to the trials: validation, the sweep and the report use the run's first slot, one launch at a time.
UPTO_TRIALS = [dg.AssetKey(k) for k in ("baseline", "roofline", "profile", "candidates", "trials")]


def test_a_run_with_three_slots_on_a_pool_measures_trials_at_once_on_disjoint_devices(tmp_path, monkeypatch,
                                                                                      host, store) -> None:
    devices = pool_of_two(tmp_path, monkeypatch)
    defs = build_defs(write_target(tmp_path), host=host, store=store)
    with dg.instance_for_test() as instance:
        done = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance,
                                                                       raise_on_error=False,
                                                                       asset_selection=UPTO_TRIALS)
        assert done.success, [str(e.event_specific_data.error) for e in done.all_events
                              if e.event_type_value == "STEP_FAILURE"]
        trials = instance.fetch_materializations(dg.AssetKey("trials"), limit=1).records[0]
    metadata = trials.asset_materialization.metadata
    assert metadata["slots"].value == 3
    rows = [r.data for r in metadata["trials"].value.records]
    # The baseline was launched twice at once, on two slots: its second launch is the fresh one the first
    # looks are judged with, so the climb launched it no more.
    context = store.measurements("sim", "baseline")[0]["context_key"]
    assert [row["record"]["role"] for row in store.looks(context, relaunch_key(BASELINE))] == ["best"]
    assert (rows[0]["name"], rows[0]["against"]) == ("--max-num-seqs=16", "baseline"), "the plan's first goes first"
    of_baseline = [m for m in store.measurements("sim", "best_relaunch") if m["fingerprint"] is None]
    assert len(of_baseline) == 1 + sum(r["best_relaunches"] for r in rows if r["against"] == "baseline"), \
        "the launch beside the baseline, and those the trials' own later looks asked for"
    assert any(r["outcome"] == "KEEP" and r["name"].startswith("--max-num-seqs") for r in rows), rows
    assert "FAILED" not in {r["outcome"] for r in rows}, "no launch found its device held (sim/devices.py)"
    held = [c for c in read_claims(devices) if c["event"] == "held"]
    # gpu-a's two devices first, then one of gpu-b's: the run's three slots, one device each, on both members.
    assert {tuple(c["devices"]) for c in held} == {(0,), (1,), (2,)}, held
    # Each trial names the slots its launches took: host and device (which trial got gpu-b's slot is
    # the threads' race, so only the claims above say that gpu-b served).
    assert all(r["ran_on"] and set(r["ran_on"].split(", ")) <= {"gpu-a:0", "gpu-a:1", "gpu-b:2"} for r in rows), rows
    # A server torn down before its start completes logs no "freed": the device's next holder bounds it.
    freed = {c["pid"]: c["at"] for c in read_claims(devices) if c["event"] == "freed"}
    ends = {c["pid"]: freed.get(c["pid"], min((d["at"] for d in held if d["devices"] == c["devices"] and
                                                d["at"] > c["at"]), default=float("inf"))) for c in held}
    at_once = [(a, b) for a in held for b in held if a["pid"] < b["pid"] and a["at"] < ends[b["pid"]]
               and b["at"] < ends[a["pid"]]]
    assert at_once and all(a["devices"] != b["devices"] for a, b in at_once), "trials ran at once, one per device"
    assert held[0]["at"] < ends[held[1]["pid"]] and held[1]["at"] < ends[held[0]["pid"]], \
        "the baseline's two launches, the run's first, served at once"
    assert HostLeases(store).of_host("gpu-a") == [] and HostLeases(store).of_host("gpu-b") == []


def test_a_pool_whose_member_serves_with_another_install_is_refused_before_any_launch(tmp_path, monkeypatch,
                                                                                      host, store) -> None:
    devices = pool_of_two(tmp_path, monkeypatch, python_b="/bin/false")  # an interpreter without the engine
    defs = build_defs(write_target(tmp_path), host=host, store=store)
    with dg.instance_for_test() as instance:
        done = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance,
                                                                       raise_on_error=False,
                                                                       asset_selection=UPTO_TRIALS[:1])
    assert not done.success
    errors = " ".join(e.event_specific_data.error.to_string() for e in done.all_events
                      if e.event_type_value == "RESOURCE_INIT_FAILURE")
    assert "pool 'gpu-pool': member 'gpu-b' differs from 'gpu-a': sim install None on 'gpu-b'" in errors, errors
    assert read_claims(devices) == [] and HostLeases(store).of_host("gpu-a") == [], "no launch, no lease"
