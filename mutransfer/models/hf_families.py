"""Where each Hugging Face model family keeps its shape in its ``config.json``.

:data:`HF_FIELDS` maps a ``model_type`` (by regex, first match wins) to the names of its
hidden size, layer count, head counts, MLP size and head dim (:class:`HFFields`);
:func:`hf_fields` looks one up. :mod:`mutransfer.models.source` reads, checks and scales an
``hf:`` config through it. :data:`RELEASED` holds the ``config.json`` fields of the released
models of the families mutransfer is tested on (the end-to-end family test narrows them in
width only; ``benchmarks/hf_coord_default.py`` checks them at proxy widths).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["HEAD_DIM_SCALARS", "HF_FIELDS", "HFFields", "RELEASED", "hf_fields"]


@dataclass(frozen=True)
class HFFields:
    """Where a model family keeps its shape in its config (None: it has no such field)."""

    hidden: str
    """Hidden size d_model."""
    layers: str
    """Number of blocks."""
    heads: str
    """Attention (query) heads."""
    kv_heads: str | None
    """Key/value heads (GQA); None: as many as query heads."""
    intermediate: str | None
    """MLP (per-expert) hidden size; kept at its ratio to the hidden size."""
    head_dim: str | None
    """An explicit head-dim field; None: head_dim = hidden / heads."""


_LLAMA_LIKE = HFFields("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                       "intermediate_size", "head_dim")
#: model_type regex -> its fields, first match wins (Llama, Qwen2/3, Mistral, Mixtral,
#: Gemma/Gemma2/Gemma3, Phi3, OLMo/OLMo2 share the last row).
HF_FIELDS: tuple[tuple[str, HFFields], ...] = (
    (r"^(gpt2|gpt_bigcode)$", HFFields("n_embd", "n_layer", "n_head", None, "n_inner", None)),
    (r"^gpt_neox", HFFields("hidden_size", "num_hidden_layers", "num_attention_heads", None,
                            "intermediate_size", None)),
    (r"^phi3$", HFFields("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                         "intermediate_size", None)),
    (r".*", _LLAMA_LIKE),
)


#: Config fields that are a head dim in another name (Gemma 2/3 scale attention logits by
#: 1/sqrt(query_pre_attn_scalar), released equal to head_dim or a fixed multiple of it):
#: a proxy whose head dim scales (``keep_heads``) scales them by the same factor.
HEAD_DIM_SCALARS: tuple[str, ...] = ("query_pre_attn_scalar",)


def hf_fields(model_type: str) -> HFFields:
    """The :data:`HF_FIELDS` row of ``model_type`` (first match wins)."""
    return next(f for pattern, f in HF_FIELDS if re.search(pattern, model_type))


#: The released models' config.json fields (architecture only: no auto_map, no
#: transformers_version), as published on the Hugging Face hub.
RELEASED: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": {
        "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "tie_word_embeddings": True, "rope_theta": 500000.0, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "rms_norm_eps": 1e-5, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"},
    "qwen2.5-0.5b": {  # q/k/v biases; head_dim 64 = 896 / 14
        "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "tie_word_embeddings": True, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 24,
        "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16"},
    "gemma-2-2b": {  # attention 8 x 256 = 2048 wide in a 2304 stream; alternating sliding/global layers
        "model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
        "sliding_window": 4096, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "rope_theta": 10000.0, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "attention_bias": False,
        "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1, "torch_dtype": "float32"},
    "mistral-7b-v0.3": {  # head_dim 128 = 4096 / 32
        "model_type": "mistral", "vocab_size": 32768, "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "tie_word_embeddings": False, "rope_theta": 1000000.0, "sliding_window": None,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
    "phi-3-mini-4k": {  # fused qkv_proj and gate_up_proj; head_dim 96 = 3072 / 32
        "model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "tie_word_embeddings": False, "rope_theta": 10000.0, "rope_scaling": None, "sliding_window": 2047,
        "max_position_embeddings": 4096, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "hidden_act": "silu", "attention_bias": False, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000,
        "torch_dtype": "bfloat16"},
    "olmo-2-1b": {  # OLMo-2-0425-1B: q/k RMSNorm over the whole projection, post-norm blocks
        "model_type": "olmo2", "vocab_size": 100352, "hidden_size": 2048, "intermediate_size": 8192,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16,
        "tie_word_embeddings": False, "rope_theta": 500000.0, "rope_scaling": None,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False,
        "eos_token_id": 100257, "pad_token_id": 100277, "torch_dtype": "float32"},
    "gpt2": {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12,
             "n_positions": 1024, "n_inner": None, "activation_function": "gelu_new",
             "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
             "bos_token_id": 50256, "eos_token_id": 50256, "tie_word_embeddings": True},
}
