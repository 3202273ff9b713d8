"""Where a configuration's time goes, by the engine's own profiler, on a server already up.

The engine's module says how its profiler is switched on (EngineSpec.profiler: argv and
env pointing it at a folder, the start and stop routes, the trace files it writes). The
profiler is configured at launch and idle until started, so the baseline's own server
carries it: after the baseline's measured rounds the server is hot, the profiler is
started, one short round is measured, and it is stopped (`ServerProfile`, used by
resources/measure.py's `after_rounds`). `benchmarks/profiler_configured.py` measures
that a configured, idle profiler leaves the measured rounds' throughput alone.

The trace comes back with the run folder (on an SSH host at teardown) and is reduced
(core/profile/trace.py). Whatever keeps the profile from being taken (no profiler for
the engine, a route that answers an error, no trace written, a trace that does not
read) becomes the reason, never an error: a profile is evidence, not a gate. A cancel
still propagates.
"""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.spec import Profiler
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.core.profile.trace import TraceError, reduce_trace
from hyperloom_assets.core.results import ProfileResult
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.measure import INTERRUPTS, in_engine_time

log = dg.get_dagster_logger("hyperloom.profile")

TRACE_FOLDER = "trace"
ROUND_FOLDER = "profile"  # the profiled round's request records, apart from the measured rounds'
TRACE_WAIT_S = 30.0  # a worker may finish writing its trace just after /stop_profile answers


class ProfileUnavailable(RuntimeError):
    """Why no profile was taken; the asset reports it as a warning."""


def profiled_spec(spec: ServerSpec, profiler: Profiler, trace_dir: str) -> ServerSpec:
    """The running configuration with the profiler on: its argv last, its env on top."""
    return spec.model_copy(update={"server_args": [*spec.server_args, *profiler.server_args(trace_dir)],
                                   "env": {**spec.env, **profiler.env(trace_dir)}})


def short_round(contract: WorkloadContract) -> int | None:
    """Two waves of the workload's concurrency: enough steady-state steps, little trace."""
    if contract.num_prompts is None:
        return None  # agentic: the trace is the round
    return min(contract.num_prompts, 2 * contract.workload.concurrency)


def _control(host: Host, url: str, timeout_s: float) -> None:
    reply = host.post(url, timeout_s)
    if "error" in reply:
        raise ProfileUnavailable(f"POST {url}: {reply['error']}")
    if reply["status"] != 200:
        raise ProfileUnavailable(f"POST {url} answered {reply['status']}: {reply.get('body', '').strip()[:300]}")


def find_trace(folder: Path, pattern: str, wait_s: float = 0.0) -> Path:
    """The largest trace file the profiler wrote (the worker's, not the API server's stub)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = [p for p in folder.glob(pattern) if p.is_file() and p.stat().st_size > 0]
        if found or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if not found:
        raise ProfileUnavailable(f"the profiler wrote no {pattern} under {folder}")
    return max(found, key=lambda p: p.stat().st_size)


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, ServerError):
        return f"the profiled server failed ({exc.error_class}): {str(exc).splitlines()[0]}"
    if isinstance(exc, (ProfileUnavailable, TraceError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class ServerProfile:
    """One profile of a configuration, taken on a server launched with the profiler configured.

    `launch_spec` is what to launch; `capture` runs on the ready server (after the rounds
    that matter); `result` reads the trace once the server is torn down.
    """

    def __init__(self, host: Host, bench: BenchmarkClient, spec: ServerSpec, contract: WorkloadContract, run_dir: Path):
        engine = engine_for(spec.engine)
        self.host, self.bench, self.spec, self.contract, self.run_dir = host, bench, spec, contract, Path(run_dir)
        self.profiler = engine.profiler
        self.trace_dir = f"{host.served_path(self.run_dir)}/{TRACE_FOLDER}"
        self.argv: list[str] = []
        self.tok_s: float | None = None
        self.reason: str | None = None
        if self.profiler is None:
            self.reason = f"engine {spec.engine!r} has no profiler this tool can drive"

    def launch_spec(self) -> ServerSpec:
        """The configuration with the profiler configured (idle until started), or as it is."""
        if self.profiler is None:
            return self.spec
        return profiled_spec(self.spec, self.profiler, self.trace_dir)

    def capture(self, launch: LaunchRecord, warmups: int = 0) -> None:
        """Start the profiler, one short round, stop it; a failure is kept as the reason."""
        if self.profiler is None:
            return
        self.argv = launch.argv
        try:
            self._profiled_round(launch, warmups)
        except INTERRUPTS:
            raise
        except Exception as exc:  # noqa: BLE001 - a profile never fails the run; the reason says what happened
            self.reason = _failure_reason(exc)
            log.warning("profile not taken: %s", self.reason)

    def _profiled_round(self, launch: LaunchRecord, warmups: int) -> None:
        records = self.run_dir / ROUND_FOLDER

        def round_(warm: int):
            return self.host.measure(self.bench, launch.base_url, launch.served_model, self.contract.workload,
                                     self.contract.vocab_size, repeats=1, warmups=warm,
                                     num_prompts=short_round(self.contract), records_dir=records,
                                     max_model_len=self.contract.max_model_len, cpus=launch.cpus)
        if warmups:
            round_(warmups)  # compile caches and allocators settle before recording starts
        _control(self.host, launch.base_url + self.profiler.start_path, 60.0)
        log.info("profile: profiler started for one short round")
        try:
            self.tok_s = in_engine_time(self.spec, round_(0)).output_throughput
        finally:
            _control(self.host, launch.base_url + self.profiler.stop_path, self.profiler.stop_timeout_s)
        local = self.run_dir / TRACE_FOLDER
        if Path(self.trace_dir) == local.resolve():  # on an SSH host the folder comes back at teardown
            find_trace(local, self.profiler.trace_glob, TRACE_WAIT_S)  # before teardown ends the writer

    def result(self) -> ProfileResult:
        """The reduced trace, after teardown; or why there is none."""
        engine = engine_for(self.spec.engine)
        result = ProfileResult(engine=self.spec.engine, taken=False, source=engine.profile_source(), argv=self.argv)
        if self.reason is None and not self.argv:
            self.reason = "the profiled server never became ready"
        if self.reason is not None:
            return result.model_copy(update={"reason": self.reason})
        try:
            trace = find_trace(self.run_dir / TRACE_FOLDER, self.profiler.trace_glob)
            summary = reduce_trace(trace)
        except INTERRUPTS:
            raise
        except Exception as exc:  # noqa: BLE001 - as in capture
            return result.model_copy(update={"reason": _failure_reason(exc)})
        return result.model_copy(update={"taken": True, "summary": summary, "trace_path": str(trace),
                                         "profiled_tok_s": self.tok_s})


def run_profile(*, host: Host, bench: BenchmarkClient, spec: ServerSpec, contract: WorkloadContract, run_dir: Path) -> ProfileResult:
    """A launch of its own for `spec`, warmed up, then profiled; the reason when it cannot be taken."""
    run_dir.mkdir(parents=True, exist_ok=True)
    profile = ServerProfile(host, bench, spec, contract, run_dir)
    if profile.profiler is None:
        return profile.result()
    try:
        with host.serve(profile.launch_spec(), run_dir, label="profile") as launch:
            profile.capture(launch, warmups=contract.warmups if profile.profiler.warms_up else 0)
    except INTERRUPTS:
        raise
    except ServerError as exc:
        profile.reason, profile.argv = _failure_reason(exc), exc.argv or []
    return profile.result()
