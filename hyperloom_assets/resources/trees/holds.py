"""Holds on the run's one worktree, for the launches of a tree target served at once.

Every launch of a tree target serves the run's worktree as it was checked out when its
server started, and a Python server goes on importing from it (vLLM imports much of itself
lazily), so the worktree must not change while any server serves it. Launches that serve
the same state (a commit, and the patch on top) share it; a launch that needs another state
waits until no server serves the worktree, then checks its state out. Launches are let in
first come, first served, so a run of same-state launches cannot starve one that waits for
another state. A run holding one slot never waits: its launches come one at a time.
"""

from __future__ import annotations

import threading
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hyperloom_assets.core.patches.run_tree import RunTree
from hyperloom_assets.resources.trees.workspace import checkout, rest_on_branch

State = tuple[str, str | None]  # (commit, patch text applied on it)


class TreeHolds:
    """None-safe: without a tree (or a commit), a hold serves the venv's engine and waits for nothing."""

    def __init__(self, tree: RunTree | None, package: str | None = None):
        self.tree, self.package = tree, package  # package: the folder no patch may reach outside
        self.changed = threading.Condition()
        self.state: State | None = None  # what the worktree holds, as last checked out through these holds
        self.holders = 0  # servers serving it now
        self.line: deque[object] = deque()  # launches waiting to be let in, in order of arrival

    @contextmanager
    def held(self, commit: str | None, patch_text: str | None = None) -> Iterator[Path | None]:
        """The worktree at `commit` (with `patch_text` applied), unchanged until the block ends."""
        if self.tree is None or commit is None:
            yield None
            return
        wanted = (commit, patch_text)
        self._enter(lambda: self.holders == 0 or self.state == wanted, lambda: self._check_out(wanted))
        try:
            yield self.tree.worktree
        finally:
            self._leave()

    @contextmanager
    def alone(self) -> Iterator[None]:
        """The worktree served by nothing while the block runs; its state is then unknown."""
        self._enter(lambda: self.holders == 0, lambda: setattr(self, "state", None))
        try:
            yield
        finally:
            self._leave()

    def rest(self) -> None:
        """Leave the worktree clean on the branch head, once nothing serves it (the climb's end)."""
        if self.tree is not None:
            with self.alone():
                rest_on_branch(self.tree)

    def _enter(self, may_enter, on_entry) -> None:
        ticket = object()
        with self.changed:
            self.line.append(ticket)
            try:
                self.changed.wait_for(lambda: self.line[0] is ticket and may_enter())
                on_entry()  # under the lock: no other launch touches the worktree meanwhile
                self.holders += 1
            finally:
                self.line.remove(ticket)
                self.changed.notify_all()

    def _leave(self) -> None:
        with self.changed:
            self.holders -= 1
            self.changed.notify_all()

    def _check_out(self, wanted: State) -> None:
        if self.state == wanted:
            return
        self.state = None  # a checkout that fails leaves the worktree in no known state
        checkout(self.tree, *wanted, package=self.package)
        self.state = wanted
