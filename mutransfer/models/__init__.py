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
from mutransfer.models.source import (
    ModelSource,
    build_model,
    hf_proxy_config,
    load_hf_config,
    logits_of,
    parse_model,
)

__all__ = [
    "DEFAULT_PRESET",
    "GPT",
    "GPTConfig",
    "MLP",
    "MLPConfig",
    "ModelSource",
    "PRESETS",
    "build_model",
    "get_preset",
    "hf_proxy_config",
    "load_hf_config",
    "logits_of",
    "parse_model",
    "gpt_40m",
    "gpt_tiny",
    "mlp_tiny",
    "width_ladder",
]
