"""Where a run serves a tree target from: its own worktree on `hyperloom/<target>`. Pure models.

resources/trees/workspace.py makes and moves it; the assets hand it on with the baseline.
"""

from __future__ import annotations

from pathlib import Path

from hyperloom_assets.core.config.names import SAFE_NAME_RULE, is_safe_name
from hyperloom_assets.core.models import Strict


class RunTree(Strict):
    operator_tree: Path
    worktree: Path
    branch: str
    base_commit: str  # the operator's HEAD when the run started
    unserved: list[str] = []  # the operator's uncommitted files: served at HEAD, so not served

    def checkout_command(self, commit: str) -> str:
        """How a user gets the served code: the branch's commit in their own checkout."""
        return f"git -C {self.operator_tree} checkout {commit}  # branch {self.branch}"


def branch_name(target: str) -> str:
    return f"hyperloom/{target}"


def trees_dir(state_dir: Path) -> Path:
    """Every run worktree's folder: nothing else under the state folder is a worktree's to touch."""
    return Path(state_dir) / "trees"


def worktree_path(state_dir: Path, target: str) -> Path:
    """`trees/<target>`; a name that is not one path segment (`..`, `a/b`, `-x`) is refused, not joined."""
    if not is_safe_name(target):
        raise ValueError(f"a target name of {SAFE_NAME_RULE}, got {target[:100]!r}")
    return trees_dir(state_dir) / target


def owner_mark(state_dir: Path, target: str) -> Path:
    """The file that says the project made `trees/<target>`: beside it, so the served tree holds no
    file of ours; a target's name never starts with `.`, so no target's tree can be this file."""
    return trees_dir(state_dir) / f".{target}.hyperloom-worktree"
