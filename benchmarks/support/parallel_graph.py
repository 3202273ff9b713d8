"""The real graph on a sim host that declares 4 devices: one run with `parallel_trials` N against one with 1.

parallel_search.py's offline rows time the climb alone, on a virtual clock. This row runs the
assets a user runs (baseline, roofline, candidates, trials, accepted_patches, optimization_stack)
through `execute_in_process`, each launch a real sim server on a slot of a local host declaring
`gpus: [0, 1, 2, 3]` (the sim holds its emulated devices as GPUs would: sim/devices.py), and reads
the `trials` step's wall time from Dagster's step stats and the validated gain with its 95%
interval from `optimization_stack`'s metadata. The search space gives at least MIN_TRIALS trials.

What bounds it on a small machine: every launch is a sim server and a client process, and a
slot's CPUs are its devices' share (core/fleet/slots.py: on 2 CPUs, two slots to a CPU). At a high
time scale the sim computes its schedule faster than real time and the run is CPU-bound: four
slots then share the cores the serial run had nearly to itself. At a low time scale
(TIME_SCALE) a round's wall time is mostly the sim sleeping out emulated GPU time, so launches
on several slots overlap as on a GPU host; what stays CPU-bound is each launch's start (a Python
server process and a client process starting), which four slots pay at once.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import dagster as dg
import yaml

from benchmarks.support.llm_servers import environment
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.process_group import read_pidfiles, terminate_group
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.sim.devices import DEVICES_DIR_ENV

SIM_MODEL = Path(__file__).resolve().parents[2] / "models" / "llama-3-8b"
DEVICES = [0, 1, 2, 3]
MIN_TRIALS = 8
NUM_PROMPTS = 16  # a round: one batch of the workload's 16 streams
TIME_SCALE = 0.25  # the sim's clock: low enough that a round mostly waits (see the module docstring)
HALF = 0.5  # the goal: N slots finish the trials step in at most half the serial run's wall time
UPTO_STACK = ("baseline", "roofline", "profile", "candidates", "trials", "accepted_patches", "optimization_stack")


def graph_target(parallel_trials: int, time_scale: float) -> dict:
    """A sequence cap of 4 under 16 streams, no CUDA graphs: raising the cap pays several times the
    launch noise, the budget and the graphs a little more on top; nine values to try, each a trial."""
    return {
        "engine": "sim", "model": str(SIM_MODEL), "host": "box", "parallel_trials": parallel_trials,
        "server_args": ["--gpu", "H100", "--time-scale", str(time_scale), "--max-num-seqs", "4", "--enforce-eager"],
        "search_space": {"args": {"--max-num-seqs": [8, 16, 32, 64], "--max-num-batched-tokens": [1024, 2048, 4096],
                                  "--block-size": [32], "--async-scheduling": [True],
                                  "--gpu-memory-utilization": [0.85, 0.95]}, "only": True},
        "workload": {"kind": "random", "isl": 256, "osl": 32, "concurrency": 16, "num_prompts": NUM_PROMPTS},
        "repeats": 2, "max_trials": MIN_TRIALS, "target_gain_pct": 100_000, "profile": False,
        "sweep_concurrencies": [16]}


@contextmanager
def sim_host(work: Path) -> Iterator[None]:
    """This process's environment names a hosts file declaring `box` with DEVICES, and a devices folder."""
    (work / "hosts.yaml").write_text(yaml.safe_dump({"box": {"kind": "local", "gpus": DEVICES}}))
    with environment({"HYPERLOOM_HOSTS_FILE": str(work / "hosts.yaml"), DEVICES_DIR_ENV: str(work / "devices"),
                      "CUDA_VISIBLE_DEVICES": None}):
        yield


def graph_run(parallel_trials: int, time_scale: float = TIME_SCALE) -> dict:
    """One optimize run up to the validated stack; its trials step's wall time and its validated gain."""
    with tempfile.TemporaryDirectory(prefix="parallel-graph-") as folder:
        work = Path(folder)
        (work / "targets").mkdir()
        (work / "targets" / "sim.yaml").write_text(yaml.safe_dump(graph_target(parallel_trials, time_scale)))
        host = LocalHost(state_dir=str(work / "state"), check_foreign_processes=False)
        store = ResultStore(url=f"sqlite:///{work / 'results.db'}")
        try:
            with sim_host(work), dg.instance_for_test() as instance:
                defs = build_defs(work / "targets", host=host, store=store)
                began = time.monotonic()
                done = defs.resolve_job_def("optimize_job").execute_in_process(
                    partition_key="sim", instance=instance, raise_on_error=False,
                    asset_selection=[dg.AssetKey(name) for name in UPTO_STACK])
                wall_s = time.monotonic() - began
                if not done.success:
                    raise RuntimeError(f"the run with parallel_trials {parallel_trials} failed: "
                                       f"{[e.message for e in done.all_events if e.is_failure][:3]}")
                return _row(instance, done.run_id, store, parallel_trials, wall_s)
        finally:
            for path, record in read_pidfiles(work / "state" / "pids"):  # a server a failed run left behind
                terminate_group(record.pgid, term_wait_s=5.0)
                path.unlink(missing_ok=True)


def _row(instance: dg.DagsterInstance, run_id: str, store: ResultStore, parallel_trials: int, wall_s: float) -> dict:
    steps = {s.step_key: s for s in instance.get_run_step_stats(run_id)}
    trials_meta, stack = _metadata(instance, "trials"), _metadata(instance, "optimization_stack")
    rows = [record.data for record in trials_meta["trials"].records]
    launches = [m for m in store.measurements("sim") if m["run_id"] == run_id]
    return {
        "parallel_trials": parallel_trials, "slots": trials_meta["slots"],
        "trials_s": round(steps["trials"].end_time - steps["trials"].start_time, 1),
        "run_s": round(wall_s, 1), "trials": len(rows), "kept": sum(r["outcome"] == "KEEP" for r in rows),
        "outcomes": [f"{r['name']}: {r['outcome']}" for r in rows],
        "climb_launches": sum(m["kind"] in ("trial", "best_relaunch") for m in launches),
        "validated_gain_pct": round(stack["validated_gain_pct"], 1),
        "validated_gain_ci": [round(stack["validated_gain_ci_low"], 1), round(stack["validated_gain_ci_high"], 1)],
    }


def _metadata(instance: dg.DagsterInstance, asset: str) -> dict:
    record = instance.fetch_materializations(dg.AssetKey(asset), limit=1).records[0]
    return {k: getattr(v, "value", v) for k, v in record.asset_materialization.metadata.items()}


def graph_row(slots: int, time_scale: float = TIME_SCALE) -> dict:
    """The serial run and the run on `slots` slots, and whether the goal is met: the trials step in at most
    half the serial wall time, each run's validated gain within the other's 95% interval."""
    serial, parallel = graph_run(1, time_scale), graph_run(slots, time_scale)
    ratio = round(parallel["trials_s"] / serial["trials_s"], 3)

    def within(gain: float, ci: list[float]) -> bool:
        return ci[0] <= gain <= ci[1]

    same_gain = (within(parallel["validated_gain_pct"], serial["validated_gain_ci"])
                 and within(serial["validated_gain_pct"], parallel["validated_gain_ci"]))
    return {"scenario": f"real graph: sim on a host of {len(DEVICES)} devices, time scale {time_scale:g}",
            "time_scale": time_scale, "serial": serial, "parallel": parallel, "trials_time_ratio": ratio,
            "same_gain_within_interval": same_gain,
            "target_met": bool(ratio <= HALF and same_gain and min(serial["trials"], parallel["trials"]) >= MIN_TRIALS)}
