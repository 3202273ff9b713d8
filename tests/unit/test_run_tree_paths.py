"""A run's worktree is `state/trees/<target>` and nothing else: no name escapes that folder, and
only a worktree the project made there is ever deleted (resources/trees/workspace.py). Real git."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperloom_assets.core.patches.run_tree import worktree_path
from hyperloom_assets.resources.hosts.agent import _clean
from hyperloom_assets.resources.trees.git import git
from hyperloom_assets.resources.trees.workspace import TreeRefused, open_run_tree


def operator_tree(folder: Path) -> Path:
    folder.mkdir(parents=True)
    git(folder, "init", "-q")
    (folder / "model.py").write_text("SPEED = 1\n")
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "base")
    return folder


def state_with_files(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A state folder holding what a run must never lose: the store, a pidfile, a run folder."""
    state = tmp_path / "state"
    kept = [state / "results.db", state / "pids" / "srv.json", state / "runs" / "t" / "r1" / "baseline" / "log"]
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("keep")
    return state, kept


@pytest.mark.parametrize("name", ["..", ".", "", "../runs", "a/b", "/etc", "-x", ".hidden", "t\n", "x" * 64])
def test_no_target_name_reaches_outside_the_trees_folder(tmp_path, name) -> None:
    state, kept = state_with_files(tmp_path)
    with pytest.raises(ValueError, match="a target name of letters"):
        worktree_path(state, name)
    with pytest.raises(TreeRefused, match="a target name of letters"):
        open_run_tree(operator_tree(tmp_path / "operator"), state, name)
    assert all(path.read_text() == "keep" for path in kept)
    for safe in ("t", "A-1_b", "x" * 63):
        assert worktree_path(state, safe).parent == state / "trees"


def test_a_stale_path_the_project_did_not_make_is_left_alone(tmp_path) -> None:
    state, _ = state_with_files(tmp_path)
    theirs = state / "trees" / "t"
    theirs.mkdir(parents=True)
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(TreeRefused, match="nothing was deleted: move it away"):
        open_run_tree(operator_tree(tmp_path / "operator"), state, "t")
    assert (theirs / "notes.txt").read_text() == "mine"


def test_a_link_at_the_worktree_path_is_not_followed(tmp_path) -> None:
    state, kept = state_with_files(tmp_path)
    (state / "trees").mkdir()
    (state / "trees" / "t").symlink_to(state)
    with pytest.raises(TreeRefused, match="is a symbolic link"):
        open_run_tree(operator_tree(tmp_path / "operator"), state, "t")
    assert all(path.read_text() == "keep" for path in kept)


def test_its_own_stale_worktree_is_replaced_but_not_a_folder_put_in_its_place(tmp_path) -> None:
    state, kept = state_with_files(tmp_path)
    first, second = operator_tree(tmp_path / "first"), operator_tree(tmp_path / "second")
    made = open_run_tree(first, state, "t")
    # The target now names another checkout: the old worktree is ours but not `second`'s, so it goes.
    again = open_run_tree(second, state, "t")
    assert again.worktree == made.worktree and again.operator_tree == second.resolve()
    # Someone moves it away and leaves a folder of the same name: the mark names another folder.
    git(second, "worktree", "remove", "--force", str(again.worktree))
    again.worktree.mkdir()
    (again.worktree / "notes.txt").write_text("mine")
    with pytest.raises(TreeRefused, match="does not name it"):
        open_run_tree(first, state, "t")
    assert (again.worktree / "notes.txt").read_text() == "mine"
    assert all(path.read_text() == "keep" for path in kept)


def test_a_host_deletes_only_run_folders_strictly_inside_its_runs_folder(tmp_path) -> None:
    runs, kept = tmp_path / "workdir" / "runs", tmp_path / "workdir" / "pids"
    (runs / "t" / "r1" / "baseline").mkdir(parents=True)
    kept.mkdir()
    for folder in (runs / ".." / "pids", runs, tmp_path):
        with pytest.raises(ValueError, match="refusing to delete"):
            _clean({"folder": str(folder), "root": str(runs)})
    assert kept.is_dir() and runs.is_dir()
    _clean({"folder": str(runs / "t" / "r1" / "baseline"), "root": str(runs)})
    assert not (runs / "t").exists() and runs.is_dir(), "the step's folder goes, and its run's and target's once empty"
