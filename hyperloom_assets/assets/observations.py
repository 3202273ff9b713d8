"""The observed inputs: the engine's identity and the target's serving config.

Both are external assets partitioned by target: Dagster runs nothing to produce them.
`target_change_sensor` (sensors/target_change.py) records their observations, each
carrying its data version; a new version for a target makes exactly that target's
`baseline` (and everything downstream) stale.
"""

import dagster as dg

FRAMEWORK_TREE = dg.AssetKey("framework_tree")
SERVER_CONFIG = dg.AssetKey("server_config")
OBSERVED_GROUP = "observed"


def build_observations(partitions: dg.StaticPartitionsDefinition) -> list[dg.AssetSpec]:
    return [
        dg.AssetSpec(FRAMEWORK_TREE, partitions_def=partitions, group_name=OBSERVED_GROUP,
                     description="The engine's identity: git HEAD plus diff hash, or the installed release. "
                                 "Observed by target_change_sensor."),
        dg.AssetSpec(SERVER_CONFIG, partitions_def=partitions, group_name=OBSERVED_GROUP,
                     description="A hash of the target file's serving fields. Observed by target_change_sensor."),
    ]
