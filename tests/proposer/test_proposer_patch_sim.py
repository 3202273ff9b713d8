"""A model's source patch takes the patch path on a sim tree: guarded against the tree,
approved by the critic, launched from the run's worktree, through the accuracy gate,
kept, committed on hyperloom/<target> and listed by accepted_patches as the model's.

The patch lifts the operator's sequence cap of 2 inside the sim (about 4x at concurrency
16), so machine load cannot turn it into a revert; served without the patch it would
measure as the baseline and be reverted, which is what the test would then see.
"""

from __future__ import annotations

import json

import yaml

from hyperloom_assets.resources.store.llm_calls import LlmCallLog
from hyperloom_assets.resources.trees.git import git_out
from tests.conftest import SIM_MODEL
from tests.graph_runs import run_job, trial_observations
from tests.proposer.proposals import APPROVE, change
from tests.proposer.scripted_llm import ScriptedLlm
from tests.trees import init_tree, make_patch, operator_state

ARGS_FILE = "hyperloom_assets/sim/engine_args.py"
CAP = ("max_seqs=args.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS,", "max_seqs=max(args.max_num_seqs or 0, 64),")


def test_an_approved_model_patch_is_launched_from_the_tree_kept_and_committed(tmp_path, host, store,
                                                                               monkeypatch) -> None:
    tree = init_tree("sim", tmp_path / "operator")
    diff = make_patch(tree, {ARGS_FILE: CAP}, tmp_path / "cap.patch").read_text()
    proposal = change("lift the cap", patch=diff, rationale="the cap of 2 binds under concurrency 16")
    before = operator_state(tree)
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "sim-tree.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "framework_tree": str(tree),
        "server_args": ["--gpu", "H100", "--time-scale", "20", "--max-num-seqs", "2"],
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
        "repeats": 2, "max_trials": 1, "target_gain_pct": 10000, "sweep_concurrencies": [16],
        "proposer": {"provider": "openai", "model": "scripted-model", "max_rounds": 1}}))
    script = {"proposer": [json.dumps({"proposals": [proposal]})], "critic": [APPROVE]}
    with ScriptedLlm(script) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{llm.port}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        result, meta = run_job(targets, "sim-tree", host, store, ("accepted_patches",))

    fates = LlmCallLog(store).rounds("sim-tree")[0]["fates"]
    assert [(f["proposal"]["name"], f["outcome"]) for f in fates] == [("lift the cap", "approved")]
    trial = trial_observations(result)["llm: lift the cap"]
    assert trial["outcome"] == "KEEP", trial
    assert trial["provenance"] == "llm:openai/scripted-model"
    variant = result.asset_value("trials").climb.trials[0].variant
    assert [(p.name, p.source) for p in variant.patches] == [("llm-lift-the-cap", "llm")]
    assert variant.accuracy_risky, "a source patch goes through the accuracy gate"

    accepted = meta["accepted_patches"]
    assert [(p["name"], p["source"]) for p in accepted["patches"]] == [("llm-lift-the-cap", "llm")]
    branch_log = git_out(tree, "log", "--format=%H %s", f"{before[0]}..hyperloom/sim-tree").splitlines()
    assert [line.split()[0] for line in branch_log] == [accepted["tree_commit"]]
    assert "hyperloom KEEP llm: lift the cap" in branch_log[0]
    assert operator_state(tree) == before, "the operator's checkout is untouched"
