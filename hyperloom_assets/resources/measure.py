"""One measurement of one server configuration: the protocol every asset shares.

Launch (through the host resource: reap, preflight, start, readiness), an optional
evidence check, warm-up and repeats (through the benchmark client), teardown (the
host's context manager, on every path), and a row in the result store whatever
happened. Assets call this; it acts only through the resources it is given.

Every measurement is bounded in all: by `overtime_s` (from readiness) where the caller
gives one, and always by the client's own limit (its workload at a floor speed, at most
`BenchmarkClient.max_measurement_s`: core/measurement/limits.py); past it the client's
round is cancelled, the failure stored, the server torn down and MeasurementOvertime raised. Progress (the server
starting and ready, each round's throughput, a heartbeat in long rounds, each rung of a
sweep) goes to Dagster's logger, so it reaches the run log and `dagster job execute`'s
stderr at INFO.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from hyperloom_assets.core.decisions.trial_record import TrialMeasurement
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.capacity import rate_shortfall
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.engine_time import to_engine_time
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.objective import goodputs_if_measured
from hyperloom_assets.core.measurement.serving import REQUEST_ERROR_CLASSES, LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.core.measurement.workloads import default_num_prompts, default_warmups, round_seed
from hyperloom_assets.core.models import Strict
from hyperloom_assets.resources.bench.client import BenchmarkClient, BenchOvertime, RoundProgress
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.signals import signals_deferred
from hyperloom_assets.resources.store.results import ResultStore

log = dg.get_dagster_logger("hyperloom.measure")
T = TypeVar("T")

INTERRUPTS = (KeyboardInterrupt, dg.DagsterExecutionInterruptedError)


class MeasuredConfig(Strict):
    measurement: Measurement
    launch: LaunchRecord
    measurement_id: int
    measuring_s: float  # from readiness to the end of the last repeat

    def as_trial_launch(self, env: dict[str, str]) -> TrialMeasurement:
        """This launch as one the climb judges (core/decisions): its repeats, goodputs and telemetry."""
        m = self.measurement
        return TrialMeasurement(throughputs=m.repeats_throughputs(), goodputs=goodputs_if_measured(m),
                                measuring_s=self.measuring_s, measurement_id=self.measurement_id,
                                argv=self.launch.argv, env=env, telemetry=m.telemetry, latency=m.latency,
                                ran_on=self.launch.slot_text())


class MeasurementOvertime(RuntimeError):
    """Measuring ran past its limit: the round was cancelled and the server torn down."""

    def __init__(self, measuring_s: float, limit_s: float, argv: list[str], why: str = ""):
        self.measuring_s, self.limit_s, self.argv = measuring_s, limit_s, argv
        set_by = f" ({why})" if why else ""
        super().__init__(f"overtime: measuring passed {limit_s:.1f} s{set_by}; stopped after {measuring_s:.1f} s")


def engine_scale(spec: ServerSpec) -> float:
    """How much faster than its engine's own time a server runs (a sim's time scale; a real engine's 1)."""
    return engine_for(spec.engine).time_scale_of(spec.server_args)


def in_engine_time(spec: ServerSpec, measurement: Measurement) -> Measurement:
    """A sim's numbers in its simulated GPU's time; real engines' as measured."""
    return to_engine_time(measurement, engine_scale(spec))


def counted_in_engine_time(spec: ServerSpec, workload):
    """The workload with the server's time scale on its SLO, so the client counts goodput against
    limits in the engine's time (metrics.meets_slo): scaling a sim's counted rate afterwards cannot
    recount requests that met the limits only on the client's sped-up clock."""
    scale = engine_scale(spec)
    if workload.slo is None or scale == 1.0:
        return workload
    return workload.model_copy(update={"slo": workload.slo.model_copy(update={"time_scale": scale})})


def round_logger(label: str, spec: ServerSpec) -> Callable[[RoundProgress], None]:
    """Each finished round's throughput (in the engine's time) and a heartbeat while one runs."""
    scale = engine_scale(spec)

    def report(progress: RoundProgress) -> None:
        if progress.metrics is None:
            log.info("%s: %s under way, %d of %d requests done after %.0f s", label, progress.label,
                     progress.done, progress.total, progress.elapsed_s)
        else:
            log.info("%s: %s %.1f output tok/s (%d requests in %.1f s)", label, progress.label,
                     progress.metrics.output_throughput / scale, progress.done, progress.elapsed_s)

    return report


def _contract_rounds(host: Host, bench: BenchmarkClient, launch: LaunchRecord, spec: ServerSpec, contract: WorkloadContract,
                     workload, run_dir: Path, label: str, num_prompts: int | None,
                     overtime_s: float | None) -> Measurement:
    """The contract's warm-up and repeats on a ready server, in the engine's own time."""
    workload = counted_in_engine_time(spec, workload)
    measurement = host.measure(bench, launch.base_url, launch.served_model, workload, contract.vocab_size,
                               repeats=contract.repeats, warmups=contract.warmups, num_prompts=num_prompts,
                               records_dir=run_dir, max_model_len=contract.max_model_len, timeout_s=overtime_s,
                               progress=round_logger(label, spec), cpus=launch.cpus)
    measurement = in_engine_time(spec, measurement)
    for text in measurement.latency.warnings() if measurement.latency else []:
        log.warning("%s: %s", label, text)
    for index, behind in enumerate(rate_shortfall(r.arrivals) if r.arrivals else None for r in measurement.repeats):
        if behind:  # timed from the send, as vLLM's, the wait for a slot is in no latency of this round
            log.warning("%s: repeat %d: %s: the server did not keep up with the workload's request_rate",
                        label, index + 1, behind)
    return measurement


def run_measurement(*, host: Host, bench: BenchmarkClient, store: ResultStore, target: str, kind: str, spec: ServerSpec,
                    contract: WorkloadContract, run_dir: Path, run_id: str | None = None,
                    context_key: str | None = None, fingerprint: str | None = None,
                    concurrency: int | None = None, num_prompts: int | None = None,
                    check_launch: Callable[[LaunchRecord], None] | None = None,
                    overtime_s: float | None = None,
                    after_rounds: Callable[[LaunchRecord], None] | None = None) -> MeasuredConfig:
    """Measure one config under the contract; a failure is stored, then re-raised.

    `after_rounds` runs on the same server once the measured rounds are over (a profile,
    a sweep), so what it asks costs no launch of its own and cannot touch the rounds.
    """
    started = datetime.now(timezone.utc)
    run_dir.mkdir(parents=True, exist_ok=True)
    workload = contract.workload
    if concurrency is not None:
        workload = workload.model_copy(update={"concurrency": concurrency})
    launch: LaunchRecord | None = None
    label = f"{kind} {fingerprint}" if fingerprint else kind
    common = dict(target=target, kind=kind, started_at=started, context_key=context_key,
                  fingerprint=fingerprint, run_id=run_id)

    def record_failure(error: str, argv: list[str] | None = None) -> None:
        store.record_measurement(argv=argv or (launch.argv if launch else []), env=spec.env,
                                 evidence=launch.evidence if launch else None, error=error,
                                 log_path=str(run_dir / "server.log"), **common)

    ready_at = time.monotonic()
    try:
        with host.serve(spec, run_dir, label=label) as launch:
            if check_launch is not None:
                check_launch(launch)
            ready_at = time.monotonic()
            measurement = _contract_rounds(host, bench, launch, spec, contract, workload, run_dir, label,
                                           num_prompts or contract.num_prompts, overtime_s)
            measuring_s = time.monotonic() - ready_at
            if after_rounds is not None:
                after_rounds(launch)
    except ServerError as exc:
        if exc.error_class in REQUEST_ERROR_CLASSES:  # ready, then misbehaved: the client's round failed
            exc.argv = exc.argv or (launch.argv if launch else [])
            log.warning("%s: the server misbehaved while measured (%s); its server is torn down", label,
                        exc.error_class)
        record_failure(str(exc), exc.argv)
        raise
    except BenchOvertime as exc:
        log.warning("%s: stopped at its time limit (%.1f s of measuring; %s); its server is torn down",
                    label, exc.elapsed_s, exc.why or "the caller's")
        overtime = MeasurementOvertime(time.monotonic() - ready_at, exc.limit_s, launch.argv if launch else [], exc.why)
        record_failure(str(overtime))
        raise overtime from exc
    except INTERRUPTS:
        with signals_deferred():  # a second signal must not cut the record short
            record_failure("cancelled: the run was terminated during this measurement")
        raise
    row = store.record_measurement(argv=launch.argv, env=spec.env, evidence=launch.evidence,
                                   log_path=str(launch.log_path), measurement=measurement.model_dump(mode="json"),
                                   **common)
    return MeasuredConfig(measurement=measurement, launch=launch, measurement_id=row, measuring_s=measuring_s)


def run_on_server(host: Host, spec: ServerSpec, run_dir: Path, work: Callable[[LaunchRecord], T]) -> T:
    """One launch of `spec`, `work` on it once ready, and the server torn down on every path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with host.serve(spec, run_dir, label=run_dir.name) as launch:
        return work(launch)


def run_sweep(*, host: Host, bench: BenchmarkClient, store: ResultStore, target: str, spec: ServerSpec, contract: WorkloadContract,
              rungs: list[int], run_dir: Path, run_id: str | None = None,
              context_key: str | None = None, label: str = "sweep",
              fingerprint: str | None = None) -> list[tuple[int, Measurement]]:
    """One launch, then every rung of a concurrency ladder on the hot server."""
    return run_on_server(host, spec, run_dir, lambda launch: sweep_rungs(
        host=host, bench=bench, store=store, target=target, spec=spec, contract=contract, rungs=rungs, launch=launch,
        run_dir=run_dir, run_id=run_id, context_key=context_key, label=label, fingerprint=fingerprint))


def sweep_rungs(*, host: Host, bench: BenchmarkClient, store: ResultStore, target: str, spec: ServerSpec, contract: WorkloadContract,
                rungs: list[int], launch: LaunchRecord, run_dir: Path, run_id: str | None = None,
                context_key: str | None = None, label: str = "sweep",
                fingerprint: str | None = None) -> list[tuple[int, Measurement]]:
    """Every rung of a concurrency ladder on a server that is up: each its own warm-up and round."""
    results: list[tuple[int, Measurement]] = []
    for number, rung in enumerate(rungs, start=1):
        workload = contract.workload.model_copy(update={"concurrency": rung})
        num_prompts = None
        if workload.kind != "agentic":
            num_prompts = default_num_prompts(rung, workload.isl or 0, workload.osl or 0)
        measurement = load_round(host=host, bench=bench, store=store, target=target, spec=spec, contract=contract,
                                 launch=launch, workload=workload, num_prompts=num_prompts,
                                 records_dir=run_dir / f"c{rung}",
                                 label=f"{run_dir.name} rung {number} of {len(rungs)} (concurrency {rung})",
                                 kind=label, run_id=run_id, context_key=context_key, fingerprint=fingerprint)
        results.append((rung, measurement))
    return results


def load_round(*, host: Host, bench: BenchmarkClient, store: ResultStore, target: str, spec: ServerSpec,
               contract: WorkloadContract, launch: LaunchRecord, workload, num_prompts: int | None,
               records_dir: Path, label: str, kind: str, run_id: str | None = None,
               context_key: str | None = None, fingerprint: str | None = None,
               timeout_s: float | None = None) -> Measurement:
    """One warm-up and one measured round at a load of its own on a server that is up, stored as `kind`
    with the fingerprint of the config that server was launched with (planning/fingerprints.py);
    within `timeout_s` where given (a capacity probe's), always within the client's own limit.

    Its prompts are its own (a dataset seed drawn from the label): the validation's rounds on
    this server already sent the contract's, and re-sending them would read the engine's
    prefix cache as speed.
    """
    started = datetime.now(timezone.utc)
    workload = counted_in_engine_time(spec, workload.model_copy(update={"seed": round_seed(workload.seed, label)}))
    warmups = default_warmups(workload.concurrency, engine_for(spec.engine).compiles_on_first_use)
    common = dict(target=target, kind=kind, argv=launch.argv, env=spec.env, started_at=started,
                  evidence=launch.evidence, log_path=str(launch.log_path), context_key=context_key, run_id=run_id,
                  fingerprint=fingerprint)
    began = time.monotonic()
    try:
        measurement = host.measure(bench, launch.base_url, launch.served_model, workload, contract.vocab_size,
                                   repeats=1, warmups=warmups, num_prompts=num_prompts, records_dir=records_dir,
                                   max_model_len=contract.max_model_len, timeout_s=timeout_s,
                                   progress=round_logger(label, spec), cpus=launch.cpus)
    except BenchOvertime as exc:  # the limit: stored as a failure, the server left to its caller
        overtime = MeasurementOvertime(time.monotonic() - began, exc.limit_s, launch.argv, exc.why)
        log.warning("%s: stopped at its time limit (%s)", label, exc)
        store.record_measurement(error=str(overtime), **common)
        raise overtime from exc
    measurement = in_engine_time(spec, measurement)
    store.record_measurement(measurement=measurement.model_dump(mode="json"), **common)
    log.info("%s: %.1f output tok/s", label, measurement.output_throughput)
    return measurement
