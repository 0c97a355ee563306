"""Model presets as functions; variants use ``dataclasses.replace`` (or ``cfg.replace``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mutransfer.models.gpt import GPTConfig
from mutransfer.models.mlp import MLPConfig


def gpt_40m() -> GPTConfig:
    """The ~40M-parameter proxy: 13 blocks of width 512, 8 heads of 64, byte vocab,
    context 512. About 41M parameters, nearly all non-embedding."""
    return GPTConfig(width=512, depth=13, head_dim=64, seq_len=512, vocab_size=256)


def gpt_tiny() -> GPTConfig:
    """A 2-block width-64 GPT for tests and CPU smoke runs (~0.1M parameters)."""
    return GPTConfig(width=64, depth=2, head_dim=16, seq_len=64, vocab_size=256)


def gpt_small() -> GPTConfig:
    """The demo's CPU proxy: 2 blocks, head dim 32, context 64 (the width ladder varies
    width from 32 up)."""
    return GPTConfig(width=128, depth=2, head_dim=32, seq_len=64, vocab_size=256)


# The Llama family: SwiGLU, grouped-query attention, RMSNorm, RoPE (HF's rotate_half after
# the converter's q/k permutation), untied head, no biases: each maps one-to-one onto a
# transformers LlamaForCausalLM (mutransfer.models.convert). d_mlp = 3·width (Llama 3 8B
# uses 3.5), so the MLP stays an integer multiple of width at every ladder width.
_LLAMA = GPTConfig(mlp="swiglu", mlp_ratio=3.0, vocab_size=256, rope_theta=10000.0, norm_eps=1e-6)


def llama_tiny() -> GPTConfig:
    """A 2-block width-64 Llama for tests and CPU smoke runs: 4 query heads of 16 sharing
    2 key/value heads (~0.1M parameters)."""
    return _LLAMA.replace(width=64, depth=2, head_dim=16, q_per_kv=2, seq_len=64)


def llama_small() -> GPTConfig:
    """The demo-sized CPU proxy, gpt-small's scale: 2 blocks, head dim 32, context 64.
    Multi-head (q_per_kv=1) so the demo's ladder can start at width 32 (one head);
    ``replace(q_per_kv=2)`` for GQA from width 64 up."""
    return _LLAMA.replace(width=128, depth=2, head_dim=32, q_per_kv=1, seq_len=64)


def llama_40m() -> GPTConfig:
    """The ~40M-parameter Llama proxy: 13 blocks of width 512 (gpt-40m's shape), 8 query
    heads of 64 over 2 key/value heads (GQA 4:1, Llama 3's ratio), context 512, byte vocab.
    About 39.3M non-embedding parameters + 0.26M embedding."""
    return _LLAMA.replace(width=512, depth=13, head_dim=64, q_per_kv=4, seq_len=512)


def mlp_tiny() -> MLPConfig:
    """A 2-hidden-layer MLP for the fastest tests."""
    return MLPConfig(in_features=32, width=64, depth=2, out_features=10)


PRESETS: dict[str, Callable[[], GPTConfig | MLPConfig]] = {
    "gpt-40m": gpt_40m,
    "gpt-small": gpt_small,
    "gpt-tiny": gpt_tiny,
    "llama-40m": llama_40m,
    "llama-small": llama_small,
    "llama-tiny": llama_tiny,
    "mlp-tiny": mlp_tiny,
}


#: The preset every verb (train, sweep, explain, transfer) uses when none is named: a
#: sweep and the card made from it must agree on the proxy without the user saying so.
DEFAULT_PRESET = "gpt-tiny"


def get_preset(name: str) -> GPTConfig | MLPConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[name]()


def width_ladder(
    cfg: GPTConfig | MLPConfig, widths: Iterable[int]
) -> list[GPTConfig | MLPConfig]:
    """The same model at several widths (head_dim fixed, so heads grow with width)."""
    return [cfg.replace(width=int(w)) for w in widths]
