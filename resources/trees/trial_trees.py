"""The trials' side of the run's worktree: what each launch serves and where keepers go.

The branch head is the running best: the operator's HEAD plus every kept patch, one
commit each. A launch of the running best serves the head; a trial serves the head with
its own patch applied on top (uncommitted), and so does the fresh launch of the whole
stack that confirms a KEEP (the stack rebench), before the patch is committed; a patch that does not apply there is refused
before any launch. A KEEP commits the patch on the branch with the trial's name,
fingerprint, gain and interval; anything else leaves the head as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.decisions.climb import TrialRecord, launched_changes
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.patches.run_tree import RunTree
from hyperloom_assets.core.planning.stack import stack_spec
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.resources.trees.workspace import (
    PatchRejected,
    branch_head,
    check_applies,
    checkout,
    commit_patch,
    reset_branch,
    rest_on_branch,
)

SpecMaker = Callable[[list[Variant], "Variant | None"], ServerSpec]


def keep_message(record: TrialRecord) -> str:
    decision = record.decision
    interval = ("no interval" if decision.ci_low_pct is None
                else f"interval [{decision.ci_low_pct:+.2f}%, {decision.ci_high_pct:+.2f}%]")
    gain = f"{decision.gain_pct:+.2f}%" if decision.gain_pct is not None else "unknown"
    return (f"hyperloom KEEP {record.name}\n\ntrial {record.index}, fingerprint {record.fingerprint}\n"
            f"gain {gain}, {interval}\n{decision.reason}\n")


class TrialTrees:
    """None-safe: a target without a framework_tree serves the venv's engine and has no patches."""

    def __init__(self, run_tree: RunTree | None):
        self.run_tree = run_tree
        self.commits: dict[str, str] = {}  # fingerprint of a kept patch trial -> its commit
        self.committed: set[str] = set()  # sha256 of every patch on the branch
        if run_tree is not None:
            reset_branch(run_tree, run_tree.base_commit)  # a re-executed step starts from the run's base

    def head(self) -> str | None:
        return branch_head(self.run_tree) if self.run_tree else None

    def launch_tree(self, changes: list[Variant]) -> Path | None:
        """Check out what a launch serves: the running best, plus the patches of `changes` not yet on it."""
        if self.run_tree is None:
            return None
        text = "".join(p.text for v in changes for p in v.patches if p.sha256 not in self.committed) or None
        return checkout(self.run_tree, branch_head(self.run_tree), text)

    def spec_maker(self, target: Target, base: ServerSpec) -> SpecMaker:
        """(keepers, variant) -> the launch spec of the stack plus the variant, its tree checked out:
        call it right before the launch, since every launch shares the one worktree."""
        def spec_for(keepers: list[Variant], variant: Variant | None) -> ServerSpec:
            changes = launched_changes(keepers, variant)
            spec = stack_spec(target, changes, base)
            return spec.model_copy(update={"framework_tree": self.launch_tree(changes)})
        return spec_for

    def admit(self, keepers: list[Variant], variant: Variant) -> str | None:
        if self.run_tree is None:
            return "the target has no framework_tree to apply a patch to"
        try:
            for patch in variant.patches:
                check_applies(self.run_tree, branch_head(self.run_tree), patch.text)
        except PatchRejected as exc:
            return str(exc)
        return None

    def settle(self, record: TrialRecord) -> None:
        """After a trial: commit a kept patch on the branch, else rest on the running best."""
        if self.run_tree is None:
            return
        if record.outcome == "KEEP" and record.variant.patches:
            text = "".join(p.text for p in record.variant.patches)
            self.commits[record.fingerprint] = commit_patch(self.run_tree, text, keep_message(record))
            self.committed.update(p.sha256 for p in record.variant.patches)
        else:
            rest_on_branch(self.run_tree)
