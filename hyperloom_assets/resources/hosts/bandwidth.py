"""The host's memory bandwidth and a rough CPU compute peak, measured once per host.

On a machine without a GPU the roofline needs the CPU's numbers. They are measured
with numpy (a large array copy; a float32 matmul), the best of a few runs, and kept in
a JSON file under a cache folder, keyed by the host, so each host is measured once.
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.roofline.roofline import Hardware

DEFAULT_ARRAY_BYTES = 256 * 1024 * 1024
DEFAULT_MATMUL_N = 2048
DEFAULT_RUNS = 5


class HostMeasurement(Frozen):
    host_key: str
    hostname: str
    cpu_model: str
    cores: int
    mem_bw_gbps: float  # read plus write bytes of one copy, GB/s
    fp32_tflops: float
    array_bytes: int
    matmul_n: int
    runs: int
    measured_at: str


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else (platform.processor() or platform.machine())


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def host_key() -> str:
    """What makes two measurements comparable: the host, its CPU and the cores we may use."""
    return f"{socket.gethostname()}|{_cpu_model()}|{_cores()}"


def measure_memory_bandwidth(array_bytes: int = DEFAULT_ARRAY_BYTES, runs: int = DEFAULT_RUNS) -> float:
    """GB/s of a numpy array copy, counting the bytes read and the bytes written."""
    source = np.ones(max(array_bytes // 8, 1), dtype=np.float64)
    target = np.zeros_like(source)  # zeros_like touches the pages, so no fault is timed
    best = float("inf")
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.nbytes / max(best, 1e-9) / 1e9


def measure_fp32_tflops(matmul_n: int = DEFAULT_MATMUL_N, runs: int = 3) -> float:
    """TFLOP/s of a float32 n x n matmul with numpy's BLAS (all threads it uses)."""
    rng = np.random.default_rng(0)
    left = rng.standard_normal((matmul_n, matmul_n), dtype=np.float32)
    right = rng.standard_normal((matmul_n, matmul_n), dtype=np.float32)
    left @ right  # warm the BLAS thread pool
    best = float("inf")
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        left @ right
        best = min(best, time.perf_counter() - start)
    return 2 * matmul_n ** 3 / max(best, 1e-9) / 1e12


def _cache_file(cache_dir: Path, key: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key.split("|", 1)[0]) or "host"
    return cache_dir / f"host_hardware_{safe}.json"


def _read_cached(path: Path, key: str) -> HostMeasurement | None:
    try:
        cached = HostMeasurement.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError):
        return None  # missing or unreadable: measure again
    return cached if cached.host_key == key else None


def host_measurement(cache_dir: Path, array_bytes: int = DEFAULT_ARRAY_BYTES,
                     matmul_n: int = DEFAULT_MATMUL_N, runs: int = DEFAULT_RUNS) -> HostMeasurement:
    """This host's numbers: from the cache when this host measured them before."""
    key = host_key()
    path = _cache_file(Path(cache_dir), key)
    cached = _read_cached(path, key)
    if cached is not None:
        return cached
    measurement = HostMeasurement(
        host_key=key, hostname=socket.gethostname(), cpu_model=_cpu_model(), cores=_cores(),
        mem_bw_gbps=measure_memory_bandwidth(array_bytes, runs),
        fp32_tflops=measure_fp32_tflops(matmul_n, min(runs, 3)),
        array_bytes=array_bytes, matmul_n=matmul_n, runs=runs,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.tmp")
    partial.write_text(measurement.model_dump_json(indent=2) + "\n")
    partial.replace(path)  # a reader never sees half a file
    return measurement


def host_hardware(cache_dir: Path, array_bytes: int = DEFAULT_ARRAY_BYTES,
                  matmul_n: int = DEFAULT_MATMUL_N, runs: int = DEFAULT_RUNS) -> Hardware:
    """The CPU host as roofline hardware: measured bandwidth, estimated compute peak."""
    m = host_measurement(cache_dir, array_bytes, matmul_n, runs)
    return Hardware(
        name=f"cpu ({m.cores} cores, {m.cpu_model})", kind="cpu", devices=1,
        mem_bw_gbps=m.mem_bw_gbps, peak_tflops=m.fp32_tflops,
        source=(f"measured on {m.hostname} at {m.measured_at}: numpy copy of {m.array_bytes / 2**20:.0f} MiB "
                f"(read+write), float32 {m.matmul_n}x{m.matmul_n} matmul; best of {m.runs}"),
    )
