"""Source patches on real vLLM CPU, served from a tree made by `framework-tree init`.

One optimize run and one baseline afterwards, shared by every assertion of the issue's
"Done when": the library's CPU-worker patch (listed as an operator patch, so it is
tried whatever the plan's order) is applied, measured and kept or reverted on its
merits; a patch that wins on throughput but corrupts outputs is reverted with
accuracy_drop; accepted_patches, the branch and the report agree; the operator's
checkout is untouched; and a slowdown committed to the tree lowers the next measured
baseline. Kept small for CI: 16 prompts of 16 tokens, 2 repeats, the sweep at
concurrency 1 only, and earlier runs' launch noise in the store so a decisive trial
decides at its first look (the winner's second look and its best's relaunches are the
sim's test). The worker patch
is a loss here (benchmarks/patch_effect.py), so the branch normally stays at the base: a
kept patch's commit, the stack validated from it and the report's checkout of it are
the sim's test (tests/assets/test_patches_sim.py), since on vLLM they would cost the
stack's validation and sweep, four more launches. The baseline after the slowdown goes
through `dagster job execute -j baseline_job`, the command line's path on vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.support.job_runs import execute, instance_of
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.patches.library import library_patch
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.trees.git import git_out
from tests.conftest import earlier_launch_noise
from tests.graph_runs import latest_metadata, run_job, trial_observations
from tests.trees import commit_edit, init_tree, make_patch, operator_state

pytestmark = [pytest.mark.real_engine, pytest.mark.cli]

LOGITS = "vllm/model_executor/layers/logits_processor.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
LLAMA = "vllm/model_executor/models/llama.py"


def fast_but_wrong(tree: Path, path: Path) -> Path:
    """Lifts the operator's sequence cap inside vLLM (a sure win at concurrency 16) and perturbs the logits."""
    scaled = "            if self.scale != 1.0:\n                logits *= self.scale\n"
    perturbed = scaled + ("            vocab = torch.arange(logits.shape[-1], dtype=logits.dtype)\n"
                          "            logits = logits + torch.sin(vocab * 12.9898)\n")
    return make_patch(tree, {
        ARG_UTILS: ("            max_num_seqs=self.max_num_seqs,\n",
                    "            max_num_seqs=max(self.max_num_seqs or 0, 16),\n"),
        LOGITS: (scaled, perturbed),
    }, path)


def test_patches_on_vllm_cpu_are_gated_measured_committed_and_a_slowdown_shows(tmp_path, tiny_model, host,
                                                                               store, home) -> None:
    tree = init_tree("vllm", tmp_path / "vllm-tree")
    wrong = fast_but_wrong(tree, tmp_path / "fast-but-wrong.patch")
    worker = library_patch(engine_for("vllm"), "cpu-worker-all-cores")
    before = operator_state(tree)
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "tiny-tree.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": str(tiny_model), "framework_tree": str(tree),
        "server_args": ["--max-num-seqs", "2", "--enforce-eager", "--max-model-len", "256"],
        # The worker patch first: a loss is decided on its first launch, before the winner's.
        # vLLM's default process layout: with the engine core in the API server's process
        # (tests/conftest.py VLLM_CPU_ENV) the patch measured -2%, too small to decide in one look.
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "patches": [worker.path, str(wrong)],
        "workload": {"kind": "random", "isl": 32, "osl": 16, "concurrency": 16, "num_prompts": 16},
        "repeats": 2, "max_trials": 2, "target_gain_pct": 1000, "sweep_concurrencies": [1]}))
    earlier_launch_noise(store, "tiny-tree", "local", "vllm", tiny_model, tree)  # each trial decides at its first look
    result, meta = run_job(targets, "tiny-tree", host, store,
                           ("baseline", "trials", "accepted_patches", "optimization_stack", "final_report"))
    trials = trial_observations(result)
    baseline, accepted, report = meta["baseline"], meta["accepted_patches"], meta["final_report"]

    assert Path(baseline["engine_path"]).is_relative_to(host.state_path()), "the run's worktree, not the venv"
    assert baseline["framework_tree_commit"] == before[0]
    wrong_trial = trials["patch fast-but-wrong"]
    assert wrong_trial["outcome"] == "REVERT" and wrong_trial["reason"].startswith("accuracy_drop:"), wrong_trial
    assert "accuracy" not in report["launches_by_step"], "the gate asked the baseline's and the trial's servers"
    worker_trial = trials["patch cpu-worker-all-cores"]
    # Measured and judged on its merits: kept, reverted, or stopped for measuring past twice the baseline's time.
    assert worker_trial["outcome"] in ("KEEP", "REVERT", "KILLED_OVERTIME") and worker_trial["provenance"] == "operator"
    print(f"cpu-worker-all-cores: {worker_trial['outcome']} ({worker_trial['reason']})")

    assert meta["trials"]["launch_noise_history_dof"] == 10, "earlier runs' launch noise reached the climb"
    kept = worker_trial["outcome"] == "KEEP"
    assert accepted["count"] == int(kept)
    on_branch = git_out(tree, "rev-list", f"{before[0]}..hyperloom/tiny-tree").split()
    assert on_branch == [r["commit"] for r in accepted["patches"]]
    assert accepted["tree_commit"] == git_out(tree, "rev-parse", "hyperloom/tiny-tree")
    report_json = json.loads(Path(report["report_path"]).with_name("report.json").read_text())
    assert report_json["source_tree"]["tree_commit"] == accepted["tree_commit"]
    assert f"checkout {accepted['tree_commit']}" in Path(report["report_path"]).read_text()
    assert operator_state(tree) == before, "the operator's checkout is untouched"

    commit_edit(tree, LLAMA, "        for idx, layer in enumerate(\n",
                "        __import__('time').sleep(0.02)  # a committed slowdown\n        for idx, layer in enumerate(\n",
                "slow every model step by 20 ms")
    done = execute("baseline_job", "tiny-tree", home, targets, timeout_s=900)
    assert done.returncode == 0, done.stderr[-4000:]
    with instance_of(home) as instance:
        slowed = latest_metadata(instance, "baseline", "tiny-tree")
    print(f"baseline {baseline['output_throughput']:.1f} -> {slowed['output_throughput']:.1f} tok/s")
    assert slowed["framework_tree_commit"] == git_out(tree, "rev-parse", "HEAD")
    assert slowed["output_throughput"] < 0.8 * baseline["output_throughput"]
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "nothing left running"
