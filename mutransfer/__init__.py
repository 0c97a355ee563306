"""mutransfer: muP hyperparameter transfer for PyTorch models.

The public API is re-exported here and loaded lazily, so ``import mutransfer`` stays
quick: torch and friends load on first use of a name that needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mutransfer._lazy import lazy_exports
from mutransfer._siblings import check_siblings as _check_siblings
from mutransfer._version import __version__

# The library imports `analysis`: a user's analysis.py first on sys.path is named here, in one
# line, not met later as "'analysis' is not a package" (the CLI checks `sweeps` as well).
_check_siblings(("analysis",))

if TYPE_CHECKING:
    from mutransfer.card.apply import Applied, apply_card
    from mutransfer.card.build import build_card, load_card, save_card
    from mutransfer.card.engines.hf import hf_param_groups
    from mutransfer.card.engines.torchtitan import torchtitan_param_groups
    from mutransfer.card.export import export_card
    from mutransfer.card.make import TransferRequest, make_card
    from mutransfer.card.plan import plan_run
    from mutransfer.card.request import ProxyPoint, RunChoices
    from mutransfer.card.schema import validate_card
    from mutransfer.card.target import TargetModel, build_target_model, resolve_target
    from mutransfer.checks.audit import audit
    from mutransfer.checks.audit_result import AuditResult
    from mutransfer.checks.coord_check import CoordCheckResult, coord_check
    from mutransfer.models.gpt import GPT, GPTConfig
    from mutransfer.models.mlp import MLP, MLPConfig
    from mutransfer.models.presets import get_preset, width_ladder
    from mutransfer.parametrize.base_shapes import load_base_shapes
    from mutransfer.parametrize.fold import fold
    from mutransfer.parametrize.parametrization import Parametrization, parametrize_model
    from mutransfer.parametrize.specs import Multipliers, ParamSpec, Rule
    from mutransfer.training.checkpoint import load_checkpoint, save_checkpoint
    from mutransfer.training.config import (
        OptimSection,
        OutputSection,
        ParametrizationSection,
        RunSection,
        ScheduleSection,
        StabilizerSection,
        TrainConfig,
        load_config,
    )
    from mutransfer.training.corpus import build_stdlib_corpus
    from mutransfer.training.data import DataConfig, TokenDataset, load_dataset
    from mutransfer.training.fused import train_fused
    from mutransfer.training.fused_wsd import train_fused_wsd_branches
    from mutransfer.training.memory import MemoryEstimate, training_memory
    from mutransfer.training.model_section import ModelSection
    from mutransfer.training.noise_scale import NoiseScaleEstimator, grad_sq_norm
    from mutransfer.training.optim import OptimizerList, build_optimizer, qk_clip, set_lr
    from mutransfer.training.schedules import (
        BatchRamp,
        BatchRampConfig,
        NoiseScaleRamp,
        Schedule,
        ScheduleConfig,
        make_schedule,
    )
    from mutransfer.training.stabilizers import SpikeDetector
    from mutransfer.training.train import train, train_wsd_branches
    from mutransfer.training.train_result import TrainResult
    from mutransfer.training.trainer import Trainer

__all__ = [
    "__version__",
    # models
    "GPT", "GPTConfig", "MLP", "MLPConfig", "get_preset", "width_ladder",
    # parametrization: the rule table, its multipliers and the folded export
    "Parametrization", "Multipliers", "Rule", "ParamSpec", "parametrize_model", "load_base_shapes", "fold",
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
    "TransferRequest", "make_card", "RunChoices", "ProxyPoint",
    "TargetModel", "resolve_target", "build_target_model", "plan_run", "build_card", "save_card",
    "load_card", "validate_card", "apply_card", "Applied", "export_card", "hf_param_groups",
    "torchtitan_param_groups",
]

# Loaded on first use, so `import mutransfer` stays quick; the names above are the ones
# a type checker and a reader see (tests/test_layers.py holds the two lists equal).
__getattr__, __dir__ = lazy_exports(__name__, {
    "mutransfer.checks.audit": ("audit",),
    "mutransfer.checks.audit_result": ("AuditResult",),
    "mutransfer.parametrize.base_shapes": ("load_base_shapes",),
    "mutransfer.card.build": ("build_card", "save_card", "load_card"),
    "mutransfer.card.apply": ("apply_card", "Applied"),
    "mutransfer.card.schema": ("validate_card",),
    "mutransfer.training.checkpoint": ("save_checkpoint", "load_checkpoint"),
    "mutransfer.training.config": (
        "TrainConfig", "ParametrizationSection", "OptimSection", "ScheduleSection",
        "RunSection", "StabilizerSection", "OutputSection", "load_config",
    ),
    "mutransfer.training.model_section": ("ModelSection",),
    "mutransfer.checks.coord_check": ("coord_check", "CoordCheckResult"),
    "mutransfer.training.corpus": ("build_stdlib_corpus",),
    "mutransfer.training.data": ("DataConfig", "TokenDataset", "load_dataset"),
    "mutransfer.card.export": ("export_card",),
    "mutransfer.card.make": ("TransferRequest", "make_card"),
    "mutransfer.card.request": ("RunChoices", "ProxyPoint"),
    "mutransfer.card.engines.hf": ("hf_param_groups",),
    "mutransfer.card.engines.torchtitan": ("torchtitan_param_groups",),
    "mutransfer.parametrize.fold": ("fold",),
    "mutransfer.training.fused": ("train_fused",),
    "mutransfer.training.fused_wsd": ("train_fused_wsd_branches",),
    "mutransfer.training.memory": ("training_memory", "MemoryEstimate"),
    "mutransfer.models.gpt": ("GPT", "GPTConfig"),
    "mutransfer.models.mlp": ("MLP", "MLPConfig"),
    "mutransfer.models.presets": ("get_preset", "width_ladder"),
    "mutransfer.training.noise_scale": ("NoiseScaleEstimator", "grad_sq_norm"),
    "mutransfer.training.optim": ("build_optimizer", "set_lr", "OptimizerList", "qk_clip"),
    "mutransfer.parametrize.parametrization": ("Parametrization", "parametrize_model"),
    "mutransfer.card.plan": ("plan_run",),
    "mutransfer.training.schedules": (
        "ScheduleConfig", "Schedule", "make_schedule", "BatchRampConfig", "BatchRamp", "NoiseScaleRamp",
    ),
    "mutransfer.parametrize.specs": ("Multipliers", "Rule", "ParamSpec"),
    "mutransfer.training.stabilizers": ("SpikeDetector",),
    "mutransfer.card.target": ("TargetModel", "resolve_target", "build_target_model"),
    "mutransfer.training.train": ("train", "train_wsd_branches"),
    "mutransfer.training.train_result": ("TrainResult",),
    "mutransfer.training.trainer": ("Trainer",),
})
