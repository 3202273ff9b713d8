"""Where a run serves a tree target from: its own worktree on `hyperloom/<target>`. Pure models.

resources/trees/workspace.py makes and moves it; the assets hand it on with the baseline.
"""

from __future__ import annotations

from pathlib import Path

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


def worktree_path(state_dir: Path, target: str) -> Path:
    return Path(state_dir) / "trees" / target
