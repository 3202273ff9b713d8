"""Assemble one simulated engine from a model folder, a GPU and resolved engine args.

Pure code. The checks here are the ones the real engines make at startup (the token
budget against the sequence cap, the KV pool against the model's length), with their
kind of message, so a bad configuration fails the launch the way it would on a GPU.
"""

from __future__ import annotations

from pathlib import Path

from hyperloom_assets.core.roofline.gpus import GpuSpec
from hyperloom_assets.core.roofline.model_shape import ModelShape, load_shape
from hyperloom_assets.sim.engine_args import EngineConfig, kv_elem_bytes
from hyperloom_assets.sim.perf_model import (
    CUDA_GRAPH_POOL_BYTES,
    DEFAULT_CALIBRATION,
    GB,
    GRAPH_MAX_TOKENS_VLLM,
    PerfModel,
    SimCalibration,
    SimConfigError,
    activation_peak_bytes,
    kv_capacity_tokens,
)
from hyperloom_assets.sim.physics import engine_overhead
from hyperloom_assets.sim.scheduler import SimEngine, StepNoise


def perf_model_for(shape: ModelShape, gpu: GpuSpec, config: EngineConfig, tp: int,
                   calibration: SimCalibration = DEFAULT_CALIBRATION, engine_version: str | None = None) -> PerfModel:
    """The perf model of this engine; `engine_version` picks physics.py's CPU-overhead row (the newest by default)."""
    vllm = config.flavor == "vllm"
    return PerfModel(
        shape=shape, gpu=gpu, tp=tp, kv_bytes_per_elem=kv_elem_bytes(config, shape.activation_bytes),
        block_size=config.block_size, cuda_graphs=config.cuda_graphs,
        graph_max_tokens=GRAPH_MAX_TOKENS_VLLM if vllm else (config.graph_max_batch or 0),
        graph_decode_only=not vllm, cpu_overhead_hidden=config.cpu_overhead_hidden, calibration=calibration,
        engine=engine_overhead(config.flavor, engine_version),
    )


def _check_budget(config: EngineConfig, max_model_len: int) -> None:
    if config.flavor != "vllm":
        return
    if config.token_budget < config.max_seqs:
        raise SimConfigError(
            f"max_num_batched_tokens ({config.token_budget}) must be greater than or equal to "
            f"max_num_seqs ({config.max_seqs}).")
    if not config.chunked_prefill and config.token_budget < max_model_len:
        raise SimConfigError(
            f"max_num_batched_tokens ({config.token_budget}) is smaller than max_model_len ({max_model_len}). "
            "This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM "
            "reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.")


def kv_pool_tokens(model: PerfModel, config: EngineConfig) -> int:
    reserved = 0.0
    if config.flavor == "vllm":
        reserved = activation_peak_bytes(model.shape, config.token_budget, model.tp)
        reserved += CUDA_GRAPH_POOL_BYTES if config.cuda_graphs else 0.0
    tokens = kv_capacity_tokens(model, config.memory_fraction, reserved)
    return min(tokens, config.max_total_tokens) if config.max_total_tokens else tokens


def build_engine(model_dir: Path, gpu: GpuSpec, config: EngineConfig, tp: int = 1, seed: int = 0,
                 noise_pct: float = 0.0, record_steps: bool = True,
                 calibration: SimCalibration = DEFAULT_CALIBRATION, engine_version: str | None = None) -> SimEngine:
    """A ready engine, or SimConfigError saying why the real engine would refuse to start."""
    return engine_for_shape(load_shape(model_dir), gpu, config, tp, seed, noise_pct, record_steps, calibration,
                            engine_version)


def engine_for_shape(shape: ModelShape, gpu: GpuSpec, config: EngineConfig, tp: int = 1, seed: int = 0,
                     noise_pct: float = 0.0, record_steps: bool = True,
                     calibration: SimCalibration = DEFAULT_CALIBRATION, engine_version: str | None = None) -> SimEngine:
    """build_engine for a shape already in hand (a checkpoint's config with its weight dtype overridden)."""
    if tp < 1:
        raise SimConfigError(f"tensor parallel size must be at least 1, got {tp}")
    max_model_len = config.max_model_len or shape.max_position_embeddings
    _check_budget(config, max_model_len)
    model = perf_model_for(shape, gpu, config, tp, calibration, engine_version)
    kv_tokens = kv_pool_tokens(model, config)
    if kv_tokens < max_model_len:
        need = max_model_len * model.kv_bytes_per_token / GB
        have = kv_tokens * model.kv_bytes_per_token / GB
        raise SimConfigError(
            f"To serve at least one request with the models's max seq len ({max_model_len}), ({need:.2f} GiB KV "
            f"cache is needed, which is larger than the available KV cache memory ({have:.2f} GiB). Based on the "
            f"available memory, the estimated maximum model length is {kv_tokens}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    return SimEngine(config, model, kv_tokens, max_model_len, StepNoise(seed, noise_pct), record_steps)
