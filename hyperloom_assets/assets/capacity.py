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
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.capacity import (
    Capacity,
    CapacityAtSlo,
    Probe,
    Unit,
    find_capacity,
    probe_limit_s,
    probe_prompts,
    rate_shortfall,
)
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.core.measurement.slo_verdict import slo_verdict
from hyperloom_assets.core.measurement.workloads import default_warmups
from hyperloom_assets.core.results import BaselineResult
from hyperloom_assets.resources.bench.client import BenchInputError, BenchmarkClient
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.measure import MeasurementOvertime, load_round
from hyperloom_assets.resources.store.results import ResultStore


def load_unit(target: Target) -> tuple[Unit, float]:
    """What the capacity is counted in, and the target's own load to start from."""
    workload = target.workload
    if workload.request_rate:
        return "request_rate", workload.request_rate
    return "concurrency", float(workload.concurrency)


def measure_capacity(context, target: Target, host: Host, bench: BenchmarkClient, store: ResultStore,
                     baseline: BaselineResult, spec: ServerSpec, launch: LaunchRecord, folder: Path,
                     config: str, fingerprint: str | None = None) -> Capacity | None:
    """The config's capacity on this server. A probe whose round fails counts as broken (its reason
    kept) and, but for its time limit, ends the search; None only when the client refused the workload."""
    slo, contract = target.slo, baseline.contract
    unit, start = load_unit(target)
    base_requests = contract.repeats * baseline.measurement.completed + contract.warmups

    def meets(load: float) -> Probe:
        # A rate probe times each request from its scheduled arrival: its wait for a slot counts.
        change = {"concurrency": int(load)} if unit == "concurrency" else {"request_rate": load,
                                                                           "latency_from": "arrival"}
        workload = contract.workload.model_copy(update=change)
        prompts = probe_prompts(load, unit, slo.percentile, contract.num_prompts)
        warmups = default_warmups(workload.concurrency, engine_for(spec.engine).compiles_on_first_use)
        sent = baseline.measurement.completed if workload.kind == "agentic" else prompts  # a trace: all of it
        label = f"capacity {config} ({unit} {load:g})"
        try:
            measured = load_round(host=host, bench=bench, store=store, target=context.partition_key, spec=spec,
                                  contract=contract, launch=launch, workload=workload, num_prompts=prompts,
                                  records_dir=folder / f"capacity-{config}" / f"{unit}-{load:g}", label=label,
                                  kind="capacity", run_id=context.run.run_id, context_key=baseline.context_key,
                                  fingerprint=fingerprint,
                                  timeout_s=probe_limit_s(baseline.measuring_s, base_requests, sent + warmups,
                                                          start, load))
        except MeasurementOvertime as exc:  # the server is still up: the search goes on
            return _broken(context, config, unit, load, str(exc), last=False)
        except ServerError as exc:  # the server's state is unknown after it: no further probe
            return _broken(context, config, unit, load, str(exc).splitlines()[0], last=True)
        return _judged(context, slo, config, unit, load, measured)

    try:
        return find_capacity(meets, start, unit, slo.capacity_probes)
    except BenchInputError as exc:  # nothing was sent: not a measurement of the server
        context.log.warning("capacity at the SLO of the %s not measured: %s", config, str(exc).splitlines()[0])
        return None


def _judged(context, slo, config: str, unit: Unit, load: float, measured: Measurement) -> Probe:
    """A probe that ran: the SLO over its requests and, at a request rate, whether its client kept up."""
    verdict = slo_verdict(slo, [measured.latency])
    arrivals = measured.repeats[-1].arrivals if unit == "request_rate" else None
    short = rate_shortfall(arrivals) if arrivals is not None else None
    met = verdict.met and short is None
    why = verdict.why if short is None else f"{short}; {verdict.why}"
    context.log.info("capacity %s: %s %g %s the SLO (%s)", config, unit, load, "meets" if met else "breaks", why)
    return Probe(load=load, met=met, why=why)


def _broken(context, config: str, unit: Unit, load: float, reason: str, last: bool) -> Probe:
    context.log.warning("capacity %s: %s %g breaks the SLO: its round failed (%s)", config, unit, load, reason)
    return Probe(load=load, met=False, why=f"its round failed ({reason})", failed=True, last=last)


def capacity_after_rounds(context, target: Target, host: Host, bench: BenchmarkClient, store: ResultStore,
                          baseline: BaselineResult, spec: ServerSpec, folder: Path, config: str,
                          found: dict[str, Capacity | None],
                          fingerprint: str | None = None) -> Callable[[LaunchRecord], None]:
    """A validation server's capacity search once its rounds are over, into `found[config]`."""
    def measure(launch: LaunchRecord) -> None:
        found[config] = measure_capacity(context, target, host, bench, store, baseline, spec, launch, folder, config,
                                         fingerprint)
    return measure


def capacity_result(target: Target, baseline: Capacity | None, stack: Capacity | None) -> CapacityAtSlo:
    unit, _ = load_unit(target)
    sides = (("baseline", baseline), ("stack", stack))
    return CapacityAtSlo(baseline=baseline.load if baseline else None, stack=stack.load if stack else None, unit=unit,
                         baseline_probes=baseline.probes if baseline else [],
                         stack_probes=stack.probes if stack else [],
                         at_ceiling=[side for side, c in sides if c is not None and c.at_ceiling],
                         baseline_broke_at=baseline.broke_at if baseline else None,
                         stack_broke_at=stack.broke_at if stack else None,
                         at_least=[side for side, c in sides if c is not None and c.broke_at is None],
                         baseline_bracket=baseline.bracket() if baseline else None,
                         stack_bracket=stack.bracket() if stack else None)
