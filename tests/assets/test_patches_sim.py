"""Source patches through the whole graph on a sim tree: the operator's patches first in the plan and the
library's offered one after them, REJECTED before any launch, a patch that wins on throughput
but changes outputs reverted with accuracy_drop, an operator patch kept and committed on
hyperloom/<target>, and accepted_patches, the branch and the report in agreement, the
operator's checkout untouched. The winning patches win by multiples, so machine load cannot
turn them into reverts."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from hyperloom_assets.resources.trees.git import git_out
from tests.conftest import SIM_MODEL
from tests.graph_runs import run_job, trial_observations
from tests.trees import init_tree, make_patch, operator_state

ARGS = ["--gpu", "H100", "--time-scale", "20", "--max-num-seqs", "2"]
PERF, MODEL, ARGS_FILE = ("hyperloom_assets/sim/perf_model.py", "hyperloom_assets/sim/synthetic_model.py",
                          "hyperloom_assets/sim/engine_args.py")
CAP = ("max_seqs=args.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS,", "max_seqs=max(args.max_num_seqs or 0, 64),")


def test_patches_are_rejected_gated_kept_and_committed(tmp_path, host, store) -> None:
    tree = init_tree("sim", tmp_path / "operator")
    stale = make_patch(tree, {PERF: ("BW_EFFICIENCY = 0.80", "BW_EFFICIENCY = 0.81")}, tmp_path / "stale.patch")
    stale.write_text(stale.read_text().replace("-BW_EFFICIENCY = 0.80", "-BW_EFFICIENCY = 0.70"))
    # Both lift the operator's cap of 2 inside the sim (about 4x at concurrency 16); one also scrambles outputs.
    wrong = make_patch(tree, {ARGS_FILE: CAP, MODEL: ("LOGIT_PERTURBATION = 0.0", "LOGIT_PERTURBATION = 1.0")},
                       tmp_path / "fast-but-wrong.patch")
    right = make_patch(tree, {ARGS_FILE: CAP, PERF: ("BW_EFFICIENCY = 0.80", "BW_EFFICIENCY = 0.90")},
                       tmp_path / "fast-and-right.patch")
    (tree / "hyperloom_assets" / "sim" / "NOTES.txt").write_text("the operator's, uncommitted\n")
    before = operator_state(tree)
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "sim-tree.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "framework_tree": str(tree), "server_args": ARGS,
        "patches": [str(stale), str(wrong), str(right)],
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
        "repeats": 2, "max_trials": 4, "target_gain_pct": 10000, "sweep_concurrencies": [16]}))
    result, meta = run_job(targets, "sim-tree", host, store,
                           ("baseline", "candidates", "accepted_patches", "optimization_stack", "final_report",
                            "concurrency_sweep"))
    baseline, accepted, stack, report = (meta[a] for a in ("baseline", "accepted_patches", "optimization_stack",
                                                           "final_report"))
    by_name = trial_observations(result)
    plan = [row.data["name"] for row in meta["candidates"]["plan"].records]
    assert plan[:3] == ["patch stale", "patch fast-but-wrong", "patch fast-and-right"], "the operator's first"
    assert "patch fused-decode-kernel" in plan[3:] and "patch perturb-logits" not in plan, "offered, not `offer: no`"
    assert Path(baseline["engine_path"]).is_relative_to(host.state_path()), "the run's worktree, not the venv"
    assert baseline["framework_tree_commit"] == before[0]
    assert baseline["unserved_files"] == ["hyperloom_assets/sim/NOTES.txt"], "served at HEAD, without it"
    assert by_name["patch stale"]["outcome"] == "REJECTED"
    assert "patch does not apply" in by_name["patch stale"]["reason"]
    wrong_trial = by_name["patch fast-but-wrong"]
    assert wrong_trial["outcome"] == "REVERT" and wrong_trial["reason"].startswith("accuracy_drop:"), wrong_trial
    # The gate's sides answered on servers already up: the baseline's and each patch's own trial launch.
    assert "accuracy" not in report["launches_by_step"], report["launches_by_step"]
    assert by_name["patch fast-and-right"]["outcome"] == "KEEP", by_name["patch fast-and-right"]
    assert by_name["patch fast-and-right"]["provenance"] == "operator"
    assert all(by_name[name]["critic"].startswith("rules approve: the patch touches ") for name in by_name
               if name.startswith("patch ")), "every patch met the critic before git apply, the stale one too"
    assert [name for name in by_name if name.startswith("patch ")] == ["patch stale", "patch fast-but-wrong",
                                                                       "patch fast-and-right"], "each tried once"

    records = accepted["patches"]
    assert accepted["count"] == 1 and records[0]["name"] == "fast-and-right"
    assert accepted["branch"] == "hyperloom/sim-tree"
    branch_log = git_out(tree, "log", "--format=%H %s", f"{before[0]}..hyperloom/sim-tree").splitlines()
    assert [line.split()[0] for line in branch_log] == [records[0]["commit"]] == [accepted["tree_commit"]]
    assert "hyperloom KEEP patch fast-and-right" in branch_log[0]
    # The KEEP commit says which trial it was and what it won: its fingerprint, gain and interval.
    kept, body = records[0], git_out(tree, "log", "-1", "--format=%B", records[0]["commit"])
    assert f"fingerprint {kept['fingerprint']}" in body and f"gain {kept['gain_pct']:+.2f}%" in body, body
    assert f"interval [{kept['ci_low_pct']:+.2f}%, {kept['ci_high_pct']:+.2f}%]" in body, body
    assert stack["tree_commit"] == accepted["tree_commit"] and stack["patches"] == ["fast-and-right"]
    assert stack["validated_gain_pct"] > 100, "validated from the tree at tree_commit, not the venv's engine"
    # The only keeper is the patch, so a sweep that served the stack's flags from the base commit
    # would read the baseline's numbers: the stack's rung is faster only when served at tree_commit.
    rungs = {row.data["config"]: row.data["output_throughput"] for row in meta["concurrency_sweep"]["table"].records}
    assert rungs["stack"] > 2 * rungs["baseline"], rungs
    markdown = Path(report["report_path"]).read_text()
    assert f"checkout {accepted['tree_commit']}" in markdown and "REJECTED" in markdown
    assert "were not served (the run serves HEAD): `hyperloom_assets/sim/NOTES.txt`" in markdown
    report_json = json.loads(Path(report["report_path"]).with_name("report.json").read_text())
    assert report_json["source_tree"]["patches"][0]["commit"] == records[0]["commit"]
    assert operator_state(tree) == before, "the operator's checkout is untouched"
