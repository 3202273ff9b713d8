"""The decode roofline, checked against ceilings worked out by hand."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.workloads import PlannedRequest
from hyperloom_assets.core.roofline.model_shape import shape_from_config
from hyperloom_assets.core.roofline.roofline import (
    Hardware,
    Roofline,
    achieved,
    decode_roofline,
    gpu_hardware,
    kv_cache_dtype_from_args,
    workload_mean_context,
    workload_roofline,
)

LLAMA_3_8B = {  # meta-llama/Meta-Llama-3-8B config.json
    "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16", "max_position_embeddings": 8192,
}
MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-v0.1 config.json
    "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
    "torch_dtype": "bfloat16", "max_position_embeddings": 32768,
}


def test_llama_3_8b_on_one_h100_is_memory_bound_at_8512_tok_s() -> None:
    # Parameters (head_dim 128, KV width 8 x 128 = 1024):
    #   attention  32 x (4096 x (4096 + 2 x 1024) + 4096 x 4096)  = 1,342,177,280
    #   MLP        32 x 3 x 4096 x 14336                          = 5,637,144,576
    #   embed+head 2 x 128256 x 4096                              = 1,050,673,152
    #   total                                                     = 8,029,995,008
    # Weights read per step, bf16: 2 x 8,029,995,008              = 16,059,990,016 B
    # Workload ISL 1024, OSL 128, concurrency 64: mean context 1024 + 128/2 = 1088
    # KV per token, bf16: 2 (K,V) x 32 layers x 8 heads x 128 x 2 B = 131,072 B
    # KV read per step: 64 x 1088 x 131,072                       = 9,126,805,504 B
    # Bytes per step: 16,059,990,016 + 9,126,805,504              = 25,186,795,520 B
    # Memory-bound: 64 / (25,186,795,520 / 3.35e12 B/s)           = 8,512.4 tok/s
    # FLOPs per token: 2 x 8,029,995,008 + 4 x 32 x 32 x 128 x 1088 = 16,630,415,360
    # Compute-bound: 989.4e12 / 16,630,415,360                    = 59,493.4 tok/s
    workload = Workload(kind="random", isl=1024, osl=128, concurrency=64)
    roofline = workload_roofline(shape_from_config(LLAMA_3_8B), gpu_hardware("H100"), workload)
    assert roofline.weight_bytes_per_step == 16_059_990_016
    assert roofline.kv_bytes_per_step == 9_126_805_504
    assert roofline.bytes_per_step == 25_186_795_520
    assert roofline.flops_per_token == 16_630_415_360
    assert roofline.memory_bound_tok_s == pytest.approx(8512.4, abs=0.1)
    assert roofline.compute_bound_tok_s == pytest.approx(59493.4, abs=0.1)
    assert roofline.binding == "memory"
    assert roofline.ceiling_tok_s == roofline.memory_bound_tok_s
    assert (roofline.batch, roofline.mean_context_tokens, roofline.hardware) == (64, 1088, "H100 x1")
    assert "memory-bound" in roofline.explanation and "8,512" in roofline.explanation


def test_mixtral_8x7b_on_two_h100_with_fp8_kv_reads_only_touched_experts() -> None:
    # One expert's MLP per layer: 3 x 4096 x 14336                = 176,160,768
    # Attention as for Llama-3-8B                                 = 1,342,177,280
    # Embed+head: 2 x 32000 x 4096                                = 262,144,000
    # Active per token: 1,342,177,280 + 32 x 2 x 176,160,768 + 262,144,000 = 12,878,610,432
    # Workload ISL 2048, OSL 256, concurrency 4: mean context 2048 + 256/2 = 2176
    # Experts a batch of 4 touches per layer, routing uniform: 8 x (1 - (6/8)^4) = 5.46875
    # Weights per step, bf16: (1,342,177,280 + 262,144,000 + 32 x 5.46875 x 176,160,768) x 2
    #   = (1,604,321,280 + 30,828,134,400) x 2                    = 64,864,911,360 B
    # KV per token, fp8: 2 x 32 x 8 x 128 x 1 B = 65,536 B; per step 4 x 2176 x 65,536 = 570,425,344 B
    # Bytes per step: 64,864,911,360 + 570,425,344                = 65,435,336,704 B
    # Memory-bound, TP2 (2 x 3350 GB/s): 4 / (65,435,336,704 / 6.7e12) = 409.56 tok/s
    # FLOPs per token: 2 x 12,878,610,432 + 4 x 32 x 32 x 128 x 2176 = 26,898,071,552
    # Compute-bound (2 x 989.4 TFLOP/s): 1978.8e12 / 26,898,071,552 = 73,566.6 tok/s
    workload = Workload(kind="random", isl=2048, osl=256, concurrency=4)
    roofline = workload_roofline(shape_from_config(MIXTRAL_8X7B), gpu_hardware("h100", tensor_parallel=2),
                                 workload, kv_cache_dtype="fp8")
    assert roofline.weight_bytes_per_step == pytest.approx(64_864_911_360)
    assert roofline.kv_bytes_per_step == 570_425_344
    assert roofline.kv_bytes_per_token == 65_536
    assert roofline.memory_bound_tok_s == pytest.approx(409.56, abs=0.01)
    assert roofline.compute_bound_tok_s == pytest.approx(73566.6, abs=0.1)
    assert roofline.binding == "memory"
    assert (roofline.mem_bw_gbps, roofline.peak_tflops) == (6700, pytest.approx(1978.8))


def test_compute_binds_when_bandwidth_is_plentiful() -> None:
    hardware = Hardware(name="toy", kind="cpu", mem_bw_gbps=1e6, peak_tflops=0.1, source="test")
    roofline = decode_roofline(shape_from_config(LLAMA_3_8B), hardware, batch=8, mean_context=512)
    assert roofline.binding == "compute"
    assert roofline.ceiling_tok_s == roofline.compute_bound_tok_s < roofline.memory_bound_tok_s
    assert "compute-bound" in roofline.explanation


def test_fp8_weights_use_the_fp8_peak_and_half_the_bytes() -> None:
    workload = Workload(kind="random", isl=1024, osl=128, concurrency=64)
    shape = shape_from_config(LLAMA_3_8B)
    bf16 = workload_roofline(shape, gpu_hardware("H100"), workload)
    fp8 = workload_roofline(shape, gpu_hardware("H100", weight_dtype="fp8"), workload, weight_dtype="fp8")
    assert fp8.weight_bytes_per_step == bf16.weight_bytes_per_step / 2
    assert fp8.kv_bytes_per_step == bf16.kv_bytes_per_step  # KV `auto` is the 16-bit compute dtype, not the weights
    assert fp8.peak_tflops == pytest.approx(1978.9)


def test_agentic_mean_context_comes_from_the_plan() -> None:
    workload = Workload(kind="agentic", trace="trace.jsonl", concurrency=2)
    plan = [[PlannedRequest(prompt_ids=[5] * 100, output_tokens=20),
             PlannedRequest(prompt_ids=[5] * 300, output_tokens=40)]]
    assert workload_mean_context(workload, plan) == (110 + 320) / 2
    with pytest.raises(ValueError, match="plan"):
        workload_mean_context(workload)


def test_kv_cache_dtype_is_read_from_server_args() -> None:
    assert kv_cache_dtype_from_args(["--max-num-seqs", "4", "--kv-cache-dtype", "fp8"]) == "fp8"
    assert kv_cache_dtype_from_args(["--kv-cache-dtype=fp8_e5m2"]) == "fp8_e5m2"
    assert kv_cache_dtype_from_args(["--enforce-eager"]) is None


def test_achieved_is_a_share_of_the_ceiling_with_its_interval() -> None:
    hardware = Hardware(name="toy", kind="cpu", mem_bw_gbps=1e6, peak_tflops=0.1, source="test")
    roofline = decode_roofline(shape_from_config(LLAMA_3_8B), hardware, batch=8, mean_context=512)
    ceiling = roofline.ceiling_tok_s
    result = achieved(roofline, ceiling / 2, ceiling / 4, ceiling * 3 / 4)
    assert result.achieved_pct == pytest.approx(50)
    assert (result.achieved_pct_ci_low, result.achieved_pct_ci_high) == (pytest.approx(25), pytest.approx(75))
    assert result.above_ceiling is False and result.warning is None
    over = achieved(roofline, ceiling * 1.2, ceiling * 1.1, ceiling * 1.3)
    assert over.above_ceiling is True
    assert over.achieved_pct == pytest.approx(120)
    assert "above" in over.warning


def test_models_reject_unknown_fields_and_bad_inputs() -> None:
    with pytest.raises(ValidationError, match="colour"):
        Hardware(name="x", kind="gpu", mem_bw_gbps=1, peak_tflops=1, source="s", colour="red")
    with pytest.raises(ValidationError):
        Roofline.model_validate({"ceiling_tok_s": 1.0, "extra": 1})
    with pytest.raises(ValueError, match="batch"):
        decode_roofline(shape_from_config(LLAMA_3_8B), gpu_hardware("H100"), batch=0, mean_context=10)
    with pytest.raises(KeyError, match="unknown GPU"):
        gpu_hardware("RTX-nope")
