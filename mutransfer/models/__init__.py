"""Proxy models and their presets."""

from __future__ import annotations

from mutransfer.models.convert import from_hf, to_hf
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP, MLPConfig
from mutransfer.models.presets import (
    DEFAULT_PRESET,
    PRESETS,
    get_preset,
    gpt_40m,
    gpt_tiny,
    llama_40m,
    llama_small,
    llama_tiny,
    mlp_tiny,
    width_ladder,
)

__all__ = [
    "DEFAULT_PRESET",
    "GPT",
    "GPTConfig",
    "MLP",
    "MLPConfig",
    "PRESETS",
    "from_hf",
    "get_preset",
    "gpt_40m",
    "gpt_tiny",
    "llama_40m",
    "llama_small",
    "llama_tiny",
    "mlp_tiny",
    "to_hf",
    "width_ladder",
]
