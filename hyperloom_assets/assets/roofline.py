"""The `roofline` asset: the decode ceiling for this model, workload and hardware.

How far the baseline is from what the hardware allows, and which resource binds.
"""

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.measurement.workloads import build_plan
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.results import BaselineResult, RooflineResult
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.core.roofline.roofline import achieved, kv_cache_dtype_from_args, workload_roofline
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.hardware import target_hardware
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.store.results import ResultStore


def compute_roofline(target: Target, baseline: BaselineResult, host: Host) -> RooflineResult:
    shape = load_shape(target.model)
    hardware, warnings = target_hardware(target, host, shape.dtype)
    plan = build_plan(target.workload, shape.vocab) if target.workload.kind == "agentic" else None
    roofline = workload_roofline(shape, hardware, target.workload, plan=plan,
                                 kv_cache_dtype=kv_cache_dtype_from_args(target.server_args))
    m = baseline.measurement
    reached = achieved(roofline, m.output_throughput, m.output_throughput_ci_low, m.output_throughput_ci_high)
    if reached.warning:
        warnings.append(reached.warning)
    return RooflineResult(roofline=roofline, hardware=hardware, achieved=reached, warnings=warnings)


def build_roofline_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="baseline",
              description="The decode ceiling for this model, workload and hardware; achieved share of it.")
    def roofline(context: AssetExecutionContext, catalog: TargetCatalog, hosts: HostFleet, store: ResultStore,
                 baseline: BaselineResult) -> dg.Output[RooflineResult]:
        target = catalog.run_target(context.partition_key, context.run.run_id, store)
        host = hosts.for_target(target)
        result = compute_roofline(target, baseline, host)
        for warning in result.warnings:
            context.log.warning(warning)
        r, a = result.roofline, result.achieved
        return dg.Output(result, metadata={
            "ceiling_tok_s": rounded(r.ceiling_tok_s, "tok/s"), "memory_bound_tok_s": rounded(r.memory_bound_tok_s, "tok/s"),
            "compute_bound_tok_s": rounded(r.compute_bound_tok_s, "tok/s"), "binding": r.binding,
            "explanation": r.explanation, "hardware": r.hardware, "achieved_pct": rounded(a.achieved_pct, "%"),
            "achieved_pct_ci_low": rounded(a.achieved_pct_ci_low, "%"),
            "achieved_pct_ci_high": rounded(a.achieved_pct_ci_high, "%"), "above_ceiling": a.above_ceiling,
        })

    return roofline
