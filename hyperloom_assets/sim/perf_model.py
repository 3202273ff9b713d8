"""The sim engine's performance model: what one engine step costs on one named GPU.

Pure code. A step is one forward pass over a batch that mixes decode tokens (one per
running sequence) and prefill chunks (new prompt tokens). Its time is

    max(bytes moved / (bandwidth x bw_efficiency),
        FLOPs / (peak x GEMM efficiency at the step's token count))
    + per-sequence attention work + per-step overhead + tensor-parallel all-reduce time,

times seeded noise (scheduler.StepNoise). Every number comes from the model's
`config.json` (hyperloom_assets/core/roofline/model_shape.py) and the GPU table (hyperloom_assets/core/roofline/gpus.py).

Bytes per step (per GPU, divided by the TP degree):
- weights: all of them for a dense model; for MoE the attention/embedding weights plus
  the experts the step's tokens are expected to touch (uniform routing);
- KV reads: every decode sequence reads its whole context; a prefill chunk reads the
  KV of the tokens before it; KV writes for every new token. `--kv-cache-dtype fp8`
  stores one byte per element instead of the model dtype's two.

FLOPs per step: 2 per active weight per token plus attention over the context.

Costs (perf_model's constants and physics.py's tables, each scaled by the calibration):
- Memory-bound: achievable HBM bandwidth is BW_EFFICIENCY (0.80) of the datasheet's in decode
  GEMVs and paged attention (tuned to public H100 numbers: Llama-3-8B bf16 decodes at
  ~150-160 tok/s at batch 1 with CUDA graphs, ~75-80% of the bandwidth bound).
- Compute-bound: a GEMM of m tokens reaches `large_fraction x m / (m + half_tokens)` of the
  dense peak, from physics.py's table for the GPU and the weights' dtype, times
  `compute_scale`.
- Block size: paged attention is tuned for 16-token blocks; 8 reads KV at 90%
  efficiency, 64 and 128 at 98% and 96% (their cost is mostly fragmentation and coarser
  prefix hits, modelled in kv_cache.py).
- Attention by context: `attention_seq_layer_s` per decode sequence per layer on top of its
  KV bytes (the kernel's fixed work per sequence), so a short context reads its KV at a
  lower effective bandwidth than a long one. Zero until a profile says otherwise.

Overheads:
- The engine's CPU work per step (scheduling, sampling, output processing), from physics.py's
  row for the engine and its version (`--engine-version`; the newest row by default): a cost
  per step plus one per decode sequence, times `cpu_scale` (the host's CPU against the
  row's). SGLang's overlap scheduler and vLLM's `--async-scheduling` hide it. SAMPLING_SHARE
  of it is sampling (a documented guess; it only splits the profile's account, never the time).
- Kernel launches of an eager step: the engine row's `launch_per_layer_s` per layer (times
  `cpu_scale`). CUDA graphs remove it for steps they cover (vLLM: steps of up to
  GRAPH_MAX_TOKENS_VLLM tokens, piecewise graphs cover mixed batches; SGLang: decode-only steps
  up to `--cuda-graph-max-bs-decode`; ATOM: up to its largest capture size).
  `--enforce-eager` (vLLM) and `--disable-cuda-graph` (SGLang) turn graphs off.
- LAYER_FIXED_S: per layer, on every step, graphs or not: the small kernels (norms, RoPE,
  activation quantisation) and the fixed cost of each weight-reading kernel on a small shard,
  that neither bandwidth nor FLOPs account for. Zero until a calibration profile says otherwise.
- TP: two all-reduces per layer of the step's activations (tokens x hidden x 2 bytes), each
  timed by physics.py's measured table for the GPU's interconnect at the nearest measured TP
  size, times `allreduce_scale`.

These scales and costs are the fields of `SimCalibration`; a calibration profile
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
from hyperloom_assets.sim.physics import EngineOverhead, engine_overhead, gpu_physics

BW_EFFICIENCY = 0.80
SAMPLING_SHARE = 0.25
GRAPH_MAX_TOKENS_VLLM = 512
LAYER_FIXED_S = 0.0
ACTIVATION_BYTES = 2.0  # the all-reduced activations are 16-bit whatever the weights' dtype
ACTIVATION_BASE_BYTES = 1.0e9
CUDA_GRAPH_POOL_BYTES = 0.5e9
BLOCK_SIZE_KV_EFFICIENCY = {1: 0.95, 8: 0.90, 16: 1.0, 32: 1.0, 64: 0.98, 128: 0.96}
GB = 1e9


class SimConfigError(ValueError):
    """A configuration the engine refuses at startup (it would not fit, or is invalid)."""


class SimCalibration(Frozen):
    """The model's efficiency parameters and the scales on physics.py's tables, each in a physical
    unit; the defaults are perf_model's constants and the tables as they stand."""

    bw_efficiency: float = Field(BW_EFFICIENCY, gt=0, le=1, description=(
        "fraction: achievable share of the datasheet HBM bandwidth in weight-reading GEMVs and paged attention"))
    compute_scale: float = Field(1.0, gt=0, le=2, description=(
        "ratio: the GEMM efficiency of physics.py's table for the GPU and dtype times this"))
    layer_fixed_s: float = Field(LAYER_FIXED_S, ge=0, description=(
        "seconds per layer per step, graphs or not: small kernels (norms, RoPE, activation quantisation)"))
    attention_seq_layer_s: float = Field(0.0, ge=0, description=(
        "seconds per decode sequence per layer: the attention kernel's fixed work per sequence beyond its KV bytes"))
    allreduce_scale: float = Field(1.0, gt=0, description=(
        "ratio: the all-reduce times of physics.py's measured table for the GPU's interconnect times this"))
    cpu_scale: float = Field(1.0, gt=0, description=(
        "ratio: the engine version's CPU work per step and kernel launches (physics.py) times this"))


DEFAULT_CALIBRATION = SimCalibration()
NEWEST_VLLM = engine_overhead("vllm")


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
    engine: EngineOverhead = field(default=NEWEST_VLLM)  # physics.py's row for the engine and its version

    @property
    def kv_bytes_per_token(self) -> float:
        return self.shape.kv_bytes_per_token(self.kv_bytes_per_elem)

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.shape.weight_bytes() / self.tp

    def _peak_flops(self) -> float:
        tflops = self.gpu.fp8_tflops if self.shape.weight_bytes_per_param == 1 else self.gpu.bf16_tflops
        return tflops * 1e12

    def _gemm_fraction(self, tokens: int) -> float:
        gemm = gpu_physics(self.gpu.name).gemm_for(self.shape.weight_bytes_per_param)
        return min(1.0, gemm.fraction(tokens) * self.calibration.compute_scale)

    def _launch(self, step: StepShape) -> float:
        tokens = step.decode_seqs + step.prefill_tokens
        covered = self.cuda_graphs and tokens <= self.graph_max_tokens
        if self.graph_decode_only and step.prefill_tokens:
            covered = False
        return 0.0 if covered else self.engine.launch_per_layer_s * self.calibration.cpu_scale * self.shape.layers

    def _cpu(self, step: StepShape) -> float:
        if self.cpu_overhead_hidden:
            return 0.0
        return (self.engine.step_cpu_s + self.engine.per_seq_cpu_s * step.decode_seqs) * self.calibration.cpu_scale

    def _allreduce(self, tokens: int) -> float:
        if self.tp <= 1:
            return 0.0
        message = tokens * self.shape.hidden * ACTIVATION_BYTES
        per_call = gpu_physics(self.gpu.name).allreduce.seconds(self.tp, message) * self.calibration.allreduce_scale
        return 2 * self.shape.layers * per_call

    def step_time(self, step: StepShape) -> float:
        """Seconds for one step, without noise."""
        return sum(self.step_breakdown(step).values())

    def step_breakdown(self, step: StepShape) -> dict[str, float]:
        """Seconds of one step by part, without noise; they sum to `step_time`."""
        tokens = step.decode_seqs + step.prefill_tokens
        if tokens <= 0:
            return {}
        cal = self.calibration
        kv_eff = BLOCK_SIZE_KV_EFFICIENCY.get(self.block_size, 1.0)
        kv_tokens = step.decode_context + step.prefill_kv_read
        weight_bytes = self.shape.decode_weight_bytes(tokens) / self.tp
        kv_bytes = (kv_tokens / kv_eff + tokens) * self.kv_bytes_per_token / self.tp
        memory_s = (weight_bytes + kv_bytes) / (self.gpu.mem_bw_gbps * GB * cal.bw_efficiency)
        attention_flops = 4.0 * self.shape.layers * self.shape.heads * self.shape.head_dim * (
            step.decode_context + step.prefill_context) / self.tp
        linear_flops = 2.0 * self.shape.active_params * tokens / self.tp
        compute_s = (linear_flops + attention_flops) / (self._peak_flops() * self._gemm_fraction(tokens))
        if memory_s >= compute_s:
            bound_s, gemm_part = memory_s, weight_bytes / (weight_bytes + kv_bytes)
        else:
            bound_s, gemm_part = compute_s, linear_flops / (linear_flops + attention_flops)
        per_sequence_s = cal.attention_seq_layer_s * step.decode_seqs * self.shape.layers
        cpu_s = self._cpu(step)
        return {"gemm": bound_s * gemm_part, "attention": bound_s * (1.0 - gemm_part) + per_sequence_s,
                "sampling": cpu_s * SAMPLING_SHARE, "scheduling": cpu_s * (1.0 - SAMPLING_SHARE),
                "kernel_launch": self._launch(step) + cal.layer_fixed_s * self.shape.layers,
                "all_reduce": self._allreduce(tokens)}

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
