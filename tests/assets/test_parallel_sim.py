"""parallel_trials on a sim host that declares 4 GPUs: one optimize run holds 3 slots and measures
its trials at once, each launch on devices no other launch of the run holds at that moment (the
sim fails a launch on a held device, as a GPU would), and keeps the raised cap a serial run keeps."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.sim.devices import DEVICES_DIR_ENV, read_claims
from tests.conftest import SIM_MODEL


@pytest.fixture
def four_gpu_box(tmp_path, monkeypatch):
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"box": {"kind": "local", "gpus": [0, 1, 2, 3]}}))
    monkeypatch.setenv("HYPERLOOM_HOSTS_FILE", str(tmp_path / "hosts.yaml"))
    monkeypatch.setenv(DEVICES_DIR_ENV, str(tmp_path / "devices"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path / "devices"


def test_a_run_with_three_slots_measures_trials_at_once_on_disjoint_devices(tmp_path, host, store,
                                                                            four_gpu_box) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "host": "box", "parallel_trials": 3,
        # A cap of 4 under 16 streams: raising it pays several times the launch noise. A slow sim
        # clock (time scale 2) keeps three servers and their clients from starving each other of
        # these 2 cores, where the numbers would read the CPU rather than the model.
        "server_args": ["--gpu", "H100", "--time-scale", "2", "--max-num-seqs", "4"],
        "search_space": {"args": {"--max-num-seqs": [16, 32], "--max-num-batched-tokens": [4096]}, "only": True},
        "workload": {"kind": "random", "isl": 256, "osl": 32, "concurrency": 16, "num_prompts": 32},
        "repeats": 2, "max_trials": 4, "target_gain_pct": 1000, "profile": False, "sweep_concurrencies": [16]}))
    defs = build_defs(folder, host=host, store=store)
    with dg.instance_for_test() as instance:
        # Up to the trials: validation, the sweep and the report use the run's first slot, one launch at a time.
        upto_trials = [dg.AssetKey(k) for k in ("baseline", "roofline", "profile", "candidates", "trials")]
        done = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance,
                                                                       raise_on_error=False,
                                                                       asset_selection=upto_trials)
        assert done.success, [str(e.event_specific_data.error) for e in done.all_events
                              if e.event_type_value == "STEP_FAILURE"]
        trials = instance.fetch_materializations(dg.AssetKey("trials"), limit=1).records[0]
    metadata = trials.asset_materialization.metadata
    assert metadata["slots"].value == 3
    rows = [r.data for r in metadata["trials"].value.records]
    # Two values of the cap at once, each against the baseline, on a slot of its own; whichever loses to
    # the other after both beat the baseline is judged again against the new best.
    assert {"--max-num-seqs=16", "--max-num-seqs=32"} <= {r["name"] for r in rows if r["against"] == "baseline"}, rows
    assert any(r["outcome"] == "KEEP" and r["name"].startswith("--max-num-seqs") for r in rows), rows
    assert "FAILED" not in {r["outcome"] for r in rows}, "no launch found its device held (sim/devices.py)"
    held = [c for c in read_claims(four_gpu_box) if c["event"] == "held"]
    assert {tuple(c["devices"]) for c in held} <= {(0,), (1,), (2,)}, "the run's three slots, one device each"
    # A server torn down before its start completes logs no "freed": the device's next holder bounds it.
    freed = {c["pid"]: c["at"] for c in read_claims(four_gpu_box) if c["event"] == "freed"}
    ends = {c["pid"]: freed.get(c["pid"], min((d["at"] for d in held if d["devices"] == c["devices"] and
                                                d["at"] > c["at"]), default=float("inf"))) for c in held}
    at_once = [(a, b) for a in held for b in held if a["pid"] < b["pid"] and a["at"] < ends[b["pid"]]
               and b["at"] < ends[a["pid"]]]
    assert at_once and all(a["devices"] != b["devices"] for a, b in at_once), "trials ran at once, one per device"
    assert HostLeases(store).of_host("box") == []
