"""Source patches on real vLLM CPU, served from a tree made by `framework-tree init`.

One optimize run and one baseline afterwards, shared by every assertion of the issue's
"Done when": an operator patch that slows every step is applied, measured and stopped
(overtime) or reverted on its merits; a patch that wins on throughput but corrupts outputs is reverted with
accuracy_drop; accepted_patches, the branch and the report agree; the operator's
checkout is untouched; and a slowdown committed to the tree lowers the next measured
baseline. Kept small for CI: 16 prompts of 16 tokens, 2 repeats, no profile (its vLLM
launch is tests/real_engine/test_profile_vllm.py's), the sweep at concurrency 1 only, and
earlier runs' launch noise in the store so each trial decides at its first look (the
winner's second look and its best's relaunches are the sim's test). Both patches are
decisive, so the run's launches do not depend on this machine's luck: a kept patch's
commit, the stack validated from it and the report's checkout of it are the sim's test
(tests/assets/test_patches_sim.py), since on vLLM they would cost the stack's validation,
four more launches. The library's patches are checked to apply to a fresh vLLM tree by
tests/sim/test_tree_serving.py and measured by benchmarks/patch_effect.py. The baseline
after the slowdown goes through `dagster job execute -j baseline_job`, the command line's
path on vLLM.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.support.job_runs import execute, instance_of
from hyperloom_assets.assets.profile import PROFILE_OFF
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.trees.git import git_out
from tests.conftest import VLLM_CPU_ENV, earlier_launch_noise
from tests.graph_runs import latest_metadata, run_job, trial_observations
from tests.trees import commit_edit, init_tree, make_patch, operator_state

pytestmark = [pytest.mark.real_engine, pytest.mark.cli]

LOGITS = "vllm/model_executor/layers/logits_processor.py"
ARG_UTILS = "vllm/engine/arg_utils.py"


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


# In the logits processor, which every model step calls once, not in llama.py: vLLM caches what
# it inspects of a model class under a hash of that model's file, one entry per class, so each
# launch that alternates an edited llama.py with the original one pays a subprocess of about
# 10 s of imports here to inspect it again.
SLOW_STEP = ("        if self.logits_as_input:\n",
             "        import time; time.sleep(0.02)  # a slowdown (the critic refuses any __import__)\n"
             "        if self.logits_as_input:\n")


def test_patches_on_vllm_cpu_are_gated_measured_committed_and_a_slowdown_shows(tmp_path, tiny_model, host,
                                                                               store, home) -> None:
    tree = init_tree("vllm", tmp_path / "vllm-tree")
    wrong = fast_but_wrong(tree, tmp_path / "fast-but-wrong.patch")
    slow = make_patch(tree, {LOGITS: SLOW_STEP}, tmp_path / "slow-steps.patch")  # 20 ms more per model step
    before = operator_state(tree)
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "tiny-tree.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": str(tiny_model), "framework_tree": str(tree),
        "server_args": ["--max-num-seqs", "2", "--enforce-eager", "--max-model-len", "256"],
        # The loser first: decided on its first launch, before the winner's.
        "env": VLLM_CPU_ENV, "patches": [str(slow), str(wrong)], "profile": False,
        "workload": {"kind": "random", "isl": 32, "osl": 16, "concurrency": 16, "num_prompts": 16},
        "repeats": 2, "max_trials": 2, "target_gain_pct": 1000, "sweep_concurrencies": [1],
        # The gate's prompts are asked of the baseline's server (its cap of 2 answers them two at a
        # time) and of the wrong patch's: 8, not the default 32. The perturbed logits leave 4 of 32
        # prompts agreeing (12%), so at most 4 of 8 can (50%), far under the 90% a pass needs.
        "accuracy": {"kind": "agreement", "prompts": 8}}))
    earlier_launch_noise(store, "tiny-tree", "local", "vllm", tiny_model, tree)  # each trial decides at its first look
    result, meta = run_job(targets, "tiny-tree", host, store,
                           ("baseline", "profile", "trials", "accepted_patches", "optimization_stack", "final_report"))
    trials = trial_observations(result)
    baseline, accepted, report = meta["baseline"], meta["accepted_patches"], meta["final_report"]

    assert Path(baseline["engine_path"]).is_relative_to(host.state_path()), "the run's worktree, not the venv"
    assert baseline["framework_tree_commit"] == before[0]
    wrong_trial = trials["patch fast-but-wrong"]
    assert wrong_trial["outcome"] == "REVERT" and wrong_trial["reason"].startswith("accuracy_drop:"), wrong_trial
    assert "accuracy" not in report["launches_by_step"], "the gate asked the baseline's and the trial's servers"
    slow_trial = trials["patch slow-steps"]
    # Stopped once its measuring passes twice the baseline's (20 ms a step is 5 s more over the
    # warm-up alone), or, on a machine so loaded that the baseline's own rounds take longer, reverted.
    assert slow_trial["outcome"] in ("KILLED_OVERTIME", "REVERT") and slow_trial["provenance"] == "operator"
    assert "accuracy" not in slow_trial["reason"], slow_trial
    print(f"slow-steps: {slow_trial['outcome']} ({slow_trial['reason']})")
    assert meta["profile"]["reason"] == PROFILE_OFF and "profile" not in report["launches_by_step"]

    assert meta["trials"]["launch_noise_history_dof"] == 10, "earlier runs' launch noise reached the climb"
    assert accepted["count"] == 0 and accepted["patches"] == []
    assert git_out(tree, "rev-list", f"{before[0]}..hyperloom/tiny-tree").split() == [], "nothing kept on the branch"
    assert accepted["tree_commit"] == git_out(tree, "rev-parse", "hyperloom/tiny-tree")
    report_json = json.loads(Path(report["report_path"]).with_name("report.json").read_text())
    assert report_json["source_tree"]["tree_commit"] == accepted["tree_commit"]
    assert f"checkout {accepted['tree_commit']}" in Path(report["report_path"]).read_text()
    assert operator_state(tree) == before, "the operator's checkout is untouched"

    commit_edit(tree, LOGITS, *SLOW_STEP, "slow every model step by 20 ms")
    done = execute("baseline_job", "tiny-tree", home, targets, timeout_s=900)
    assert done.returncode == 0, done.stderr[-4000:]
    with instance_of(home) as instance:
        slowed = latest_metadata(instance, "baseline", "tiny-tree")
    print(f"baseline {baseline['output_throughput']:.1f} -> {slowed['output_throughput']:.1f} tok/s")
    assert slowed["framework_tree_commit"] == git_out(tree, "rev-parse", "HEAD")
    assert slowed["output_throughput"] < 0.8 * baseline["output_throughput"]
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "nothing left running"
