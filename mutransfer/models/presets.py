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


def mlp_tiny() -> MLPConfig:
    """A 2-hidden-layer MLP for the fastest tests."""
    return MLPConfig(in_features=32, width=64, depth=2, out_features=10)


PRESETS: dict[str, Callable[[], GPTConfig | MLPConfig]] = {
    "gpt-40m": gpt_40m,
    "gpt-small": gpt_small,
    "gpt-tiny": gpt_tiny,
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
