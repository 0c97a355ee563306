"""The coordinate check lowers a default LR when the run itself is unstable (at its smallest
width, where every parametrization is one model), says so, and never lowers it for
instability that appears only wider (SP's width effect, which the check exists to find)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from mutransfer.checks.coord_check import LR_BACKOFF, UNSTABLE_LOSS_RISE, coord_check, unstable
from mutransfer.models.gpt import GPT, GPTConfig


def _rows(loss_by_width: dict[int, tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"width": w, "depth": 0, "seed": 0, "module": "m", "step": step, "l1": 1.0,
                          "loss": loss} for w, pair in loss_by_width.items() for step, loss in enumerate(pair)])


def test_only_the_smallest_widths_instability_is_the_lrs() -> None:
    assert unstable(_rows({32: (5.0, 4.0), 64: (5.0, 9.0)})) is None  # wider only: SP's width effect
    why = unstable(_rows({32: (5.0, 5.0 * UNSTABLE_LOSS_RISE * 1.01), 64: (5.0, 4.0)}))
    assert why is not None and "width 32" in why
    nan = _rows({32: (5.0, float("nan")), 64: (5.0, 4.0)})
    assert "non-finite" in unstable(nan)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 64, (4, 16), generator=g)
    return x, torch.roll(x, -1, dims=1)


def _builder(width: int) -> GPT:
    return GPT(GPTConfig(vocab_size=64, seq_len=16, width=width, depth=2, head_dim=16))


def test_an_unstable_default_lr_is_lowered_and_recorded() -> None:
    """At lr 10 Adam blows the 2-block model up at every width: the check lowers the LR by
    4 until the smallest width trains, records each step and takes its verdict there."""
    res = coord_check(_builder, _batch(), widths=(32, 64), steps=3, seeds=1, lr=10.0, adapt_lr=True)
    low = res.settings["lr_lowered"]
    assert low and low[0]["lr"] == 10.0 and all(b["lr"] == a["to"] for a, b in zip(low, low[1:]))
    assert res.settings["lr"] == pytest.approx(10.0 / LR_BACKOFF ** len(low))
    if "unstable" not in res.settings:  # it settled: the smallest width's loss no longer rises
        assert unstable(res.data) is None
    # a stable LR is not touched, and without adapt_lr nothing is lowered
    calm = coord_check(_builder, _batch(), widths=(32, 64), steps=3, seeds=1, lr=1e-3, adapt_lr=True)
    assert calm.settings["lr_lowered"] == [] and calm.settings["lr"] == 1e-3
    fixed = coord_check(_builder, _batch(), widths=(32, 64), steps=3, seeds=1, lr=1e-3)
    assert "lr_lowered" not in fixed.settings
