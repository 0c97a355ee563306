"""Where each Hugging Face model family keeps its shape in its ``config.json``.

:data:`HF_FIELDS` maps a ``model_type`` (by regex, first match wins) to the names of its
hidden size, layer count, head counts, MLP size and head dim (:class:`HFFields`);
:func:`hf_fields` looks one up. :mod:`mutransfer.models.source` reads, checks and scales an
``hf:`` config through it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["HF_FIELDS", "HFFields", "hf_fields"]


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


def hf_fields(model_type: str) -> HFFields:
    """The :data:`HF_FIELDS` row of ``model_type`` (first match wins)."""
    return next(f for pattern, f in HF_FIELDS if re.search(pattern, model_type))

