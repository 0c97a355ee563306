"""mutransfer: muP hyperparameter transfer for PyTorch models.

The public API is re-exported here and loaded lazily, so ``import mutransfer`` stays
quick: torch and friends load on first use of a name that needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mutransfer._lazy import lazy_exports
from mutransfer._version import __version__

if TYPE_CHECKING:
    from mutransfer.audit import audit
    from mutransfer.audit_result import AuditResult
    from mutransfer.base_shapes import load_base_shapes
    from mutransfer.card import build_card, load_card, save_card
    from mutransfer.card_apply import Applied, apply_card
    from mutransfer.card_schema import validate_card
    from mutransfer.checkpoint import load_checkpoint, save_checkpoint
    from mutransfer.config import (
        ModelSection,
        OptimSection,
        OutputSection,
        ParametrizationSection,
        RunSection,
        ScheduleSection,
        StabilizerSection,
        TrainConfig,
        load_config,
    )
    from mutransfer.coord_check import CoordCheckResult, coord_check
    from mutransfer.corpus import build_stdlib_corpus
    from mutransfer.data import DataConfig, TokenDataset, load_dataset
    from mutransfer.export import export_card
    from mutransfer.export.hf import hf_param_groups
    from mutransfer.export.torchtitan import torchtitan_param_groups
    from mutransfer.fold import fold
    from mutransfer.fused import train_fused
    from mutransfer.fused_wsd import train_fused_wsd_branches
    from mutransfer.memory import MemoryEstimate, training_memory
    from mutransfer.models.gpt import GPT, GPTConfig
    from mutransfer.models.mlp import MLP, MLPConfig
    from mutransfer.models.presets import get_preset, width_ladder
    from mutransfer.noise_scale import NoiseScaleEstimator, grad_sq_norm
    from mutransfer.optim import OptimizerList, build_optimizer, qk_clip, set_lr
    from mutransfer.parametrization import Parametrization, parametrize
    from mutransfer.plan import plan_run
    from mutransfer.schedules import (
        BatchRamp,
        BatchRampConfig,
        NoiseScaleRamp,
        Schedule,
        ScheduleConfig,
        make_schedule,
    )
    from mutransfer.specs import Multipliers, ParamSpec, Rule
    from mutransfer.stabilizers import SpikeDetector
    from mutransfer.target import TargetModel, build_target_model, resolve_target
    from mutransfer.train import train, train_wsd_branches
    from mutransfer.train_result import TrainResult
    from mutransfer.trainer import Trainer

__all__ = [
    "__version__",
    # models
    "GPT", "GPTConfig", "MLP", "MLPConfig", "get_preset", "width_ladder",
    # parametrization: the rule table, its multipliers and the folded export
    "Parametrization", "Multipliers", "Rule", "ParamSpec", "parametrize", "load_base_shapes", "fold",
    # training: the config tree, the trainer, its optimizers, schedules and data
    "TrainConfig", "ModelSection", "ParametrizationSection", "OptimSection", "ScheduleSection",
    "RunSection", "StabilizerSection", "OutputSection", "load_config", "Trainer", "TrainResult", "train",
    "train_wsd_branches", "train_fused", "train_fused_wsd_branches", "SpikeDetector", "save_checkpoint",
    "load_checkpoint", "build_optimizer", "set_lr", "OptimizerList", "qk_clip", "DataConfig",
    "TokenDataset", "load_dataset", "build_stdlib_corpus", "ScheduleConfig", "Schedule", "make_schedule",
    "BatchRampConfig", "BatchRamp", "NoiseScaleRamp", "NoiseScaleEstimator", "grad_sq_norm",
    "training_memory", "MemoryEstimate",
    # checks: coordinate check and audit
    "coord_check", "CoordCheckResult", "audit", "AuditResult",
    # the transfer card: target, plan, build, validate, apply, export
    "TargetModel", "resolve_target", "build_target_model", "plan_run", "build_card", "save_card",
    "load_card", "validate_card", "apply_card", "Applied", "export_card", "hf_param_groups",
    "torchtitan_param_groups",
]

# Loaded on first use, so `import mutransfer` stays quick; the names above are the ones
# a type checker and a reader see (tests/test_layers.py holds the two lists equal).
__getattr__, __dir__ = lazy_exports(__name__, {
    "mutransfer.audit": ("audit",),
    "mutransfer.audit_result": ("AuditResult",),
    "mutransfer.base_shapes": ("load_base_shapes",),
    "mutransfer.card": ("build_card", "save_card", "load_card"),
    "mutransfer.card_apply": ("apply_card", "Applied"),
    "mutransfer.card_schema": ("validate_card",),
    "mutransfer.checkpoint": ("save_checkpoint", "load_checkpoint"),
    "mutransfer.config": (
        "TrainConfig", "ModelSection", "ParametrizationSection", "OptimSection", "ScheduleSection",
        "RunSection", "StabilizerSection", "OutputSection", "load_config",
    ),
    "mutransfer.coord_check": ("coord_check", "CoordCheckResult"),
    "mutransfer.corpus": ("build_stdlib_corpus",),
    "mutransfer.data": ("DataConfig", "TokenDataset", "load_dataset"),
    "mutransfer.export": ("export_card",),
    "mutransfer.export.hf": ("hf_param_groups",),
    "mutransfer.export.torchtitan": ("torchtitan_param_groups",),
    "mutransfer.fold": ("fold",),
    "mutransfer.fused": ("train_fused",),
    "mutransfer.fused_wsd": ("train_fused_wsd_branches",),
    "mutransfer.memory": ("training_memory", "MemoryEstimate"),
    "mutransfer.models.gpt": ("GPT", "GPTConfig"),
    "mutransfer.models.mlp": ("MLP", "MLPConfig"),
    "mutransfer.models.presets": ("get_preset", "width_ladder"),
    "mutransfer.noise_scale": ("NoiseScaleEstimator", "grad_sq_norm"),
    "mutransfer.optim": ("build_optimizer", "set_lr", "OptimizerList", "qk_clip"),
    "mutransfer.parametrization": ("Parametrization", "parametrize"),
    "mutransfer.plan": ("plan_run",),
    "mutransfer.schedules": (
        "ScheduleConfig", "Schedule", "make_schedule", "BatchRampConfig", "BatchRamp", "NoiseScaleRamp",
    ),
    "mutransfer.specs": ("Multipliers", "Rule", "ParamSpec"),
    "mutransfer.stabilizers": ("SpikeDetector",),
    "mutransfer.target": ("TargetModel", "resolve_target", "build_target_model"),
    "mutransfer.train": ("train", "train_wsd_branches"),
    "mutransfer.train_result": ("TrainResult",),
    "mutransfer.trainer": ("Trainer",),
})
