"""The `accepted_patches` asset: the kept source patches, upstream of `optimization_stack`.

Each record names the patch, the sha256 of its text, the files it touches, its commit on
the run's branch and its trial's gain and interval; `tree_commit` is the branch head,
the tree the stack is validated, swept and reported from.
"""

import dagster as dg

from hyperloom_assets.assets.metadata import table_value
from hyperloom_assets.core.report.tables import trials_table
from hyperloom_assets.core.results import AcceptedPatches, BaselineResult, PatchRecord, TrialsResult


def patch_records(trials: TrialsResult) -> list[PatchRecord]:
    records = []
    for trial in trials.climb.trials:
        if trial.outcome != "KEEP" or not trial.variant.patches:
            continue
        for patch in trial.variant.patches:
            records.append(PatchRecord(name=patch.name, source=patch.source, sha256=patch.sha256,
                                       files=list(patch.files), commit=trials.patch_commits.get(trial.fingerprint, ""),
                                       trial=trial.name, fingerprint=trial.fingerprint,
                                       gain_pct=trial.decision.gain_pct, ci_low_pct=trial.decision.ci_low_pct,
                                       ci_high_pct=trial.decision.ci_high_pct))
    return records


def accepted(trials: TrialsResult, baseline: BaselineResult) -> AcceptedPatches:
    tree = baseline.run_tree
    return AcceptedPatches(patches=patch_records(trials), branch=tree.branch if tree else None,
                           tree_commit=trials.tree_commit, base_commit=tree.base_commit if tree else None,
                           keepers=trials.climb.keepers)


def build_accepted_patches_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="explore", dagster_type=AcceptedPatches,
              description="The kept source patches, each with its commit on hyperloom/<target>; the stack's tree.")
    def accepted_patches(trials: TrialsResult, baseline: BaselineResult) -> dg.Output[AcceptedPatches]:
        result = accepted(trials, baseline)
        kept = [t for t in trials.climb.trials if t.outcome == "KEEP"]
        return dg.Output(result, metadata={
            "count": len(result.patches),
            "patches": dg.MetadataValue.json([p.model_dump(mode="json") for p in result.patches]),
            "branch": dg.MetadataValue.text(result.branch or "none (no framework_tree)"),
            "tree_commit": dg.MetadataValue.text(result.tree_commit or "none (no framework_tree)"),
            "keepers": table_value(trials_table(kept)),
        })

    return accepted_patches
