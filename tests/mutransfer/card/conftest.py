"""Fixtures of the card tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def _titan_llama(cfg: dict[str, Any], theta: float) -> Any:
    """torchtitan's llama3 config for an HF Llama config ``cfg``, with torchtitan's own
    param_init (its model registry's: embedding std 1, heads trunc-normal dim^-1/2,
    wq/wk/wv/w1 0.02, wo/w2/w3 depth-scaled), q/k/v unfused so that a card's names fit."""
    L = pytest.importorskip("torchtitan.models.llama3", reason="torchtitan's llama3 needs triton")
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm

    dim, v, heads = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    return L.Llama3Model.Config(
        dim=dim, vocab_size=v,
        tok_embeddings=Embedding.Config(num_embeddings=v, embedding_dim=dim, param_init=L._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=L._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=v, param_init=L._output_linear_init(dim)),
        layers=L._build_llama3_layers(
            fuse_qkv=False, n_layers=cfg["num_hidden_layers"], dim=dim, n_heads=heads,
            n_kv_heads=cfg["num_key_value_heads"], hidden_dim=cfg["intermediate_size"], attn_backend="flex",
            rope=ComplexRoPE.Config(dim=dim // heads, max_seq_len=64, theta=theta, scaling="none")))


@pytest.fixture
def titan_llama() -> Callable[[dict[str, Any], float], Any]:
    """The builder of torchtitan's own-init llama3 config for an HF Llama config."""
    return _titan_llama
