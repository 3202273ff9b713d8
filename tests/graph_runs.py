"""One job run in process over a targets folder, with each asset's latest metadata read back."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from hyperloom_assets.definitions import build_defs


def latest_metadata(instance: dg.DagsterInstance, asset: str, partition: str) -> dict:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
    assert records, f"no materialization of {asset} for {partition}"
    return {k: getattr(v, "value", v) for k, v in records[0].asset_materialization.metadata.items()}


def run_job(targets: Path, partition: str, host, store, assets: tuple[str, ...],
            job: str = "optimize_job", only: tuple[str, ...] | None = None,
            ) -> tuple[dg.ExecuteInProcessResult, dict[str, dict]]:
    """Run `job` for one partition on a fresh instance; (result, asset -> metadata) for `assets`.

    `only`: these assets of the job alone (a run stopped after its trials skips the validation's launches).
    """
    defs = build_defs(targets, host=host, store=store)
    selection = [dg.AssetKey(name) for name in only] if only else None
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(job).execute_in_process(partition_key=partition, instance=instance,
                                                               raise_on_error=False, asset_selection=selection)
        assert result.success, [e.message for e in result.all_events if e.is_failure][:3]
        return result, {asset: latest_metadata(instance, asset, partition) for asset in assets}


def trial_observations(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    """Each trial's AssetObservation metadata by trial name, values unwrapped."""
    observed = [e.event_specific_data.asset_observation.metadata for e in result.all_events
                if e.event_type_value == "ASSET_OBSERVATION"]
    return {o["name"].value: {k: getattr(v, "value", v) for k, v in o.items()} for o in observed if "name" in o}
