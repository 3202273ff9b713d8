"""The critic in front of the operator's patches in the climb, on a sim tree, through the graph.

The target asks a model critic (the proposer itself is the rules), and the model's server
fails every call: with `critic_fallback: rules`, the offline critic decides. It rejects the
patch that swallows the perf model's errors before `git apply` (REJECTED, no launch, the
branch untouched). The failed call is in the result store; the trial's row carries the
verdict, and the report shows it. (The rules critic approving the operator's and the
library's patches, measured after it: tests/assets/test_patches_sim.py.)
"""

from __future__ import annotations

import yaml

from hyperloom_assets.resources.store.llm_calls import LlmCallLog
from hyperloom_assets.resources.trees.git import git_out
from tests.conftest import SIM_MODEL
from tests.graph_runs import run_job, trial_observations
from tests.proposer.scripted_llm import Failed, ScriptedLlm
from tests.trees import init_tree, make_patch, operator_state

PERF = "hyperloom_assets/sim/perf_model.py"
SWALLOW = ("BW_EFFICIENCY = 0.80\n", "try:\n    BW_EFFICIENCY = 0.80\nexcept Exception:\n    pass\n")


def test_a_failing_model_critic_falls_back_to_the_rules_before_any_patch_is_applied(tmp_path, host, store,
                                                                                    monkeypatch) -> None:
    tree = init_tree("sim", tmp_path / "operator")
    swallow = make_patch(tree, {PERF: SWALLOW}, tmp_path / "swallow.patch")
    before = operator_state(tree)
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "sim-tree.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "framework_tree": str(tree),
        "server_args": ["--gpu", "H100", "--time-scale", "20", "--max-num-seqs", "2"],
        "patches": [str(swallow)], "profile": False,
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
        "repeats": 2, "max_trials": 1, "target_gain_pct": 10000, "sweep_concurrencies": [16],
        "proposer": {"critic_provider": "openai", "critic_model": "scripted-critic", "critic_fallback": "rules"}}))
    with ScriptedLlm({"critic": [Failed(500)]}) as llm:
        llm.point_sdk(monkeypatch, "openai")
        result, meta = run_job(targets, "sim-tree", host, store, ("final_report",))

    trials = trial_observations(result)
    rejected = trials["patch swallow"]
    assert rejected["outcome"] == "REJECTED" and rejected["reason"].startswith("the critic did not approve"), rejected
    assert "sensitive_code" in rejected["critic"] and "the critic's call failed" in rejected["critic"], rejected
    assert rejected["critic"].startswith("rules reject:"), "the rules decided, and the row says the model failed"
    record = {t.name: t for t in result.asset_value("trials").climb.trials}
    assert record["patch swallow"].launches == [] and record["patch swallow"].measurements == 0, "never launched"
    branch = git_out(tree, "log", "--format=%s", f"{before[0]}..hyperloom/sim-tree").splitlines()
    assert branch == [], "the rejected patch never reached the tree"
    assert operator_state(tree) == before

    calls = LlmCallLog(store).calls("sim-tree")
    assert [(c.role, c.round, c.provider) for c in calls] == [("critic", 0, "openai")]
    assert all(c.call_error and "500" in c.call_error for c in calls)
    report = next(tmp_path.rglob("report.md")).read_text()
    assert "rules reject: sensitive_code" in report, "the report's trials table shows the verdict"
