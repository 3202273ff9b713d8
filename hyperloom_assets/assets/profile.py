"""The `profile` asset: where the running configuration's time goes, by the engine's own profiler.

Where the engine's idle profiler is shown to leave the measured rounds alone
(`Profiler.free_when_idle`), the baseline's own server carries it and is profiled for one
short round after its measured rounds (assets/baseline.py, resources/profiling.py);
otherwise, or for a baseline stored without a profile, the profile is one launch of its
own here, warmed up first. Either trace is reduced to top ops by self time and the shares
of attention, GEMM, sampling and overhead. The tables and the trace file are kept; the proposer and the report read
them. A profile that cannot be taken is a warning: the asset still materializes, saying why.
"""

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.assets.metadata import argv_text, run_secrets, table_value
from hyperloom_assets.assets.stops import recorded_stops
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.report.tables import profile_ops_table, profile_shares_table
from hyperloom_assets.core.results import BaselineResult, ProfileResult, RooflineResult
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.profiling import run_profile
from hyperloom_assets.resources.store.results import ResultStore

PROFILE_OFF = "off in the target (profile: false), so no launch of its own"


def profile_metadata(result: ProfileResult) -> dict:
    metadata: dict = {"taken": result.taken, "engine": result.engine}
    if not result.taken:
        return {**metadata, "reason": dg.MetadataValue.text(result.reason or "unknown")}
    s = result.summary
    metadata.update({f"{category}_pct": rounded(share, "%") for category, share in s.shares_pct.items()})
    metadata.update(
        time_base=s.time_base, window_ms=rounded(s.window_ms, "ms"), ops=s.events,
        top_ops=table_value(profile_ops_table(s)), shares=table_value(profile_shares_table(s)),
        trace=dg.MetadataValue.path(result.trace_path), argv=argv_text(result.argv, run_secrets(argv=result.argv)))
    if result.profiled_tok_s is not None:
        metadata["profiled_output_throughput"] = rounded(result.profiled_tok_s, "tok/s")
    return metadata


def build_profile_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="explore",
              description="Where the time goes: the baseline's configuration profiled (on the baseline's server "
                          "where the engine's idle profiler is shown free, else on a launch of its own), reduced to "
                          "top ops by self time and the shares of attention, GEMM, sampling and overhead.")
    def profile(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet, bench: BenchmarkClient,
                store: ResultStore, baseline: BaselineResult, roofline: RooflineResult) -> dg.Output[ProfileResult]:
        result = baseline.profile
        # The run's snapshot of the target, as every step reads it: the host it leased, not an edit's.
        target = catalog.run_target(context.partition_key, context.run.run_id, store)
        if result is None and not target.profile:
            result = ProfileResult(engine=baseline.spec.engine, taken=False, reason=PROFILE_OFF)
        if result is None:
            host = hosts.for_target(target)
            folder = step_dir(host, context.partition_key, context.run.run_id, "profile")
            with recorded_stops(context, store, "profile"):  # a cancel while the profiled server runs
                result = run_profile(host=host, bench=bench, spec=baseline.spec, contract=baseline.contract,
                                     run_dir=folder)
        if result.taken:
            shares = ", ".join(f"{k} {v:.1f}%" for k, v in result.summary.shares_pct.items() if v >= 0.05)
            context.log.info("profile %s: %s (trace %s)", context.partition_key, shares, result.trace_path)
        else:
            context.log.warning("profile %s not taken: %s", context.partition_key, result.reason)
        return dg.Output(result, metadata=profile_metadata(result))

    return profile
