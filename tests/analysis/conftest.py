from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


def make_lr_sweep(
    param: str = "mup",
    widths: Sequence[int] = (128, 256, 512, 1024),
    seeds: int = 3,
    noise: float = 0.002,
    log2_opt: float = -9.3,
    curvature: float = 0.02,
    log2_lrs: Sequence[float] | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Synthetic LR x width sweep: loss = 3 + c·(log2 lr − log2 lr*)² + noise.

    Under muP the optimum stays at ``log2_opt``; under SP it falls one octave per width
    doubling (lr* ∝ 1/width), the classic SP drift.
    """
    rng = np.random.default_rng(seed)
    grid = np.arange(-14.0, -3.0) if log2_lrs is None else np.asarray(log2_lrs, float)
    rows = []
    for w in widths:
        opt = log2_opt if param == "mup" else log2_opt - np.log2(w / widths[0])
        for t in grid:
            for s in range(seeds):
                loss = 3.0 + curvature * (t - opt) ** 2 + rng.normal(0.0, noise)
                rows.append(dict(parametrization=param, width=w, lr=2.0**t, seed=s,
                                 loss=loss, diverged=False))
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def lr_sweep() -> Callable[..., pd.DataFrame]:
    return make_lr_sweep
