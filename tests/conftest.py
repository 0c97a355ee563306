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
