"""The run's own worktree of the operator's checkout: what every launch of a tree target serves.

A run never edits the operator's checkout. It works in a git worktree on branch
`hyperloom/<target>`, under the host's state folder, created from the operator's HEAD
when the run starts (uncommitted changes are not served; `unserved` names them). A
launch checks out a commit there (detached) and applies at most one patch on top; a
kept patch is committed on the branch, so the branch head is always the running best.
A worktree left by a killed run is taken over by the next: reset, cleaned, re-pointed.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hyperloom_assets.core.patches.patch import touched_files
from hyperloom_assets.core.patches.run_tree import RunTree, branch_name, worktree_path
from hyperloom_assets.resources.trees.git import GitError, dirty_files, git, git_out, head_commit


class PatchRejected(RuntimeError):
    """`git apply --check` refused a patch; the message is git's."""


def _registered(operator_tree: Path, path: Path) -> bool:
    listing = git_out(operator_tree, "worktree", "list", "--porcelain")
    return any(line == f"worktree {path}" for line in listing.splitlines())


def _clear_stale_lock(path: Path) -> None:
    # A run killed inside a git command leaves its index lock; nothing else writes here.
    gitdir = Path(git_out(path, "rev-parse", "--absolute-git-dir"))
    (gitdir / "index.lock").unlink(missing_ok=True)


def open_run_tree(operator_tree: Path, state_dir: Path, target: str) -> RunTree:
    """Create, or take over, the run's worktree at the operator's HEAD on `hyperloom/<target>`."""
    operator_tree = Path(operator_tree).resolve()
    head, unserved = head_commit(operator_tree), dirty_files(operator_tree)
    path, branch = worktree_path(state_dir, target).resolve(), branch_name(target)
    git(operator_tree, "worktree", "prune")
    if path.exists() and _registered(operator_tree, path):
        _clear_stale_lock(path)
        git(path, "checkout", "-q", "-f", "-B", branch, head)
        git(path, "clean", "-q", "-fd")  # ignored files (bytecode) stay: the next import is faster
    else:
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        git(operator_tree, "worktree", "add", "-q", "-f", "-B", branch, str(path), head)
    return RunTree(operator_tree=operator_tree, worktree=path, branch=branch, base_commit=head, unserved=unserved)


def reset_branch(tree: RunTree, commit: str) -> None:
    """Point the run's branch at `commit` and check it out clean (a step that starts over)."""
    _clear_stale_lock(tree.worktree)
    drop_bytecode(tree.worktree, _changed_files(tree, commit))
    git(tree.worktree, "checkout", "-q", "-f", "-B", tree.branch, commit)
    git(tree.worktree, "clean", "-q", "-fd")


def branch_head(tree: RunTree) -> str:
    return git_out(tree.worktree, "rev-parse", tree.branch)


@contextmanager
def _index_at(tree: RunTree, commit: str) -> Iterator[dict[str, str]]:
    """An index of its own holding `commit` (the env that points git at it): patches are checked
    and committed there, so the worktree, which servers may be serving, is never touched."""
    with tempfile.TemporaryDirectory(prefix="hyperloom-index-") as folder:
        env = {"GIT_INDEX_FILE": str(Path(folder) / "index")}
        git(tree.worktree, "read-tree", commit, env=env)
        yield env


def _apply_to_index(tree: RunTree, env: dict[str, str], patch_text: str, *flags: str) -> None:
    done = git(tree.worktree, "apply", "--cached", *flags, "-", input_text=patch_text, check=False, env=env)
    if done.returncode != 0:
        raise PatchRejected((done.stderr or done.stdout).strip() or f"git apply exited {done.returncode}")


def check_applies(tree: RunTree, commit: str, patch_text: str) -> None:
    """`git apply --check` of a patch on `commit`; PatchRejected carries git's message."""
    with _index_at(tree, commit) as env:
        _apply_to_index(tree, env, patch_text, "--check")


def _changed_files(tree: RunTree, commit: str) -> list[str]:
    """Files that differ between what the worktree holds now and `commit`."""
    dirty = [line[3:] for line in git(tree.worktree, "status", "--porcelain=v1").stdout.splitlines() if line.strip()]
    return dirty + git_out(tree.worktree, "diff", "--name-only", "HEAD", commit).splitlines()


def drop_bytecode(worktree: Path, files: list[str]) -> None:
    # Python trusts a .pyc whose recorded source mtime (whole seconds) and size match: a
    # same-size edit within the second of the last compile would serve the old code.
    for name in files:
        source = worktree / name
        if source.suffix == ".py":
            for cached in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
                cached.unlink(missing_ok=True)


def checkout(tree: RunTree, commit: str, patch_text: str | None = None) -> Path:
    """The worktree at `commit` (detached, clean), with the patch applied uncommitted; its path."""
    _clear_stale_lock(tree.worktree)
    drop_bytecode(tree.worktree, _changed_files(tree, commit))
    git(tree.worktree, "checkout", "-q", "-f", "--detach", commit)
    git(tree.worktree, "clean", "-q", "-fd")
    if patch_text is not None:
        done = git(tree.worktree, "apply", "-", input_text=patch_text, check=False)
        if done.returncode != 0:
            raise PatchRejected((done.stderr or done.stdout).strip())
        drop_bytecode(tree.worktree, touched_files(patch_text))
    return tree.worktree


def commit_patch(tree: RunTree, patch_text: str, message: str) -> str:
    """Commit a kept patch on the branch head, the worktree untouched (a launch checks the new head
    out when it serves it); the new head."""
    head = branch_head(tree)
    with _index_at(tree, head) as env:
        _apply_to_index(tree, env, patch_text)
        snapshot = git_out(tree.worktree, "write-tree", env=env)
    commit = git_out(tree.worktree, "commit-tree", snapshot, "-p", head, "-m", message)
    git(tree.worktree, "update-ref", f"refs/heads/{tree.branch}", commit, head)
    return commit


def rest_on_branch(tree: RunTree) -> None:
    """Leave the worktree clean on the branch head (after a trial that was not kept)."""
    try:
        reset_branch(tree, branch_head(tree))
    except GitError:
        pass  # the next run takes the worktree over whatever its state


def served_at(tree: RunTree | None, commit: str | None) -> Path | None:
    """Check out `commit` for the next launch (None without a tree): validation, sweep, release checks."""
    if tree is None or commit is None:
        return None
    return checkout(tree, commit)
