"""analysis: fit hyperparameter optima, power laws, critical batch size and loss laws.

Pure pandas/scipy/matplotlib. It never imports torch or mutransfer, so a CSV of runs from
any framework is enough. scipy and matplotlib are imported lazily, inside the functions
that need them, so ``import analysis`` stays light.
"""

from __future__ import annotations

from .critical_batch import (
    CriticalBatchFit,
    CriticalBatchResults,
    first_crossing,
    fit_critical_batch,
    fit_noise_scale,
    steps_to_target,
)
from .loss_law import (
    HOFFMANN_DELTA,
    HOFFMANN_GRID,
    ChinchillaFit,
    ComputeOptimal,
    LossPrediction,
    SaturatingPowerLawFit,
)
from .optimum import Drift, GroupOptimum, OptimumFit
from .powerlaw import PowerLawFit, PowerLawPrediction

__all__ = [
    "HOFFMANN_DELTA",
    "HOFFMANN_GRID",
    "ChinchillaFit",
    "ComputeOptimal",
    "CriticalBatchFit",
    "CriticalBatchResults",
    "Drift",
    "GroupOptimum",
    "LossPrediction",
    "OptimumFit",
    "PowerLawFit",
    "PowerLawPrediction",
    "SaturatingPowerLawFit",
    "first_crossing",
    "fit_critical_batch",
    "fit_noise_scale",
    "steps_to_target",
]
