"""mutransfer: muP hyperparameter transfer for PyTorch models.

The public API is re-exported here and loaded lazily, so ``import mutransfer`` stays
quick: torch and friends load on first use of a name that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # parametrization
    "Parametrization": "mutransfer.parametrization",
    "Multipliers": "mutransfer.parametrization",
    "Rule": "mutransfer.parametrization",
    "ParamSpec": "mutransfer.parametrization",
    "parametrize": "mutransfer.parametrization",
    "load_base_shapes": "mutransfer.parametrization",
    # coordinate check
    "coord_check": "mutransfer.coord_check",
    "CoordCheckResult": "mutransfer.coord_check",
    # audit of a user's muP
    "audit": "mutransfer.audit",
    "AuditResult": "mutransfer.audit",
    # transfer card
    "build_card": "mutransfer.card",
    "save_card": "mutransfer.card",
    "load_card": "mutransfer.card",
    "validate_card": "mutransfer.card",
    "apply_card": "mutransfer.card",
    "Applied": "mutransfer.card",
    "TargetModel": "mutransfer.target",
    "resolve_target": "mutransfer.target",
    "build_target_model": "mutransfer.target",
    "ScalingLaws": "mutransfer.target",
    "plan_run": "mutransfer.target",
    # folding and engine exports
    "fold": "mutransfer.fold",
    "export_card": "mutransfer.export",
    "hf_param_groups": "mutransfer.export",
    "torchtitan_param_groups": "mutransfer.export",
    # models
    "GPT": "mutransfer.models",
    "GPTConfig": "mutransfer.models",
    "MLP": "mutransfer.models",
    "MLPConfig": "mutransfer.models",
    "get_preset": "mutransfer.models",
    "width_ladder": "mutransfer.models",
    # trainer and its config tree
    "TrainConfig": "mutransfer.config",
    "ModelSection": "mutransfer.config",
    "ParametrizationSection": "mutransfer.config",
    "OptimSection": "mutransfer.config",
    "ScheduleSection": "mutransfer.config",
    "RunSection": "mutransfer.config",
    "StabilizerSection": "mutransfer.config",
    "OutputSection": "mutransfer.config",
    "TrainResult": "mutransfer.train",
    "Trainer": "mutransfer.train",
    "train": "mutransfer.train",
    "train_wsd_branches": "mutransfer.train",
    "load_config": "mutransfer.config",
    "train_fused": "mutransfer.fused",
    "train_fused_wsd_branches": "mutransfer.fused_wsd",
    "SpikeDetector": "mutransfer.stabilizers",
    "save_checkpoint": "mutransfer.checkpoint",
    "load_checkpoint": "mutransfer.checkpoint",
    "qk_clip": "mutransfer.optim",
    # optimizers
    "build_optimizer": "mutransfer.optim",
    "set_lr": "mutransfer.optim",
    "OptimizerList": "mutransfer.optim",
    # data, schedules, noise scale, memory
    "DataConfig": "mutransfer.data",
    "TokenDataset": "mutransfer.data",
    "load_dataset": "mutransfer.data",
    "build_stdlib_corpus": "mutransfer.data",
    "ScheduleConfig": "mutransfer.schedules",
    "Schedule": "mutransfer.schedules",
    "make_schedule": "mutransfer.schedules",
    "BatchRampConfig": "mutransfer.schedules",
    "BatchRamp": "mutransfer.schedules",
    "NoiseScaleRamp": "mutransfer.schedules",
    "NoiseScaleEstimator": "mutransfer.noise_scale",
    "grad_sq_norm": "mutransfer.noise_scale",
    "training_memory": "mutransfer.memory",
    "MemoryEstimate": "mutransfer.memory",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mutransfer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
