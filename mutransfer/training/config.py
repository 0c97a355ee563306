"""The training run's configuration as a tree: :class:`TrainConfig` of seven sections.

``TrainConfig(model=ModelSection(...), optim=OptimSection(...), ...)``: each section is a
frozen dataclass that validates its own fields (choices come from the ``Literal`` of the
field's type); :class:`TrainConfig` checks only what spans sections (the optimizer that
goes with the parametrization, warmup <= steps, base width <= width).

Every section field also has a *flat* name (:data:`ALIASES`): its own name, except
``parametrization`` (``parametrization.kind``), ``optimizer`` (``optim.name``) and
``schedule`` (``schedule.kind``). Flat names are what ``--set key=value``, sweep specs,
results rows, trial attributes and checkpoints use, so those stay as they were:
:meth:`TrainConfig.from_overrides` takes flat or dotted keys (``lr`` or ``optim.lr``),
:meth:`TrainConfig.to_flat` gives the flat dict, :meth:`TrainConfig.replace` derives
variants. Sections declare which of their fields may differ between the members of a
fused group (``PER_MEMBER``; :func:`mutransfer.training.fusion.fusion_key` is the rest).
The model section, which names the model and gives its shape, is
:mod:`mutransfer.training.model_section`; what every section shares is
:mod:`mutransfer.training.config_fields`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from mutransfer._io import read_yaml_mapping
from mutransfer.models.gpt import GPTConfig
from mutransfer.parametrize.specs import Kind
from mutransfer.training.config_fields import (
    _coerce,
    _hints,
    _Section,
    _section,
    build_aliases,
    expand_sections,
    lookup_field,
)
from mutransfer.training.model_section import ModelSection
from mutransfer.training.schedules import DecayShape, ScheduleConfig, ScheduleKind
from mutransfer.training.stabilizers import SpikePolicy

__all__ = [
    "ALIASES",
    "SECTIONS",
    "OptimSection",
    "OutputSection",
    "ParametrizationSection",
    "RunSection",
    "ScheduleSection",
    "StabilizerSection",
    "TrainConfig",
    "load_config",
]


#: Token dtypes of ``.bin`` data (:mod:`mutransfer.training.data`).
TokenDtype = Literal["uint8", "uint16", "uint32"]


@_section("parametrization")
class ParametrizationSection(_Section):
    """How width and depth scale the init, the forward and the per-parameter LR."""

    kind: Kind = "mup"
    """``sp``, ``mup``, ``completep`` or ``muon`` (flat name ``parametrization``)."""
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
    readout_init: Literal["constant", "zero", "fan_in"] = "fan_in"
    """Readout init under μP: ``fan_in`` (the default: SP's fan-in law for the effective
    readout, std ∝ width^-1/2), ``constant`` (mup's: constant variance, effective std ∝
    width^-1) or ``zero``; ``fan_in`` and ``constant`` are the same at the base width
    (:data:`mutransfer.parametrize.rules.READOUT_INIT`,
    :data:`~mutransfer.parametrize.rules.DEFAULT_READOUT_INIT`).
    On the demo's proxy over widths 32-512 (``benchmarks/readout_ladder.py``) ``fan_in``
    matched SP's best loss at 512 (0.9995x) with its optimal LR drifting 0.30 octave
    [0.14, 1.44]; ``constant`` was 1.05x SP's with a drift of 0.52."""

    # The kind decides which optimizer math runs; the rest are per-member scalars.
    PER_MEMBER: ClassVar[frozenset[str]] = frozenset({
        "base_width", "base_depth", "depth_alpha", "input_mult", "output_mult", "attn_mult",
        "residual_mult", "lr_mult_input", "lr_mult_output", "lr_mult_vector", "readout_init"})

    def __post_init__(self) -> None:
        self._check_choices()
        self._positive("input_mult", "output_mult", "attn_mult", "residual_mult", "lr_mult_input",
                       "lr_mult_output", "lr_mult_vector")
        self._ints(("base_width", "base_depth"), 1, "a positive integer or None", optional=True)
        if self.depth_alpha not in (0.5, 1.0):
            raise self._bad("depth_alpha", "0.5 or 1")

    @property
    def mults(self) -> tuple[float, float, float, float]:
        """(input, output, attn, residual) forward multipliers."""
        return self.input_mult, self.output_mult, self.attn_mult, self.residual_mult

    @property
    def lr_mults(self) -> dict[str, float]:
        """Tuned per-role LR multipliers, by role."""
        return {"input": self.lr_mult_input, "output": self.lr_mult_output, "vector": self.lr_mult_vector}


@_section("optim")
class OptimSection(_Section):
    """The optimizer and its hyperparameters."""

    name: Literal["auto", "adamw", "sgd", "muon"] = "auto"
    """``adamw``, ``sgd`` or ``muon``; ``auto`` picks muon for the muon parametrization
    and adamw otherwise (resolved by :class:`TrainConfig`; flat name ``optimizer``)."""
    lr: float = 1e-2
    """Base learning rate (per-parameter LR = lr × schedule × μP multiplier)."""
    beta1: float = 0.9
    """Adam beta1."""
    beta2: float = 0.95
    """Adam beta2 (unless ``beta2_halflife_tokens`` sets it from the batch)."""
    beta2_halflife_tokens: float | None = None
    """Opt-in: Adam's beta2 = 0.5^(batch tokens / this), so the second-moment average has
    the same half-life in tokens at every batch (Marek et al. 2025); None keeps ``beta2``.
    It replaces ``beta2``: setting both (``beta2`` other than its default) is refused, and
    a half-life whose beta2 at the run's batch rounds to 0 or 1 is refused at the start."""
    eps: float = 1e-8
    """Adam epsilon (CompleteP scales it per parameter)."""
    momentum: float = 0.0
    """SGD momentum."""
    muon_momentum: float = 0.95
    """Muon momentum (Nesterov)."""
    weight_decay: float = 0.0
    """Weight decay of matrix-like parameters (vectors get none)."""
    wd_mode: Literal["coupled", "independent"] = "coupled"
    """``coupled`` (torch AdamW: decay lr_t × wd) or ``independent`` (wd × schedule)."""
    qk_clip: bool = False
    """Apply QK-clip (MuonClip, Kimi K2) after every step."""
    qk_clip_tau: float = 100.0
    """QK-clip threshold tau on the per-head max attention logit."""

    # The optimizer kind and whether QK-clip runs are one code path for the whole group.
    PER_MEMBER: ClassVar[frozenset[str]] = frozenset({
        "lr", "beta1", "beta2", "beta2_halflife_tokens", "eps", "momentum", "muon_momentum", "weight_decay",
        "wd_mode", "qk_clip_tau"})

    def adam_beta2(self, batch_tokens: int) -> float:
        """Adam's beta2 for a step of ``batch_tokens``: ``beta2``, or 0.5^(batch_tokens /
        beta2_halflife_tokens) when the half-life is set (Marek et al. 2025, "Small batch
        size training for language models", §4)."""
        if self.beta2_halflife_tokens is None:
            return self.beta2
        value = 0.5 ** (batch_tokens / self.beta2_halflife_tokens)
        if not 0.0 < value < 1.0:  # torch refuses 1 with its own words; 0 would run silently
            raise ValueError(f"beta2_halflife_tokens={self.beta2_halflife_tokens!r} gives Adam's beta2 = "
                             f"0.5^({batch_tokens}/{self.beta2_halflife_tokens:g}) = {value:g} at a batch of "
                             f"{batch_tokens} tokens; it must lie strictly between 0 and 1 (a half-life of "
                             f"{batch_tokens / math.log2(1 / 0.95):.4g} tokens gives 0.95)")
        return value

    def __post_init__(self) -> None:
        self._check_choices()
        self._positive("lr", "eps", "qk_clip_tau")
        self._unit("beta1", "beta2", "momentum", "muon_momentum")
        t = self.beta2_halflife_tokens
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not (
                math.isfinite(t) and t > 0)):
            raise self._bad("beta2_halflife_tokens", "a positive finite number of tokens or None")
        if t is not None and self.beta2 != type(self).beta2:
            raise ValueError(f"beta2={self.beta2!r} and beta2_halflife_tokens={t!r} are both set: the "
                             "half-life sets beta2 from the batch; drop one")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise self._bad("weight_decay", ">= 0")


@_section("schedule")
class ScheduleSection(_Section):
    """The LR schedule (a pure function of the step; :mod:`mutransfer.training.schedules`)."""

    kind: ScheduleKind = "cosine"
    """LR schedule kind: constant, cosine, linear, inverse_sqrt, wsd (flat name ``schedule``)."""
    warmup_steps: int | None = None
    """Linear warmup steps (None: 10% of the steps)."""
    decay_fraction: float = 0.2
    """WSD cooldown length as a fraction of the steps."""
    decay_shape: DecayShape = "1-sqrt"
    """WSD cooldown shape: linear, 1-sqrt, exp, cosine."""
    lr_floor: float = 0.0
    """Final LR as a fraction of the peak (cosine/linear/wsd; inverse_sqrt's clamp)."""

    # Each member computes its own LR multiplier per step.
    PER_MEMBER: ClassVar[frozenset[str]] = frozenset({
        "kind", "warmup_steps", "decay_fraction", "decay_shape", "lr_floor"})

    def __post_init__(self) -> None:
        self._check_choices()
        # The upper bound (steps) is another section's: TrainConfig checks it.
        self._ints(("warmup_steps",), 0, "a non-negative integer or None", optional=True)
        if not (0.0 <= self.lr_floor <= 1.0):
            raise self._bad("lr_floor", "in [0, 1]")
        if not (0.0 <= self.decay_fraction <= 1.0):
            raise self._bad("decay_fraction", "in [0, 1]")


@_section("run")
class RunSection(_Section):
    """How long, on what data and where the run trains."""

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
    data_dtype: TokenDtype | None = None
    """Token dtype of .bin data (uint8/uint16/uint32; None: the sidecar's, or uint16 for a
    train.bin/val.bin folder; a single .bin without a sidecar needs it)."""
    data_max_bytes: int | None = None
    """Cap on the stdlib corpus in bytes (tests, quick demos)."""
    data_cache: str | None = None
    """Where the stdlib corpus is cached (None: $MUTRANSFER_CACHE or ~/.cache)."""
    eval_every: int = 50
    """Evaluate on the held-out split every this many steps (0: only at the end)."""
    eval_sequences: int = 64
    """Held-out sequences per evaluation: a fixed set drawn once from the val split, the
    same for every batch size, seed and trial (scored in chunks that only bound memory)."""
    device: str = "auto"
    """``auto`` (cuda, then mps, then cpu), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    dtype: Literal["auto", "fp32", "bf16"] = "auto"
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

    # A fused group steps, evaluates and fetches data in lock step on one device; the
    # seed only picks a member's init and batches. ``threads`` is process-wide; ``compile``
    # compiles the group's one stacked forward, so its members agree on it.
    PER_MEMBER: ClassVar[frozenset[str]] = frozenset({"seed", "threads", "gns_beta"})

    def __post_init__(self) -> None:
        self._check_choices()
        self._ints(("steps", "batch_size", "grad_accum", "eval_sequences"), 1, "a positive integer")
        self._ints(("threads",), 1, "a positive integer or None", optional=True)
        self._ints(("seed", "eval_every", "max_logit_every"), 0, "a non-negative integer")
        self._ints(("data_max_bytes",), 1, "a positive integer or None", optional=True)
        if self.data_dtype is not None and self.data_dtype not in typing.get_args(TokenDtype):
            raise self._bad("data_dtype", f"one of {', '.join(typing.get_args(TokenDtype))} or None")
        self._unit("gns_beta")
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size={self.batch_size} is not divisible by grad_accum={self.grad_accum}")


@_section("stabilizers")
class StabilizerSection(_Section):
    """Gradient clipping, loss-spike handling and divergence (:mod:`mutransfer.training.stabilizers`)."""

    grad_clip: float | None = 1.0
    """Clip the global gradient norm to this (None or 0: no clipping; norm still logged)."""
    spike_policy: SpikePolicy = "log"
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

    # Each member takes its own decision every step (Trainer.decide); ``rollback`` is
    # refused by fusion (mutransfer.training.fusion.unsupported_reason).
    PER_MEMBER: ClassVar[frozenset[str]] = frozenset({
        "grad_clip", "spike_policy", "spike_threshold", "spike_window", "rollback_every",
        "max_rollbacks", "diverge_factor"})

    def __post_init__(self) -> None:
        self._check_choices()
        self._positive("diverge_factor", "spike_threshold")
        self._ints(("rollback_every",), 1, "a positive integer")
        self._ints(("max_rollbacks",), 0, "a non-negative integer")
        if self.grad_clip is not None and not (self.grad_clip >= 0 and math.isfinite(self.grad_clip)):
            raise self._bad("grad_clip", ">= 0 or None")
        self._ints(("spike_window",), 4, ">= 4")


@_section("output")
class OutputSection(_Section):
    """What the run writes (metrics, checkpoints) and what it resumes from."""

    out_dir: str | None = None
    """Where metrics and checkpoints go (None: nothing is written)."""
    metrics_format: Literal["jsonl", "csv"] = "jsonl"
    """Per-step metrics file: ``jsonl`` or ``csv``."""
    checkpoint_every: int = 0
    """Save out_dir/checkpoint.pt every this many steps and at the end (0: never)."""
    resume: str | None = None
    """Checkpoint to resume from."""

    # Where a member writes is its own (checkpointing/resume are refused by fusion).
    PER_MEMBER: ClassVar[frozenset[str]] = frozenset({
        "out_dir", "metrics_format", "checkpoint_every", "resume"})

    def __post_init__(self) -> None:
        self._check_choices()
        self._ints(("checkpoint_every",), 0, "a non-negative integer")


#: The sections of :class:`TrainConfig`, by attribute name, in order.
SECTIONS: dict[str, type[_Section]] = {
    "model": ModelSection, "parametrization": ParametrizationSection, "optim": OptimSection,
    "schedule": ScheduleSection, "run": RunSection, "stabilizers": StabilizerSection,
    "output": OutputSection,
}


@dataclass(frozen=True)
class TrainConfig:
    """One proxy training run: seven sections. Frozen; derive variants with
    :meth:`replace` (``cfg.replace(lr=1e-3)`` or ``cfg.replace(**{"optim.lr": 1e-3})``),
    build from flat fields with :meth:`from_flat`/:meth:`from_overrides`. ``None`` model
    fields take the preset's value."""

    model: ModelSection = field(default_factory=ModelSection)
    """The model preset and its shape/architecture overrides."""
    parametrization: ParametrizationSection = field(default_factory=ParametrizationSection)
    """The parametrization (SP, μP, CompleteP, Muon), its bases and multipliers."""
    optim: OptimSection = field(default_factory=OptimSection)
    """The optimizer and its hyperparameters."""
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    """The LR schedule."""
    run: RunSection = field(default_factory=RunSection)
    """Steps, batch, data, evaluation, device."""
    stabilizers: StabilizerSection = field(default_factory=StabilizerSection)
    """Gradient clipping, spikes, divergence."""
    output: OutputSection = field(default_factory=OutputSection)
    """Metrics, checkpoints, resume."""

    def __post_init__(self) -> None:
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"TrainConfig.{name} must be a {cls.__name__}, got {getattr(self, name)!r}")
        kind, opt = self.parametrization.kind, self.optim.name
        if opt == "auto":
            opt = "muon" if kind == "muon" else "adamw"
            object.__setattr__(self, "optim", dataclasses.replace(self.optim, name=opt))
        if (opt == "muon") != (kind == "muon"):
            raise ValueError(f"optimizer {opt!r} does not go with parametrization {kind!r} "
                             "(muon pairs with muon)")
        warmup, steps = self.schedule.warmup_steps, self.run.steps
        if warmup is not None and warmup > steps:
            raise ValueError(f"warmup_steps must be in [0, steps={steps}], got {warmup!r}")
        base_width = self.parametrization.base_width
        if base_width is not None and base_width > self.model.shape().width:
            raise ValueError(f"base_width={base_width} is larger than the width {self.model.shape().width}")
        if self.model.source is not None and self.optim.qk_clip:
            raise ValueError(f"qk_clip does not apply to model {self.model.source!r}: QK-clip rescales "
                             "the query/key weights of our attention module from its max logits")

    # ---- derived -------------------------------------------------------------------------

    def model_config(self, vocab_size: int | None = None) -> GPTConfig:
        """The preset's GPTConfig with this config's overrides (and the data's vocab)."""
        return self.model.gpt_config(vocab_size)

    def schedule_config(self, total_steps: int | None = None,
                        decay_start: int | None = None) -> ScheduleConfig:
        """The ScheduleConfig of this run (``total_steps`` defaults to ``run.steps``)."""
        s, steps = self.schedule, self.run.steps
        total = steps if total_steps is None else total_steps
        warmup = round(0.1 * steps) if s.warmup_steps is None else s.warmup_steps
        return ScheduleConfig(kind=s.kind, warmup_steps=min(warmup, total), total_steps=total,
                              lr_floor=s.lr_floor, decay_fraction=s.decay_fraction,
                              decay_start=decay_start, decay_shape=s.decay_shape)

    # ---- flat view -----------------------------------------------------------------------

    def to_flat(self) -> dict[str, Any]:
        """Every field under its flat name (:data:`ALIASES`), section by section: the dict
        results rows, trial attributes, checkpoints and cards store."""
        return {flat: getattr(getattr(self, sec), name) for flat, (sec, name) in ALIASES.items()}

    @classmethod
    def from_flat(cls, fields: Mapping[str, Any]) -> TrainConfig:
        """The defaults with ``fields`` (flat, dotted or nested by section) applied:
        the inverse of :meth:`to_flat`."""
        return cls.from_overrides(None, fields)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` (flat names; dotted ones through ``**{"optim.lr": x}``)
        applied as :meth:`from_overrides` applies them."""
        return type(self).from_overrides(self, changes)

    @classmethod
    def from_overrides(cls, base: TrainConfig | None = None,
                       overrides: Mapping[str, Any] | None = None) -> TrainConfig:
        """``base`` (default: the defaults) with ``overrides`` applied. Keys are flat
        (``lr``), dotted (``optim.lr``) or a section name with a mapping of its fields
        (``{"optim": {"lr": 1e-3}}``, as in a nested YAML file). Values may be strings (as
        from ``--set key=value``: parsed by the field's type, ``none``/``null`` for None,
        true/false for booleans) or typed values (type-checked). Unknown keys and values
        of the wrong type raise ValueError naming them. Changing the parametrization
        without naming an optimizer re-resolves ``optimizer="auto"``."""
        base = base or cls()
        changes: dict[str, dict[str, Any]] = {}
        for key, value in expand_sections(overrides or {}, SECTIONS).items():
            sec, name = lookup_field(key, ALIASES, _DOTTED)
            flat = _FLAT[(sec, name)]
            if name in changes.get(sec, {}):
                raise ValueError(f"config field {flat!r} is given twice (flat and as {sec}.{name})")
            changes.setdefault(sec, {})[name] = _coerce(flat, value, _hints(SECTIONS[sec])[name])
        # An explicit optimizer "auto" must re-resolve against the new parametrization.
        if "kind" in changes.get("parametrization", {}) and "name" not in changes.get("optim", {}):
            changes.setdefault("optim", {})["name"] = "auto"
        if not changes:
            return base
        sections = {sec: dataclasses.replace(getattr(base, sec), **changes[sec]) if sec in changes
                    else getattr(base, sec) for sec in SECTIONS}
        return cls(**sections)  # type: ignore[arg-type]

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str],
                  overrides: Mapping[str, Any] | None = None) -> TrainConfig:
        """Read a YAML (or JSON) mapping of fields, flat or nested by section, with
        ``yaml.safe_load``, then apply ``overrides`` on top."""
        base = load_config(path)
        return cls.from_overrides(base, overrides) if overrides else base


def load_config(path: str | os.PathLike[str]) -> TrainConfig:
    """A TrainConfig from a YAML/JSON file of ``field: value`` (flat names) or of
    ``section: {field: value}`` (``yaml.safe_load``)."""
    return TrainConfig.from_overrides(TrainConfig(), read_yaml_mapping(path, "config file"))


# ---- the alias map -----------------------------------------------------------------------

#: Flat field name -> (section, field), in section order: ``"lr" -> ("optim", "lr")``.
ALIASES: dict[str, tuple[str, str]] = build_aliases(SECTIONS)
_FLAT: dict[tuple[str, str], str] = {v: k for k, v in ALIASES.items()}
_DOTTED: frozenset[str] = frozenset(f"{s}.{n}" for s, n in ALIASES.values())


def _int_fields() -> frozenset[str]:
    out = set()
    for flat, (sec, name) in ALIASES.items():
        tp = typing.get_type_hints(SECTIONS[sec])[name]
        if tp is int or set(typing.get_args(tp)) - {type(None)} == {int}:
            out.add(flat)
    return frozenset(out)


#: Flat names of the integer fields (``int`` or ``int | None`` by their type hints): a sweep
#: records a grid over one of them as integers.
INT_FIELDS: frozenset[str] = _int_fields()
