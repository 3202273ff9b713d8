"""The `accepted_patches` asset: the keepers, in the order they joined."""

import dagster as dg

from hyperloom_assets.assets.metadata import table_value
from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.report.tables import trials_table
from hyperloom_assets.core.results import TrialsResult


def build_accepted_patches_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="explore",
              description="The keepers, in the order they joined, with their gains.")
    def accepted_patches(trials: TrialsResult) -> dg.Output[list[TrialRecord]]:
        kept = [t for t in trials.climb.trials if t.outcome == "KEEP"]
        return dg.Output(kept, metadata={"count": len(kept), "patches": table_value(trials_table(kept))})

    return accepted_patches
