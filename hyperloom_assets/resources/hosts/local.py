"""GPU hosts as resources: the local host serves on this machine (a Host, host.py).

`LocalHost.serve(spec, run_dir)` is the measurement protocol's launch half, through the
one lifecycle every host shares (lifecycle.py) with the steps run in-process: reap
orphans, preflight, launch in a process group, wait for `/health`, read the launch
evidence, and tear down on every exit path, a cancel included (signals are held while
the teardown runs). Whatever goes wrong before the server is ready surfaces as a
ServerError after the teardown. While a run is in progress (`watching_run`, entered by
the fleet resource), the host records the run's worker process and releases the runs
whose worker died (run_workers.py), so a killed run never holds its host.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import dagster as dg

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.fleet.slots import Slot
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import CpuPlacement, LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.resources.bench.client import BenchmarkClient, ProgressFn
from hyperloom_assets.resources.hosts.agent_call import bench_in_process_of_its_own, bench_limit_s, bench_request
from hyperloom_assets.resources.hosts.agent import facts as agent_facts
from hyperloom_assets.resources.hosts.cpu_pinning import AUTO, pinned_thread
from hyperloom_assets.resources.hosts.engines import identity, installed_in
from hyperloom_assets.resources.hosts.host_side import control_post, preflight_problems, slot_facts
from hyperloom_assets.resources.hosts.lifecycle import LocalTransport, serve_on
from hyperloom_assets.resources.hosts.preflight import read_gpu_memory
from hyperloom_assets.resources.hosts.reaper import ReapReport, reap_orphans
from hyperloom_assets.resources.hosts.proposal_checks import proposal_checks
from hyperloom_assets.resources.hosts.run_workers import CancelWatch, dead_workers, record_worker

log = dg.get_dagster_logger("hyperloom.host")


def default_state_dir() -> Path:
    home = os.environ.get("DAGSTER_HOME")
    return Path(home) / "hyperloom" if home else Path.cwd() / ".cache" / "hyperloom"


class LocalHost(dg.ConfigurableResource):
    """This machine as a serving host."""

    name: str = "local"
    state_dir: str | None = None  # default: $DAGSTER_HOME/hyperloom, else ./.cache/hyperloom
    check_foreign_processes: bool = True
    teardown_term_wait_s: float = 15.0
    python: str | None = None  # the interpreter with the engine; default: this venv's
    # "auto": on a CPU-only host with 3+ CPUs the benchmark client gets the last CPU and the
    # server the rest (cpu_pinning.py); "off" shares them; "2,3" names the client's CPUs.
    client_cpus: str = AUTO
    slot: dict | None = None  # the run's slot on this host (core/fleet/slots.Slot), from the fleet

    def state_path(self) -> Path:
        return Path(self.state_dir) if self.state_dir else default_state_dir()

    def pid_dir(self) -> Path:
        # Stand-in hosts on this machine keep their own pidfiles, so one host's reaper
        # (or its recovery) never touches another's servers.
        if self.name == "local":
            return self.state_path() / "pids"
        return self.state_path() / "hosts" / self.name / "pids"

    def workers_dir(self) -> Path:
        """Run workers of this control machine (every host's runs start here)."""
        return self.state_path() / "workers"

    @contextmanager
    def watching_run(self, instance: dg.DagsterInstance, run_id: str) -> Iterator[None]:
        """For the run in progress: release dead runs, reap their servers, record this worker and
        turn a Terminate into an interrupt (CancelWatch) until the run's resources are torn down."""
        self.release_dead_runs(instance, run_id)
        self.reap_orphans()
        worker_file = record_worker(self.workers_dir(), run_id)
        watch = CancelWatch(instance, run_id).start()
        try:
            yield
        finally:
            watch.stop()
            worker_file.unlink(missing_ok=True)

    def release_dead_runs(self, instance: dg.DagsterInstance, current_run_id: str) -> list[str]:
        """Mark runs whose worker died failed (canceled if they were being terminated), so their
        host's run slot is free again, and free any concurrency slots they held; returns their run ids."""
        released = []
        for path, worker in dead_workers(self.workers_dir()):
            run = instance.get_run_by_id(worker.run_id) if worker.run_id != current_run_id else None
            if run is not None and not run.is_finished:
                message = (f"the run worker of run {worker.run_id} (pid {worker.pid}) is gone; marked by run "
                           f"{current_run_id}, which frees its host")
                log.warning(message)
                if run.status == dg.DagsterRunStatus.CANCELING:
                    instance.report_run_canceled(run, message)
                else:
                    instance.report_run_failed(run, message)
                released.append(worker.run_id)
            if run is not None and instance.event_log_storage.supports_global_concurrency_limits:
                instance.event_log_storage.free_concurrency_slots_for_run(worker.run_id)
            path.unlink(missing_ok=True)
        return released

    def python_executable(self, spec: ServerSpec) -> Path:
        if spec.python:
            return Path(spec.python)
        return Path(self.python) if self.python else Path(sys.executable)

    def gpu_names(self) -> list[str]:
        reading = read_gpu_memory()
        return [gpu.name for gpu in reading[1]] if reading else []

    def facts(self) -> dict:
        """What `hyperloom hosts check` prints, from the same host-agent op an SSH host runs."""
        return {**agent_facts({"python": self.python}), "clock_skew_s": 0.0}

    def slot_facts(self) -> dict:
        """The GPU tool, its topology matrix and the CPUs (host_side.slot_facts), read here."""
        return slot_facts()

    def proposal_checks(self, request: dict) -> dict:
        """The engine's parser and `git apply --check` over a model's proposals (proposal_checks.py)."""
        return proposal_checks(request)

    def engine_identity(self, spec: ServerSpec) -> str | None:
        """`distribution version` of the spec's engine in its serving environment."""
        engine = engine_for(spec.engine)
        return identity(engine, installed_in(engine, self.python_executable(spec)))

    def preflight(self, port: int) -> None:
        """Raise ServerError("preflight") naming whatever makes this host unfit to serve."""
        problems = preflight_problems(port, self.check_foreign_processes)
        if problems:
            raise ServerError("preflight", f"host {self.name!r} is not free: " + "; ".join(problems))

    def reap_orphans(self) -> ReapReport:
        """Tear down servers of earlier runs on this host whose launcher is gone (docs/design.md, invariant 8)."""
        report = reap_orphans(self.pid_dir(), term_wait_s=self.teardown_term_wait_s)
        if report.reaped or report.survivors:
            log.warning("reaped orphan servers %s; survivors %s", report.reaped, report.survivors)
        return report

    @contextmanager
    def serve(self, spec: ServerSpec, run_dir: Path, label: str | None = None) -> Iterator[LaunchRecord]:
        """A ready server for `spec`, torn down when the block ends; `label` names it in the log."""
        transport = LocalTransport(self.pid_dir(), self.check_foreign_processes, self.teardown_term_wait_s,
                                   self.client_cpus, Slot.model_validate(self.slot) if self.slot else None)
        with serve_on(transport, self.name, spec, self.python_executable(spec), run_dir, label) as launch:
            yield launch

    def measure(self, bench: BenchmarkClient, base_url: str, served_model: str, workload: Workload, vocab_size: int,
                repeats: int, warmups: int | None = None, num_prompts: int | None = None,
                records_dir: Path | None = None, max_model_len: int | None = None, timeout_s: float | None = None,
                progress: ProgressFn | None = None, cpus: CpuPlacement | None = None) -> Measurement:
        """The benchmark client, here beside the server, on the client's CPUs of the launch's placement.
        On a slot, as a process of its own (the host agent's `bench`, as an SSH host runs it): the clients
        of a run's slots at once then share no interpreter, so none slows another's by holding the GIL."""
        client_cpus = cpus.client_cpus if cpus else None
        if self.slot is None:
            with pinned_thread(client_cpus):
                return bench.measure(base_url, served_model, workload, vocab_size, repeats, warmups=warmups,
                                     num_prompts=num_prompts, records_dir=records_dir, max_model_len=max_model_len,
                                     timeout_s=timeout_s, progress=progress)
        records = str(Path(records_dir).resolve()) if records_dir else str(self.state_path() / "runs" / "bench")
        request = bench_request(bench, base_url, served_model, workload, vocab_size, repeats, warmups, num_prompts,
                                records, max_model_len, timeout_s, client_cpus)
        return Measurement.model_validate(bench_in_process_of_its_own(self.name, request,
                                                                      bench_limit_s(bench, timeout_s), progress))

    def post(self, url: str, timeout_s: float) -> dict:
        """A server's control route (host_side.control_post), from here beside it."""
        return control_post(url, timeout_s)

    def served_path(self, run_dir: Path) -> str:
        """Where a server of this step writes files that come back with its run folder: the folder itself."""
        return str(Path(run_dir).resolve())
