"""The observed inputs: the engine's identity and the target's serving config.

Each is an observable source partitioned by target; a new data version for a target
makes exactly that target's `baseline` (and everything downstream) stale.
"""

import dagster as dg

from hyperloom_assets.core.config.identity import server_config_version
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.releases.identity import framework_identity


def build_observations(partitions: dg.StaticPartitionsDefinition) -> list:
    @dg.observable_source_asset(partitions_def=partitions, group_name="observed",
                                description="The engine's identity: git HEAD plus diff hash, or the installed release.")
    def framework_tree(catalog: TargetCatalog) -> dg.DataVersionsByPartition:
        good, _ = catalog.all()
        return dg.DataVersionsByPartition({
            name: dg.DataVersion(framework_identity(target.engine, target.framework_tree))
            for name, target in good.items() if name in partitions.get_partition_keys()
        })

    @dg.observable_source_asset(partitions_def=partitions, group_name="observed",
                                description="A hash of the target file's serving fields.")
    def server_config(catalog: TargetCatalog) -> dg.DataVersionsByPartition:
        good, _ = catalog.all()
        return dg.DataVersionsByPartition({
            name: dg.DataVersion(server_config_version(target))
            for name, target in good.items() if name in partitions.get_partition_keys()
        })

    return [framework_tree, server_config]
