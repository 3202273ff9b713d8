"""The tiny Llama the embedded default serves: random weights, a small BPE tokenizer.

Everything derives from one fixed seed, so two runs write byte-identical folders and
a measurement on one machine means the same model as on another. Pure code apart from
writing the folder it is given.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

SEED = 20240611
VOCAB_SIZE = 2048
HIDDEN = 256
LAYERS = 4
HEADS = 8
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 704
MAX_POSITIONS = 4096
INIT_STD = 0.02
CORPUS_SENTENCES = 20000

# Llama-3 names, at the first IDs so every tokenizer built here agrees on them.
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eot_id|>"]
BOS_ID, EOS_ID, EOT_ID = 0, 1, 4

CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)

_ONSETS = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v",
           "w", "z", "br", "ch", "cl", "dr", "fl", "gr", "pl", "sh", "st", "th", "tr"]
_NUCLEI = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "oo", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck", "x"]
_PUNCT = [".", ".", ".", "?", "!"]


def _pseudo_word(rng: random.Random) -> str:
    syllables = rng.choice([1, 1, 2, 2, 2, 3, 3, 4])
    return "".join(rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS) for _ in range(syllables))


def corpus(seed: int = SEED, sentences: int = CORPUS_SENTENCES) -> list[str]:
    """Pseudo-English sentences; a Zipf-like lexicon so BPE finds frequent words."""
    rng = random.Random(seed)
    lexicon = sorted({_pseudo_word(rng) for _ in range(3000)})
    rng.shuffle(lexicon)
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    lines = []
    for _ in range(sentences):
        words = rng.choices(lexicon, weights=weights, k=rng.randint(4, 18))
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
        if rng.random() < 0.15:
            words.insert(rng.randrange(len(words)), rng.choice([",", ";", ":", "-", "(x)", "\"y\""]))
        lines.append(" ".join(words).capitalize() + rng.choice(_PUNCT))
    return lines


def build_tokenizer(seed: int = SEED):
    """A byte-level BPE tokenizer trained on `corpus(seed)`, BOS added like Llama 3."""
    # Checked on tokenizers 0.23: training is byte-identical across runs with 1 or 2
    # rayon threads (tests/unit/test_tiny_model.py guards it), so no thread pinning.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(seed), trainer=trainer)
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single=f"{SPECIAL_TOKENS[BOS_ID]} $A",
            pair=f"{SPECIAL_TOKENS[BOS_ID]} $A {SPECIAL_TOKENS[BOS_ID]} $B",
            special_tokens=[(SPECIAL_TOKENS[BOS_ID], BOS_ID)],
        ),
    ])
    return tokenizer


def model_config(vocab_size: int = VOCAB_SIZE) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": INIT_STD,
        "vocab_size": vocab_size,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def _weight_shapes(vocab_size: int) -> dict[str, tuple[int, ...]]:
    kv_out = KV_HEADS * HEAD_DIM
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, HIDDEN)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        shapes.update({
            f"{prefix}.self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            f"{prefix}.self_attn.k_proj.weight": (kv_out, HIDDEN),
            f"{prefix}.self_attn.v_proj.weight": (kv_out, HIDDEN),
            f"{prefix}.self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            f"{prefix}.mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{prefix}.mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{prefix}.mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
            f"{prefix}.input_layernorm.weight": (HIDDEN,),
            f"{prefix}.post_attention_layernorm.weight": (HIDDEN,),
        })
    shapes["model.norm.weight"] = (HIDDEN,)
    shapes["lm_head.weight"] = (vocab_size, HIDDEN)
    return shapes


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even); numpy has no bf16."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    return ((bits + rounding) >> 16).astype(np.uint16)


def weights_bytes(seed: int = SEED, vocab_size: int = VOCAB_SIZE) -> bytes:
    """The safetensors file: N(0, 0.02) matrices, unit norms, stored as bf16."""
    from safetensors import TensorSpec, serialize

    rng = np.random.default_rng(seed)
    arrays = {}
    for name, shape in _weight_shapes(vocab_size).items():
        if len(shape) == 1:
            arrays[name] = _bf16_bits(np.ones(shape, dtype=np.float32))
        else:
            arrays[name] = _bf16_bits(rng.standard_normal(shape, dtype=np.float32) * INIT_STD)
    # safetensors.numpy.save only knows numpy dtypes; its serializer takes bf16 bits.
    specs = {name: TensorSpec(dtype="bfloat16", shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, a in arrays.items()}
    return bytes(serialize(specs, metadata={"format": "pt"}))


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOT_ID],
        "pad_token": SPECIAL_TOKENS[EOS_ID],
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
    }


def _write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def write_tiny_model(dir: Path, seed: int = SEED) -> Path:  # noqa: A002 - the documented name
    """Write config, weights and tokenizer to `dir`; the same bytes for the same seed."""
    target = Path(dir)
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed)
    vocab_size = tokenizer.get_vocab_size()
    (target / "tokenizer.json").write_text(tokenizer.to_str(pretty=True) + "\n")
    _write_json(target / "tokenizer_config.json", tokenizer_config())
    _write_json(target / "config.json", model_config(vocab_size))
    _write_json(target / "generation_config.json", {
        "bos_token_id": BOS_ID, "eos_token_id": [EOS_ID, EOT_ID], "do_sample": True,
        "temperature": 0.6, "top_p": 0.9,
    })
    (target / "model.safetensors").write_bytes(weights_bytes(seed, vocab_size))
    return target


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom tiny-model", description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="folder to write the model into")
    p.add_argument("--seed", type=int, default=SEED, help=f"the random weights' seed (default {SEED})")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    path = write_tiny_model(args.dir, args.seed)
    total = sum(p.stat().st_size for p in path.iterdir())
    print(f"wrote tiny Llama to {path} ({total / 1e6:.1f} MB)")
    return 0
