"""parallel_trials on a pool of two sim hosts that declare 2 GPUs each: one optimize run holds 3 slots
across them, launches the baseline on two of them at once, and measures its trials at once, each
launch on devices no other launch of the run holds at that moment (the sim fails a launch on a held
device, as a GPU would), says where each trial ran, keeps the raised cap a serial run keeps, and
validates each pair's baseline and stack at once, one on each of two slots. A pool whose members
serve with another install is refused. A tree target's trials in flight at once never change the
run's one worktree under each other's servers."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import yaml

from hyperloom_assets.core.decisions.climb_state import BASELINE
from hyperloom_assets.core.decisions.parallel import relaunch_key
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.sim.devices import DEVICES_DIR_ENV, read_claims
from tests.conftest import SIM_MODEL
from hyperloom_assets.resources.trees.git import git_out
from tests.graph_runs import latest_metadata, run_job
from tests.trees import init_tree, make_patch


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


def served_steps(monkeypatch) -> list[dict]:
    """Each launch's step folder, devices and serving interval, as LocalHost.serve started and ended it."""
    seen: list[dict] = []
    serve = LocalHost.serve

    @contextmanager
    def watched(self, spec, run_dir, label=None):
        with serve(self, spec, run_dir, label) as launch:
            ready_at = time.monotonic()
            yield launch
        seen.append({"step": Path(run_dir).name, "devices": launch.devices, "ready_at": ready_at,
                     "gone_at": time.monotonic()})
    monkeypatch.setattr(LocalHost, "serve", watched)
    return seen


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


UPTO_TRIALS = [dg.AssetKey(k) for k in ("baseline", "roofline", "profile", "candidates", "trials")]
# Through the sweep, which rides on the validation's last pair: the report is the serial tests'.
UPTO_SWEEP = [*UPTO_TRIALS, *(dg.AssetKey(k) for k in ("accepted_patches", "optimization_stack", "concurrency_sweep"))]


def test_a_run_with_three_slots_on_a_pool_measures_trials_at_once_on_disjoint_devices(tmp_path, monkeypatch,
                                                                                      host, store) -> None:
    devices = pool_of_two(tmp_path, monkeypatch)
    seen = served_steps(monkeypatch)
    defs = build_defs(write_target(tmp_path), host=host, store=store)
    with dg.instance_for_test() as instance:
        done = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance,
                                                                       raise_on_error=False,
                                                                       asset_selection=UPTO_SWEEP)
        assert done.success, [str(e.event_specific_data.error) for e in done.all_events
                              if e.event_type_value == "STEP_FAILURE"]
        trials = instance.fetch_materializations(dg.AssetKey("trials"), limit=1).records[0]
        stack = latest_metadata(instance, "optimization_stack", "sim")
        sweep = latest_metadata(instance, "concurrency_sweep", "sim")
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
    _assert_each_validation_pair_served_at_once_on_two_slots(seen, stack, sweep)
    assert HostLeases(store).of_host("gpu-a") == [] and HostLeases(store).of_host("gpu-b") == []


def _assert_each_validation_pair_served_at_once_on_two_slots(seen: list[dict], stack: dict, sweep: dict) -> None:
    """Three slots: each pair's base and stack at once on the first two (the third idle rather than
    split a pair), swapping slots for the second pair; the sweep on the last pair, baseline first."""
    assert stack["validated"] is True, stack
    served = {s["step"]: s for s in seen if s["step"].startswith("validate-")}
    assert sorted(served) == ["validate-1-base", "validate-1-stack", "validate-2-base", "validate-2-stack"], seen
    for pair in (1, 2):
        base, top = served[f"validate-{pair}-base"], served[f"validate-{pair}-stack"]
        assert max(base["ready_at"], top["ready_at"]) < min(base["gone_at"], top["gone_at"]), \
            f"pair {pair}'s two sides served at once: {base}, {top}"
        assert {tuple(base["devices"]), tuple(top["devices"])} == {(0,), (1,)}, (base, top)
    assert served["validate-1-base"]["devices"] == served["validate-2-stack"]["devices"], \
        "the sides swapped slots for the second pair"
    assert sweep["measured_on"] == "the validation's last base/stack pair", "the sweep rode on the pair at once"
    assert [row.data["config"] for row in sweep["table"].records] == ["baseline", "stack"], \
        "the baseline's rows first, whichever server finished first"


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


CAP_FILE = "hyperloom_assets/sim/engine_args.py"
CAP = ("max_seqs=args.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS,", "max_seqs=max(args.max_num_seqs or 0, 64),")


def worktree_watched(monkeypatch) -> list[dict]:
    """Each launch's step folder and its tree's HEAD and patched state at ready and at teardown."""
    seen: list[dict] = []
    serve = LocalHost.serve

    def state(tree) -> tuple[str, bool]:
        return git_out(tree, "rev-parse", "HEAD"), CAP[1] in (Path(tree) / CAP_FILE).read_text()

    @contextmanager
    def watched(self, spec, run_dir, label=None):
        with serve(self, spec, run_dir, label) as launch:
            ready = state(spec.framework_tree)
            yield launch
            seen.append({"step": Path(run_dir).name, "ready": ready, "gone": state(spec.framework_tree)})
    monkeypatch.setattr(LocalHost, "serve", watched)
    return seen


def test_a_tree_targets_trials_at_once_never_change_the_worktree_under_a_server(tmp_path, monkeypatch, host,
                                                                                store) -> None:
    # Mutation: without the holds (resources/trees/holds.py) the patch trial's checkout lands
    # under the other trial's server, or two checkouts collide on git's index lock.
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"box": {"kind": "local", "gpus": [0, 1, 2, 3]}}))
    monkeypatch.setenv("HYPERLOOM_HOSTS_FILE", str(tmp_path / "hosts.yaml"))
    monkeypatch.setenv(DEVICES_DIR_ENV, str(tmp_path / "devices"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    tree = init_tree("sim", tmp_path / "operator")
    lift = make_patch(tree, {CAP_FILE: CAP}, tmp_path / "lift-cap.patch")
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "sim-tree.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "framework_tree": str(tree), "host": "box", "parallel_trials": 4,
        "server_args": ["--gpu", "H100", "--time-scale", "20", "--max-num-seqs", "2"], "patches": [str(lift)],
        # The patch first, the flag beside it on the other pair of slots (each launch beside the baseline's):
        # two trials at once, two states of one tree.
        "search_space": {"args": {"--max-num-seqs": [4]}, "only": True}, "accuracy": {"kind": "agreement", "prompts": 4},
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 32},
        "repeats": 2, "max_trials": 2, "target_gain_pct": 10000, "profile": False}))
    seen = worktree_watched(monkeypatch)
    result, meta = run_job(targets, "sim-tree", host, store, ("trials",),
                           only=("baseline", "roofline", "profile", "candidates", "trials"))
    rows = {r.data["name"]: r.data for r in meta["trials"]["trials"].records}
    assert sorted(rows) == ["--max-num-seqs=4", "patch lift-cap"] and "FAILED" not in {r["outcome"] for r in rows.values()}
    assert all(s["ready"] == s["gone"] for s in seen), f"a worktree changed under its server: {seen}"
    patched = {s["step"].split("-")[1]: s["ready"][1] for s in seen if s["step"].startswith("trial-")}
    assert patched == {rows["patch lift-cap"]["fingerprint"]: True, rows["--max-num-seqs=4"]["fingerprint"]: False}, \
        f"each trial served its own state: {seen}"
