"""The run's one worktree under launches served at once (resources/trees/holds.py), and patches
checked and committed without touching it (resources/trees/workspace.py): real git, real threads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hyperloom_assets.resources.trees.git import git, git_out
from hyperloom_assets.resources.trees.holds import TreeHolds
from hyperloom_assets.resources.trees.workspace import PatchRejected, check_applies, commit_patch, open_run_tree

WAIT_S = 10


@pytest.fixture
def run_tree(tmp_path):
    operator = tmp_path / "operator"
    operator.mkdir()
    git(operator, "init", "-q")
    (operator / "model.py").write_text("SPEED = 1\n")
    git(operator, "add", ".")
    git(operator, "commit", "-qm", "base")
    (operator / "model.py").write_text("SPEED = 2\n")
    patch = git_out(operator, "diff") + "\n"
    git(operator, "checkout", "-q", ".")
    return open_run_tree(operator, tmp_path / "state", "t"), patch


class Launch(threading.Thread):
    """A launch that holds the worktree at a state until told to go, noting what it served."""

    def __init__(self, holds: TreeHolds, commit: str, patch: str | None = None):
        super().__init__(daemon=True)
        self.holds, self.commit, self.patch = holds, commit, patch
        self.entered, self.go = threading.Event(), threading.Event()
        self.served: list[str] = []

    def run(self) -> None:
        with self.holds.held(self.commit, self.patch) as tree:
            self.served.append((Path(tree) / "model.py").read_text())
            self.entered.set()
            assert self.go.wait(WAIT_S)
            self.served.append((Path(tree) / "model.py").read_text())


def test_one_state_is_shared_another_waits_until_none_serves_and_the_line_is_kept(run_tree) -> None:
    # Mutation: letting a launch of the served state join past one waiting for another state
    # (no `self.line[0] is ticket`) lets `third` in at once, and the patch's launch would wait
    # behind a stream of them.
    tree, patch = run_tree
    holds = TreeHolds(tree)
    first, patched, third = (Launch(holds, tree.base_commit), Launch(holds, tree.base_commit, patch),
                             Launch(holds, tree.base_commit))
    first.start()
    assert first.entered.wait(WAIT_S)
    patched.start()
    assert not patched.entered.wait(0.5), "another state waits while the worktree is served"
    third.start()
    assert not third.entered.wait(0.5), "the served state, but behind a launch that waits"
    first.go.set()
    assert patched.entered.wait(WAIT_S) and not third.entered.is_set()
    patched.go.set()
    assert third.entered.wait(WAIT_S)
    third.go.set()
    for launch in (first, patched, third):
        launch.join(WAIT_S)
    assert first.served == ["SPEED = 1\n"] * 2, "unchanged under its server for its whole life"
    assert patched.served == ["SPEED = 2\n"] * 2 and third.served == ["SPEED = 1\n"] * 2


def test_two_launches_of_one_state_serve_at_once(run_tree) -> None:
    tree, _ = run_tree
    holds = TreeHolds(tree)
    a, b = Launch(holds, tree.base_commit), Launch(holds, tree.base_commit)
    a.start()
    b.start()
    assert a.entered.wait(WAIT_S) and b.entered.wait(WAIT_S), "both in at once"
    a.go.set()
    b.go.set()
    a.join(WAIT_S)
    b.join(WAIT_S)


def test_a_patch_that_fails_to_apply_lets_the_next_launch_in(run_tree) -> None:
    tree, patch = run_tree
    holds = TreeHolds(tree)
    with pytest.raises(PatchRejected):
        with holds.held(tree.base_commit, patch.replace("SPEED = 1", "SPEED = 7")):
            pass
    with holds.held(tree.base_commit) as served:
        assert (served / "model.py").read_text() == "SPEED = 1\n"


def test_a_kept_patch_is_committed_and_checked_without_touching_the_served_worktree(run_tree) -> None:
    # Mutation: committing through the worktree (checkout, apply --index, commit) changes
    # model.py under the server that holds it.
    tree, patch = run_tree
    holds = TreeHolds(tree)
    with holds.held(tree.base_commit) as served:
        check_applies(tree, tree.base_commit, patch)
        kept = commit_patch(tree, patch, "KEEP speed")
        assert (served / "model.py").read_text() == "SPEED = 1\n"
        assert git_out(served, "status", "--porcelain") == "", "nothing staged or changed in the worktree"
    assert git_out(tree.worktree, "rev-parse", tree.branch) == kept
    assert git_out(tree.worktree, "show", f"{kept}:model.py") == "SPEED = 2"
    assert git_out(tree.worktree, "log", "-1", "--format=%s%n%P", kept).split() == ["KEEP", "speed", tree.base_commit]
    with pytest.raises(PatchRejected, match="patch does not apply"):
        check_applies(tree, kept, patch)  # already on the running best
    with holds.held(kept) as served:
        assert (served / "model.py").read_text() == "SPEED = 2\n"
