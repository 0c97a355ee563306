"""Proxy models and their presets."""

from __future__ import annotations

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP, MLPConfig
from mutransfer.models.presets import (
    DEFAULT_PRESET,
    PRESETS,
    get_preset,
    gpt_40m,
    gpt_tiny,
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
    "get_preset",
    "gpt_40m",
    "gpt_tiny",
    "mlp_tiny",
    "width_ladder",
]
