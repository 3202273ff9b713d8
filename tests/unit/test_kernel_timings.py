"""The prepared GPU kernel-timing script (benchmarks/calibration/kernel_timings.py): the layer
shapes it times, and a smoke run on the CPU that writes every row the GPU run would."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.calibration.kernel_timings import gemm_shapes, layer_shape, main

MODELS = Path(__file__).resolve().parents[2] / "models"


def shape_of(name: str) -> dict:
    return layer_shape(json.loads((MODELS / name / "config.json").read_text()))


def test_the_products_are_each_gpus_share_of_the_layer() -> None:
    assert gemm_shapes(shape_of("llama-3-8b"), 1) == [
        ("qkv", (32 + 2 * 8) * 128, 4096), ("o", 4096, 4096), ("gate_up", 2 * 14336, 4096), ("down", 4096, 14336),
        ("lm_head", 128256, 4096)]
    by_op = {op: (n, k) for op, n, k in gemm_shapes(shape_of("llama-3-70b"), 8)}
    assert by_op["qkv"] == ((64 + 2 * 8) * 128 // 8, 8192) and by_op["down"] == (8192, 28672 // 8)
    assert shape_of("mixtral-8x7b")["experts"] == 8 and shape_of("mixtral-8x7b")["experts_per_token"] == 2


def test_a_smoke_run_on_the_cpu_writes_every_row_and_says_why_fp8_is_missing(tmp_path) -> None:
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps({
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 256}))
    out = tmp_path / "kernels.json"
    assert main(["--device", "cpu", "--quick", "--models-dir", str(tmp_path), "--models", "tiny",
                 "--out", str(out), "--commit", "abc1234"]) == 0
    record = json.loads(out.read_text())
    assert record["machine"]["commit"] == "abc1234" and record["machine"]["device"] == "cpu"
    assert record["fp8"] == "FP8 tensor cores are a GPU's"
    assert [(r["op"], r["m"]) for r in record["gemm"]] == [
        (op, m) for op in ("qkv", "o", "gate_up", "down", "lm_head") for m in (1, 16)]
    assert all(r["seconds"] > 0 and r["tflops"] > 0 for r in record["gemm"])
    [attention] = record["attention"]
    assert (attention["batch"], attention["context"], attention["kv_heads"]) == (1, 512, 2) and attention["seconds"] > 0
