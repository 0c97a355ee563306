"""analysis: fit hyperparameter optima, power laws, critical batch size and loss laws.

Pure pandas/scipy/matplotlib. It never imports torch or mutransfer, so a CSV of runs from
any framework is enough. scipy and matplotlib are imported lazily, inside the functions
that need them, so ``import analysis`` stays light.
"""

from __future__ import annotations

from analysis._fitted import NotFittedError, check_is_fitted
from analysis._io import plain
from analysis.baselines import (
    DEEPSEEK_LLM,
    POWER_LINES_BATCH_EXPONENT,
    STEP_LAW,
    deepseek_llm,
    linear_rule,
    power_lines,
    scaling_baselines,
    sqrt_rule,
    step_law,
)
from analysis.best_loss import measured_best, paired_best_ratio
from analysis.critical_batch import (
    CriticalBatchFit,
    CriticalBatchResults,
    first_crossing,
    fit_critical_batch,
    fit_noise_scale,
    steps_to_target,
)
from analysis.holdout import AUDIT_KEYS, fill_loss_gap, holdout_audit
from analysis.loss_law import (
    HOFFMANN_DELTA,
    HOFFMANN_GRID,
    ChinchillaFit,
    ComputeOptimal,
    LossPrediction,
    SaturatingPowerLawFit,
)
from analysis.optimum import Drift, GroupOptimum, OptimumFit
from analysis.plots import (
    plot_critical_batch,
    plot_loss_law,
    plot_lr_curves,
    plot_optimum_vs_width,
    plot_power_law,
)
from analysis.powerlaw import PowerLawFit, PowerLawPrediction
from analysis.projection import Estimate, Projection, project
from analysis.results import PROXY_COLUMNS, check_single_valued, proxy_record, read_results
from analysis.scaling_fit import ScalingCurves, ScalingLawFit
from analysis.scaling_plots import (
    CriticalBatchComparison,
    critical_batch_comparison,
    plot_critical_batch_comparison,
    plot_scaling,
)
from analysis.scaling_projection import ScalingProjection
from analysis.schedule import ScheduleRules
from analysis.tau import tau_from, weight_decay_for

__all__ = [
    "AUDIT_KEYS",
    "NotFittedError",
    "check_is_fitted",
    "plain",
    "CriticalBatchComparison",
    "critical_batch_comparison",
    "plot_critical_batch_comparison",
    "plot_scaling",
    "DEEPSEEK_LLM",
    "POWER_LINES_BATCH_EXPONENT",
    "STEP_LAW",
    "ScalingCurves",
    "ScalingLawFit",
    "ScalingProjection",
    "ScheduleRules",
    "deepseek_llm",
    "fill_loss_gap",
    "holdout_audit",
    "linear_rule",
    "power_lines",
    "scaling_baselines",
    "sqrt_rule",
    "step_law",
    "tau_from",
    "weight_decay_for",
    "HOFFMANN_DELTA",
    "HOFFMANN_GRID",
    "ChinchillaFit",
    "ComputeOptimal",
    "CriticalBatchFit",
    "CriticalBatchResults",
    "Drift",
    "Estimate",
    "GroupOptimum",
    "LossPrediction",
    "OptimumFit",
    "PowerLawFit",
    "PowerLawPrediction",
    "Projection",
    "SaturatingPowerLawFit",
    "check_single_valued",
    "proxy_record",
    "PROXY_COLUMNS",
    "first_crossing",
    "measured_best",
    "paired_best_ratio",
    "fit_critical_batch",
    "fit_noise_scale",
    "plot_critical_batch",
    "plot_loss_law",
    "plot_lr_curves",
    "plot_optimum_vs_width",
    "plot_power_law",
    "project",
    "read_results",
    "steps_to_target",
]
