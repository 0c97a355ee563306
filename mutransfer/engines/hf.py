"""Tiny Hugging Face ``transformers`` models, built from configs with random init (no
download), and the loss the coordinate check and trainer call on them.

``tiny_builder("llama")`` returns ``builder(width) -> model`` for
:class:`~mutransfer.parametrization.Parametrization`: the head dim is fixed (heads grow
with width, as in our presets) for Llama/Qwen2/Mixtral; GPT-2 keeps its head count fixed
so its head dim grows with width, which exercises μP's 1/d_head attention scale.
``transformers`` is imported only when a builder is called (``pip install '.[engines]'``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

ARCHITECTURES: tuple[str, ...] = ("llama", "qwen2", "gpt2", "mixtral")


def tiny_config(arch: str, width: int, *, depth: int = 2, vocab_size: int = 128, head_dim: int = 16,
                seq_len: int = 64, tie: bool = False, **overrides: Any) -> Any:
    """A ``transformers`` config for a tiny ``arch`` model of hidden size ``width``."""
    import transformers as tf

    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; choose from {', '.join(ARCHITECTURES)}")
    if width % head_dim:
        raise ValueError(f"width {width} is not divisible by head_dim {head_dim}")
    heads = width // head_dim
    common: dict[str, Any] = dict(vocab_size=vocab_size, tie_word_embeddings=tie)
    if arch == "gpt2":
        cfg = tf.GPT2Config(n_embd=width, n_layer=depth, n_head=2, n_positions=seq_len,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common)
    else:
        cls = {"llama": tf.LlamaConfig, "qwen2": tf.Qwen2Config, "mixtral": tf.MixtralConfig}[arch]
        kw: dict[str, Any] = dict(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=depth,
                                  num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                                  head_dim=head_dim, max_position_embeddings=seq_len)
        if arch == "mixtral":
            kw.update(num_local_experts=4, num_experts_per_tok=2)
        cfg = cls(**kw, **common)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def tiny_builder(arch: str, **kwargs: Any) -> Callable[[int], nn.Module]:
    """``builder(width)`` building a tiny ``arch`` causal LM at random init."""
    import transformers as tf

    tiny_config(arch, 64, **kwargs)  # fail fast on a bad architecture or option

    def builder(width: int) -> nn.Module:
        return tf.AutoModelForCausalLM.from_config(tiny_config(arch, width, **kwargs))

    return builder


def hf_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Next-token cross entropy of a causal LM on (inputs, targets), targets already
    shifted (the trainer's batches): logits are compared position by position."""
    logits = model(input_ids=batch[0]).logits
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[1].flatten())


__all__ = ["ARCHITECTURES", "hf_loss", "tiny_builder", "tiny_config"]
