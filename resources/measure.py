"""One measurement of one server configuration: the protocol every asset shares.

Launch (through the host resource: reap, preflight, start, readiness), an optional
evidence check, warm-up and repeats (through the benchmark client), teardown (the
host's context manager, on every path), and a row in the result store whatever
happened. Assets call this; it acts only through the resources it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.core.measurement.workloads import default_num_prompts, default_warmups
from hyperloom_assets.core.models import Strict
from hyperloom_assets.sim.timescale import time_scale_of, to_simulated_time


class MeasuredConfig(Strict):
    measurement: Measurement
    launch: LaunchRecord
    measurement_id: int
    measuring_s: float  # from readiness to the end of the last repeat


def in_engine_time(spec: ServerSpec, measurement: Measurement) -> Measurement:
    """A sim's numbers in its simulated GPU's time; real engines' as measured."""
    if not engine_for(spec.engine).simulated:
        return measurement
    return to_simulated_time(measurement, time_scale_of(spec.server_args))


def run_measurement(*, host: Any, bench: Any, store: Any, target: str, kind: str, spec: ServerSpec,
                    contract: WorkloadContract, run_dir: Path, run_id: str | None = None,
                    context_key: str | None = None, fingerprint: str | None = None,
                    concurrency: int | None = None, num_prompts: int | None = None,
                    check_launch: Callable[[LaunchRecord], None] | None = None) -> MeasuredConfig:
    """Measure one config under the contract; a failure is stored, then re-raised."""
    started = datetime.now(timezone.utc)
    run_dir.mkdir(parents=True, exist_ok=True)
    workload = contract.workload
    if concurrency is not None:
        workload = workload.model_copy(update={"concurrency": concurrency})
    launch: LaunchRecord | None = None
    common = dict(target=target, kind=kind, started_at=started, context_key=context_key,
                  fingerprint=fingerprint, run_id=run_id)
    try:
        with host.serve(spec, run_dir) as launch:
            if check_launch is not None:
                check_launch(launch)
            ready_at = time.monotonic()
            measurement = host.measure(
                bench, launch.base_url, launch.served_model, workload, contract.vocab_size,
                repeats=contract.repeats, warmups=contract.warmups,
                num_prompts=num_prompts or contract.num_prompts, records_dir=run_dir,
                max_model_len=contract.max_model_len,
            )
            measurement = in_engine_time(spec, measurement)
            measuring_s = time.monotonic() - ready_at
    except ServerError as exc:
        store.record_measurement(argv=exc.argv or (launch.argv if launch else []), env=spec.env,
                                 evidence=launch.evidence if launch else None, error=str(exc),
                                 log_path=str(run_dir / "server.log"), **common)
        raise
    row = store.record_measurement(argv=launch.argv, env=spec.env, evidence=launch.evidence,
                                   log_path=str(launch.log_path), measurement=measurement.model_dump(mode="json"),
                                   **common)
    return MeasuredConfig(measurement=measurement, launch=launch, measurement_id=row, measuring_s=measuring_s)


def run_sweep(*, host: Any, bench: Any, store: Any, target: str, spec: ServerSpec, contract: WorkloadContract,
              rungs: list[int], run_dir: Path, run_id: str | None = None,
              context_key: str | None = None, label: str = "sweep") -> list[tuple[int, Measurement]]:
    """One launch, then every rung of a concurrency ladder on the hot server."""
    run_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc)
    results: list[tuple[int, Measurement]] = []
    with host.serve(spec, run_dir) as launch:
        for rung in rungs:
            workload = contract.workload.model_copy(update={"concurrency": rung})
            num_prompts = None
            if workload.kind != "agentic":
                num_prompts = default_num_prompts(rung, workload.isl or 0, workload.osl or 0)
            measurement = host.measure(bench, launch.base_url, launch.served_model, workload, contract.vocab_size,
                                        repeats=1, warmups=default_warmups(rung), num_prompts=num_prompts,
                                        records_dir=run_dir / f"c{rung}",
                                        max_model_len=contract.max_model_len)
            measurement = in_engine_time(spec, measurement)
            store.record_measurement(target=target, kind=label, argv=launch.argv, env=spec.env, started_at=started,
                                     measurement=measurement.model_dump(mode="json"), evidence=launch.evidence,
                                     log_path=str(launch.log_path), context_key=context_key, run_id=run_id)
            results.append((rung, measurement))
    return results
