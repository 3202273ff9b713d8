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
