"""The run's own worktree of the operator's checkout: what every launch of a tree target serves.

A run never edits the operator's checkout. It works in a git worktree on branch
`hyperloom/<target>`, under the host's state folder, created from the operator's HEAD
when the run starts (uncommitted changes are not served; `unserved` names them). A
launch checks out a commit there (detached) and applies at most one patch on top; a
kept patch is committed on the branch, so the branch head is always the running best.
A worktree left by a killed run is taken over by the next: reset, cleaned, re-pointed.
Only the project's own worktrees are ever deleted: `trees/<target>` itself (never through a
link), and only when the mark beside it, written when the project made it, names that
very folder; anything else in the way is refused, and the refusal says what to move.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hyperloom_assets.core.patches.git_paths import refusal
from hyperloom_assets.core.proposer.code_regions import PYTHON_SUFFIXES
from hyperloom_assets.core.patches.run_tree import RunTree, branch_name, owner_mark, trees_dir, worktree_path
from hyperloom_assets.resources.trees.git import GitError, dirty_files, git, git_out, head_commit
from hyperloom_assets.resources.trees.patch_paths import PatchPathsError, git_patch_paths, with_commit_modes


class PatchRejected(RuntimeError):
    """`git apply --check` refused a patch (the message is git's), or git's account of its paths did."""


class TreeRefused(RuntimeError):
    """The run's worktree path is not the project's to make or take over; nothing was deleted."""


def _folder_identity(path: Path) -> dict:
    """What tells this worktree from a folder put in its place: where it is, its inode (which a new
    folder may reuse) and its `.git` file, naming the repository's record of it (which none has by chance)."""
    stat = path.stat()
    return {"path": str(path), "device": stat.st_dev, "inode": stat.st_ino, "git_file": (path / ".git").read_text()}


def _mark_as_ours(path: Path, mark: Path, operator_tree: Path) -> None:
    mark.write_text(json.dumps({**_folder_identity(path), "operator_tree": str(operator_tree)}) + "\n")


def _is_ours(path: Path, mark: Path) -> bool:
    """The mark names this very folder (a folder put there since, even by the same name, is not ours)."""
    try:
        recorded = json.loads(mark.read_text())
        return path.is_dir() and {key: recorded[key] for key in ("path", "device", "inode", "git_file")} == \
            _folder_identity(path)
    except (OSError, ValueError, TypeError, KeyError):
        return False


def _own_path(state_dir: Path, target: str) -> Path:
    """`trees/<target>`, resolved; TreeRefused for a name that is not one path segment, or a link there."""
    try:
        path = trees_dir(state_dir).resolve() / worktree_path(state_dir, target).name
    except ValueError as error:
        raise TreeRefused(f"run worktree for {target[:100]!r}: {error}") from error
    if path.is_symlink():
        raise TreeRefused(f"run worktree {path} is a symbolic link (to {path.readlink()}); the project never "
                          f"makes one there, so it is left alone: remove the link to let the run make its worktree")
    return path


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
    path, branch, mark = _own_path(state_dir, target), branch_name(target), owner_mark(state_dir, target)
    git(operator_tree, "worktree", "prune")
    if path.exists() and _registered(operator_tree, path):
        _clear_stale_lock(path)
        git(path, "checkout", "-q", "-f", "-B", branch, head)
        git(path, "clean", "-q", "-fd")  # ignored files (bytecode) stay: the next import is faster
    else:
        if path.exists():
            _remove_stale(path, mark, operator_tree)
        path.parent.mkdir(parents=True, exist_ok=True)
        git(operator_tree, "worktree", "add", "-q", "-f", "-B", branch, str(path), head)
    _mark_as_ours(path, mark, operator_tree)
    return RunTree(operator_tree=operator_tree, worktree=path, branch=branch, base_commit=head, unserved=unserved)


def _remove_stale(path: Path, mark: Path, operator_tree: Path) -> None:
    """A worktree of ours that `operator_tree` no longer knows (another checkout's, or pruned) goes; anything else stays."""
    if not _is_ours(path, mark):
        raise TreeRefused(f"run worktree {path} exists but is neither a worktree of {operator_tree} nor one the project "
                          f"made ({mark} does not name it), so nothing was deleted: move it away (or remove it) "
                          f"and run again")
    shutil.rmtree(path)


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


def patch_paths_at(tree: RunTree, commit: str, patch_text: str, package: str | None = None) -> list[str]:
    """The paths git says the patch touches on `commit`; PatchRejected for a rename or copy, a symlink, a
    submodule or binary data (a text edit of a symlink re-points it), or a path outside `package` when given.
    Every way a patch reaches the tree (checked, served, committed) passes here first."""
    try:
        found = with_commit_modes(tree.worktree, commit, git_patch_paths(tree.worktree, patch_text))
    except PatchPathsError as exc:
        raise PatchRejected(str(exc)) from exc
    if (refused := refusal(found, package)) is not None:
        raise PatchRejected(refused[1])
    return list(found.paths)


def _apply_to_index(tree: RunTree, env: dict[str, str], patch_text: str, *flags: str) -> None:
    done = git(tree.worktree, "apply", "--cached", *flags, "-", input_text=patch_text, check=False, env=env)
    if done.returncode != 0:
        raise PatchRejected((done.stderr or done.stdout).strip() or f"git apply exited {done.returncode}")


def check_applies(tree: RunTree, commit: str, patch_text: str, package: str | None = None) -> None:
    """`git apply --check` of a patch on `commit`; PatchRejected carries git's message."""
    patch_paths_at(tree, commit, patch_text, package)
    with _index_at(tree, commit) as env:
        _apply_to_index(tree, env, patch_text, "--check")


def _index_text(tree: RunTree, env: dict[str, str], path: str) -> str:
    done = git(tree.worktree, "show", f":{path}", check=False, env=env)
    return done.stdout if done.returncode == 0 else ""  # not in the index: created, or deleted


def patched_texts(tree: RunTree, commit: str, base_text: str, patch_text: str,
                  package: str | None = None) -> list[tuple[str, str, str]]:
    """(path, text before, text after) of each Python file `patch_text` changes on `commit` with `base_text`
    applied first, read in an index of its own (the critic reads them where a hunk alone cannot be read);
    PatchRejected when the patch does not apply there."""
    paths = [name for name in patch_paths_at(tree, commit, patch_text, package)
             if name.lower().endswith(PYTHON_SUFFIXES)]
    with _index_at(tree, commit) as env:
        if base_text:
            _apply_to_index(tree, env, base_text)
        before = {name: _index_text(tree, env, name) for name in paths}
        _apply_to_index(tree, env, patch_text)
        return [(name, before[name], _index_text(tree, env, name)) for name in paths]


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


def checkout(tree: RunTree, commit: str, patch_text: str | None = None, package: str | None = None) -> Path:
    """The worktree at `commit` (detached, clean), with the patch applied uncommitted; its path."""
    touched = patch_paths_at(tree, commit, patch_text, package) if patch_text is not None else []
    _clear_stale_lock(tree.worktree)
    drop_bytecode(tree.worktree, _changed_files(tree, commit))
    git(tree.worktree, "checkout", "-q", "-f", "--detach", commit)
    git(tree.worktree, "clean", "-q", "-fd")
    if patch_text is not None:
        done = git(tree.worktree, "apply", "-", input_text=patch_text, check=False)
        if done.returncode != 0:
            raise PatchRejected((done.stderr or done.stdout).strip())
        drop_bytecode(tree.worktree, touched)
    return tree.worktree


def commit_patch(tree: RunTree, patch_text: str, message: str, package: str | None = None) -> str:
    """Commit a kept patch on the branch head, the worktree untouched (a launch checks the new head
    out when it serves it); the new head."""
    head = branch_head(tree)
    patch_paths_at(tree, head, patch_text, package)
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
