"""Climbs on sim servers driven step by step, outside a Dagster run: the baseline through
its job, then `run_climb` with hand-made candidates. The fault tests (tests/assets/) and
the fault matrix (benchmarks/faults.py) share them."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import yaml

from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.definitions import build_defs

SIM_MODEL = Path(__file__).resolve().parents[2] / "models" / "llama-3-8b"

FAST = ["--gpu", "H100", "--time-scale", "50"]
SCALE_10 = ["--gpu", "H100", "--time-scale", "10"]  # slower, but the engine, not the client, sets the pace
WORKLOAD = {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48}
# Four streams keep the client's share of a busy 2-core machine small: launches of one
# config then agree within about 1%, so scripted luck is the only luck.
QUIET = {"kind": "random", "isl": 256, "osl": 128, "concurrency": 4, "num_prompts": 16}


def variant(name: str, *args: str) -> Variant:
    return Variant(name=name, add_args=list(args), provenance="seed_grid", reason="test")


def write_target(folder: Path, server_args: list[str], workload: dict | None = None, **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "server_args": server_args, "workload": workload or WORKLOAD,
        "repeats": 2, "max_trials": 1, "target_gain_pct": 1000, **extra}))


def baseline_and_roofline(folder: Path, host, store, instance):
    defs = build_defs(folder, host=host, store=store)
    done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance)
    return done.asset_value("baseline"), done.asset_value("roofline")


def climb_context(run_id: str) -> SimpleNamespace:
    return SimpleNamespace(partition_key="sim", run=SimpleNamespace(run_id=run_id),
                           log=logging.getLogger(run_id), log_event=lambda event: None)
