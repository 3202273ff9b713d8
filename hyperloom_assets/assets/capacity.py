"""Capacity at the SLO on a server that is up: the bisection of core/measurement/capacity.py,
each probe a fresh round through the resources (stored as kind `capacity`).

`optimization_stack` runs it on the validation's last base/stack pair after their rounds
and the sweep, so it costs no launch of its own; a stack with nothing kept launches the
baseline once for it (the stack is the baseline's config, and its capacity the same).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.measurement.capacity import Capacity, CapacityAtSlo, Unit, find_capacity, probe_prompts
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.core.measurement.slo_verdict import slo_verdict
from hyperloom_assets.core.results import BaselineResult
from hyperloom_assets.resources.bench.client import BenchInputError, BenchmarkClient
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.measure import load_round
from hyperloom_assets.resources.store.results import ResultStore


def load_unit(target: Target) -> tuple[Unit, float]:
    """What the capacity is counted in, and the target's own load to start from."""
    workload = target.workload
    if workload.request_rate:
        return "request_rate", workload.request_rate
    return "concurrency", float(workload.concurrency)


def measure_capacity(context, target: Target, host: Host, bench: BenchmarkClient, store: ResultStore,
                     baseline: BaselineResult, spec: ServerSpec, launch: LaunchRecord, folder: Path,
                     config: str) -> Capacity | None:
    """The config's capacity on this server; None when a probe's round failed (said in the log)."""
    slo, contract = target.slo, baseline.contract
    unit, start = load_unit(target)

    def meets(load: float) -> tuple[bool, str]:
        change = {"concurrency": int(load)} if unit == "concurrency" else {"request_rate": load}
        workload = contract.workload.model_copy(update=change)
        prompts = probe_prompts(load, unit, slo.percentile, contract.num_prompts)
        measured = load_round(host=host, bench=bench, store=store, target=context.partition_key, spec=spec,
                              contract=contract, launch=launch, workload=workload, num_prompts=prompts,
                              records_dir=folder / f"capacity-{config}" / f"{unit}-{load:g}",
                              label=f"capacity {config} ({unit} {load:g})", kind="capacity",
                              run_id=context.run.run_id, context_key=baseline.context_key)
        verdict = slo_verdict(slo, [measured.latency])
        context.log.info("capacity %s: %s %g %s the SLO (%s)", config, unit, load,
                         "meets" if verdict.met else "breaks", verdict.why)
        return verdict.met, verdict.why

    try:
        return find_capacity(meets, start, unit, slo.capacity_probes)
    except (ServerError, BenchInputError) as exc:
        context.log.warning("capacity at the SLO of the %s failed: %s", config, str(exc).splitlines()[0])
        return None


def capacity_after_rounds(context, target: Target, host: Host, bench: BenchmarkClient, store: ResultStore,
                          baseline: BaselineResult, spec: ServerSpec, folder: Path, config: str,
                          found: dict[str, Capacity | None]) -> Callable[[LaunchRecord], None]:
    """A validation server's capacity search once its rounds are over, into `found[config]`."""
    def measure(launch: LaunchRecord) -> None:
        found[config] = measure_capacity(context, target, host, bench, store, baseline, spec, launch, folder, config)
    return measure


def capacity_result(target: Target, baseline: Capacity | None, stack: Capacity | None) -> CapacityAtSlo:
    unit, _ = load_unit(target)
    return CapacityAtSlo(baseline=baseline.load if baseline else None, stack=stack.load if stack else None, unit=unit,
                         baseline_probes=baseline.probes if baseline else [],
                         stack_probes=stack.probes if stack else [],
                         at_ceiling=[side for side, c in (("baseline", baseline), ("stack", stack))
                                     if c is not None and c.at_ceiling],
                         baseline_broke_at=baseline.broke_at if baseline else None,
                         stack_broke_at=stack.broke_at if stack else None)
