"""Git, run as a process: the one way the project reads and writes a source tree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_TIMEOUT_S = 300
# Commits the tool makes carry its own identity, so they never depend on the user's git config.
AUTHOR = ("-c", "user.name=hyperloom", "-c", "user.email=hyperloom@localhost", "-c", "commit.gpgsign=false")


class GitError(RuntimeError):
    """A git command that failed; the message is git's own."""

    def __init__(self, args: tuple[str, ...], tree: Path, stderr: str):
        self.stderr = stderr.strip()
        super().__init__(f"git {' '.join(args)} in {tree}: {self.stderr}")


def git(tree: Path, *args: str, input_text: str | None = None, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`env`: variables on top of this process's (an index of its own: GIT_INDEX_FILE)."""
    done = subprocess.run(["git", "-C", str(tree), *AUTHOR, *args], capture_output=True, text=True,
                          input=input_text, timeout=GIT_TIMEOUT_S, env={**os.environ, **env} if env else None)
    if check and done.returncode != 0:
        raise GitError(args, tree, done.stderr or done.stdout)
    return done


def git_out(tree: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return git(tree, *args, env=env).stdout.strip()


def is_repository(tree: Path) -> bool:
    done = git(tree, "rev-parse", "--git-dir", check=False)
    return done.returncode == 0


def head_commit(tree: Path) -> str:
    return git_out(tree, "rev-parse", "HEAD")


def dirty_files(tree: Path) -> list[str]:
    """Tracked files with uncommitted changes and untracked files: what serving at HEAD leaves out."""
    lines = git(tree, "status", "--porcelain=v1", "--untracked-files=all").stdout.splitlines()
    return [line[3:] for line in lines if line.strip()]
