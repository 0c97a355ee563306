"""A small MLP for fast tests: input layer, hidden layers, readout."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class MLPConfig:
    in_features: int = 32
    """Input size (fixed: does not scale with width)."""
    width: int = 128
    """Hidden width, the dimension μP scales."""
    depth: int = 2
    """Number of hidden-to-hidden layers (the MLP has depth + 2 linear layers)."""
    out_features: int = 10
    """Output size (fixed)."""
    bias: bool = True
    """Biases in every linear layer."""

    def __post_init__(self) -> None:
        for field in ("in_features", "width", "out_features"):
            if getattr(self, field) < 1:
                raise ValueError(f"MLPConfig.{field} must be >= 1, got {getattr(self, field)}")
        if self.depth < 0:
            raise ValueError(f"MLPConfig.depth must be >= 0, got {self.depth}")

    def replace(self, **changes: object) -> MLPConfig:
        return dataclasses.replace(self, **changes)


class MLP(nn.Module):
    def __init__(self, cfg: MLPConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.fc_in = nn.Linear(cfg.in_features, cfg.width, bias=cfg.bias)
        self.hidden = nn.ModuleList(
            nn.Linear(cfg.width, cfg.width, bias=cfg.bias) for _ in range(cfg.depth)
        )
        self.fc_out = nn.Linear(cfg.width, cfg.out_features, bias=cfg.bias)

    def forward(self, x_BI: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc_in(x_BI))
        for layer in self.hidden:
            h = F.relu(layer(h))
        return self.fc_out(h)
