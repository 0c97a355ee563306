from __future__ import annotations

import os

# Tests run under pytest-xdist with one process per core: keep each single-threaded and
# headless.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # analysis tests run without torch
    pass

try:
    from hypothesis import HealthCheck, settings

    # No per-example deadline: CI machines are shared and slow; correctness is what we test.
    settings.register_profile("mutransfer", deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("mutransfer")
except ImportError:
    pass


import pytest  # noqa: E402


@pytest.fixture
def scaling_sweep():
    """A sweep on known laws, as the results table holds it: ``scaling_sweep(budgets=...,
    batches=..., seed=...)`` -> DataFrame. eta* = 2^-12·B^0.5·D^-0.25 and B* = 16·D^0.5
    (tokens), a quadratic loss bowl in log2 lr and log2 B, 2 seeds, noise 0.001."""
    import numpy as np
    import pandas as pd

    def scaling_sweep(budgets: tuple[float, ...] = (2**20, 2**21, 2**22, 2**23),
                      batches: tuple[float, ...] = (2.0**12, 2.0**13, 2.0**14, 2.0**15, 2.0**16),
                      seed: int = 0) -> pd.DataFrame:
        """Optima on known laws: eta* = 2^-12·B^0.5·D^-0.25, B* = 16·D^0.5 (tokens), 2 seeds."""
        rng = np.random.default_rng(seed)
        rows = []
        for d in budgets:
            for b in batches:
                t_opt = np.log2(2.0**-12 * b**0.5 * d**-0.25)
                for t in np.arange(-14.0, -5.5):
                    for s in range(2):
                        loss = (3 + 0.02 * (t - t_opt) ** 2 + 0.01 * (np.log2(b) - np.log2(16 * d**0.5)) ** 2
                                + rng.normal(0, 0.001))
                        rows.append(dict(lr=2.0**t, batch_tokens=b, tokens=d, loss=loss, seed=s,
                                         diverged=False, weight_decay=0.1, seq_len=128))
        return pd.DataFrame(rows)

    return scaling_sweep
