"""The sim engine's performance model: what one engine step costs on one named GPU.

Pure code. A step is one forward pass over a batch that mixes decode tokens (one per
running sequence) and prefill chunks (new prompt tokens). Its time is

    max(bytes moved / (bandwidth x BW_EFFICIENCY),
        FLOPs / (peak x COMPUTE_EFFICIENCY x small_batch_factor))
    + per-step overhead + tensor-parallel all-reduce time,

times seeded noise (scheduler.StepNoise). Every number comes from the model's
`config.json` (hyperloom_assets/core/roofline/model_shape.py) and the GPU table (hyperloom_assets/core/roofline/gpus.py).

Bytes per step (per GPU, divided by the TP degree):
- weights: all of them for a dense model; for MoE the attention/embedding weights plus
  the experts the step's tokens are expected to touch (uniform routing);
- KV reads: every decode sequence reads its whole context; a prefill chunk reads the
  KV of the tokens before it; KV writes for every new token. `--kv-cache-dtype fp8`
  stores one byte per element instead of the model dtype's two.

FLOPs per step: 2 per active weight per token plus attention over the context.

Efficiency factors (documented guesses, tuned to public H100 numbers: Llama-3-8B bf16
decodes at ~150-160 tok/s at batch 1 with CUDA graphs, ~75-80% of the bandwidth bound):
- BW_EFFICIENCY 0.80: achievable HBM bandwidth in decode GEMVs and paged attention.
- COMPUTE_EFFICIENCY 0.60: large-GEMM MFU in prefill; a step of m tokens reaches
  m / (m + SMALL_BATCH_TOKENS) of it (tensor cores idle on thin matrices).
- Block size: paged attention is tuned for 16-token blocks; 8 reads KV at 90%
  efficiency, 64 and 128 at 98% and 96% (their cost is mostly fragmentation and coarser
  prefix hits, modelled in kv_cache.py).

Overheads:
- STEP_CPU_S: scheduling, sampling and detokenizing every step (SGLang's overlap
  scheduler hides it unless `--disable-overlap-schedule`); SAMPLING_SHARE of it is
  sampling (a documented guess; it only splits the profile's account, never the time).
- LAUNCH_PER_LAYER_S: kernel launches of an eager step, per layer. CUDA graphs remove
  it for steps they cover (vLLM: steps of up to GRAPH_MAX_TOKENS_VLLM tokens, piecewise
  graphs cover mixed batches; SGLang: decode-only steps up to `--cuda-graph-max-bs-decode`; ATOM: up to its largest capture size).
  `--enforce-eager` (vLLM) and `--disable-cuda-graph` (SGLang) turn graphs off.
- LAYER_FIXED_S: per layer, on every step, graphs or not: the small kernels (norms, RoPE,
  activation quantisation) that neither bandwidth nor FLOPs account for. Zero until a
  calibration profile says otherwise.
- TP: two all-reduces per layer, each ALLREDUCE_LATENCY_S plus a ring transfer over
  NVLINK_GBPS.

These constants are the defaults of `SimCalibration`; a calibration profile
(calibration.py, `--calibration FILE`) replaces them with values fitted to measurements.

The profile (`step_breakdown`) splits the same time: the bound term between GEMMs and
attention in proportion to the weight and KV bytes (memory-bound) or the linear and
attention FLOPs (compute-bound), then sampling, scheduling, kernel launches, all-reduce.

Memory: weights / TP per GPU; vLLM's KV pool is `--gpu-memory-utilization` x memory
minus weights, the activation peak of a `--max-num-batched-tokens` forward pass and the
CUDA-graph pool; SGLang's is `--mem-fraction-static` x memory minus weights. The pool
over all TP ranks, divided by KV bytes per token, is the KV capacity in tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import Field

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.roofline.gpus import GpuSpec
from hyperloom_assets.core.roofline.model_shape import ModelShape

BW_EFFICIENCY = 0.80
COMPUTE_EFFICIENCY = 0.60
SMALL_BATCH_TOKENS = 64
STEP_CPU_S = 0.4e-3
SAMPLING_SHARE = 0.25
LAUNCH_PER_LAYER_S = 80e-6
GRAPH_MAX_TOKENS_VLLM = 512
ALLREDUCE_LATENCY_S = 8e-6
NVLINK_GBPS = 300.0
LAYER_FIXED_S = 0.0
ACTIVATION_BASE_BYTES = 1.0e9
CUDA_GRAPH_POOL_BYTES = 0.5e9
BLOCK_SIZE_KV_EFFICIENCY = {1: 0.95, 8: 0.90, 16: 1.0, 32: 1.0, 64: 0.98, 128: 0.96}
GB = 1e9


class SimConfigError(ValueError):
    """A configuration the engine refuses at startup (it would not fit, or is invalid)."""


class SimCalibration(Frozen):
    """The efficiency parameters of the model, each in a physical unit; the defaults are the constants above."""

    bw_efficiency: float = Field(BW_EFFICIENCY, gt=0, le=1, description=(
        "fraction: achievable share of the datasheet HBM bandwidth in weight-reading GEMVs and paged attention"))
    compute_efficiency: float = Field(COMPUTE_EFFICIENCY, gt=0, le=1, description=(
        "fraction: share of dense peak FLOPs a large GEMM reaches (prefill, large batches)"))
    small_batch_tokens: float = Field(SMALL_BATCH_TOKENS, ge=0, description=(
        "tokens: a step of m tokens reaches m / (m + this) of compute_efficiency (thin matrices idle tensor cores)"))
    step_cpu_s: float = Field(STEP_CPU_S, ge=0, description=(
        "seconds per step: the engine's CPU work (scheduling, sampling, detokenizing) unless overlapped"))
    launch_per_layer_s: float = Field(LAUNCH_PER_LAYER_S, ge=0, description=(
        "seconds per layer per step: kernel launches of a step no CUDA/HIP graph covers"))
    layer_fixed_s: float = Field(LAYER_FIXED_S, ge=0, description=(
        "seconds per layer per step, graphs or not: small kernels (norms, RoPE, activation quantisation)"))
    allreduce_latency_s: float = Field(ALLREDUCE_LATENCY_S, ge=0, description=(
        "seconds per all-reduce call (two per layer under tensor parallelism), whatever its payload"))
    allreduce_gbps: float = Field(NVLINK_GBPS, gt=0, description=(
        "GB/s: bus bandwidth of the all-reduce's ring transfer between the TP ranks"))


DEFAULT_CALIBRATION = SimCalibration()


@dataclass(frozen=True)
class StepShape:
    """What one step computes; contexts are token counts already in the KV cache."""

    decode_seqs: int = 0
    decode_context: int = 0  # sum over decode sequences of their context length
    prefill_tokens: int = 0
    prefill_context: int = 0  # sum over prefill chunks of (tokens before the chunk x chunk)
    prefill_kv_read: int = 0  # sum over prefill chunks of tokens before the chunk


@dataclass(frozen=True)
class PerfModel:
    shape: ModelShape
    gpu: GpuSpec
    tp: int
    kv_bytes_per_elem: float
    block_size: int
    cuda_graphs: bool
    graph_max_tokens: int  # steps up to this many tokens run as CUDA graphs
    graph_decode_only: bool  # SGLang captures decode batches only
    cpu_overhead_hidden: bool
    calibration: SimCalibration = field(default=DEFAULT_CALIBRATION)

    @property
    def kv_bytes_per_token(self) -> float:
        return self.shape.kv_bytes_per_token(self.kv_bytes_per_elem)

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.shape.weight_bytes() / self.tp

    def _peak_flops(self) -> float:
        tflops = self.gpu.fp8_tflops if self.shape.weight_bytes_per_param == 1 else self.gpu.bf16_tflops
        return tflops * 1e12

    def _overhead(self, step: StepShape) -> float:
        tokens = step.decode_seqs + step.prefill_tokens
        covered = self.cuda_graphs and tokens <= self.graph_max_tokens
        if self.graph_decode_only and step.prefill_tokens:
            covered = False
        launch = 0.0 if covered else self.calibration.launch_per_layer_s * self.shape.layers
        return launch + self.calibration.layer_fixed_s * self.shape.layers + self._cpu()

    def _cpu(self) -> float:
        return 0.0 if self.cpu_overhead_hidden else self.calibration.step_cpu_s

    def _allreduce(self, tokens: int) -> float:
        if self.tp <= 1:
            return 0.0
        payload = tokens * self.shape.hidden * 2.0 * 2 * (self.tp - 1) / self.tp
        per_call = self.calibration.allreduce_latency_s + payload / (self.calibration.allreduce_gbps * GB)
        return 2 * self.shape.layers * per_call

    def step_time(self, step: StepShape) -> float:
        """Seconds for one step, without noise."""
        return sum(self.step_breakdown(step).values())

    def step_breakdown(self, step: StepShape) -> dict[str, float]:
        """Seconds of one step by part, without noise; they sum to `step_time`."""
        tokens = step.decode_seqs + step.prefill_tokens
        if tokens <= 0:
            return {}
        kv_eff = BLOCK_SIZE_KV_EFFICIENCY.get(self.block_size, 1.0)
        kv_tokens = step.decode_context + step.prefill_kv_read
        weight_bytes = self.shape.decode_weight_bytes(tokens) / self.tp
        kv_bytes = (kv_tokens / kv_eff + tokens) * self.kv_bytes_per_token / self.tp
        memory_s = (weight_bytes + kv_bytes) / (self.gpu.mem_bw_gbps * GB * self.calibration.bw_efficiency)
        attention_flops = 4.0 * self.shape.layers * self.shape.heads * self.shape.head_dim * (
            step.decode_context + step.prefill_context) / self.tp
        linear_flops = 2.0 * self.shape.active_params * tokens / self.tp
        cal = self.calibration
        utilisation = cal.compute_efficiency * tokens / (tokens + cal.small_batch_tokens)
        compute_s = (linear_flops + attention_flops) / (self._peak_flops() * utilisation)
        if memory_s >= compute_s:
            bound_s, gemm_part = memory_s, weight_bytes / (weight_bytes + kv_bytes)
        else:
            bound_s, gemm_part = compute_s, linear_flops / (linear_flops + attention_flops)
        cpu_s = self._cpu()
        return {"gemm": bound_s * gemm_part, "attention": bound_s * (1.0 - gemm_part),
                "sampling": cpu_s * SAMPLING_SHARE, "scheduling": cpu_s * (1.0 - SAMPLING_SHARE),
                "kernel_launch": self._overhead(step) - cpu_s, "all_reduce": self._allreduce(tokens)}

    def bandwidth_bound_decode_s(self, batch: int = 1, context: int = 0) -> float:
        """The physical floor of one decode step: every byte at full bandwidth, no overhead."""
        weight_bytes = self.shape.decode_weight_bytes(batch) / self.tp
        kv_bytes = batch * context * self.kv_bytes_per_token / self.tp
        return (weight_bytes + kv_bytes) / (self.gpu.mem_bw_gbps * GB)


def activation_peak_bytes(shape: ModelShape, token_budget: int, tp: int) -> float:
    """vLLM's profiled activation peak for a forward pass of `token_budget` tokens."""
    per_token = 2.0 * (10 * shape.hidden + 2 * (shape.moe_intermediate or shape.intermediate))
    return ACTIVATION_BASE_BYTES + token_budget * per_token / tp


def kv_capacity_tokens(model: PerfModel, memory_fraction: float, reserved_bytes_per_gpu: float) -> int:
    """Tokens the KV pool holds over all TP ranks; raises when nothing is left for it."""
    pool = model.gpu.memory_gb * GB * memory_fraction - model.weight_bytes_per_gpu - reserved_bytes_per_gpu
    if pool <= 0:
        need = (model.weight_bytes_per_gpu + reserved_bytes_per_gpu) / GB
        raise SimConfigError(
            f"No available memory for the cache blocks: the model needs {need:.1f} GB per GPU but "
            f"{memory_fraction:g} x {model.gpu.memory_gb:g} GB of {model.gpu.name} is "
            f"{memory_fraction * model.gpu.memory_gb:.1f} GB (try a larger --tp or memory fraction)")
    return int(math.floor(pool * model.tp / model.kv_bytes_per_token))
