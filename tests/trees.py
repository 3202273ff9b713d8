"""Trees for tests: `framework-tree init` through the CLI, and operator patches made from edits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hyperloom_assets.resources.trees.git import git, git_out

OPERATOR_STATE = (("rev-parse", "HEAD"), ("branch", "--show-current"), ("status", "--porcelain"))


def init_tree(engine: str, folder: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "framework-tree", "init", "--engine", engine,
                           str(folder)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return folder


def make_patch(tree: Path, edits: dict[str, tuple[str, str]], path: Path) -> Path:
    """A diff of `tree` with the given (old, new) text edits, written to `path`; the tree is restored."""
    for name, (old, new) in edits.items():
        file = tree / name
        assert old in file.read_text(), f"{old!r} not in {name}"
        file.write_text(file.read_text().replace(old, new, 1))
    path.write_text("# changes: a test's operator patch\n" + git_out(tree, "diff") + "\n")
    git(tree, "checkout", "-q", ".")
    return path


def commit_edit(tree: Path, name: str, old: str, new: str, message: str) -> None:
    file = tree / name
    assert old in file.read_text(), f"{old!r} not in {name}"
    file.write_text(file.read_text().replace(old, new, 1))
    git(tree, "commit", "-qam", message)


def operator_state(tree: Path) -> list[str]:
    """HEAD, branch and `git status`: what a run must leave exactly as it found."""
    return [git_out(tree, *args) for args in OPERATOR_STATE]


def small_tree(folder: Path, files: dict[str, str]) -> Path:
    """A git repository holding `files` (path -> text), committed: a tree in milliseconds, for git's own checks."""
    folder.mkdir(parents=True)
    git(folder, "init", "-q")
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "base")
    return folder


def staged_diff(tree: Path, *commands: tuple[str, ...]) -> str:
    """The diff git writes for what `commands` (git argument lists) stage, renames found; the tree is restored."""
    for command in commands:
        git(tree, *command)
    text = git_out(tree, "diff", "--cached", "-M") + "\n"
    git(tree, "reset", "-q", "--hard")
    return text
