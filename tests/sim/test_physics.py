"""The sim's performance model behaves like the hardware: each test names one physical effect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.sim.build import build_engine
from hyperloom_assets.sim.engine_args import resolve_config
from hyperloom_assets.sim.perf_model import SimConfigError
from hyperloom_assets.sim.predict import fixed_batch_latency, parse_engine_args, predict
from tests.sim.conftest import LLAMA_8B, REPO

MIXTRAL = REPO / "models" / "mixtral-8x7b"
LLAMA_70B = {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64, "num_hidden_layers": 80,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


def random_workload(**fields) -> Workload:
    return Workload(**{"kind": "random", "isl": 512, "osl": 128, "concurrency": 32, **fields})


def throughput(args: list[str], model: Path = LLAMA_8B, tp: int = 1, **fields) -> float:
    return predict(model, "H100", args, random_workload(**fields), tp=tp).output_throughput


def engine_for(args: list[str], model: Path = LLAMA_8B, tp: int = 1, gpu: str = "H100"):
    spec = gpu_spec(gpu)
    config = resolve_config(parse_engine_args(model, args, "vllm"), "vllm", spec.memory_gb)
    return build_engine(model, spec, config, tp=tp)


def test_batch_one_decode_is_bandwidth_bound_but_never_beats_it():
    engine = engine_for([])
    measured = predict(LLAMA_8B, "H100", [], random_workload(isl=16, osl=256, concurrency=1, num_prompts=4))
    bound_ms = engine.model.bandwidth_bound_decode_s(batch=1, context=16 + 128) * 1000
    assert measured.tpot_p50_ms >= bound_ms
    assert 0.6 <= bound_ms / measured.tpot_p50_ms <= 0.9  # a plausible share of peak bandwidth


def test_throughput_rises_with_the_sequence_cap_up_to_the_concurrency():
    caps = [1, 2, 4, 8, 16, 32]
    results = [throughput(["--max-num-seqs", str(cap)], num_prompts=96) for cap in caps]
    assert all(later > earlier * 1.2 for earlier, later in zip(results, results[1:])), results
    beyond = throughput(["--max-num-seqs", "64"], num_prompts=96)
    assert beyond == pytest.approx(results[-1], rel=0.01)


def test_prefix_caching_wins_on_shared_prefixes_and_not_on_random_prompts():
    shared = dict(kind="shared_prefix", isl=1024, prefix_len=896, osl=32, concurrency=16, num_prompts=96)
    assert throughput([], **shared) > 1.5 * throughput(["--no-enable-prefix-caching"], **shared)
    unique = dict(isl=1024, osl=32, concurrency=16, num_prompts=96)
    assert throughput([], **unique) == pytest.approx(throughput(["--no-enable-prefix-caching"], **unique), rel=0.01)


def test_fp8_kv_wins_when_kv_reads_dominate_and_doubles_capacity():
    long_context = dict(isl=4096, osl=256, concurrency=64, num_prompts=128)
    assert throughput(["--kv-cache-dtype", "fp8"], **long_context) > 1.1 * throughput([], **long_context)
    assert engine_for(["--kv-cache-dtype", "fp8"]).kv_tokens == pytest.approx(2 * engine_for([]).kv_tokens, rel=0.001)
    tight = dict(isl=2048, osl=512, concurrency=256, num_prompts=256)
    small = ["--gpu-memory-utilization", "0.35"]
    assert throughput([*small, "--kv-cache-dtype", "fp8"], **tight) > 1.2 * throughput(small, **tight)


def test_an_fp8_checkpoint_keeps_a_16_bit_kv_cache_unless_fp8_kv_is_asked_for(tmp_path: Path):
    """`--kv-cache-dtype auto` is the model's compute dtype, not its weights'.

    vLLM's CacheConfig.cache_dtype (vllm/config/cache.py at 002f10e0): 'If "auto", will use
    model data type'; the runner (ROCm/vllm 7802e2b, vllm/v1/worker/gpu_model_runner.py):
    `if cache_config.cache_dtype == "auto": self.kv_cache_dtype = self.dtype`, the
    activations' dtype, which stays 16-bit for an fp8 checkpoint.
    """
    config = json.loads((LLAMA_8B / "config.json").read_text())
    for name, dtype in (("fp8", "float8_e4m3fn"), ("fp32", "float32")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({**config, "torch_dtype": dtype}))
    bf16 = engine_for([])
    auto = engine_for([], model=tmp_path / "fp8")
    fp8_kv = engine_for(["--kv-cache-dtype", "fp8"], model=tmp_path / "fp8")
    assert auto.model.kv_bytes_per_token == bf16.model.kv_bytes_per_token
    assert fp8_kv.model.kv_bytes_per_token == bf16.model.kv_bytes_per_token / 2
    assert auto.model.weight_bytes_per_gpu == bf16.model.weight_bytes_per_gpu / 2  # the weights are fp8
    assert engine_for([], model=tmp_path / "fp32").model.kv_bytes_per_elem == 4.0


def test_a_fixed_batch_costs_its_steps_and_grows_with_the_batch():
    shape = load_shape(LLAMA_8B)
    one = fixed_batch_latency(shape, "H100", [], batch=1, input_len=128, output_len=64)
    floor = 64 * engine_for([]).model.bandwidth_bound_decode_s(batch=1, context=128)
    assert floor < one < 2 * floor
    assert fixed_batch_latency(shape, "H100", [], batch=64, input_len=128, output_len=64) > one


def test_running_out_of_kv_preempts():
    engine = engine_for(["--gpu-memory-utilization", "0.3"])
    from hyperloom_assets.core.measurement.workloads import build_plan
    from hyperloom_assets.sim.predict import simulate_round
    plan = build_plan(random_workload(isl=2048, osl=1024, concurrency=256, num_prompts=256), 1000)
    records, _ = simulate_round(engine, plan, 256)
    assert all(r.ok and r.output_tokens == 1024 for r in records)
    assert engine.meter.preemptions > 0
    assert engine.kv.used == 0  # every block came back


def test_a_bigger_model_is_slower(tmp_path: Path):
    big = tmp_path / "llama-70b"
    big.mkdir()
    (big / "config.json").write_text(json.dumps(LLAMA_70B))
    workload = random_workload(isl=128, osl=128, concurrency=1, num_prompts=4)
    small_tpot = predict(LLAMA_8B, "H100", [], workload, tp=4).tpot_p50_ms
    assert predict(big, "H100", [], workload, tp=4).tpot_p50_ms > 4 * small_tpot
    assert predict(MIXTRAL, "H100", [], workload, tp=4).tpot_p50_ms > small_tpot


def test_tensor_parallelism_spreads_weights():
    one, two = engine_for([]), engine_for([], tp=2)
    assert two.model.weight_bytes_per_gpu == pytest.approx(one.model.weight_bytes_per_gpu / 2)
    assert two.kv_tokens > 2 * one.kv_tokens  # each GPU also frees the weights it no longer holds
    workload = random_workload(isl=128, osl=128, concurrency=1, num_prompts=4)
    assert predict(LLAMA_8B, "H100", [], workload, tp=2).tpot_p50_ms < predict(LLAMA_8B, "H100", [], workload).tpot_p50_ms
    with pytest.raises(SimConfigError, match="No available memory"):
        engine_for([], model=MIXTRAL)  # 93 GB of bf16 weights do not fit one H100
    assert engine_for([], model=MIXTRAL, tp=2).kv_tokens > 0


def test_the_token_budget_only_pays_once_the_sequence_cap_is_raised():
    workload = dict(isl=512, osl=512, concurrency=128, num_prompts=256)

    def gain(seqs: int) -> float:
        small = throughput(["--max-num-seqs", str(seqs), "--max-num-batched-tokens", "128"], **workload)
        large = throughput(["--max-num-seqs", str(seqs), "--max-num-batched-tokens", "2048"], **workload)
        return large / small - 1

    assert gain(8) < 0.01
    assert gain(128) > 0.2


def test_cuda_graphs_remove_launch_overhead():
    fields = dict(isl=128, osl=128, concurrency=8, num_prompts=32)
    assert throughput(["--enforce-eager"], **fields) < 0.85 * throughput([], **fields)


def test_sglang_flavor_models_its_own_knobs():
    workload = random_workload(kind="shared_prefix", prefix_len=384, num_prompts=128)
    on = predict(LLAMA_8B, "H100", [], workload, flavor="sglang").output_throughput
    off = predict(LLAMA_8B, "H100", ["--disable-radix-cache"], workload, flavor="sglang").output_throughput
    assert on > off * 1.05
    capped = predict(LLAMA_8B, "H100", ["--max-running-requests", "4"], workload, flavor="sglang").output_throughput
    assert capped < 0.5 * on


def test_atom_flavor_models_its_own_knobs():
    # ATOM: prefix caching on unless turned off (either spelling), fp8 KV, its own sequence cap.
    workload = random_workload(kind="shared_prefix", prefix_len=384, num_prompts=128)
    on = predict(LLAMA_8B, "MI300X", [], workload, flavor="atom").output_throughput
    for off_flag in ("--no-enable_prefix_caching", "--no-enable-prefix-caching"):
        off = predict(LLAMA_8B, "MI300X", [off_flag], workload, flavor="atom").output_throughput
        assert on > off * 1.05, off_flag
    capped = predict(LLAMA_8B, "MI300X", ["--max_num_seqs", "4"], workload, flavor="atom").output_throughput
    assert capped < 0.5 * on
    spec = gpu_spec("MI300X")
    kv = {dtype: build_engine(LLAMA_8B, spec, resolve_config(parse_engine_args(LLAMA_8B, ["--kv-cache-dtype", dtype], "atom"),
                                                              "atom", spec.memory_gb)).kv_tokens for dtype in ("bf16", "fp8")}
    assert kv["fp8"] == pytest.approx(2 * kv["bf16"], rel=0.05)


def test_block_sizes_are_accepted_and_benign():
    results = {size: throughput(["--block-size", str(size)], num_prompts=64) for size in (8, 16, 32, 64, 128)}
    assert max(results.values()) < 1.1 * min(results.values())


def test_prediction_is_deterministic_and_noise_is_seeded():
    workload = random_workload(num_prompts=64)
    assert predict(LLAMA_8B, "H100", [], workload).flat() == predict(LLAMA_8B, "H100", [], workload).flat()
    noisy = [predict(LLAMA_8B, "H100", [], workload, seed=seed, noise_pct=5).output_throughput for seed in (1, 1, 2)]
    assert noisy[0] == noisy[1] != noisy[2]


def test_agentic_replay_hits_the_prefix_cache(tmp_path: Path):
    from hyperloom_assets.core.measurement.workloads import synthetic_trace, write_trace
    trace = tmp_path / "trace.jsonl"
    write_trace(synthetic_trace(sessions=8, turns=4, first_user_tokens=1024, user_tokens=64, output_tokens=64,
                                think_ms=0, seed=1), trace)
    workload = Workload(kind="agentic", trace=trace, concurrency=8)
    on = predict(LLAMA_8B, "H100", [], workload)
    off = predict(LLAMA_8B, "H100", ["--no-enable-prefix-caching"], workload)
    assert on.theoretical_prefix_hit_pct and on.theoretical_prefix_hit_pct > 50
    assert on.ttft_p50_ms < off.ttft_p50_ms
