"""Tiny Hugging Face ``transformers`` models, built from configs with random init (no
download), and the loss the coordinate check and trainer call on them.

``tiny_builder("llama")`` returns ``builder(width) -> model`` for
:class:`~mutransfer.parametrize.parametrization.Parametrization`: the head dim is fixed (heads grow
with width, as in our presets) for every architecture but GPT-2, which keeps its head
count fixed so its head dim grows with width, exercising μP's 1/d_head attention scale.
One row of :data:`_ARCH` per architecture: its config class and the argument names it
uses. Gemma and Gemma2 multiply the embeddings by sqrt(hidden_size) inside the forward
(found and compensated by :mod:`mutransfer.parametrize.internals`); Gemma2 runs eager attention, the
only kernel that applies its attention-logit soft-capping.
``transformers`` is imported only when a builder is called (``pip install '.[engines]'``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

# arch -> (config class, family): "gpt2" names its sizes n_embd/n_layer/n_head; "neox" and
# "phi3" derive the head dim from hidden_size / heads; "llama" takes head_dim and GQA heads.
_ARCH: dict[str, tuple[str, str]] = {
    "llama": ("LlamaConfig", "llama"),
    "qwen2": ("Qwen2Config", "llama"),
    "mistral": ("MistralConfig", "llama"),
    "mixtral": ("MixtralConfig", "llama"),
    "gemma": ("GemmaConfig", "llama"),
    "gemma2": ("Gemma2Config", "llama"),
    "olmo2": ("Olmo2Config", "llama"),
    "phi3": ("Phi3Config", "phi3"),
    "gpt_neox": ("GPTNeoXConfig", "neox"),
    "gpt2": ("GPT2Config", "gpt2"),
}
# Per-architecture extras: MoE sizes, Gemma2's 1/sqrt(query_pre_attn_scalar) made the plain
# 1/sqrt(head_dim), eager attention where another kernel would skip part of the forward.
_EXTRA: dict[str, dict[str, Any]] = {
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "gemma2": dict(query_pre_attn_scalar="head_dim", attn_implementation="eager"),
    "phi3": dict(resid_pdrop=0.0, embd_pdrop=0.0),
    "gpt_neox": dict(hidden_dropout=0.0, attention_dropout=0.0),
}
ARCHITECTURES: tuple[str, ...] = tuple(_ARCH)


def tiny_config(arch: str, width: int, *, depth: int = 2, vocab_size: int = 128, head_dim: int = 16,
                seq_len: int = 64, tie: bool = False, **overrides: Any) -> Any:
    """A ``transformers`` config for a tiny ``arch`` model of hidden size ``width``."""
    import transformers as tf

    if arch not in _ARCH:
        raise ValueError(f"unknown architecture {arch!r}; choose from {', '.join(ARCHITECTURES)}")
    if width % head_dim:
        raise ValueError(f"width {width} is not divisible by head_dim {head_dim}")
    heads = width // head_dim
    cls_name, family = _ARCH[arch]
    # token ids inside the tiny vocabulary, and no padding row (an Embedding's padding_idx
    # row is zero and never trained)
    kw: dict[str, Any] = dict(vocab_size=vocab_size, tie_word_embeddings=tie, bos_token_id=0,
                              eos_token_id=1, pad_token_id=None)
    if family == "gpt2":
        kw.update(n_embd=width, n_layer=depth, n_head=2, n_positions=seq_len,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    else:
        kw.update(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=depth,
                  num_attention_heads=heads, max_position_embeddings=seq_len)
        if family != "neox":
            kw.update(num_key_value_heads=max(1, heads // 2))
        if family == "llama":
            kw.update(head_dim=head_dim)
    attn = None
    for k, v in _EXTRA.get(arch, {}).items():
        if k == "attn_implementation":
            attn = v
        else:
            kw[k] = head_dim if v == "head_dim" else v
    cfg = getattr(tf, cls_name)(**kw)
    if attn is not None:
        cfg._attn_implementation = attn
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
