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
