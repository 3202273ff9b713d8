"""The server and the benchmark client on separate CPUs of a CPU-only host.

Without a GPU the engine computes on the cores the client parses its streams on: a
client burst steals server time, the client reads latency the server never produced
(5-34% over the server's own e2e on a shared 2-core host, 2-3% pinned apart) and reports
itself saturated. So on such a host the client gets a CPU of its own (the last one this
process may use) and the server the rest, unless the host's config says otherwise
(`client_cpus`: "auto", "off", or the client's CPU ids, "3" or "2,3").

"auto" pins only when the server keeps at least MIN_SERVER_CPUS: vLLM CPU binds its
OpenMP worker to all but one of its CPUs and leaves that one to its API server and engine
core, so on one CPU all three share it. Measured on a 2-CPU host (benchmarks/noise.py
--compare-pinning): pinned, the demo target's server ran at half the throughput with
three times the launch-to-launch spread; there "auto" shares and `client_cpus: "1"` pins.

The server's process is pinned right after it starts, before it forks workers, which
inherit the mask; vLLM CPU's OpenMP auto-binding (VLLM_CPU_OMP_THREADS_BIND=auto)
chooses its cores from that mask, so its compute threads stay off the client's CPU. A CPU
list there instead ("0-3") binds them past the mask (vLLM's multiprocess executor, its
default, reads it), so a pinned server gets the engine's binding within the mask
(`bound_within`): the server's CPUs, a slot's among them, win over the operator's list.
The client pins only the thread that runs its rounds (and the threads that one starts),
so the rest of the step process keeps every CPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.measurement.serving import CpuPlacement, ServerError
from hyperloom_assets.resources.hosts.preflight import GpuToolOutputError, read_gpu_memory

AUTO, OFF = "auto", "off"  # the other values of the host config's client_cpus name CPUs: "3", "2,3"
MIN_SERVER_CPUS = 2


def plan_placement(setting: str, allowed: list[int], has_gpu: bool) -> CpuPlacement | None:
    """Who gets which CPUs, or None when they share all of them (a GPU host, too few CPUs, "off")."""
    if setting == OFF:
        return None
    if setting == AUTO:
        if has_gpu or len(allowed) < MIN_SERVER_CPUS + 1:
            return None
        client, reason = [allowed[-1]], f"auto: a CPU-only host with CPUs {allowed}"
    else:
        client, reason = sorted({int(cpu) for cpu in setting.split(",")}), f"host config client_cpus={setting}"
        foreign = [cpu for cpu in client if cpu not in allowed]
        if foreign:
            raise ServerError("preflight", f"host config client_cpus={setting!r}: CPUs {foreign} are not among "
                                           f"the CPUs this host may use, {allowed}")
    server = [cpu for cpu in allowed if cpu not in client]
    if not server:
        raise ServerError("preflight", f"host config client_cpus={setting!r} leaves no CPU for the server "
                                       f"(this host may use {allowed})")
    return CpuPlacement(server_cpus=server, client_cpus=client, reason=reason)


def slot_placement(setting: str, slot_cpus: list[int], has_gpu: bool) -> CpuPlacement:
    """Within a slot's CPUs (core/fleet/slots.py): split as plan_placement would, else both share
    the slot's CPUs, never another slot's. A slotted host's `client_cpus` is auto or off (hosts.py)."""
    placement = plan_placement(AUTO, slot_cpus, has_gpu) if setting != OFF else None
    if placement is not None:
        return placement.model_copy(update={"reason": f"slot CPUs {slot_cpus}, {placement.reason}"})
    return CpuPlacement(server_cpus=slot_cpus, client_cpus=slot_cpus,
                        reason=f"slot CPUs {slot_cpus}, shared by the server and the client")


def host_placement(setting: str, slot_cpus: list[int] | None = None) -> CpuPlacement | None:
    """plan_placement for this machine (slot_placement within a slot's CPUs): its usable CPUs
    and whether it has a GPU."""
    try:
        reading = read_gpu_memory()
        has_gpu = bool(reading and reading[1])
    except (GpuToolOutputError, OSError, ValueError):
        if not slot_cpus:
            return None  # a GPU tool that fails to answer means a GPU host; the preflight reports it
        has_gpu = True
    if slot_cpus:
        return slot_placement(setting, slot_cpus, has_gpu)
    return plan_placement(setting, sorted(os.sched_getaffinity(0)), has_gpu)


def bound_within(env: dict[str, str], engine: EngineSpec | None, server_cpus: list[int] | None) -> dict[str, str]:
    """The launch env of a server pinned to `server_cpus`, with the engine's own thread binding
    kept within them: a value naming CPUs gives way to the engine's default binding in its mask."""
    name = engine.cpu_bind_env if engine else None
    if not server_cpus or name is None or name not in env or env[name] in engine.cpu_bind_within_mask:
        return env
    return {**env, name: engine.cpu_bind_within_mask[0]}


def pin_process(pid: int, cpus: list[int]) -> None:
    """Every thread of the process and of its descendants onto `cpus` (gone ones skipped)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            tids = [thread.id for thread in process.threads()]
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:
                continue


@contextmanager
def pinned_thread(cpus: list[int] | None) -> Iterator[None]:
    """The calling thread (and threads it starts meanwhile) on `cpus`; its mask restored after."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)  # pid 0: the calling thread only, on Linux
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
