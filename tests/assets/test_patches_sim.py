"""Source patches through the whole graph on a sim tree: REJECTED before any launch, a patch that
wins on throughput but changes outputs reverted with accuracy_drop, a library patch kept and
committed on hyperloom/<target>, and accepted_patches, the branch and the report in agreement,
the operator's checkout untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from hyperloom_assets.resources.trees.git import git, git_out
from tests.conftest import SIM_MODEL
from tests.graph_runs import run_job, trial_observations

ARGS = ["--gpu", "H100", "--time-scale", "5", "--max-num-seqs", "64"]


def make_patch(tree: Path, edits: dict[str, tuple[str, str]], path: Path) -> Path:
    """A diff of `tree` with the given (old, new) line edits, written to `path`; the tree is restored."""
    for name, (old, new) in edits.items():
        file = tree / name
        file.write_text(file.read_text().replace(old, new))
    path.write_text("# changes: a test's operator patch\n" + git_out(tree, "diff") + "\n")
    git(tree, "checkout", "-q", ".")
    return path


def test_patches_are_rejected_gated_kept_and_committed(tmp_path, host, store) -> None:
    tree = tmp_path / "operator"
    subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "framework-tree", "init", "--engine", "sim",
                    str(tree)], check=True, capture_output=True)
    perf, model = "hyperloom_assets/sim/perf_model.py", "hyperloom_assets/sim/synthetic_model.py"
    stale = make_patch(tree, {perf: ("BW_EFFICIENCY = 0.80", "BW_EFFICIENCY = 0.81")}, tmp_path / "stale.patch")
    stale.write_text(stale.read_text().replace("-BW_EFFICIENCY = 0.80", "-BW_EFFICIENCY = 0.70"))
    corrupt = make_patch(tree, {perf: ("BW_EFFICIENCY = 0.80", "BW_EFFICIENCY = 1.2"),
                                model: ("LOGIT_PERTURBATION = 0.0", "LOGIT_PERTURBATION = 1.0")},
                         tmp_path / "fast-but-wrong.patch")
    before = [git_out(tree, *a) for a in (("rev-parse", "HEAD"), ("branch", "--show-current"), ("status", "--porcelain"))]
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "sim-tree.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "framework_tree": str(tree), "server_args": ARGS,
        "patches": [str(stale), str(corrupt)],
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
        "repeats": 2, "max_trials": 4, "target_gain_pct": 1000, "sweep_concurrencies": [16]}))
    result, meta = run_job(targets, "sim-tree", host, store,
                           ("baseline", "accepted_patches", "optimization_stack", "final_report"))
    baseline, accepted, stack, report = (meta[a] for a in ("baseline", "accepted_patches", "optimization_stack",
                                                           "final_report"))
    by_name = trial_observations(result)
    assert baseline["engine_path"].startswith(str(host.state_path()))  # the run's worktree, not the venv
    assert baseline["framework_tree_commit"] == before[0]

    rejected = by_name["patch stale"]
    assert rejected["outcome"] == "REJECTED" and "patch does not apply" in rejected["reason"]
    wrong = by_name["patch fast-but-wrong"]
    assert wrong["outcome"] == "REVERT" and wrong["reason"].startswith("accuracy_drop:")
    assert wrong["gain_pct"] > 1, "it won on throughput before the gate reverted it"
    kept = by_name["patch fused-decode-kernel"]
    assert kept["outcome"] == "KEEP" and kept["provenance"] == "library"

    records = accepted["patches"]
    assert accepted["count"] == 1 and records[0]["name"] == "fused-decode-kernel"
    assert accepted["branch"] == "hyperloom/sim-tree"
    branch_log = git_out(tree, "log", "--format=%H %s", f"{before[0]}..hyperloom/sim-tree").splitlines()
    assert [line.split()[0] for line in branch_log] == [records[0]["commit"]] == [accepted["tree_commit"]]
    assert "hyperloom KEEP patch fused-decode-kernel" in branch_log[0]
    assert stack["tree_commit"] == accepted["tree_commit"] and stack["patches"] == ["fused-decode-kernel"]
    markdown = Path(report["report_path"]).read_text()
    assert f"checkout {accepted['tree_commit']}" in markdown and "REJECTED" in markdown
    report_json = json.loads(Path(report["report_path"]).with_name("report.json").read_text())
    assert report_json["source_tree"]["patches"][0]["commit"] == records[0]["commit"]
    after = [git_out(tree, *a) for a in (("rev-parse", "HEAD"), ("branch", "--show-current"), ("status", "--porcelain"))]
    assert after == before, "the operator's checkout is untouched"
