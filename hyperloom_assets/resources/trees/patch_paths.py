"""git's own account of what a patch touches: `git apply --numstat -z --summary`, and the tree's modes.

Run wherever a patch is checked or applied (resources/hosts/proposal_checks.py for a model's
proposal, workspace.py for every patch the climb applies or commits); the verdict is pure
code's (core/patches/git_paths.py). The modes of the paths the tree already holds come from
the commit a patch applies to (`git ls-tree`), or from the file system for a tree that is
not a checkout (the installed package's folder).
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from hyperloom_assets.core.patches.git_paths import GitPaths, read_git_paths, with_tree_modes

GIT_TIMEOUT_S = 30.0
# Paths reach git as they are, never as patterns (a `*` in a name is a name).
LITERAL = ("git", "--literal-pathspecs")


class PatchPathsError(RuntimeError):
    """git could not read the patch (its words)."""


def _run(cwd: Path, args: list[str], text: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([*LITERAL, *args], cwd=cwd, input=text, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PatchPathsError(f"git {args[0]} did not run: {exc}") from exc


def git_patch_paths(cwd: Path, patch_text: str) -> GitPaths:
    """What git reads in the patch (run in `cwd`, which needs not be a checkout); PatchPathsError if it cannot."""
    text = patch_text if patch_text.endswith("\n") else patch_text + "\n"
    done = _run(cwd, ["apply", "--numstat", "-z", "--summary", "-"], text)
    if done.returncode != 0:
        raise PatchPathsError((done.stderr or done.stdout).strip() or f"git apply --numstat exited {done.returncode}")
    return read_git_paths(done.stdout)


def _file_mode(path: Path) -> str | None:
    try:
        info = path.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "120000"
    if stat.S_ISREG(info.st_mode):
        return "100755" if info.st_mode & stat.S_IXUSR else "100644"
    return "040000" if stat.S_ISDIR(info.st_mode) else f"{stat.S_IFMT(info.st_mode):06o}"


def with_file_modes(tree: Path, found: GitPaths) -> GitPaths:
    """`found` with the mode the file system gives each path `tree` holds."""
    modes = {name: mode for name in found.paths if (mode := _file_mode(tree / name)) is not None}
    return with_tree_modes(found, modes)


def with_commit_modes(tree: Path, commit: str, found: GitPaths) -> GitPaths:
    """`found` with the mode `commit` gives each path it holds (`git ls-tree`)."""
    if not found.paths:
        return found
    done = _run(tree, ["ls-tree", "-z", commit, "--", *found.paths])
    if done.returncode != 0:
        raise PatchPathsError((done.stderr or done.stdout).strip() or f"git ls-tree exited {done.returncode}")
    modes = {}
    for entry in filter(None, done.stdout.split("\0")):
        info, _, name = entry.partition("\t")
        modes[name] = info.split(" ", 1)[0]
    return with_tree_modes(found, modes)
