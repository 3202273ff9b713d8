"""Seed grids are data: the shipped files load, and a bad entry names file, entry and key."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.registry import engine_flags_for, flavor_of, grid_engine, harness_flags_for
from hyperloom_assets.core.engines.sim import HARNESS_FLAGS as SIM_HARNESS_FLAGS
from hyperloom_assets.core.planning.seed_grids import (
    GRIDS_DIR,
    GridError,
    Ladder,
    accuracy_risk,
    load_grid_file,
    load_grids,
)
from hyperloom_assets.core.planning.variants import setting_key


def test_shipped_grids_load_and_say_which_engine():
    grids = load_grids()
    assert set(grids) == {"vllm", "sglang", "atom"}
    for engine, grid in grids.items():
        assert grid.engine == engine and grid.entries


def test_no_shipped_grid_entry_touches_a_harness_flag():
    harness = {setting_key(f) for f in SIM_HARNESS_FLAGS}
    for grid in load_grids().values():
        for entry in grid.entries:
            flags = [entry.flag] if entry.flag else [a for a in entry.add_args if a.startswith("-")]
            assert not {setting_key(f) for f in flags} & harness, (grid.engine, entry.name)


def test_vllm_grid_content():
    grid = load_grids()["vllm"]
    by_name = {e.name: e for e in grid.entries}
    assert by_name["max-num-seqs"].ladder.concurrency_multipliers == [0.25, 0.5, 0.75, 1, 1.5, 2]
    assert by_name["gpu-memory-utilization"].rule == "kv_capacity" and by_name["gpu-memory-utilization"].when.host == "gpu"
    assert by_name["fp8-kv"].accuracy_risky and by_name["fp8-kv"].add_args == ["--kv-cache-dtype", "fp8"]
    assert by_name["prefix-caching"].when.shared_prefix is True
    cpu_envs = {e.env_var for e in grid.entries if e.when.host == "cpu" and e.env_var}
    assert cpu_envs == {"VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"}
    assert grid.ablation_rules["--enforce-eager"] == "cuda_graphs"
    assert grid.default_value("--max-num-seqs", "cpu") == "128"
    assert grid.default_value("--max-num-seqs", "gpu") == "256"


def test_vllm_cpu_env_names_exist_in_the_installed_vllm():
    # Read vllm/envs.py as text: importing vllm costs seconds.
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vllm is not installed")
    registry = (Path(spec.origin).parent / "envs.py").read_text()
    grid = load_grids()["vllm"]
    for entry in grid.entries:
        if entry.env_var:
            assert f'"{entry.env_var}": lambda' in registry, entry.env_var


def _copy_grids(tmp_path: Path) -> Path:
    folder = tmp_path / "grids"
    shutil.copytree(GRIDS_DIR, folder)
    return folder


def test_unknown_key_in_an_entry_names_file_entry_and_key(tmp_path: Path):
    folder = _copy_grids(tmp_path)
    path = folder / "vllm.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["entries"][1]["colour"] = "blue"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(GridError) as info:
        load_grids(folder)
    message = str(info.value)
    assert str(path) in message and "max-num-batched-tokens" in message and "colour" in message and "unknown key" in message


def test_unknown_key_nested_in_when_and_at_top_level(tmp_path: Path):
    path = tmp_path / "sglang.yaml"
    raw = yaml.safe_load((GRIDS_DIR / "sglang.yaml").read_text())
    raw["entries"][0]["when"] = {"hots": "gpu"}
    raw["extra_top"] = 1
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(GridError) as info:
        load_grid_file(path)
    assert "entry 'max-running-requests': key 'when.hots': unknown key" in str(info.value)
    assert "extra_top: unknown key" in str(info.value)


def test_an_entry_needs_one_shape(tmp_path: Path):
    path = tmp_path / "atom.yaml"
    raw = yaml.safe_load((GRIDS_DIR / "atom.yaml").read_text())
    raw["entries"].append({"name": "nothing", "rule": "block_size"})
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(GridError, match="entry 'nothing'"):
        load_grid_file(path)


def test_a_grid_file_for_the_wrong_engine_is_refused(tmp_path: Path):
    folder = _copy_grids(tmp_path)
    shutil.copy(folder / "sglang.yaml", folder / "vllm.yaml")
    with pytest.raises(GridError, match="expected 'vllm'"):
        load_grids(folder)


def test_ladder_numbers_and_pow2_rendering():
    ladder = Ladder(values=[2048], concurrency_multipliers=[0.5, 1], base_multipliers=[2])
    assert ladder.numbers(concurrency=3, isl=None, current=4096) == [2, 3, 2048, 8192]
    assert Ladder(format="pow2_list").render(24) == "[1,2,4,8,16,32]"
    assert Ladder(format="pow2_list").render(32) == "[1,2,4,8,16,32]"


def test_sim_plans_with_its_flavor_and_knows_its_harness_flags():
    assert flavor_of("sim", ["--gpu", "H100"]) == "vllm"
    assert flavor_of("sim", ["--gpu", "H100", "--flavor", "sglang"]) == "sglang"
    assert grid_engine("sim", "sglang") == "sglang" and grid_engine("vllm", None) == "vllm"
    assert "--gpu" in harness_flags_for("sim") and "--gpu" not in harness_flags_for("vllm")
    assert "--port" in harness_flags_for("vllm")


def test_vllm_grid_flags_exist_in_the_installed_vllm_parser():
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vllm is not installed")
    parser_source = (Path(spec.origin).parent / "engine" / "arg_utils.py").read_text()
    grid = load_grids()["vllm"]
    flags = {grid.sequence_cap_flag, grid.token_budget_flag, *grid.ablation_rules}
    for entry in grid.entries:
        flags |= {entry.flag} if entry.flag else {a for a in entry.add_args if a.startswith("--")}
    for flag in {f for f in flags if f and f.startswith("--") and not f.startswith("--no-")}:
        assert f'"{flag}"' in parser_source, flag


def test_engine_flags_are_known_for_the_sim_only():
    vllm_sim = engine_flags_for("sim", "vllm")
    assert {"--max-num-seqs", "--max-num-batched-tokens", "--no-enable-prefix-caching", "--enforce-eager"} <= vllm_sim
    assert "--stream-interval" not in vllm_sim and "--max-running-requests" not in vllm_sim
    assert "--max-running-requests" in engine_flags_for("sim", "sglang")
    assert engine_flags_for("sim", None) == vllm_sim  # a sim speaks vLLM unless told otherwise
    assert engine_flags_for("vllm", None) is None and engine_flags_for("sglang", None) is None


def test_accuracy_risk_follows_the_engines_table_and_a_grid_cannot_disagree(tmp_path: Path):
    grids = load_grids()
    risky = {(grid.engine, e.name) for grid in grids.values() for e in grid.entries if e.accuracy_risky}
    assert risky == {("vllm", "fp8-kv"), ("sglang", "fp8-kv"), ("atom", "fp8-kv"), ("atom", "level"), ("atom", "mtp")}
    path = tmp_path / "vllm.yaml"
    raw = yaml.safe_load((GRIDS_DIR / "vllm.yaml").read_text())
    next(e for e in raw["entries"] if e["name"] == "fp8-kv")["accuracy_risky"] = False
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(GridError, match="entry 'fp8-kv': the grid says not accuracy-risky.*--kv-cache-dtype fp8"):
        load_grid_file(path)


def test_an_env_var_in_the_engines_table_is_a_risk_unless_it_keeps_the_default():
    spec = engine_for("vllm")
    assert "another order" in accuracy_risk(spec, [], {"VLLM_CPU_ATTN_SPLIT_KV": "0"})
    assert accuracy_risk(spec, [], {"VLLM_CPU_ATTN_SPLIT_KV": "1"}) is None
    assert accuracy_risk(spec, [], {"VLLM_CPU_KVCACHE_SPACE": "4"}) is None  # sizing, not numerics
