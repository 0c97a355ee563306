"""The proxy trainer: one sweep trial is one call of :func:`train`.

``train(TrainConfig(...))`` builds a GPT proxy from a preset, parametrizes it (SP, μP,
CompleteP or Muon; :mod:`mutransfer.parametrization`), trains it on step-indexed
batches (:mod:`mutransfer.data`) with the parametrization's param groups, a pure-function
LR schedule (:mod:`mutransfer.schedules`) and the stabilizers of
:mod:`mutransfer.stabilizers`, and returns a :class:`TrainResult` whose ``to_row()`` is
one row of the results table (docs/architecture.md). See docs/trainer_contract.md.

The effective LR of every parameter at step t is ``lr × schedule(t) × lr_mult``
(:func:`mutransfer.optim.set_lr`). A step's data is a pure function of (seed, data step),
and everything else the run depends on is in the checkpoint, so a resumed run repeats
the uninterrupted one bit for bit on CPU. Divergence never raises: it ends the run with
``diverged=True`` and a finite worst-case loss.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import io
import json
import math
import os
import sys
import time
import typing
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from mutransfer._io import atomic_write_text, read_yaml_mapping
from mutransfer.checkpoint import check_resume, get_rng_state, load_checkpoint, save_checkpoint, set_rng_state
from mutransfer.data import DataConfig, TokenDataset, load_dataset
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.presets import PRESETS, get_preset
from mutransfer.noise_scale import NoiseScaleEstimator, grad_sq_norm
from mutransfer.optim import attention_modules, build_optimizer, qk_clip, set_lr
from mutransfer.parametrization import KINDS, Multipliers, Parametrization
from mutransfer.schedules import DECAY_SHAPES, SCHEDULE_KINDS, Schedule, ScheduleConfig, make_schedule
from mutransfer.stabilizers import (
    SPIKE_POLICIES,
    SpikeDetector,
    clip_grad_norm,
    divergence_bound,
    is_diverged,
)

__all__ = [
    "Callback",
    "TrainConfig",
    "TrainResult",
    "apply_role_lr_mults",
    "Trainer",
    "load_config",
    "resolve_device",
    "train",
    "train_wsd_branches",
]

Callback = Callable[[int, dict[str, Any]], "bool | None"]
#: What :meth:`Trainer.decide` makes of a step.
Verdict = Literal["step", "skip", "rollback", "diverged"]

# Row keys required by docs/architecture.md's results table, in order.
ROW_KEYS = ("parametrization", "width", "depth", "n_params", "n_params_nonembed", "tokens", "steps",
            "batch_size", "seq_len", "batch_tokens", "lr", "seed", "loss", "train_loss", "gns",
            "wall_s", "diverged")
# Config fields that say where/how a run executes, not what it is: kept out of rows.
_NOT_HYPERPARAMETERS = frozenset({"out_dir", "resume", "device", "threads", "compile", "metrics_format",
                                  "checkpoint_every", "data_cache"})


@dataclass(frozen=True)
class TrainConfig:
    """One proxy training run. Frozen; derive variants with :meth:`from_overrides` or
    ``dataclasses.replace``. ``None`` model fields take the preset's value."""

    # ---- model ---------------------------------------------------------------------------
    preset: str = "gpt-tiny"
    """Model preset (:data:`mutransfer.models.presets.PRESETS`), a GPT one."""
    width: int | None = None
    """Model width d_model (None: the preset's)."""
    depth: int | None = None
    """Number of blocks (None: the preset's)."""
    head_dim: int | None = None
    """Per-head dimension (None: the preset's); heads = width / head_dim."""
    seq_len: int | None = None
    """Tokens per training sequence (None: the preset's context)."""
    tie_embeddings: bool | None = None
    """Share the embedding with the readout (None: the preset's)."""
    qk_norm: bool | None = None
    """RMS-normalize queries and keys (None: the preset's)."""
    logit_softcap: float | None = None
    """Soft-cap logits at cap·tanh(x/cap) (None: the preset's; 0 turns it off)."""
    z_loss: float | None = None
    """z-loss coefficient (PaLM's 1e-4 when on; None: the preset's)."""
    freeze_norm_gains: bool | None = None
    """Keep RMSNorm gains at 1 (Lingle 2024; None: the preset's)."""

    # ---- parametrization -----------------------------------------------------------------
    parametrization: str = "mup"
    """``sp``, ``mup``, ``completep`` or ``muon``."""
    base_width: int | None = None
    """Width at which the parametrization equals SP: the proxy whose hyperparameters
    transfer. None: the preset's own width (or the model's width, if smaller), so
    ``--preset gpt-tiny --set width=512`` is gpt-tiny's tuning carried to width 512."""
    base_depth: int | None = None
    """CompleteP's base depth. None: the preset's own depth (or the model's, if smaller)."""
    depth_alpha: float = 1.0
    """CompleteP's alpha, 0.5 or 1."""
    input_mult: float = 1.0
    """Forward multiplier of the embeddings."""
    output_mult: float = 1.0
    """Forward multiplier of the readout (μP divides by the width multiplier on top)."""
    attn_mult: float = 1.0
    """Multiplier of the attention logits (attn_mult/d_head under μP)."""
    residual_mult: float = 1.0
    """Multiplier of every residual branch."""
    lr_mult_input: float = 1.0
    """Tunable LR multiplier of the input role (embeddings), on top of the parametrization's."""
    lr_mult_output: float = 1.0
    """Tunable LR multiplier of the output role (readout), on top of the parametrization's."""
    lr_mult_vector: float = 1.0
    """Tunable LR multiplier of the vector role (gains, biases), on top of the parametrization's."""
    readout_init: str = "constant"
    """Readout init under μP: ``constant`` (constant variance), ``zero``, or ``fan_in``
    (SP's fan-in law for the effective readout, std ∝ width^-1/2; the same as ``constant``
    at the base width; :data:`mutransfer.rules.READOUT_INIT`)."""

    # ---- optimizer -----------------------------------------------------------------------
    optimizer: str = "auto"
    """``adamw``, ``sgd`` or ``muon``; ``auto`` picks muon for the muon parametrization
    and adamw otherwise."""
    lr: float = 1e-2
    """Base learning rate (per-parameter LR = lr × schedule × μP multiplier)."""
    beta1: float = 0.9
    """Adam beta1."""
    beta2: float = 0.95
    """Adam beta2."""
    eps: float = 1e-8
    """Adam epsilon (CompleteP scales it per parameter)."""
    momentum: float = 0.0
    """SGD momentum."""
    muon_momentum: float = 0.95
    """Muon momentum (Nesterov)."""
    weight_decay: float = 0.0
    """Weight decay of matrix-like parameters (vectors get none)."""
    wd_mode: str = "coupled"
    """``coupled`` (torch AdamW: decay lr_t × wd) or ``independent`` (wd × schedule)."""
    qk_clip: bool = False
    """Apply QK-clip (MuonClip, Kimi K2) after every step."""
    qk_clip_tau: float = 100.0
    """QK-clip threshold tau on the per-head max attention logit."""

    # ---- schedule ------------------------------------------------------------------------
    schedule: str = "cosine"
    """LR schedule kind: constant, cosine, linear, inverse_sqrt, wsd."""
    warmup_steps: int | None = None
    """Linear warmup steps (None: 10% of the steps)."""
    decay_fraction: float = 0.2
    """WSD cooldown length as a fraction of the steps."""
    decay_shape: str = "1-sqrt"
    """WSD cooldown shape: linear, 1-sqrt, exp, cosine."""
    lr_floor: float = 0.0
    """Final LR as a fraction of the peak (cosine/linear/wsd; inverse_sqrt's clamp)."""

    # ---- run -----------------------------------------------------------------------------
    steps: int = 200
    """Optimizer steps."""
    batch_size: int = 16
    """Global batch in sequences (over all micro-batches and ranks)."""
    grad_accum: int = 1
    """Micro-batches per step (>= 2 also gives the gradient noise scale)."""
    seed: int = 0
    """Seed of the init and of the training-data order (eval data is fixed)."""
    data: str = "stdlib"
    """Token source: ``stdlib`` (embedded corpus) or a path (.bin memmap(s), text)."""
    data_dtype: str | None = None
    """Token dtype of .bin data (uint8/uint16/uint32; None: sidecar or uint16)."""
    data_max_bytes: int | None = None
    """Cap on the stdlib corpus in bytes (tests, quick demos)."""
    data_cache: str | None = None
    """Where the stdlib corpus is cached (None: $MUTRANSFER_CACHE or ~/.cache)."""
    eval_every: int = 50
    """Evaluate on the held-out split every this many steps (0: only at the end)."""
    eval_batches: int = 4
    """Held-out batches (of batch_size sequences) per evaluation."""
    device: str = "auto"
    """``auto`` (cuda, then mps, then cpu), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    dtype: str = "auto"
    """``auto`` (bf16 autocast on CUDA, fp32 elsewhere), ``fp32`` or ``bf16``."""
    compile: bool = False
    """torch.compile the model."""
    threads: int | None = 1
    """torch CPU threads (None: leave torch's setting). Default 1: on 2 cores two
    single-threaded runs side by side beat one two-threaded run (by ~10% at width 256,
    1.5x at width 32), and with other processes busy a 2-thread gpt-tiny run measured
    40x slower than a 1-thread one (OpenMP threads waiting on each other)."""
    gns_beta: float = 0.99
    """EMA decay of the gradient-noise-scale estimator."""
    max_logit_every: int = 10
    """Measure the max attention logit every this many steps (0: never, unless QK-clip)."""

    # ---- stabilizers ---------------------------------------------------------------------
    grad_clip: float | None = 1.0
    """Clip the global gradient norm to this (None or 0: no clipping; norm still logged)."""
    spike_policy: str = "log"
    """Loss spikes: ``off``, ``log``, ``skip`` (drop the update) or ``rollback``."""
    spike_threshold: float = 6.0
    """Spike: loss > median + threshold × 1.4826·MAD of the window."""
    spike_window: int = 50
    """Recent losses the spike statistics use."""
    rollback_every: int = 10
    """Rollback: in-memory ring snapshots every this many steps; a spike restores the
    oldest of the last two (about 10-20 steps back) and skips the batches since."""
    max_rollbacks: int = 3
    """Rollbacks allowed before spikes are just skipped."""
    diverge_factor: float = 3.0
    """Diverged when the loss exceeds diverge_factor × max(ln V, initial loss)."""

    # ---- output --------------------------------------------------------------------------
    out_dir: str | None = None
    """Where metrics and checkpoints go (None: nothing is written)."""
    metrics_format: str = "jsonl"
    """Per-step metrics file: ``jsonl`` or ``csv``."""
    checkpoint_every: int = 0
    """Save out_dir/checkpoint.pt every this many steps and at the end (0: never)."""
    resume: str | None = None
    """Checkpoint to resume from."""

    def __post_init__(self) -> None:
        def bad(name: str, what: str) -> ValueError:
            return ValueError(f"{name} must be {what}, got {getattr(self, name)!r}")

        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose from {', '.join(PRESETS)}")
        if not isinstance(get_preset(self.preset), GPTConfig):
            gpts = [n for n in PRESETS if isinstance(get_preset(n), GPTConfig)]
            raise ValueError(f"preset {self.preset!r} is not a GPT; the trainer takes {', '.join(gpts)}")
        choices = {"parametrization": KINDS, "optimizer": ("auto", "adamw", "sgd", "muon"),
                   "wd_mode": ("coupled", "independent"), "schedule": SCHEDULE_KINDS,
                   "decay_shape": DECAY_SHAPES, "readout_init": ("constant", "zero", "fan_in"),
                   "spike_policy": SPIKE_POLICIES, "dtype": ("auto", "fp32", "bf16"),
                   "metrics_format": ("jsonl", "csv")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise bad(name, f"one of {', '.join(allowed)}")
        if self.optimizer == "auto":
            object.__setattr__(self, "optimizer", "muon" if self.parametrization == "muon" else "adamw")
        if (self.optimizer == "muon") != (self.parametrization == "muon"):
            raise ValueError(f"optimizer {self.optimizer!r} does not go with parametrization "
                             f"{self.parametrization!r} (muon pairs with muon)")
        if self.parametrization == "muon" and self.optimizer == "sgd":
            raise ValueError("the muon parametrization needs optimizer 'muon'")
        for name in ("lr", "eps", "qk_clip_tau", "diverge_factor", "spike_threshold"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise bad(name, "a positive finite number")
        for name in ("input_mult", "output_mult", "attn_mult", "residual_mult", "lr_mult_input",
                     "lr_mult_output", "lr_mult_vector"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise bad(name, "a positive finite number")
        for name in ("steps", "batch_size", "grad_accum", "eval_batches", "rollback_every"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise bad(name, "a positive integer")
        for name in ("width", "depth", "head_dim", "seq_len", "base_width", "base_depth", "threads"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int) and v >= 1):
                raise bad(name, "a positive integer or None")
        for name in ("seed", "eval_every", "checkpoint_every", "max_logit_every", "max_rollbacks"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 0):
                raise bad(name, "a non-negative integer")
        if self.warmup_steps is not None and not (0 <= self.warmup_steps <= self.steps):
            raise bad("warmup_steps", f"in [0, steps={self.steps}]")
        for name in ("beta1", "beta2", "momentum", "muon_momentum", "gns_beta"):
            if not (0.0 <= getattr(self, name) < 1.0):
                raise bad(name, "in [0, 1)")
        if not (0.0 <= self.lr_floor <= 1.0):
            raise bad("lr_floor", "in [0, 1]")
        if not (0.0 <= self.decay_fraction <= 1.0):
            raise bad("decay_fraction", "in [0, 1]")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise bad("weight_decay", ">= 0")
        if self.grad_clip is not None and not (self.grad_clip >= 0 and math.isfinite(self.grad_clip)):
            raise bad("grad_clip", ">= 0 or None")
        if self.z_loss is not None and not (self.z_loss >= 0):
            raise bad("z_loss", ">= 0 or None")
        if self.logit_softcap is not None and not (self.logit_softcap >= 0):
            raise bad("logit_softcap", ">= 0 or None")
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size={self.batch_size} is not divisible by grad_accum={self.grad_accum}")
        if self.depth_alpha not in (0.5, 1.0):
            raise bad("depth_alpha", "0.5 or 1")
        if self.spike_window < 4:
            raise bad("spike_window", ">= 4")
        self.model_config()  # width/head divisibility etc., with GPTConfig's own messages
        if self.base_width is not None and self.base_width > self.model_config().width:
            raise ValueError(f"base_width={self.base_width} is larger than the width "
                             f"{self.model_config().width}")

    # ---- derived -------------------------------------------------------------------------

    def model_config(self, vocab_size: int | None = None) -> GPTConfig:
        """The preset's GPTConfig with this config's overrides (and the data's vocab)."""
        base = get_preset(self.preset)
        assert isinstance(base, GPTConfig)
        changes: dict[str, Any] = {}
        for name in ("width", "depth", "head_dim", "seq_len", "tie_embeddings", "qk_norm",
                     "z_loss", "freeze_norm_gains"):
            if getattr(self, name) is not None:
                changes[name] = getattr(self, name)
        if self.logit_softcap is not None:
            changes["logit_softcap"] = self.logit_softcap or None
        if vocab_size is not None:
            changes["vocab_size"] = vocab_size
        if "head_dim" in changes and base.n_head is not None:
            changes["n_head"] = None
        return base.replace(**changes)

    def schedule_config(self, total_steps: int | None = None,
                        decay_start: int | None = None) -> ScheduleConfig:
        """The ScheduleConfig of this run (``total_steps`` defaults to ``steps``)."""
        total = self.steps if total_steps is None else total_steps
        warmup = round(0.1 * self.steps) if self.warmup_steps is None else self.warmup_steps
        return ScheduleConfig(kind=self.schedule, warmup_steps=min(warmup, total), total_steps=total,
                              floor=self.lr_floor, decay_fraction=self.decay_fraction,
                              decay_start=decay_start, decay_shape=self.decay_shape)

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain dict."""
        return dataclasses.asdict(self)

    # ---- overrides -----------------------------------------------------------------------

    @classmethod
    def from_overrides(cls, base: TrainConfig | None = None,
                       overrides: Mapping[str, Any] | None = None) -> TrainConfig:
        """``base`` (default: the defaults) with ``overrides`` applied. Values may be
        strings (as from ``--set key=value``: parsed by the field's type, ``none``/``null``
        for None, true/false for booleans) or typed values (type-checked). Unknown keys
        and values of the wrong type raise ValueError naming them."""
        base = base or cls()
        overrides = dict(overrides or {})
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in names:
                close = [n for n in sorted(names) if key.replace("-", "_") == n or key in n]
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown config field {key!r}{hint}")
            changes[key] = _coerce(key, value, hints[key])
        # An explicit optimizer "auto" must re-resolve against the new parametrization.
        if "parametrization" in changes and "optimizer" not in changes:
            changes["optimizer"] = "auto"
        return dataclasses.replace(base, **changes)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str],
                  overrides: Mapping[str, Any] | None = None) -> TrainConfig:
        """Read a YAML (or JSON) mapping of fields with ``yaml.safe_load``, then apply
        ``overrides`` on top."""
        base = load_config(path)
        return cls.from_overrides(base, overrides) if overrides else base


def load_config(path: str | os.PathLike[str]) -> TrainConfig:
    """A TrainConfig from a YAML/JSON file of ``field: value`` (``yaml.safe_load``)."""
    return TrainConfig.from_overrides(TrainConfig(), read_yaml_mapping(path, "config file"))


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Parse/check ``value`` for a field of type ``tp`` (int, float, str, bool, X | None)."""
    args = typing.get_args(tp)
    optional = type(None) in args
    inner = next((a for a in args if a is not type(None)), tp) if args else tp
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
        if optional:
            return None
        raise ValueError(f"config field {key!r} cannot be None")
    if isinstance(value, str) and inner is not str:
        text = value.strip()
        try:
            if inner is bool:
                low = text.lower()
                if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError
                return low in ("true", "1", "yes", "on")
            if inner is int:
                try:
                    return int(text)
                except ValueError:
                    f = float(text)  # "1e3" is a fine integer
                    if not f.is_integer():
                        raise
                    return int(f)
            if inner is float:
                return float(text)
        except ValueError:
            raise ValueError(f"config field {key!r} expects {inner.__name__}, got {value!r}") from None
    ok = (isinstance(value, inner) and not (inner is int and isinstance(value, bool))) or (
        inner is float and isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise ValueError(f"config field {key!r} expects {inner.__name__}, got {value!r}")
    return float(value) if inner is float else value


# ---- result ------------------------------------------------------------------------------


@dataclass
class TrainResult:
    """What a run returns; :meth:`to_row` is one results-table row."""

    config: TrainConfig
    parametrization: str
    width: int
    depth: int
    n_params: int
    n_params_nonembed: int
    tokens: int
    """Tokens trained on (steps done × batch tokens)."""
    steps: int
    """Planned optimizer steps (``steps_done`` says how many ran)."""
    steps_done: int
    batch_size: int
    seq_len: int
    lr: float
    seed: int
    loss: float
    """Final held-out loss (nats/token); the worst-case ln V (or the initial loss if
    larger) when diverged."""
    train_loss: float
    """Mean training loss of the last (up to) 10 steps."""
    gns: float | None
    """Smoothed gradient noise scale B_simple in sequences (None without grad_accum >= 2)."""
    wall_s: float
    diverged: bool = False
    pruned: bool = False
    stop_reason: str = "completed"
    """completed, pruned, diverged."""
    history: list[dict[str, Any]] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    spikes: list[int] = field(default_factory=list)
    """Steps at which a loss spike was detected."""
    rollbacks: list[tuple[int, int]] = field(default_factory=list)
    """(spike step, step restored to) of every rollback."""
    flops_per_token: int = 0
    tokens_per_s: float = 0.0
    device: str = "cpu"

    @property
    def batch_tokens(self) -> int:
        return self.batch_size * self.seq_len

    def to_row(self) -> dict[str, Any]:
        """docs/architecture.md's results-table keys, then ``pruned``, ``steps_done`` and every
        hyperparameter of the config (not where/how it ran) under its field name."""
        row: dict[str, Any] = {k: getattr(self, k) for k in ROW_KEYS}
        row.update(pruned=self.pruned, steps_done=self.steps_done, stop_reason=self.stop_reason,
                   tokens_per_s=self.tokens_per_s, flops_per_token=self.flops_per_token)
        for k, v in self.config.to_dict().items():
            if k not in row and k not in _NOT_HYPERPARAMETERS and v is not None:
                row[k] = v
        return row


def apply_role_lr_mults(groups: list[dict[str, Any]], mults: Mapping[str, float], wd_mode: str) -> None:
    """Multiply each param group's LR multiplier by ``mults[role]`` (tuned per-role LR
    multipliers, TP-V §F's "learning-rate multipliers"; 1 leaves a role as the
    parametrization set it). Under ``independent`` weight decay the stored decay is
    wd / (lr × lr_mult), so it is divided by the same factor to keep the per-step decay."""
    for g in groups:
        m = float(mults.get(g.get("role", ""), 1.0))
        if m != 1.0:
            g["lr"] *= m
            g["lr_mult"] = g.get("lr_mult", 1.0) * m
            if wd_mode == "independent" and g.get("weight_decay"):
                g["weight_decay"] /= m


# ---- device / distributed ----------------------------------------------------------------


def resolve_device(name: str = "auto") -> torch.device:
    """``auto``: cuda, then mps, then cpu; otherwise the named device (checked)."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be auto, cpu, cuda[:N] or mps, got {name!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but CUDA is not available")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device {name!r} was asked for but MPS is not available")
    return dev


def _dist_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment (1 process: 0, 1, 0)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size(), int(
            os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def _denormals_flushed() -> bool:
    """Whether the CPU currently flushes subnormal floats to zero."""
    return float(torch.tensor([1e-40], dtype=torch.float32).mul(1.0)) == 0.0


def _finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# ---- the trainer -------------------------------------------------------------------------


def build_parametrization(cfg: TrainConfig, gcfg: GPTConfig) -> Parametrization:
    """The parametrization a run of ``cfg`` trains its ``gcfg`` model under (the
    trainer's, and ``mutransfer fold``'s to rebuild a checkpoint's model)."""

    def builder(width: int, depth: int) -> GPT:
        return GPT(gcfg.replace(width=width, depth=depth))

    preset = get_preset(cfg.preset)
    return Parametrization(
        builder, width=gcfg.width, base_width=cfg.base_width or min(preset.width, gcfg.width),
        kind=cfg.parametrization, optimizer="sgd" if cfg.optimizer == "sgd" else "adam",
        depth=gcfg.depth, base_depth=cfg.base_depth or min(preset.depth, gcfg.depth),
        depth_alpha=cfg.depth_alpha,
        multipliers=Multipliers(cfg.input_mult, cfg.output_mult, cfg.attn_mult, cfg.residual_mult),
        readout_init=cfg.readout_init)


class Trainer:
    """The training loop as an object, for :func:`train`, WSD branching and tests.

    ``Trainer(cfg).run()`` is ``train(cfg)``. ``run_until(step)`` trains up to a step;
    :meth:`snapshot` / :meth:`restore` copy the full state in memory; :meth:`state_dict`
    is what checkpoints hold.
    """

    def __init__(self, cfg: TrainConfig, *, callback: Callback | None = None, progress: bool = False,
                 data: TokenDataset | None = None) -> None:
        self.cfg, self.callback = cfg, callback
        self.t_start = time.perf_counter()
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.rank, self.world, local_rank = _dist_env()
        self._own_pg = False
        if self.world > 1 and not torch.distributed.is_initialized():
            backend = "nccl" if torch.cuda.is_available() and cfg.device in ("auto", "cuda") else "gloo"
            torch.distributed.init_process_group(backend=backend)
            self._own_pg = True
        dev = resolve_device(cfg.device)
        if dev.type == "cuda" and self.world > 1:
            dev = torch.device("cuda", local_rank)
            torch.cuda.set_device(dev)
        self.device = dev
        if dev.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        dtype = cfg.dtype if cfg.dtype != "auto" else ("bf16" if dev.type == "cuda" else "fp32")
        self.amp_dtype = torch.bfloat16 if dtype == "bf16" else None

        self.data = data if data is not None else load_dataset(DataConfig(
            source=cfg.data, dtype=cfg.data_dtype, max_bytes=cfg.data_max_bytes, cache_dir=cfg.data_cache))
        self.gcfg = cfg.model_config(vocab_size=self.data.vocab_size)
        self.seq_len = self.gcfg.seq_len
        for split in ("train", "val"):
            n = self.data.n_tokens(split)
            if self.seq_len + 1 > n:
                raise ValueError(f"seq_len={self.seq_len} is longer than the data: the {split} split of "
                                 f"{cfg.data!r} has {n} tokens (needs seq_len + 1)")
        if cfg.batch_size % (self.world * cfg.grad_accum):
            raise ValueError(f"batch_size={cfg.batch_size} is not divisible by world_size × grad_accum = "
                             f"{self.world} × {cfg.grad_accum}")

        self.pz = build_parametrization(cfg, self.gcfg)
        self.raw_model = self.pz.build(seed=cfg.seed, device=dev)
        groups = self.pz.param_groups(self.raw_model, cfg.lr, weight_decay=cfg.weight_decay,
                                      wd_mode=cfg.wd_mode, eps=cfg.eps)
        apply_role_lr_mults(groups, {"input": cfg.lr_mult_input, "output": cfg.lr_mult_output,
                                     "vector": cfg.lr_mult_vector}, cfg.wd_mode)
        self.opt = build_optimizer(groups, cfg.optimizer, betas=(cfg.beta1, cfg.beta2),
                                   momentum=cfg.momentum, muon_momentum=cfg.muon_momentum)
        self.params = [p for p in self.raw_model.parameters() if p.requires_grad]
        model: torch.nn.Module = self.raw_model
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
        self.ddp_model = model
        self.model = torch.compile(model) if cfg.compile else model
        self.attn = attention_modules(self.raw_model)
        self.schedule: Schedule = make_schedule(cfg.schedule_config())
        self.total_steps = cfg.steps

        # Running state (all of it is in state_dict()).
        self.step = 0
        self.data_offset = 0  # data step = step + data_offset (rollback skips batches)
        self.tokens = 0
        self.initial_loss: float | None = None
        self.history: list[dict[str, Any]] = []
        self.evals: list[tuple[int, float]] = []
        self.spikes: list[int] = []
        self.rollbacks: list[tuple[int, int]] = []
        self.gns = NoiseScaleEstimator(beta=cfg.gns_beta)
        self.detector = SpikeDetector(window=cfg.spike_window, threshold=cfg.spike_threshold,
                                      min_history=min(10, cfg.spike_window))
        self.ring: deque[dict[str, Any]] = deque(maxlen=2)
        self.diverged = False
        self.pruned = False
        self.train_time = 0.0
        self.progress = None
        if progress and self.rank == 0 and sys.stderr.isatty():
            from tqdm import tqdm

            self.progress = tqdm(total=cfg.steps, desc="train", leave=False, file=sys.stderr)
        if cfg.resume:
            self.load_state_dict(load_checkpoint(cfg.resume, map_location=dev))

    # ---- one step ------------------------------------------------------------------------

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _track(self, step: int) -> bool:
        cfg = self.cfg
        every = cfg.max_logit_every
        return bool(self.attn) and (cfg.qk_clip or (every > 0 and step % every == 0))

    def train_step(self) -> dict[str, Any]:
        """Run one optimizer step (or a skip/rollback) and return its history record."""
        cfg, step = self.cfg, self.step
        t0 = time.perf_counter()
        if cfg.spike_policy == "rollback" and step % cfg.rollback_every == 0 and (
                not self.ring or self.ring[-1]["step"] != step):
            self.ring.append(self.snapshot())
        mult = self.schedule(step)
        set_lr(self.opt, mult)
        n = cfg.grad_accum
        dstep = step + self.data_offset
        track = self._track(step)
        for _, m in self.attn:
            m.track_max_logit = track
        max_logits: dict[str, torch.Tensor] = {}
        losses = []
        g_small = None
        for i in range(n):
            x, y = self.data.get_batch("train", dstep, cfg.batch_size, self.seq_len, cfg.seed, micro=(i, n),
                                       rank=self.rank, world_size=self.world, device=self.device)
            sync = self.world > 1 and i < n - 1
            ctx = self.ddp_model.no_sync() if sync else contextlib.nullcontext()  # type: ignore[operator]
            with ctx:
                with self._autocast():
                    _, loss = self.model(x, y)
                (loss / n).backward()
            losses.append(loss.detach().float())
            if track:
                for name, m in self.attn:
                    if m.max_logit is not None:
                        s = m.max_logit.detach().float()
                        max_logits[name] = torch.maximum(max_logits[name], s) if name in max_logits else s
            if i == 0 and n >= 2:
                # |G_small|^2 of one micro-batch (local to this rank under DDP: no_sync).
                g_small = grad_sq_norm(self.params, scale=n)
        loss_t = torch.stack(losses).mean()
        if self.world > 1:
            torch.distributed.all_reduce(loss_t)
            loss_t /= self.world
            if g_small is not None:
                torch.distributed.all_reduce(g_small)
                g_small /= self.world
        loss_v = float(loss_t)
        rec: dict[str, Any] = {"step": step + 1, "loss": loss_v, "lr": cfg.lr * mult}
        if max_logits:
            rec["max_attn_logit"] = max(float(s.max()) for s in max_logits.values())
        verdict = self.decide(rec, loss_v, g_small)
        if verdict == "rollback":
            self.opt.zero_grad(set_to_none=True)
            return self._rollback(rec, t0)
        if verdict == "step":
            self.opt.step()
            if cfg.qk_clip and max_logits:
                rec["qk_clipped_heads"] = qk_clip(self.raw_model, cfg.qk_clip_tau, max_logits)
        self.opt.zero_grad(set_to_none=True)
        self.advance(verdict)
        return self._finish_record(rec, t0)

    def decide(self, rec: dict[str, Any], loss_v: float, g_small: torch.Tensor | float | None) -> Verdict:
        """The stabilizers' verdict on one step whose gradients are in place; shared by
        :meth:`train_step` and every member of a fused group (:mod:`mutransfer.fused`).

        In order: divergence (loss; :func:`divergence_bound`), the spike policy, the
        gradient norm and its clipping (Pascanu et al. 2013), divergence again (a
        non-finite norm), and the gradient-noise-scale update from ``g_small`` (the
        squared norm of one micro-batch's gradient). Records go into ``rec``. Returns
        ``"step"`` (take the optimizer step), ``"skip"`` (drop it, the batch is spent),
        ``"rollback"`` or ``"diverged"``.
        """
        cfg = self.cfg
        if self.initial_loss is None and math.isfinite(loss_v):
            self.initial_loss = loss_v
        if is_diverged(loss_v, divergence_bound(cfg.diverge_factor, self.data.vocab_size, self.initial_loss)):
            self.diverged = True
            return "diverged"
        if cfg.spike_policy != "off" and self.detector.is_spike(loss_v):
            self.spikes.append(self.step + 1)
            rec["spike"] = True
            if cfg.spike_policy == "rollback" and self.ring and len(self.rollbacks) < cfg.max_rollbacks:
                return "rollback"
            if cfg.spike_policy in ("skip", "rollback"):
                rec["skipped"] = True
                return "skip"
        else:
            self.detector.update(loss_v)
        g_big = grad_sq_norm(self.params)
        gn = float(clip_grad_norm(self.params, cfg.grad_clip or None))
        rec["grad_norm"] = gn
        if not math.isfinite(gn):
            self.diverged = True
            return "diverged"
        if g_small is not None and math.isfinite(float(g_small)):
            b_small = cfg.batch_size // (self.world * cfg.grad_accum)
            rec["gns"] = self.gns.update(float(g_small), float(g_big), b_small, cfg.batch_size)
        return "step"

    def advance(self, verdict: Verdict) -> None:
        """Count a finished step: a skipped one consumes its batch but trains no tokens."""
        if verdict in ("step", "skip"):
            self.step += 1
        if verdict == "step":
            self.tokens += self.cfg.batch_size * self.seq_len

    def _finish_record(self, rec: dict[str, Any], t0: float) -> dict[str, Any]:
        self.train_time += time.perf_counter() - t0
        rec["tokens"] = self.tokens
        rec["wall_s"] = round(time.perf_counter() - self.t_start, 4)
        for key in ("grad_norm", "gns", "max_attn_logit"):  # every record has every column
            rec.setdefault(key, None)
        self.history.append(rec)
        return rec

    def _rollback(self, rec: dict[str, Any], t0: float) -> dict[str, Any]:
        """PaLM's remedy (Chowdhery et al. 2022, §5.1): restore a snapshot from before the
        spike and skip the batches between it and the spike, spike included."""
        spike_step, spike_dstep = self.step, self.step + self.data_offset
        snap = self.ring[0]
        history, spikes, rollbacks = self.history, self.spikes, self.rollbacks
        self.restore(snap)
        self.spikes, self.rollbacks = spikes, rollbacks
        self.rollbacks.append((spike_step + 1, self.step))
        self.data_offset = spike_dstep + 1 - self.step
        self.ring.clear()
        self.ring.append(self.snapshot())
        rec["rollback_to"] = self.step
        self.train_time += time.perf_counter() - t0
        self.history = history[: snap["n_history"]]
        return rec

    # ---- eval ----------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean held-out cross-entropy (no z-loss) over ``eval_batches`` fixed val batches
        (the same for every seed and trial, so runs are compared on the same data)."""
        cfg = self.cfg
        for _, m in self.attn:
            m.track_max_logit = False
        self.raw_model.eval()
        total = torch.zeros((), device=self.device)
        for b in range(cfg.eval_batches):
            x, y = self.data.get_batch("val", b, cfg.batch_size, self.seq_len, 0,
                                       rank=self.rank, world_size=self.world, device=self.device)
            with self._autocast():
                logits, _ = self.raw_model(x)
            total += F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        self.raw_model.train()
        if self.world > 1:
            torch.distributed.all_reduce(total)
            total /= self.world
        return float(total) / cfg.eval_batches

    def _eval_and_callback(self) -> bool:
        """Evaluate, record, call the callback; True when the run should stop."""
        return self.record_eval(self.evaluate())

    def record_eval(self, val: float) -> bool:
        """Record a held-out loss and call the callback; True when the run should stop
        (a non-finite loss, or the callback prunes). Shared with fused members."""
        self.evals.append((self.step, val))
        if not math.isfinite(val):
            self.diverged = True
            return True
        stop = False
        if self.callback is not None and self.rank == 0:
            metrics = {"step": self.step, "val_loss": val, "train_loss": self.recent_train_loss(),
                       "tokens": self.tokens, "lr": self.history[-1]["lr"] if self.history else self.cfg.lr,
                       "wall_s": time.perf_counter() - self.t_start}
            stop = bool(self.callback(self.step, metrics))
        if self.world > 1:
            flag = torch.tensor([1.0 if stop else 0.0], device=self.device)
            torch.distributed.broadcast(flag, 0)
            stop = bool(flag.item())
        if stop:
            self.pruned = True
        return stop

    def recent_train_loss(self, k: int = 10) -> float:
        """Mean training loss over the last ``k`` recorded finite losses."""
        vals = [h["loss"] for h in self.history[-k:] if math.isfinite(h["loss"])]
        return sum(vals) / len(vals) if vals else float("nan")

    # ---- loop ----------------------------------------------------------------------------

    def run_until(self, stop_step: int) -> bool:
        """Train until ``self.step == stop_step`` (evaluating, checkpointing and writing
        metrics on the way). Returns False when the run ended early (diverged/pruned)."""
        flush_before = None
        if self.device.type == "cpu":
            # Denormals in the tails of high-LR runs made CPU steps up to 2x slower. The
            # flag is CPU state shared with everything else in the thread (Python's own
            # float math too), so it is on only while this loop runs.
            flush_before = _denormals_flushed()
            torch.set_flush_denormal(True)
        try:
            return self._run_until(stop_step)
        finally:
            if flush_before is not None:
                torch.set_flush_denormal(flush_before)

    def _run_until(self, stop_step: int) -> bool:
        cfg = self.cfg
        while self.step < stop_step:
            before = self.step
            rec = self.train_step()
            if self.progress is not None:
                self.progress.update(self.step - self.progress.n)
                self.progress.set_postfix(loss=f"{rec['loss']:.3f}", refresh=False)
            if self.diverged:
                self.write_metrics()
                return False
            if self.step <= before:  # a rollback: nothing finished this iteration
                continue
            at_end = self.step == stop_step
            final = at_end and stop_step == self.total_steps
            if (cfg.eval_every and self.step % cfg.eval_every == 0) or final:
                if self._eval_and_callback():
                    self._maybe_checkpoint(force=True)
                    self.write_metrics()
                    return False
            self._maybe_checkpoint(force=final)
            if cfg.eval_every and self.step % cfg.eval_every == 0:
                self.write_metrics()
        return True

    def run(self) -> TrainResult:
        """Train to ``cfg.steps`` (or until diverged/pruned) and return the result."""
        try:
            self.run_until(self.total_steps)
            if not self.diverged and not self.pruned and (not self.evals or self.evals[-1][0] != self.step):
                self._eval_and_callback()
            self.write_metrics()
            return self.result()
        finally:
            self.close()

    def close(self) -> None:
        """Close the progress bar and a process group this trainer started."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        if self._own_pg and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
            self._own_pg = False

    def result(self) -> TrainResult:
        """The TrainResult of the run so far."""
        cfg = self.cfg
        worst = math.log(self.data.vocab_size)
        if self.initial_loss is not None and math.isfinite(self.initial_loss):
            worst = max(worst, self.initial_loss)
        if self.diverged:
            loss = train_loss = worst
        else:
            loss = self.evals[-1][1] if self.evals else worst
            train_loss = self.recent_train_loss()
            train_loss = train_loss if math.isfinite(train_loss) else worst
        model = self.raw_model
        assert isinstance(model, GPT)
        return TrainResult(
            config=cfg, parametrization=cfg.parametrization, width=self.gcfg.width, depth=self.gcfg.depth,
            n_params=model.num_params(), n_params_nonembed=model.num_params(non_embedding=True),
            tokens=self.tokens, steps=self.total_steps, steps_done=self.step, batch_size=cfg.batch_size,
            seq_len=self.seq_len, lr=cfg.lr, seed=cfg.seed, loss=loss, train_loss=train_loss,
            gns=self.gns.value, wall_s=time.perf_counter() - self.t_start, diverged=self.diverged,
            pruned=self.pruned and not self.diverged,
            stop_reason="diverged" if self.diverged else ("pruned" if self.pruned else "completed"),
            history=list(self.history), evals=list(self.evals), spikes=list(self.spikes),
            rollbacks=list(self.rollbacks), flops_per_token=model.flops_per_token(),
            tokens_per_s=self.tokens / self.train_time if self.train_time > 0 else 0.0,
            device=str(self.device))

    # ---- state ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs (tensors, numbers, strings, lists, dicts only)."""
        return {
            "model": self.raw_model.state_dict(), "optimizer": self.opt.state_dict(),
            "step": self.step, "data_offset": self.data_offset, "tokens": self.tokens,
            "initial_loss": self.initial_loss, "gns": self.gns.state_dict(),
            "spike": self.detector.state_dict(), "history": self.history,
            "evals": [list(e) for e in self.evals], "spikes": self.spikes,
            "rollbacks": [list(r) for r in self.rollbacks], "rng": get_rng_state(),
            "config": self.cfg.to_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (a model mismatch, or a config change outside
        :data:`mutransfer.checkpoint.RESUMABLE_FIELDS`, raises ValueError)."""
        check_resume(state.get("config"), self.cfg.to_dict(), int(state.get("step", 0)))
        try:
            self.raw_model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError, ValueError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"checkpoint does not fit this model/optimizer: {msg}") from None
        self.step, self.data_offset = int(state["step"]), int(state["data_offset"])
        self.tokens = int(state.get("tokens", self.step * self.cfg.batch_size * self.seq_len))
        self.initial_loss = state.get("initial_loss")
        if "gns" in state:
            self.gns.load_state_dict(state["gns"])
        if "spike" in state:
            self.detector.load_state_dict(state["spike"])
        self.history = [dict(h) for h in state.get("history", [])]
        self.evals = [(int(s), float(v)) for s, v in state.get("evals", [])]
        self.spikes = list(state.get("spikes", []))
        self.rollbacks = [(int(a), int(b)) for a, b in state.get("rollbacks", [])]
        if "rng" in state:
            set_rng_state(state["rng"])
        if self.progress is not None:
            self.progress.update(self.step)

    def snapshot(self) -> dict[str, Any]:
        """An in-memory deep copy of the state (for rollback and WSD branches)."""
        snap = copy.deepcopy({k: v for k, v in self.state_dict().items() if k != "rng"})
        snap["n_history"] = len(self.history)
        return snap

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Restore a :meth:`snapshot` (the snapshot stays reusable)."""
        self.load_state_dict(copy.deepcopy(dict(snap)))

    def _maybe_checkpoint(self, force: bool = False) -> None:
        cfg = self.cfg
        if not (cfg.out_dir and cfg.checkpoint_every) or self.rank != 0:
            return
        if force or self.step % cfg.checkpoint_every == 0:
            save_checkpoint(Path(cfg.out_dir) / "checkpoint.pt", self.state_dict())

    def write_metrics(self, path: str | os.PathLike[str] | None = None) -> Path | None:
        """Write the per-step history (JSONL or CSV, atomically; non-finite values become
        null/empty, never NaN) to ``path`` or ``out_dir/metrics.<format>``."""
        cfg = self.cfg
        if path is None:
            if not cfg.out_dir or self.rank != 0:
                return None
            path = Path(cfg.out_dir) / f"metrics.{cfg.metrics_format}"
        return write_metrics(self.history, path, fmt="csv" if str(path).endswith(".csv") else "jsonl")


METRIC_COLUMNS = ("step", "loss", "lr", "grad_norm", "tokens", "gns", "max_attn_logit", "wall_s")


def write_metrics(history: Sequence[Mapping[str, Any]], path: str | os.PathLike[str],
                  fmt: str = "jsonl") -> Path:
    """Write per-step records as JSONL or CSV atomically; NaN/inf are written as null
    (JSONL) or an empty cell (CSV)."""
    rows = [{k: _finite_or_none(v) for k, v in h.items()} for h in history]
    if fmt == "jsonl":
        text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows)
    else:
        cols = list(METRIC_COLUMNS) + sorted({k for r in rows for k in r} - set(METRIC_COLUMNS))
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, restval="", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
        text = buf.getvalue()
    return atomic_write_text(path, text)


# ---- entry points ------------------------------------------------------------------------


def train(cfg: TrainConfig, callback: Callback | None = None, progress: bool = False,
          data: TokenDataset | None = None) -> TrainResult:
    """Train one proxy run; see docs/trainer_contract.md.

    ``callback(step, metrics)`` is called after every evaluation with ``step``,
    ``val_loss``, ``train_loss``, ``tokens``, ``lr`` and ``wall_s``; returning True stops
    the run (``pruned=True``). Divergence ends the run with ``diverged=True`` and never
    raises. ``data`` replaces ``cfg.data`` with an already-open dataset.
    """
    return Trainer(cfg, callback=callback, progress=progress, data=data).run()


def train_wsd_branches(cfg: TrainConfig, fractions: Sequence[float], callback: Callback | None = None,
                       progress: bool = False, data: TokenDataset | None = None) -> list[TrainResult]:
    """WSD branching: losses at several token budgets from one stable run.

    For each fraction f the branch length is L = round(f × steps) and its cooldown starts
    at D = L − round(decay_fraction × L), exactly as a fresh WSD run of L steps would have
    it. One trunk trains at the stable LR; at each D its state is snapshotted (and saved
    as ``out_dir/wsd_stable_D.pt`` when out_dir is set), the cooldown to L runs, and the
    trunk resumes from the snapshot. Because the schedule is a pure function of the step
    and the data of (seed, step), each branch repeats the separate run of L steps (the
    same floats on CPU). Returns one TrainResult per fraction, in the order given.
    """
    if not fractions:
        raise ValueError("give at least one WSD branch fraction")
    for f in fractions:
        if not (isinstance(f, (int, float)) and 0 < f <= 1):
            raise ValueError(f"WSD branch fractions must be in (0, 1], got {f!r}")
    cfg = dataclasses.replace(cfg, schedule="wsd")
    plan = []
    for f in fractions:
        length = max(1, round(f * cfg.steps))
        sched = cfg.schedule_config(total_steps=length)
        warm = round(0.1 * length) if cfg.warmup_steps is None else cfg.warmup_steps
        if warm > length:
            raise ValueError(f"branch {f} has {length} steps, fewer than warmup_steps={warm}")
        start = make_schedule(dataclasses.replace(sched, warmup_steps=warm)).decay_start
        assert start is not None
        plan.append((f, length, start, warm))
    results: dict[float, TrainResult] = {}
    # Each branch's whole run, warmup included, must equal a fresh run of its length: the
    # warmup is relative to the branch's own length, so branches with different warmups
    # cannot share a trunk. Group branches by warmup and run one trunk per group.
    for warm in sorted({p[3] for p in plan}):
        group = sorted((p for p in plan if p[3] == warm), key=lambda p: p[2])
        tcfg = dataclasses.replace(cfg, steps=max(p[1] for p in group), warmup_steps=warm, eval_every=0,
                                   checkpoint_every=0, out_dir=None)
        trainer = Trainer(tcfg, callback=None, progress=progress, data=data)
        # Stable phase: warmup then constant (a WSD with no cooldown inside the trunk).
        stable = make_schedule(ScheduleConfig(kind="constant", warmup_steps=warm))
        try:
            for k, (f, length, start, _) in enumerate(group):
                trainer.schedule, trainer.total_steps = stable, length
                trainer.callback = None
                if not trainer.run_until(start):  # the trunk diverged: so do the rest
                    for f_rest, *_ in group[k:]:
                        results[f_rest] = trainer.result()
                    break
                snap = trainer.snapshot()
                if cfg.out_dir:
                    save_checkpoint(Path(cfg.out_dir) / f"wsd_stable_{start}.pt", trainer.state_dict())
                bcfg = dataclasses.replace(cfg, steps=length, warmup_steps=warm)
                trainer.cfg = dataclasses.replace(bcfg, checkpoint_every=0, out_dir=None)
                trainer.schedule = make_schedule(bcfg.schedule_config())
                trainer.callback = callback
                trainer.run_until(length)
                if not trainer.diverged and not trainer.pruned and (
                        not trainer.evals or trainer.evals[-1][0] != trainer.step):
                    trainer._eval_and_callback()
                res = trainer.result()
                res.config = bcfg
                results[f] = res
                if cfg.out_dir:
                    name = f"metrics_branch_{length}.{cfg.metrics_format}"
                    write_metrics(res.history, Path(cfg.out_dir) / name, fmt=cfg.metrics_format)
                trainer.cfg = tcfg
                trainer.restore(snap)
                trainer.diverged = trainer.pruned = False
        finally:
            trainer.close()
    return [results[f] for f in fractions]
