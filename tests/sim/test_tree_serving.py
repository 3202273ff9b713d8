"""Serving from a tree for real: `framework-tree init`, the server's own report of its engine's
file, a commit that changes what is served, and the run's worktree beside the operator's checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.core.patches.library import library_patch, library_patches
from hyperloom_assets.resources.hosts.engine_origin import check_tree_imports
from hyperloom_assets.resources.hosts.process_group import MARKER_ENV, read_pidfiles
from hyperloom_assets.resources.trees.git import git, git_out
from hyperloom_assets.resources.trees.workspace import (
    PatchRejected,
    check_applies,
    checkout,
    commit_patch,
    open_run_tree,
)
from tests.sim.conftest import LLAMA_8B
from tests.trees import init_tree, operator_state

SIM_ARGS = ["--gpu", "H100", "--time-scale", "50"]


def greedy_tokens(base_url: str) -> list[str]:
    body = json.dumps({"model": str(LLAMA_8B), "prompt": "one two three", "max_tokens": 6, "temperature": 0,
                       "logprobs": 1, "return_tokens_as_token_ids": True}).encode()
    request = urllib.request.Request(f"{base_url}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())["choices"][0]["logprobs"]["tokens"]


def serve_tokens(host, tree: Path, folder: Path) -> tuple[str | None, list[str]]:
    spec = ServerSpec(engine="sim", model=LLAMA_8B, server_args=SIM_ARGS, framework_tree=tree)
    with host.serve(spec, folder) as launch:
        return launch.engine_path, greedy_tokens(launch.base_url)


def test_the_server_runs_the_trees_code_and_a_commit_changes_what_is_served(tmp_path, host) -> None:
    tree = init_tree("sim", tmp_path / "sim-tree")
    assert git_out(tree, "status", "--porcelain") == "" and git_out(tree, "rev-list", "--count", "HEAD") == "1"
    path, before = serve_tokens(host, tree, tmp_path / "run-1")
    assert path == str(tree / "hyperloom_assets" / "__init__.py")
    patch = library_patch(engine_for("sim"), "perturb-logits")
    git(tree, "apply", "--index", "-", input_text=patch.text)
    git(tree, "commit", "-qm", "perturb the synthetic model")
    _, after = serve_tokens(host, tree, tmp_path / "run-2")
    assert after != before, "the committed change is what the server runs"


# What the run's environment holds and a served patch must never see: the LLM providers'
# keys, the store's and the broker's secrets, the user's SSH agent, and credentials under a
# prefix a server does inherit (the platform's HF_, the engine's own).
RUN_CREDENTIALS = {"ANTHROPIC_API_KEY": "sk-ant-canary1", "OPENAI_API_KEY": "sk-canary2", "PGPASSWORD": "canary3",
                   "HYPERLOOM_POSTGRES_PASSWORD": "canary4", "HYPERLOOM_CELERY_BROKER": "redis://:canary5@broker:6379/0",
                   "SSH_AUTH_SOCK": "/tmp/ssh-canary6/agent.1", "HF_TOKEN": "hf_canary7", "VLLM_API_KEY": "canary8",
                   "HYPERLOOM_SIM_API_TOKEN": "canary9"}
ENV_DUMP = "hyperloom-test-environment: "


def test_a_served_patch_that_prints_its_environment_finds_no_credential_of_the_run(tmp_path, host, monkeypatch) -> None:
    tree = init_tree("sim", tmp_path / "sim-tree")
    (tree / "hyperloom_assets" / "__init__.py").write_text(
        f"import json, os, sys\nsys.stderr.write({ENV_DUMP!r} + json.dumps(dict(os.environ)) + '\\n')\n")
    git(tree, "commit", "-qam", "a proposal that reads its environment")
    for name, value in RUN_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    spec = ServerSpec(engine="sim", model=LLAMA_8B, server_args=SIM_ARGS, framework_tree=tree,
                      env={"TARGET_KNOB": "from-the-target"})
    with host.serve(spec, tmp_path / "run") as launch:
        (_, record), = read_pidfiles(host.pid_dir())
        dumps = [line for line in launch.log_path.read_text().splitlines() if line.startswith(ENV_DUMP)]
    assert dumps, "the patch ran in the server"
    served = json.loads(dumps[0][len(ENV_DUMP):])
    assert not set(served) & set(RUN_CREDENTIALS), sorted(set(served) & set(RUN_CREDENTIALS))
    assert not [name for name, value in served.items() if any(v in value for v in RUN_CREDENTIALS.values())]
    assert served["TARGET_KNOB"] == "from-the-target" and served["PATH"] == os.environ["PATH"]
    assert served[MARKER_ENV] == record.marker, "the reaper's marker reaches the server"


def test_a_tree_whose_engine_does_not_import_or_is_not_there_fails_saying_so(tmp_path, host) -> None:
    sim = engine_for("sim")
    broken = tmp_path / "broken"
    (broken / "hyperloom_assets").mkdir(parents=True)
    (broken / "hyperloom_assets" / "__init__.py").write_text("import no_such_module_here\n")
    with pytest.raises(ServerError, match="does not import: ModuleNotFoundError: No module named 'no_such_module_here'"):
        check_tree_imports(sim, broken, Path(sys.executable), {})
    elsewhere = tmp_path / "elsewhere"  # a repository without the package: the venv's would be imported
    elsewhere.mkdir()
    with pytest.raises(ServerError, match="preflight: .*imported 'hyperloom_assets' from .*, not from the tree"):
        check_tree_imports(sim, elsewhere, Path(sys.executable), {})
    spec = ServerSpec(engine="sim", model=LLAMA_8B, server_args=SIM_ARGS, framework_tree=elsewhere)
    with pytest.raises(ServerError, match="engine_not_from_tree: the server imported 'hyperloom_assets' from "):
        with host.serve(spec, tmp_path / "run"):
            pass


def test_every_library_patch_applies_to_a_fresh_tree_of_its_engine(tmp_path) -> None:
    for engine in ("sim", "vllm"):
        tree = init_tree(engine, tmp_path / engine)
        for patch in library_patches(engine_for(engine)):
            done = git(tree, "apply", "--check", "-", input_text=patch.text, check=False)
            assert done.returncode == 0, f"{patch.path}: {done.stderr}"


def test_the_run_worktree_leaves_the_operators_checkout_as_it_was_and_recovers_a_killed_run(tmp_path) -> None:
    tree = init_tree("sim", tmp_path / "operator")
    (tree / "hyperloom_assets" / "sim" / "notes.txt").write_text("mine, uncommitted\n")
    before = operator_state(tree)
    state = tmp_path / "state"
    run = open_run_tree(tree, state, "t")
    assert run.unserved == ["hyperloom_assets/sim/notes.txt"] and run.base_commit == before[0]
    patch = library_patch(engine_for("sim"), "fused-decode-kernel")
    kept = commit_patch(run, patch.text, "KEEP fused-decode-kernel")
    assert git_out(tree, "log", "--format=%s", "-1", "hyperloom/t") == "KEEP fused-decode-kernel"
    with pytest.raises(PatchRejected, match="patch does not apply"):
        check_applies(run, kept, patch.text)  # already applied on the running best
    # A killed run leaves a patch half-applied and git's lock behind; the next run takes over.
    checkout(run, kept, library_patch(engine_for("sim"), "perturb-logits").text)
    gitdir = Path(git_out(run.worktree, "rev-parse", "--absolute-git-dir"))
    (gitdir / "index.lock").write_text("")
    again = open_run_tree(tree, state, "t")
    assert git_out(again.worktree, "status", "--porcelain") == ""
    assert git_out(again.worktree, "rev-parse", "HEAD") == before[0] == git_out(tree, "rev-parse", "hyperloom/t")
    assert operator_state(tree) == before, "the operator's HEAD, branch and status are untouched"


def test_a_same_size_edit_in_the_same_second_is_not_served_from_stale_bytecode(tmp_path) -> None:
    run = open_run_tree(init_tree("sim", tmp_path / "operator"), tmp_path / "state", "t")
    source = run.worktree / "hyperloom_assets" / "sim" / "perf_model.py"
    read = [sys.executable, "-c", "import hyperloom_assets.sim.perf_model as m; print(m.BW_EFFICIENCY)"]
    env = {"PYTHONPATH": str(run.worktree), "PYTHONSAFEPATH": "1", "PATH": "/usr/bin:/bin"}
    assert subprocess.run(read, env=env, capture_output=True, text=True).stdout.strip() == "0.8"  # writes the .pyc
    stamp = source.stat().st_mtime
    checkout(run, run.base_commit, library_patch(engine_for("sim"), "fused-decode-kernel").text)
    os.utime(source, (stamp, stamp))  # 0.80 -> 0.92 keeps the size; now the mtime too, as within one second
    assert subprocess.run(read, env=env, capture_output=True, text=True).stdout.strip() == "0.92"
