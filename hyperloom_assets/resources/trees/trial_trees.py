"""The trials' side of the run's worktree: what each launch serves and where keepers go.

The branch head is the running best: the operator's HEAD plus every kept patch, one
commit each. A launch of a running best serves its commit; a trial serves it with its own
patch applied on top (uncommitted), and so does the fresh launch of the whole stack that
confirms a KEEP (the stack rebench), before the patch is committed; a patch that does not
apply there is refused before any launch. A KEEP commits the patch on the branch with the
trial's name, fingerprint, gain and interval; anything else leaves the head as it was.
Launches served at once (parallel trials) hold the worktree in turn (holds.py); checking
a patch and committing one never touch it (workspace.py), so they wait for no launch.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from typing import Iterator

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.decisions.climb import TrialRecord, launched_changes
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.patches.run_tree import RunTree
from hyperloom_assets.core.planning.stack import stack_spec
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.resources.trees.git import GitError
from hyperloom_assets.resources.trees.holds import TreeHolds
from hyperloom_assets.resources.trees.workspace import (
    PatchRejected,
    branch_head,
    check_applies,
    commit_patch,
    patched_texts,
    reset_branch,
)

SpecMaker = Callable[[list[Variant], "Variant | None"], AbstractContextManager[ServerSpec]]


def keep_message(record: TrialRecord) -> str:
    decision = record.decision
    interval = ("no interval" if decision.ci_low_pct is None
                else f"interval [{decision.ci_low_pct:+.2f}%, {decision.ci_high_pct:+.2f}%]")
    gain = f"{decision.gain_pct:+.2f}%" if decision.gain_pct is not None else "unknown"
    return (f"hyperloom KEEP {record.name}\n\ntrial {record.index}, fingerprint {record.fingerprint}\n"
            f"gain {gain}, {interval}\n{decision.reason}\n")


class TrialTrees:
    """None-safe: a target without a framework_tree serves the venv's engine and has no patches."""

    def __init__(self, run_tree: RunTree | None, package: str | None = None):
        self.run_tree = run_tree
        self.package = package  # the engine package's folder in the tree: no patch reaches outside it
        self.holds = TreeHolds(run_tree, package)
        self.commits: dict[str, str] = {}  # fingerprint of a kept patch trial -> its commit
        self.commit_of: dict[str, str] = {}  # sha256 of every patch on the branch -> the commit that added it
        if run_tree is not None:
            reset_branch(run_tree, run_tree.base_commit)  # a re-executed step starts from the run's base

    def head(self) -> str | None:
        return branch_head(self.run_tree) if self.run_tree else None

    def served_state(self, changes: list[Variant]) -> tuple[str | None, str | None]:
        """(commit, patch text) a launch of `changes` serves: the commit of its last kept patch (the
        run's base without one), and the patches of `changes` not committed yet on top."""
        if self.run_tree is None:
            return None, None
        kept = [self.commit_of[p.sha256] for v in changes for p in v.patches if p.sha256 in self.commit_of]
        text = "".join(p.text for v in changes for p in v.patches if p.sha256 not in self.commit_of) or None
        return (kept[-1] if kept else self.run_tree.base_commit), text

    def spec_maker(self, target: Target, base: ServerSpec) -> SpecMaker:
        """(keepers, variant) -> the launch spec of the stack plus the variant, its tree checked out
        and held for the block: enter it right around the launch."""
        @contextmanager
        def spec_for(keepers: list[Variant], variant: Variant | None) -> Iterator[ServerSpec]:
            changes = launched_changes(keepers, variant)
            with self.holds.held(*self.served_state(changes)) as tree:
                yield stack_spec(target, changes, base).model_copy(update={"framework_tree": tree})
        return spec_for

    def admit(self, keepers: list[Variant], variant: Variant) -> str | None:
        if self.run_tree is None:
            return "the target has no framework_tree to apply a patch to"
        commit, text = self.served_state(keepers)  # the running best, as its launch serves it
        try:
            for patch in variant.patches:
                check_applies(self.run_tree, commit, (text or "") + patch.text, self.package)
        except PatchRejected as exc:
            return str(exc)
        return None

    def patched_files(self, keepers: list[Variant], variant: Variant) -> tuple[tuple[str, str, str], ...]:
        """(path, before, after) of each Python file the variant's patches change on the running best's tree,
        for the critic; () without a tree, or when they do not apply (admit then refuses them)."""
        if self.run_tree is None or not variant.patches:
            return ()
        commit, text = self.served_state(keepers)
        try:
            return tuple(patched_texts(self.run_tree, commit, text or "", "".join(p.text for p in variant.patches),
                                       self.package))
        except (PatchRejected, GitError, UnicodeDecodeError):
            return ()

    def settle(self, record: TrialRecord) -> None:
        """After a trial: commit a kept patch on the branch (the worktree is left to the launches)."""
        if self.run_tree is None or record.outcome != "KEEP" or not record.variant.patches:
            return
        text = "".join(p.text for p in record.variant.patches)
        self.commits[record.fingerprint] = commit_patch(self.run_tree, text, keep_message(record), self.package)
        self.commit_of.update((p.sha256, self.commits[record.fingerprint]) for p in record.variant.patches)

    def rest(self) -> None:
        """After the climb: the worktree clean on the branch head, once no launch serves it."""
        self.holds.rest()
