"""Measured costs the sim's perf model reads, as data: collectives per GPU and TP size, GEMM
throughput per GPU and dtype, and the engine's CPU work per step per engine version. Pure data.

Every figure has a unit and a source. A GPU without a measurement of its own borrows
another's and says so (`borrowed`), and a figure that is an estimate rather than a
measurement says that in its source. A calibration profile (calibration.py) scales these
tables (`allreduce_scale`, `compute_scale`, `cpu_scale`) rather than replacing them, so
their shape (by message size, by token count, by engine version) survives a fit.
"""

from __future__ import annotations

import bisect
import math

from pydantic import Field

from hyperloom_assets.core.models import Frozen

KIB, MIB = 1024, 1024 * 1024


def piecewise(points: list[tuple[float, float]], x: float) -> float:
    """y at x on the polyline through `points` (ascending x): the first y below them, the last
    segment's slope above them (a transfer larger than any measured one costs its bandwidth)."""
    xs = [p[0] for p in points]
    if x <= xs[0] or len(points) == 1:
        return points[0][1]
    index = min(bisect.bisect_left(xs, x), len(points) - 1)
    (x0, y0), (x1, y1) = points[index - 1], points[index]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class AllReduceTable(Frozen):
    """One all-reduce's time by message size, per tensor-parallel size, on one GPU's interconnect."""

    interconnect: str
    source: str
    by_tp: dict[int, list[tuple[float, float]]]  # tp -> [(message bytes, seconds)], bytes ascending

    def seconds(self, tp: int, message_bytes: float) -> float:
        """The measured TP size nearest `tp` (on a log scale; the larger on a tie) at this message size."""
        nearest = min(self.by_tp, key=lambda size: (abs(math.log(size / tp)), -size))
        return piecewise(self.by_tp[nearest], message_bytes)


class GemmEfficiency(Frozen):
    """How close a GEMM of m tokens comes to the GPU's dense peak for one dtype."""

    large_fraction: float = Field(gt=0, le=1)  # fraction of dense peak at large m
    half_tokens: float = Field(gt=0)  # tokens: m / (m + this) of large_fraction (thin matrices idle tensor cores)
    source: str

    def fraction(self, tokens: int) -> float:
        return self.large_fraction * tokens / (tokens + self.half_tokens)


class GpuPhysics(Frozen):
    gpu: str
    allreduce: AllReduceTable
    gemm: dict[str, GemmEfficiency]  # "bf16", "fp8"
    borrowed: str | None = None  # what this GPU takes from another's measurements, and why

    def gemm_for(self, weight_bytes_per_param: float) -> GemmEfficiency:
        return self.gemm["fp8" if weight_bytes_per_param == 1 else "bf16"]


class EngineOverhead(Frozen):
    """An engine version's CPU work per step (scheduling, sampling, output processing) and its
    kernel launches where no CUDA/HIP graph covers a step."""

    engine: str
    since: tuple[int, ...]  # the first version this row describes
    label: str
    step_cpu_s: float = Field(ge=0)  # seconds per step, whatever the batch
    per_seq_cpu_s: float = Field(ge=0)  # seconds per running sequence per step
    launch_per_layer_s: float = Field(ge=0)  # seconds per layer of a step no graph covers
    source: str


# H100 SXM, NVLink 4 through NVSwitch: sgl-project/sglang pull request 2904 (2025-01-15),
# "unit test performance in H100 (without cuda graph)", the "custom allreduce" rows; sizes
# are float32 element counts (sgl-kernel tests/test_trt_reduce.py performance_worker), so
# bytes are 4x. A loop of 100 host-timed calls: an upper bound on a graph-replayed call.
_NVLINK4 = AllReduceTable(
    interconnect="NVLink 4 (NVSwitch), 900 GB/s per GPU",
    source="sgl-project/sglang#2904, H100 custom all-reduce latency by TP size and float32 element count",
    by_tp={
        2: [(2 * KIB, 3.7e-6), (16 * KIB, 3.9e-6), (128 * KIB, 4.5e-6), (1 * MIB, 7.9e-6), (2 * MIB, 12.5e-6),
            (4 * MIB, 19.9e-6)],
        4: [(2 * KIB, 4.8e-6), (16 * KIB, 3.7e-6), (128 * KIB, 4.8e-6), (1 * MIB, 13.9e-6), (2 * MIB, 20.2e-6),
            (4 * MIB, 31.1e-6)],
        8: [(2 * KIB, 5.9e-6), (16 * KIB, 5.7e-6), (128 * KIB, 7.8e-6), (1 * MIB, 16.7e-6), (2 * MIB, 22.1e-6),
            (4 * MIB, 33.8e-6)],
    },
)
# MI300X, xGMI mesh: vllm-project/vllm pull request 19744 (2025-06), kernel test "TP=4 (latency
# us)", the "baseline" column (vLLM's custom all-reduce, fp16). TP 2 and 8 read these rows.
_XGMI_MI300X = AllReduceTable(
    interconnect="Infinity Fabric xGMI, fully connected, 7 x 64 GB/s links per GPU",
    source="vllm-project/vllm#19744, MI300X custom all-reduce latency at TP 4 by message size (fp16)",
    by_tp={4: [(2 * KIB, 7.18e-6), (16 * KIB, 7.26e-6), (32 * KIB, 7.58e-6), (256 * KIB, 14.39e-6),
               (512 * KIB, 14.65e-6), (1 * MIB, 22.91e-6), (2 * MIB, 36.64e-6), (4 * MIB, 63.86e-6),
               (8 * MIB, 118.31e-6), (16 * MIB, 230.48e-6)]},
)
# MI355X: vllm-project/vllm pull request 39080 (2026-04-06), "TP8 (bf16, dim=3072)", the
# "vllm/us" column (vLLM's all-reduce before that pull request), tokens x 3072 x 2 bytes.
_XGMI_MI355X = AllReduceTable(
    interconnect="Infinity Fabric xGMI, fully connected, 76.8 GB/s per link",
    source="vllm-project/vllm#39080, MI355X vLLM all-reduce latency at TP 8 by message size (bf16)",
    by_tp={8: [(24 * KIB, 6.3e-6), (48 * KIB, 6.7e-6), (96 * KIB, 7.6e-6), (192 * KIB, 10.0e-6),
               (384 * KIB, 13.1e-6), (768 * KIB, 16.0e-6), (1536 * KIB, 24.2e-6)]},
)

_ESTIMATE = ("an estimate, not a measurement: library GEMM benchmarks reach about this share of dense "
             "peak on large shapes; benchmarks/calibration/kernel_timings.py measures it on a lent GPU")
_NVIDIA_GEMM = {
    "bf16": GemmEfficiency(large_fraction=0.60, half_tokens=64, source=_ESTIMATE),
    "fp8": GemmEfficiency(large_fraction=0.60, half_tokens=128, source=_ESTIMATE + "; FP8 tiles need twice the rows"),
}
_AMD_GEMM = {
    "bf16": GemmEfficiency(large_fraction=0.50, half_tokens=64, source=_ESTIMATE),
    "fp8": GemmEfficiency(large_fraction=0.45, half_tokens=128, source=_ESTIMATE + "; FP8 tiles need twice the rows"),
}

PHYSICS: dict[str, GpuPhysics] = {
    p.gpu: p for p in (
        GpuPhysics(gpu="H100", allreduce=_NVLINK4, gemm=_NVIDIA_GEMM),
        GpuPhysics(gpu="H200", allreduce=_NVLINK4, gemm=_NVIDIA_GEMM,
                   borrowed="all-reduce: H100's (an HGX H200 has the same NVLink 4 fabric)"),
        GpuPhysics(gpu="B200", allreduce=_NVLINK4, gemm=_NVIDIA_GEMM,
                   borrowed="all-reduce: H100's NVLink 4 figures (NVLink 5 doubles the bandwidth: pessimistic)"),
        GpuPhysics(gpu="MI300X", allreduce=_XGMI_MI300X, gemm=_AMD_GEMM),
        GpuPhysics(gpu="MI325X", allreduce=_XGMI_MI300X, gemm=_AMD_GEMM,
                   borrowed="all-reduce: MI300X's (the same xGMI mesh)"),
        GpuPhysics(gpu="MI355X", allreduce=_XGMI_MI355X, gemm=_AMD_GEMM),
    )
}

_VLLM_V0_BLOG = ("vLLM blog 2024-09-05 'vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction': on "
                 "v0.5.3, Llama 3 8B on one H100 spent 29% of its time scheduling and 38% on the GPU")
ENGINE_OVERHEADS: tuple[EngineOverhead, ...] = (
    EngineOverhead(engine="vllm", since=(0,), label="vLLM V0 before 0.6", step_cpu_s=1.5e-3, per_seq_cpu_s=40e-6,
                   launch_per_layer_s=80e-6,
                   source=_VLLM_V0_BLOG + "; an estimate of that share per step and per sequence"),
    EngineOverhead(engine="vllm", since=(0, 6), label="vLLM V0 0.6-0.7", step_cpu_s=0.8e-3, per_seq_cpu_s=15e-6,
                   launch_per_layer_s=80e-6,
                   source=_VLLM_V0_BLOG + "; 0.6 overlaps output processing with the next step: an estimate"),
    EngineOverhead(engine="vllm", since=(0, 8), label="vLLM V1", step_cpu_s=0.4e-3, per_seq_cpu_s=5e-6,
                   launch_per_layer_s=80e-6,
                   source="an estimate: V1's engine core schedules in its own process and detokenizes in the "
                          "API server's; what is left per step is the scheduler's pass over the running batch"),
    EngineOverhead(engine="sglang", since=(0,), label="SGLang", step_cpu_s=0.4e-3, per_seq_cpu_s=5e-6,
                   launch_per_layer_s=80e-6,
                   source="an estimate, as vLLM V1's; the overlap scheduler hides it unless --disable-overlap-schedule"),
    EngineOverhead(engine="atom", since=(0,), label="ATOM", step_cpu_s=0.4e-3, per_seq_cpu_s=5e-6,
                   launch_per_layer_s=80e-6, source="an estimate, as vLLM V1's (ATOM's scheduler follows it)"),
)


def gpu_physics(gpu: str) -> GpuPhysics:
    """The GPU's measured costs; KeyError naming the GPUs that have them."""
    if gpu not in PHYSICS:
        raise KeyError(f"no collective or GEMM data for GPU {gpu!r}; have: {', '.join(PHYSICS)}")
    return PHYSICS[gpu]


def parse_version(text: str) -> tuple[int, ...]:
    """'0.10.0' -> (0, 10, 0); ValueError naming the text when it is not dotted numbers."""
    try:
        return tuple(int(part) for part in text.strip().lstrip("v").split("."))
    except ValueError:
        raise ValueError(f"engine version {text!r}: expected dotted numbers such as 0.10.0") from None


def engine_overhead(engine: str, version: str | None = None) -> EngineOverhead:
    """The row for this engine at `version` (its newest row when None); ValueError for an unknown engine."""
    rows = sorted((row for row in ENGINE_OVERHEADS if row.engine == engine), key=lambda row: row.since)
    if not rows:
        raise ValueError(f"no CPU overhead data for engine {engine!r}")
    if version is None:
        return rows[-1]
    wanted = parse_version(version)
    return [row for row in rows if row.since <= wanted][-1] if rows[0].since <= wanted else rows[0]
