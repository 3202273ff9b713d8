"""A target's search_space through the graph on the sim: with `only: true` the climb tries the
space's knobs alone, a flag outside the seed grid included; a flag the engine's parser does
not have fails the baseline before any server is launched."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from hyperloom_assets.core.planning.variants import split_args
from hyperloom_assets.definitions import build_defs
from tests.conftest import SIM_MODEL

BASE = {"engine": "sim", "model": str(SIM_MODEL), "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4"],
        "workload": {"kind": "random", "isl": 128, "osl": 32, "concurrency": 16, "num_prompts": 48},
        "repeats": 2, "max_trials": 3, "target_gain_pct": 1000, "profile": False}
# --async-scheduling is in no seed grid: the planner has no rule for it, and tries it anyway.
SPACE = {"args": {"--max-num-seqs": [16], "--async-scheduling": [True]}, "only": True}


def write(tmp_path, target: dict):
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump(target))
    return folder


def test_only_the_space_is_searched_a_flag_outside_the_grid_included(tmp_path, host, store) -> None:
    defs = build_defs(write(tmp_path, {**BASE, "search_space": SPACE}), host=host, store=store)
    selection = [dg.AssetKey(k) for k in ("baseline", "roofline", "profile", "candidates", "trials")]
    with dg.instance_for_test() as instance:
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            partition_key="sim", instance=instance, asset_selection=selection)
        assert result.success
        plan, climb = result.asset_value("candidates"), result.asset_value("trials").climb
        table = instance.fetch_materializations(dg.AssetKey("trials"), limit=1).records[0] \
            .asset_materialization.metadata["trials"].value
    space_flags = set(SPACE["args"])
    for variant in plan:
        touched = {s.flag for s in split_args(variant.add_args) if s.flag}
        assert touched <= space_flags and not variant.remove_args and not variant.set_env, variant.name
    alone = {v.name: v for v in plan if v.provenance == "search_space"}
    assert set(alone) == {"--max-num-seqs=16", "--async-scheduling"}, [v.name for v in plan]
    assert alone["--async-scheduling"].rule == "search_space", "no rule for it, and it is planned anyway"
    assert alone["--max-num-seqs=16"].rule == "cap_raise_to_concurrency", "a grid knob keeps the grid's rules"
    # Whether a trial is kept is the measurement's call (on a loaded machine these fast sim
    # rounds can read as noise): the point here is that the space's knobs are what is tried.
    tried = [set(t.variant.add_args) for t in climb.trials]
    assert tried and any("--async-scheduling" in flags for flags in tried), [t.name for t in climb.trials]
    assert all(t.outcome in ("KEEP", "REVERT") for t in climb.trials), [(t.name, t.outcome) for t in climb.trials]
    assert [row.data["name"] for row in table.records] == [t.name for t in climb.trials]


@pytest.mark.stop_reason("baseline_failed", case="search_space")
def test_a_flag_the_parser_lacks_fails_the_baseline_before_any_launch(tmp_path, host, store) -> None:
    space = {"args": {"--max-num-seqz": [16]}, "only": True}
    defs = build_defs(write(tmp_path, {**BASE, "search_space": space}), host=host, store=store)
    with dg.instance_for_test() as instance:
        done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance,
                                                                      raise_on_error=False)
    assert not done.success
    failure = next(e for e in done.all_events if e.event_type_value == "STEP_FAILURE")
    said = str(failure.event_specific_data.error)
    assert "search_space.args.--max-num-seqz" in said and "did you mean --max-num-seqs?" in said, said
    assert store.measurements("sim") == [] and store.baseline_attempts("sim") == []
    assert not (host.state_path() / "runs").exists() or not any((host.state_path() / "runs").rglob("server.log"))
