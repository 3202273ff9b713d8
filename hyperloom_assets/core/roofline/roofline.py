"""The decode roofline: the most output tokens per second a model can make on hardware.

Pure code. A decode step reads every weight it touches once for the whole batch plus
each sequence's KV cache, and does about two FLOPs per active weight per token plus
attention over the context; the ceiling is the smaller of what the memory bandwidth
and what the compute peak allow at the workload's concurrency.

The hardware is every device one server takes (tensor x pipeline x data parallel,
core/fleet/slots.py's layout), their bandwidth and peak summed. Tensor-parallel ranks
split each weight, so one step still reads the weights once. Data-parallel replicas each
hold the model and decode their own share of the batch, so each reads its own copy: the
ceiling is the replicas' ceilings added up. Pipeline stages split the layers; every stage
can only be busy when as many micro-batches are in flight, each passing every stage's
weights, so one step of the whole batch reads the weights once per stage's micro-batch.
That is the most any pipeline schedule allows (fewer micro-batches leave stages idle), so
the ceiling stays an upper bound. A group with no sequence to decode (a batch smaller
than the groups) leaves its devices idle.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.workloads import PlannedRequest, mean_context_tokens
from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.core.roofline.model_shape import DTYPE_BYTES, ModelShape

FP8_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2", "float8_e4m3fn", "float8_e5m2", "fp8_inc")


class Hardware(Frozen):
    """What the roofline needs of a machine, summed over the devices serving one model."""

    name: str  # e.g. "H100 x2" or "cpu (2 cores)"
    kind: Literal["gpu", "cpu"]
    mem_bw_gbps: float = Field(gt=0)  # GB/s (1e9 bytes), all devices together
    peak_tflops: float = Field(gt=0)  # dense peak for the weights' dtype, all devices together
    devices: int = Field(default=1, ge=1)
    # Groups of the batch that each read their own pass over the weights in a step: pipeline x
    # data-parallel sizes (core/fleet/slots.py, Layout.weight_passes); 1 for tensor parallelism alone.
    weight_passes: int = Field(default=1, ge=1)
    source: str  # a datasheet, or how the host was measured


class Roofline(Frozen):
    ceiling_tok_s: float
    memory_bound_tok_s: float
    compute_bound_tok_s: float
    binding: Literal["memory", "compute"]
    explanation: str
    hardware: str
    hardware_source: str
    mem_bw_gbps: float  # of the devices at work: a batch smaller than the weight passes idles some
    peak_tflops: float
    batch: int
    mean_context_tokens: float
    weight_bytes_per_step: float
    kv_bytes_per_step: float
    bytes_per_step: float
    flops_per_token: float
    weight_dtype: str
    kv_bytes_per_token: float
    weight_passes: int = 1  # the hardware's: passes over the weights one step makes


def gpu_hardware(name: str, tensor_parallel: int = 1, weight_dtype: str = "bfloat16",
                 pipeline_parallel: int = 1, data_parallel: int = 1) -> Hardware:
    """A GPU from the table, times the devices one server takes (tensor x pipeline x data
    parallel); fp8 weights use the fp8 peak."""
    spec = gpu_spec(name)
    per_device = spec.fp8_tflops if _is_fp8(weight_dtype) else spec.bf16_tflops
    devices = tensor_parallel * pipeline_parallel * data_parallel
    sizes = [f"{label}{size}" for label, size in (("TP", tensor_parallel), ("PP", pipeline_parallel),
                                                   ("DP", data_parallel)) if size > 1]
    layout = f" ({' x '.join(sizes)})" if devices != tensor_parallel else ""  # plain TP keeps "H100 x8"
    return Hardware(name=f"{spec.name} x{devices}{layout}", kind="gpu", devices=devices,
                    weight_passes=pipeline_parallel * data_parallel,
                    mem_bw_gbps=spec.mem_bw_gbps * devices, peak_tflops=per_device * devices, source=spec.source)


def _is_fp8(dtype: str | None) -> bool:
    return bool(dtype) and str(dtype).lower() in FP8_DTYPES


def kv_bytes_per_element(shape: ModelShape, kv_cache_dtype: str | None) -> float:
    """Bytes per KV element: the activations' dtype for `auto`/None (16-bit for quantized weights), one for fp8."""
    if kv_cache_dtype is None or kv_cache_dtype == "auto":
        return float(shape.activation_bytes)
    if _is_fp8(kv_cache_dtype):
        return 1.0
    if kv_cache_dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown kv cache dtype {kv_cache_dtype!r}; known: auto, {', '.join(DTYPE_BYTES)}, fp8_e5m2")
    return float(DTYPE_BYTES[kv_cache_dtype])


def kv_cache_dtype_from_args(server_args: list[str]) -> str | None:
    """The `--kv-cache-dtype` (vLLM) or `--kv-cache-dtype`/`--kv_cache_dtype` value in argv."""
    for index, token in enumerate(server_args):
        for flag in ("--kv-cache-dtype", "--kv_cache_dtype"):
            if token == flag and index + 1 < len(server_args):
                return server_args[index + 1]
            if token.startswith(flag + "="):
                return token.split("=", 1)[1]
    return None


def workload_mean_context(workload: Workload, plan: list[list[PlannedRequest]] | None = None) -> float:
    """Mean tokens in context during decode; an agentic trace needs its plan."""
    if plan is not None:
        return mean_context_tokens(plan)
    if workload.kind == "agentic" or workload.isl is None or workload.osl is None:
        raise ValueError("an agentic workload's mean context comes from its plan (workloads.build_plan)")
    return workload.isl + workload.osl / 2


def decode_roofline(shape: ModelShape, hardware: Hardware, batch: int, mean_context: float,
                    kv_cache_dtype: str | None = None) -> Roofline:
    """The decode ceiling (output tok/s) with `batch` sequences at `mean_context` tokens each."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    kv_per_token = shape.kv_bytes_per_token(kv_bytes_per_element(shape, kv_cache_dtype))
    groups = min(hardware.weight_passes, batch)  # the groups with a sequence to decode
    at_work = groups / hardware.weight_passes  # the share of the devices those groups hold
    weight_bytes = groups * shape.decode_weight_bytes(math.ceil(batch / groups))
    kv_bytes = batch * mean_context * kv_per_token
    step_bytes = weight_bytes + kv_bytes
    bandwidth, peak = hardware.mem_bw_gbps * at_work, hardware.peak_tflops * at_work
    memory_rate = batch / (step_bytes / (bandwidth * 1e9))
    flops = shape.flops_per_token(mean_context)
    compute_rate = peak * 1e12 / flops
    binding: Literal["memory", "compute"] = "memory" if memory_rate <= compute_rate else "compute"
    roofline = Roofline(
        ceiling_tok_s=min(memory_rate, compute_rate), memory_bound_tok_s=memory_rate,
        compute_bound_tok_s=compute_rate, binding=binding, explanation="",
        hardware=hardware.name, hardware_source=hardware.source, mem_bw_gbps=bandwidth,
        peak_tflops=peak, batch=batch, mean_context_tokens=mean_context,
        weight_bytes_per_step=weight_bytes, kv_bytes_per_step=kv_bytes, bytes_per_step=step_bytes,
        flops_per_token=flops, weight_dtype=shape.dtype, kv_bytes_per_token=kv_per_token,
        weight_passes=hardware.weight_passes,
    )
    return roofline.model_copy(update={"explanation": _explain(roofline)})


def _size(count: float) -> str:
    return f"{count / 1e9:.3g} GB" if count >= 1e9 else f"{count / 1e6:.3g} MB"


def _explain(r: Roofline) -> str:
    sequences = "1 sequence" if r.batch == 1 else f"{r.batch} sequences"
    passes = f" ({min(r.weight_passes, r.batch)} passes: one per pipeline micro-batch and data-parallel replica)" \
        if r.weight_passes > 1 else ""
    reads = (f"each step reads {_size(r.weight_bytes_per_step)} of weights{passes} and "
             f"{_size(r.kv_bytes_per_step)} of KV cache for {sequences} at a mean context of "
             f"{r.mean_context_tokens:,.0f} tokens")
    if r.binding == "memory":
        return (f"Decode on {r.hardware} is memory-bound: {reads}, so {r.mem_bw_gbps:,.0f} GB/s allows at most "
                f"{r.memory_bound_tok_s:,.0f} output tok/s (compute would allow {r.compute_bound_tok_s:,.0f}).")
    return (f"Decode on {r.hardware} is compute-bound: each token costs {r.flops_per_token / 1e9:.3g} GFLOP, "
            f"so {r.peak_tflops:,.3g} TFLOP/s allows at most {r.compute_bound_tok_s:,.0f} output tok/s "
            f"(memory would allow {r.memory_bound_tok_s:,.0f}, as {reads}).")


def workload_roofline(shape: ModelShape, hardware: Hardware, workload: Workload,
                      plan: list[list[PlannedRequest]] | None = None,
                      kv_cache_dtype: str | None = None, weight_dtype: str | None = None) -> Roofline:
    """The roofline at a workload's concurrency and mean context (weights' dtype overridable)."""
    if weight_dtype is not None:
        shape = shape.model_copy(update={"dtype": weight_dtype})
    return decode_roofline(shape, hardware, workload.concurrency, workload_mean_context(workload, plan),
                           kv_cache_dtype)


def ceiling_for_launch(shape: ModelShape, hardware: Hardware, workload_roofline: Roofline, concurrency: int,
                       argv: list[str]) -> Roofline:
    """The ceiling one measurement faces: its own concurrency and the KV dtype its argv asks for,
    at the workload's mean context (a sweep rung or an fp8-KV trial has a ceiling of its own)."""
    return decode_roofline(shape, hardware, concurrency, workload_roofline.mean_context_tokens,
                           kv_cache_dtype_from_args(argv))


class Achieved(Frozen):
    """A measured throughput as a share of the roofline ceiling, with its interval."""

    achieved_tok_s: float
    ceiling_tok_s: float
    achieved_pct: float
    achieved_pct_ci_low: float
    achieved_pct_ci_high: float
    binding: str
    above_ceiling: bool = False
    warning: str | None = None


def achieved(roofline: Roofline, mean: float, ci_low: float, ci_high: float) -> Achieved:
    """Achieved output throughput as a share of the ceiling; above it is a warning only."""
    ceiling = roofline.ceiling_tok_s
    above = mean > ceiling
    warning = None
    if above:
        warning = (f"measured {mean:,.1f} tok/s is above the {roofline.binding}-bound ceiling of {ceiling:,.1f} "
                   f"tok/s on {roofline.hardware}; the hardware figures ({roofline.hardware_source}) "
                   f"or the model shape are likely off")
    return Achieved(achieved_tok_s=mean, ceiling_tok_s=ceiling, achieved_pct=100.0 * mean / ceiling,
                    achieved_pct_ci_low=100.0 * ci_low / ceiling, achieved_pct_ci_high=100.0 * ci_high / ceiling,
                    binding=roofline.binding, above_ceiling=above, warning=warning)
