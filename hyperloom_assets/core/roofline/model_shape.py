"""A model's shape from its Hugging Face `config.json`: parameters, FLOPs, KV bytes.

Pure code, shared by the sim's performance model and the roofline, so both agree on
what a token costs. Dense and MoE (expert count, experts per token) Llama-like models.
"""

from __future__ import annotations

import json
from pathlib import Path

from hyperloom_assets.core.models import Frozen

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "float8_e4m3fn": 1}


class ModelShape(Frozen):
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int = 0  # 0 for dense
    experts_per_token: int = 0
    moe_intermediate: int = 0
    dtype: str = "bfloat16"
    max_position_embeddings: int = 4096
    mtp_layers: int = 0  # multi-token-prediction layers shipped for speculative decoding (DeepSeek-V3, GLM-4.5)

    @property
    def weight_bytes_per_param(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element, and so per `auto` KV-cache element.

        vLLM and SGLang store KV in the model's compute dtype ("If "auto", will use model
        data type", vLLM's CacheConfig.cache_dtype); a quantized checkpoint (fp8, int8,
        4-bit) still computes in 16 bits, so only an fp8 `--kv-cache-dtype` halves KV.
        """
        return max(self.weight_bytes_per_param, 2)

    @property
    def attention_params(self) -> int:
        q_out = self.heads * self.head_dim
        kv_out = 2 * self.kv_heads * self.head_dim
        return self.layers * (self.hidden * (q_out + kv_out) + q_out * self.hidden)

    @property
    def expert_params(self) -> int:
        """Parameters of one expert's MLP in one layer (gate, up, down)."""
        return 3 * self.hidden * (self.moe_intermediate or self.intermediate)

    @property
    def dense_mlp_params(self) -> int:
        return 0 if self.experts else self.layers * 3 * self.hidden * self.intermediate

    @property
    def embedding_params(self) -> int:
        return 2 * self.vocab * self.hidden  # input embedding and LM head

    @property
    def total_params(self) -> int:
        experts = self.layers * self.experts * self.expert_params
        return self.attention_params + self.dense_mlp_params + experts + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches (MoE: only its routed experts)."""
        experts = self.layers * self.experts_per_token * self.expert_params
        return self.attention_params + self.dense_mlp_params + experts + self.embedding_params

    def weight_bytes(self) -> float:
        return float(self.total_params * self.weight_bytes_per_param)

    def expected_experts_touched(self, batch: int) -> float:
        """Experts per layer a batch of tokens touches, routing taken as uniform."""
        if not self.experts:
            return 0.0
        miss = (1 - self.experts_per_token / self.experts) ** max(batch, 0)
        return self.experts * (1 - miss)

    def decode_weight_bytes(self, batch: int) -> float:
        """Weight bytes one decode step reads for a batch (MoE: touched experts only)."""
        if not self.experts:
            return self.weight_bytes()
        dense = self.attention_params + self.embedding_params
        experts = self.layers * self.expected_experts_touched(batch) * self.expert_params
        return float((dense + experts) * self.weight_bytes_per_param)

    def kv_bytes_per_token(self, kv_dtype_bytes: float | None = None) -> float:
        per_elem = kv_dtype_bytes if kv_dtype_bytes is not None else self.activation_bytes
        return 2.0 * self.layers * self.kv_heads * self.head_dim * per_elem

    def flops_per_token(self, context: float) -> float:
        """Forward FLOPs for one token: 2 per active weight plus attention over context."""
        attention = 4.0 * self.layers * self.heads * self.head_dim * context
        return 2.0 * self.active_params + attention


def _dtype(config: dict) -> str:
    raw = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return raw.replace("torch.", "")


def shape_from_config(config: dict) -> ModelShape:
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    return ModelShape(
        hidden=hidden,
        layers=int(config["num_hidden_layers"]),
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate=int(config.get("intermediate_size") or 4 * hidden),
        vocab=int(config["vocab_size"]),
        experts=int(config.get("num_local_experts") or config.get("num_experts") or config.get("n_routed_experts") or 0),
        experts_per_token=int(config.get("num_experts_per_tok") or 0),
        moe_intermediate=int(config.get("moe_intermediate_size") or 0),
        dtype=_dtype(config),
        max_position_embeddings=int(config.get("max_position_embeddings") or 4096),
        mtp_layers=int(config.get("num_nextn_predict_layers") or 0),
    )


def load_shape(model_dir: Path) -> ModelShape:
    """The shape of the model in a folder holding `config.json`."""
    return shape_from_config(json.loads((model_dir / "config.json").read_text()))
