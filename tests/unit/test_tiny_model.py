"""The tiny Llama: same bytes every time, a config vLLM and transformers accept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hyperloom_assets.core import tiny_model
from hyperloom_assets.core.roofline.model_shape import load_shape

EXPECTED_FILES = {"config.json", "generation_config.json", "model.safetensors",
                  "tokenizer.json", "tokenizer_config.json"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model.write_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_writes_the_expected_files_of_a_few_megabytes(model_dir: Path) -> None:
    assert {p.name for p in model_dir.iterdir()} == EXPECTED_FILES
    total = sum(p.stat().st_size for p in model_dir.iterdir())
    assert 1e6 < total < 20e6


def test_a_second_run_in_another_process_writes_identical_bytes(model_dir: Path, tmp_path: Path) -> None:
    # Another process with two rayon threads: BPE training must not depend on scheduling.
    other = tmp_path / "again"
    code = "import sys; from hyperloom_assets.cli.main import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", code, "tiny-model", str(other)], check=True,
                   env={**os.environ, "RAYON_NUM_THREADS": "2"}, capture_output=True)
    for name in EXPECTED_FILES:
        assert (other / name).read_bytes() == (model_dir / name).read_bytes(), name


def test_config_describes_a_small_gqa_llama(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["torch_dtype"] == "bfloat16"
    assert config["max_position_embeddings"] == 4096
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
    assert config["num_key_value_heads"] < config["num_attention_heads"]
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    assert config["vocab_size"] == len(tokenizer["model"]["vocab"]) == tiny_model.VOCAB_SIZE
    shape = load_shape(model_dir)
    assert shape.layers == 4 and shape.hidden == 256 and shape.kv_heads == 2


def test_weights_use_hf_llama_names_shapes_and_a_small_std(model_dir: Path) -> None:
    from safetensors import safe_open

    config = json.loads((model_dir / "config.json").read_text())
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
        q_proj = handle.get_tensor("model.layers.0.self_attn.q_proj.weight").float().numpy()
        k_proj = handle.get_tensor("model.layers.3.self_attn.k_proj.weight")
        norm = handle.get_tensor("model.norm.weight").float().numpy()
        head = handle.get_tensor("lm_head.weight")
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
            "model.layers.3.mlp.down_proj.weight", "model.layers.0.post_attention_layernorm.weight"} <= names
    assert len(names) == 3 + 9 * config["num_hidden_layers"]
    assert str(k_proj.dtype) == "torch.bfloat16"
    assert tuple(k_proj.shape) == (config["num_key_value_heads"] * config["head_dim"], config["hidden_size"])
    assert tuple(head.shape) == (config["vocab_size"], config["hidden_size"])
    assert abs(float(q_proj.std()) - 0.02) < 0.002
    assert np.all(norm == 1.0)


def test_bf16_conversion_rounds_to_nearest() -> None:
    values = np.array([1.0, -2.5, 0.02, 3.0e-3], dtype=np.float32)
    bits = tiny_model._bf16_bits(values).astype(np.uint32) << 16
    back = bits.view(np.float32)
    assert np.allclose(back, values, rtol=2 ** -8)


def test_tokenizer_round_trips_and_applies_the_chat_template(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    text = "Hello world, 42 tiny models speak (quietly)."
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id == 0
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.convert_tokens_to_ids(tiny_model.SPECIAL_TOKENS) == list(range(len(tiny_model.SPECIAL_TOKENS)))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")
