"""One profiled launch of a configuration: where its time goes, by the engine's own profiler.

The engine's module says how its profiler is switched on (EngineSpec.profiler: argv and
env pointing it at a folder, the start and stop routes, the trace files it writes). The
launch goes through the host like every other (reap, preflight, readiness, teardown on
every path); a short round warms the server up unprofiled, then the profiler is
started, one short round is measured, and it is stopped. The trace comes back with the
run folder and is reduced (core/profile/trace.py). Whatever keeps the profile from being
taken (no profiler for the engine, a server that will not start with it, a route that
answers an error, no trace written, a trace that does not read) is returned as the
reason, never raised: a profile is evidence, not a gate. A cancel still propagates.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import dagster as dg

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.spec import Profiler
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.core.profile.trace import TraceError, reduce_trace
from hyperloom_assets.core.results import ProfileResult
from hyperloom_assets.resources.measure import INTERRUPTS, in_engine_time

log = dg.get_dagster_logger("hyperloom.profile")

TRACE_FOLDER = "trace"
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


def _control(host: Any, url: str, timeout_s: float) -> None:
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


def _profiled_launch(host: Any, bench: Any, spec: ServerSpec, contract: WorkloadContract, run_dir: Path,
                     profiler: Profiler, trace_dir: str) -> tuple[list[str], float]:
    num_prompts = short_round(contract)
    with host.serve(spec, run_dir, label="profile") as launch:
        def round_(warmups: int):
            return host.measure(bench, launch.base_url, launch.served_model, contract.workload, contract.vocab_size,
                                repeats=1, warmups=warmups, num_prompts=num_prompts, records_dir=run_dir,
                                max_model_len=contract.max_model_len)
        if contract.warmups and not engine_for(spec.engine).simulated:  # the sim has no caches to warm
            round_(contract.warmups)  # compile caches and allocators settle before recording starts
        _control(host, launch.base_url + profiler.start_path, 60.0)
        try:
            measurement = in_engine_time(spec, round_(0))
        finally:
            _control(host, launch.base_url + profiler.stop_path, profiler.stop_timeout_s)
        local = run_dir / TRACE_FOLDER
        if Path(trace_dir) == local.resolve():  # on an SSH host the folder comes back at teardown
            find_trace(local, profiler.trace_glob, TRACE_WAIT_S)  # before teardown ends the writer
        return launch.argv, measurement.output_throughput


def run_profile(*, host: Any, bench: Any, spec: ServerSpec, contract: WorkloadContract, run_dir: Path) -> ProfileResult:
    """Profile one launch of `spec`; a profile that cannot be taken comes back with its reason."""
    engine = engine_for(spec.engine)
    result = ProfileResult(engine=spec.engine, taken=False, simulated=engine.simulated)
    if engine.profiler is None:
        return result.model_copy(update={"reason": f"engine {spec.engine!r} has no profiler this tool can drive"})
    run_dir.mkdir(parents=True, exist_ok=True)
    trace_dir = f"{host.served_path(run_dir)}/{TRACE_FOLDER}"
    profiled = profiled_spec(spec, engine.profiler, trace_dir)
    try:
        argv, tok_s = _profiled_launch(host, bench, profiled, contract, run_dir, engine.profiler, trace_dir)
        trace = find_trace(run_dir / TRACE_FOLDER, engine.profiler.trace_glob)
        summary = reduce_trace(trace)
    except INTERRUPTS:
        raise
    except ServerError as exc:
        return result.model_copy(update={"reason": f"the profiled server failed ({exc.error_class}): "
                                                   f"{str(exc).splitlines()[0]}", "argv": exc.argv or []})
    except (ProfileUnavailable, TraceError) as exc:
        return result.model_copy(update={"reason": str(exc)})
    except Exception as exc:  # noqa: BLE001 - a profile never fails the run; the reason says what happened
        return result.model_copy(update={"reason": f"{type(exc).__name__}: {exc}"})
    return result.model_copy(update={"taken": True, "summary": summary, "trace_path": str(trace), "argv": argv,
                                     "profiled_tok_s": tok_s})
