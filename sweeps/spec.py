"""Sweep specs: frozen dataclasses (also loadable from YAML) that enumerate grid points.

Four kinds:

* ``lr`` (:class:`LRSweep`): log2 learning-rate grid (default 2^-14 ... 2^-3 in steps of 1)
  or an adaptive TPE/GP search over the same range, x widths (x depths) x
  parametrizations x seeds. The muTransfer check and proxy tuning.
* ``batch`` (:class:`BatchSweep`): learning rate x batch size x widths and/or token
  budgets, for eta*(N, D), B*(D) and B_crit.
* ``scaling`` (:class:`ScalingSweep`): token budget D (WSD branches: one run, several
  budgets) x batch size B x an LR grid around the optimum at the base width, plus a check
  at one wider width, every run logging its gradient noise scale: eta*(B, D), B*(D), B_crit.
* ``run`` (:class:`GridSweep`): any TrainConfig field (or multiplier) as a dimension.

A spec never touches Optuna; :meth:`SweepSpec.points` gives the deterministic, ordered
list of grid points (dicts of TrainConfig field -> value) and :meth:`SweepSpec.search`
the continuous (adaptive) dimensions, if any.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import math
import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from mutransfer._io import plain

PARAMETRIZATIONS: tuple[str, ...] = ("sp", "mup", "completep", "muon")
SAMPLERS: tuple[str, ...] = ("grid", "tpe", "gp", "random")
PRUNERS: tuple[str, ...] = ("divergence", "median", "hyperband")

# TrainConfig fields named by docs/trainer_contract.md; the real dataclass wins when importable.
CONTRACT_FIELDS: frozenset[str] = frozenset(
    """preset width depth head_dim seq_len tie_embeddings qk_norm logit_softcap z_loss
    freeze_norm_gains parametrization base_width base_depth depth_alpha input_mult output_mult
    attn_mult residual_mult readout_init optimizer lr beta1 beta2 eps momentum weight_decay
    wd_mode schedule warmup_steps decay_fraction decay_shape lr_floor steps batch_size
    grad_accum seed data eval_every eval_batches device dtype compile threads grad_clip
    spike_policy diverge_factor out_dir checkpoint_every""".split()
)
# Pseudo-fields a sweep may set: ``tokens`` becomes ``steps`` = tokens / (batch_size * seq_len);
# ``wsd_branches`` (fractions of the steps) makes the runner train WSD branches, one row each.
PSEUDO_FIELDS: frozenset[str] = frozenset({"tokens", "wsd_branches"})


def train_config_fields() -> frozenset[str]:
    """Names a sweep may set: the real TrainConfig's flat field names
    (:data:`mutransfer.config.ALIASES`) if it imports, else the contract's."""
    try:
        from mutransfer.config import ALIASES  # type: ignore[import-not-found]
    except ImportError:
        return CONTRACT_FIELDS
    return frozenset(ALIASES)


def log2_grid(lo: float, hi: float, step: float = 1.0) -> tuple[float, ...]:
    """``2**lo, 2**(lo+step), ..., 2**hi`` (inclusive, to float tolerance)."""
    if not step > 0:
        raise ValueError(f"log2 LR step must be > 0, got {step}")
    if hi < lo:
        raise ValueError(f"log2 LR range is empty: min {lo} > max {hi}")
    n = int(math.floor((hi - lo) / step + 1e-9)) + 1
    return tuple(2.0 ** (lo + i * step) for i in range(n))


def point_key(point: Mapping[str, Any]) -> str:
    """Canonical identity of a grid point (a JSON string with sorted keys)."""
    return json.dumps(dict(point), sort_keys=True, default=str)


_TRUSTED = False


@contextlib.contextmanager
def trusted() -> Iterator[None]:
    """Skip the model-shape check (it imports torch) for specs read back from a study."""
    global _TRUSTED
    old, _TRUSTED = _TRUSTED, True
    try:
        yield
    finally:
        _TRUSTED = old


def _as_tuple(name: str, value: Any) -> tuple[Any, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        value = (value,)
    return tuple(value)


@dataclass(frozen=True)
class SweepSpec:
    """Fields shared by every kind. Subclasses add their dimensions."""

    kind: ClassVar[str] = ""
    # fields of the subclass that are grid dimensions (field name, TrainConfig name)
    _dims: ClassVar[tuple[tuple[str, str], ...]] = ()

    preset: str = "gpt-tiny"
    """Model preset of every trial (``mutransfer.models.PRESETS``)."""
    model: str | None = None
    """Your model instead of the preset: ``hf:PATH`` (a local config.json) or
    ``module:function`` (:func:`mutransfer.models.source.parse_model`; the trials' config
    field ``source``). None: the preset; a preset name here is that preset."""
    base: Mapping[str, Any] = field(default_factory=dict)
    """TrainConfig overrides shared by every trial (steps, batch_size, base_width, ...)."""
    sampler: str = "grid"
    """grid (every point once), or an adaptive search over the LR: tpe | gp | random."""
    trials: int | None = None
    """Adaptive samplers: trials per group (default 8). Ignored by the grid sampler."""
    pruner: str = "divergence"
    """divergence (default: transfer curves only stop diverged runs) | median | hyperband."""
    sampler_seed: int = 0
    """Seed of the sampler; worker k uses sampler_seed + k."""
    name: str | None = None
    """Study name (default: the kind)."""

    # -- validation -------------------------------------------------------------------
    def __post_init__(self) -> None:
        object.__setattr__(self, "base", dict(self.base or {}))
        if self.model is not None and not _TRUSTED:
            from mutransfer.models.source import parse_model

            if not isinstance(self.model, str):
                raise ValueError(f"model must be a preset name, hf:PATH or module:function, "
                                 f"got {self.model!r}")
            src = parse_model(self.model, head_rule=self.base.get("head_rule") or "keep_head_dim")
            if src.builtin:
                object.__setattr__(self, "preset", src.ref)
                object.__setattr__(self, "model", None)
            else:  # hf: the absolute config.json, so every worker reads the same file
                object.__setattr__(self, "model", src.spec())
        if "source" in self.base:
            raise ValueError("give your model as the spec's model (or --model), not base.source")
        for fname, _ in self._dims:
            object.__setattr__(self, fname, _as_tuple(fname, getattr(self, fname)))
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; choose from {', '.join(SAMPLERS)}")
        if self.pruner not in PRUNERS:
            raise ValueError(f"unknown pruner {self.pruner!r}; choose from {', '.join(PRUNERS)}")
        for name in ("trials", "sampler_seed"):
            v = getattr(self, name)
            if (v is not None or name == "sampler_seed") and (
                    isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "trials" else 0)):
                raise ValueError(f"{name} must be an integer >= {1 if name == 'trials' else 0}, got {v!r}")
        known = CONTRACT_FIELDS | set(self.base) if _TRUSTED else train_config_fields() | PSEUDO_FIELDS
        bad = sorted(set(self.base) - known)
        if bad:
            raise ValueError(f"unknown TrainConfig field(s) in base: {', '.join(bad)}")
        for fname, _ in self._dims:
            values = getattr(self, fname)
            if values is not None and len(values) == 0:
                raise ValueError(f"empty grid: {fname} has no values")
        self._validate()
        if self.sampler == "grid" and not self.points():
            raise ValueError("empty grid: the sweep has no points")
        self._check_widths()

    def _validate(self) -> None:  # per kind
        pass

    def _check_widths(self) -> None:
        if _TRUSTED:  # a spec read back from a study was checked when the study was made
            return
        widths = {p["width"] for p in self.points() if "width" in p}
        if not widths:
            return
        if self.model is not None:  # the config checks an hf: model at each width
            from mutransfer.config import ModelSection

            for w in sorted(widths):
                try:
                    ModelSection(preset=self.preset, source=self.model, head_rule=self.base.get("head_rule"),
                                 width=w)
                except ValueError as exc:
                    raise ValueError(f"width {w} does not fit model {self.model}: {exc}") from None
            self._probe_builder(sorted(widths))
            return
        from mutransfer.models import get_preset

        cfg = get_preset(self.preset)
        overrides = {k: self.base[k] for k in ("head_dim", "seq_len") if k in self.base}
        for w in sorted(widths):
            if not isinstance(w, int) or isinstance(w, bool) or w < 1:
                raise ValueError(f"width {w!r} must be a positive integer")
            try:
                cfg.replace(width=w, **overrides)
            except ValueError as exc:
                raise ValueError(f"width {w} does not fit preset {self.preset}: {exc}") from None
            except TypeError:  # an override the preset does not have (e.g. head_dim on an MLP)
                cfg.replace(width=w)

    def _probe_builder(self, widths: list[int]) -> None:
        """A ``module:function`` model is built at every width (on the meta device; for
        real at the smallest), so a builder that raises or gives no logits is refused
        before any study exists, not trial by trial."""
        from mutransfer.models.source import build_model, parse_model

        src = parse_model(str(self.model))
        if src.kind != "builder":
            return
        import torch

        depths = sorted({int(p["depth"]) for p in self.points() if "depth" in p}) or [
            int(self.base.get("depth") or preset_attr(self.preset, "depth", 2))]
        for w in widths:
            for d in depths:
                if w == widths[0] and d == depths[0]:
                    build_model(src, w, d)
                else:
                    with torch.device("meta"):
                        build_model(src, w, d)

    # -- enumeration ------------------------------------------------------------------
    def grid_dims(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Ordered (TrainConfig field, values) of the grid; lr is left out when adaptive."""
        out = []
        for fname, cname in self._dims:
            values = getattr(self, fname)
            if values is None:
                continue
            if cname == "lr" and self.adaptive:
                continue
            out.append((cname, tuple(values)))
        return out

    @property
    def adaptive(self) -> bool:
        return self.sampler != "grid"

    def search(self) -> dict[str, tuple[float, float]]:
        """Continuous dimensions the sampler searches (log scale): {} for a grid."""
        return {}

    def points(self) -> list[dict[str, Any]]:
        """The deterministic, ordered grid points (for adaptive samplers: the groups)."""
        dims = self.grid_dims()
        names = [n for n, _ in dims]
        return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in dims))]

    def trials_per_point(self) -> int:
        return 1 if not self.adaptive else (self.trials or 8)

    def study_name(self) -> str:
        return self.name or self.kind

    def group_keys(self) -> list[str]:
        """Columns that define a curve (everything searched except lr and seed)."""
        return [n for n, _ in self.grid_dims() if n not in ("lr", "seed")]

    # -- (de)serialization ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            d[f.name] = plain(getattr(self, f.name))  # tuples -> lists, as JSON/YAML give back
        return d



def _lr_values(spec: Any) -> tuple[float, ...]:
    if spec.lrs is not None:
        return tuple(float(x) for x in spec.lrs)
    return log2_grid(spec.log2_lr_min, spec.log2_lr_max, spec.log2_lr_step)


@dataclass(frozen=True)
class _LRMixin:
    lrs: tuple[float, ...] | None = None
    """Explicit learning rates; default the log2 grid below."""
    log2_lr_min: float = -14.0
    log2_lr_max: float = -3.0
    log2_lr_step: float = 1.0


@dataclass(frozen=True)
class LRSweep(SweepSpec, _LRMixin):
    """LR x width (x depth) x parametrization x seed: the muTransfer check."""

    kind: ClassVar[str] = "lr"
    _dims: ClassVar[tuple[tuple[str, str], ...]] = (
        ("parametrizations", "parametrization"),
        ("widths", "width"),
        ("depths", "depth"),
        ("seeds", "seed"),
        ("lrs", "lr"),
    )
    widths: tuple[int, ...] | None = (32, 64, 128)
    depths: tuple[int, ...] | None = None
    parametrizations: tuple[str, ...] | None = ("sp", "mup")
    seeds: tuple[int, ...] | None = (0,)

    def __post_init__(self) -> None:
        if self.lrs is None:
            object.__setattr__(self, "lrs", _lr_values(self))
        if not _TRUSTED:
            _default_bases(self)
        super().__post_init__()

    def _validate(self) -> None:
        for p in self.parametrizations or ():
            if p not in PARAMETRIZATIONS:
                raise ValueError(f"unknown parametrization {p!r}; choose from {', '.join(PARAMETRIZATIONS)}")
        _check_lrs(self)

    def search(self) -> dict[str, tuple[float, float]]:
        if not self.adaptive:
            return {}
        return {"lr": (2.0**self.log2_lr_min, 2.0**self.log2_lr_max)}


@dataclass(frozen=True)
class BatchSweep(SweepSpec, _LRMixin):
    """LR x batch size x widths and/or token budgets: eta*(N, D), B*(D), B_crit."""

    kind: ClassVar[str] = "batch"
    _dims: ClassVar[tuple[tuple[str, str], ...]] = (
        ("widths", "width"),
        ("tokens", "tokens"),
        ("batch_sizes", "batch_size"),
        ("seeds", "seed"),
        ("lrs", "lr"),
    )
    widths: tuple[int, ...] | None = (32, 64)
    tokens: tuple[int, ...] | None = None
    """Token budgets D; each trial trains steps = D / (batch_size * seq_len)."""
    batch_sizes: tuple[int, ...] | None = (8, 16, 32, 64)
    seeds: tuple[int, ...] | None = (0,)
    parametrization: str = "mup"

    def __post_init__(self) -> None:
        if self.lrs is None:
            object.__setattr__(self, "lrs", _lr_values(self))
        if not _TRUSTED:
            _default_bases(self)
        super().__post_init__()

    def _validate(self) -> None:
        if self.parametrization not in PARAMETRIZATIONS:
            raise ValueError(f"unknown parametrization {self.parametrization!r}; "
                             f"choose from {', '.join(PARAMETRIZATIONS)}")
        for b in self.batch_sizes or ():
            if not isinstance(b, int) or b < 1:
                raise ValueError(f"batch size {b!r} must be a positive integer")
        for t in self.tokens or ():
            if not isinstance(t, int) or t < 1:
                raise ValueError(f"token budget {t!r} must be a positive integer")
        _check_lrs(self)

    def points(self) -> list[dict[str, Any]]:
        pts = super().points()
        for p in pts:
            p.setdefault("parametrization", self.parametrization)
        return pts

    def search(self) -> dict[str, tuple[float, float]]:
        if not self.adaptive:
            return {}
        return {"lr": (2.0**self.log2_lr_min, 2.0**self.log2_lr_max)}


@dataclass(frozen=True)
class GridSweep(SweepSpec):
    """Any TrainConfig field (or multiplier) as a dimension: ``grid: {field: [values]}``;
    with an adaptive sampler, ``search: {field: [lo, hi]}`` is searched on a log scale."""

    kind: ClassVar[str] = "run"
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    search_space: Mapping[str, Sequence[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        grid = {k: tuple(_as_tuple(k, v) or ()) for k, v in (self.grid or {}).items()}
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "search_space",
                           {k: tuple(float(x) for x in v) for k, v in (self.search_space or {}).items()})
        super().__post_init__()

    def _validate(self) -> None:
        dims = set(self.grid) | set(self.search_space)
        bad = [] if _TRUSTED else sorted(dims - (train_config_fields() | PSEUDO_FIELDS))
        if bad:
            raise ValueError(f"unknown TrainConfig field(s) as sweep dimension: {', '.join(bad)}")
        for k, v in self.grid.items():
            if len(v) == 0:
                raise ValueError(f"empty grid: {k} has no values")
        for k, v in self.search_space.items():
            if len(v) != 2 or not 0 < v[0] < v[1]:
                raise ValueError(f"search range of {k} must be [lo, hi] with 0 < lo < hi, got {list(v)}")
        if self.adaptive and not self.search_space:
            raise ValueError(f"sampler {self.sampler!r} needs a search_space (e.g. {{lr: [1e-4, 1e-1]}})")
        if "lr" in self.grid:
            for x in self.grid["lr"]:
                if not (isinstance(x, (int, float)) and x > 0 and math.isfinite(x)):
                    raise ValueError(f"learning rate {x!r} must be a positive finite number")

    def grid_dims(self) -> list[tuple[str, tuple[Any, ...]]]:
        return [(k, tuple(v)) for k, v in self.grid.items() if not (self.adaptive and k in self.search_space)]

    def search(self) -> dict[str, tuple[float, float]]:
        return {k: (v[0], v[1]) for k, v in self.search_space.items()} if self.adaptive else {}


#: The search space of ``mutransfer sweep multipliers``: every dimension is searched on a
#: log scale. Per-role LR multipliers (input/embedding, output, vector; the hidden role's
#: LR is the base LR), forward multipliers (input, output, attention), independent weight
#: decay (timescale 1/weight_decay steps: about 30 to 30,000 steps here) and Adam's
#: beta2 and eps; the ranges span what TP-V's Fig. 4/§F sweeps tune (Yang et al. 2022).
MULTIPLIER_SEARCH_SPACE: dict[str, tuple[float, float]] = {
    "lr": (2.0 ** -8, 2.0 ** -3),
    "lr_mult_input": (0.125, 32.0),
    "lr_mult_output": (0.0625, 8.0),
    "lr_mult_vector": (0.125, 16.0),
    "input_mult": (0.125, 32.0),
    "output_mult": (0.0625, 8.0),
    "attn_mult": (0.25, 8.0),
    "weight_decay": (3e-5, 3e-2),
    "beta2": (0.9, 0.999),
    "eps": (1e-12, 1e-6),
}


@dataclass(frozen=True)
class MultiplierSweep(GridSweep):
    """Tune μP's multipliers at the base width: an adaptive (TPE by default) search over
    :data:`MULTIPLIER_SEARCH_SPACE` (or ``search_space``) at ``width``, under ``mup`` with
    independent weight decay unless ``base`` says otherwise. Under μP all of these are
    width-independent, so the best trial's config is the proxy the card transfers
    (``mutransfer transfer --proxy-config OUT/best.yaml``)."""

    kind: ClassVar[str] = "multipliers"
    sampler: str = "tpe"
    """tpe (default), gp or random: the multipliers are searched, not gridded."""
    trials: int | None = 32
    """Trials of the search (default 32)."""
    width: int | None = None
    """The base width to tune at (default: the preset's width); also ``base_width``."""

    def __post_init__(self) -> None:
        if not self.search_space:
            object.__setattr__(self, "search_space", dict(MULTIPLIER_SEARCH_SPACE))
        base = dict(self.base or {})
        if self.width is not None:
            if isinstance(self.width, bool) or not isinstance(self.width, int) or self.width < 1:
                raise ValueError(f"width must be a positive integer, got {self.width!r}")
            for key in ("width", "base_width"):
                if key in base and base[key] != self.width:
                    raise ValueError(f"width {self.width} contradicts base {key}={base[key]}")
                base[key] = self.width
        elif "width" in base:
            base.setdefault("base_width", base["width"])
        base.setdefault("parametrization", "mup")
        base.setdefault("wd_mode", "independent")
        object.__setattr__(self, "base", base)
        super().__post_init__()
        if not self.adaptive:
            raise ValueError("a multipliers sweep searches: sampler must be tpe, gp or random, got 'grid'")
        if self.base["parametrization"] == "sp":
            raise ValueError("parametrization 'sp' has nothing to transfer: tune under mup, completep "
                             "or muon")


#: AdamW weight decay of a scaling sweep unless ``base`` sets one (the common 0.1).
DEFAULT_SCALING_WEIGHT_DECAY = 0.1


@dataclass(frozen=True)
class ScalingSweep(SweepSpec, _LRMixin):
    """Token budget D x batch size B x LR at the base width, plus a check at one wider width.

    What muP does not fix: the LR optimum eta*(B, D), the batch optimum B*(D)
    and the critical batch. Each trial is one (width, batch, seed, lr) and trains the
    largest budget with a WSD schedule; its WSD branches (:func:`mutransfer.train.
    train_wsd_branches`) cool down at every smaller budget, so one trial gives one
    results-table row per budget, each equal to a separate run of that length. The
    runs accumulate ``grad_accum`` (default 2) micro-batches, which gives every row its
    gradient noise scale ``gns`` (B_simple, in sequences).

    The LR grid is ``lrs`` (or the log2 grid) for every batch, or, with ``lr_center``,
    centred per batch on ``lr_center * (B / lr_center_batch) ** lr_batch_exponent`` at
    the offsets ``log2_lr_offsets``: a grid around the optimum that follows it as B grows,
    so fewer points are spent far from it.

    Per trial the warmup is ``warmup_tokens`` (the same tokens at every batch) and the
    held-out set ``eval_sequences`` sequences (the same size at every batch): both enter
    the grid point as ``warmup_steps`` and ``eval_batches``. The weight decay defaults to
    :data:`DEFAULT_SCALING_WEIGHT_DECAY` (not the trainer's 0), so the AdamW timescale
    tau = B/(eta·lambda·D) is measured at the optimum and the card's weight decay can
    follow it. ``weight_decays`` adds a lambda axis at one batch (``tau_batch_size``, the
    base width, that batch's LR grid, every budget through the branches): the fit then
    finds tau* at its optimum instead of at one lambda. Only one batch, so its cost is
    (weight decays other than base's) x LRs x seeds trials, not that times every batch; tau* is
    a timescale of the run, so one batch near B* serves (Wang & Aitchison 2024).
    """

    kind: ClassVar[str] = "scaling"
    # tuple-ized and checked for emptiness by SweepSpec; the grid itself is :meth:`points`
    _dims: ClassVar[tuple[tuple[str, str], ...]] = (
        ("tokens", "tokens"),
        ("batch_sizes", "batch_size"),
        ("check_batch_sizes", "batch_size"),
        ("seeds", "seed"),
        ("lrs", "lr"),
        ("log2_lr_offsets", "lr"),
        ("weight_decays", "weight_decay"),
    )
    width: int | None = None
    """Base width of the sweep (None: the preset's); also muP's ``base_width`` unless
    ``base`` sets one."""
    check_width: int | None = None
    """One wider width, run at ``check_batch_sizes`` with the same LR grid (None: none)."""
    check_batch_sizes: tuple[int, ...] | None = None
    """Batch sizes of the wider-width check (None: the middle of ``batch_sizes``)."""
    tokens: tuple[int, ...] = (32768, 65536, 131072, 262144)
    """Token budgets D (>= 3); the largest is trained, the others are WSD branches."""
    batch_sizes: tuple[int, ...] = (4, 8, 16, 32)
    """Batch sizes B in sequences (>= 3; the issue asks for >= 4 over >= 8x)."""
    seeds: tuple[int, ...] = (0,)
    parametrization: str = "mup"
    lr_center: float | None = None
    """Centre of a per-batch LR grid (the LR at ``lr_center_batch``); None: ``lrs``."""
    lr_center_batch: int | None = None
    """Batch size (sequences) at which ``lr_center`` holds (None: the smallest batch)."""
    lr_batch_exponent: float = 0.5
    """How the grid's centre moves with the batch: the square-root rule by default."""
    log2_lr_offsets: tuple[float, ...] = (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5)
    """Octaves around the centre (with ``lr_center``)."""
    warmup_tokens: int | None = None
    """Linear warmup in tokens, the same at every batch (None: 10% of the smallest budget)."""
    eval_sequences: int = 256
    """Held-out sequences per evaluation, the same at every batch size."""
    weight_decays: tuple[float, ...] | None = None
    """More AdamW weight decays lambda, run at ``tau_batch_size`` only (base width, every
    seed, that batch's LR grid; every budget through the WSD branches): with the sweep's
    own ``base`` weight decay, >= 3 positive values, so the fit finds the timescale
    tau* = B/(eta·lambda·D) at its optimum. None: the one weight decay of ``base``."""
    tau_batch_size: int | None = None
    """The batch (sequences) of the ``weight_decays`` runs (None: the middle batch)."""

    def __post_init__(self) -> None:
        if self.lrs is None and self.lr_center is None:
            object.__setattr__(self, "lrs", _lr_values(self))
        if not _TRUSTED:
            base = dict(self.base or {})
            if self.width is not None:
                base.setdefault("base_width", int(self.width))
            base.setdefault("schedule", "wsd")
            base.setdefault("grad_accum", 2)
            base.setdefault("eval_every", 0)
            base.setdefault("weight_decay", DEFAULT_SCALING_WEIGHT_DECAY)
            if "wsd_branches" not in base and len(set(self.tokens or ())) >= 1:
                base["wsd_branches"] = list(self.fractions())
            object.__setattr__(self, "base", base)
        super().__post_init__()

    # -- derived ------------------------------------------------------------------------
    def seq_len(self) -> int:
        """Tokens per sequence: ``base['seq_len']`` or the preset's context."""
        if "seq_len" in self.base:
            return int(self.base["seq_len"])
        return default_seq_len(self)

    def budgets(self) -> tuple[int, ...]:
        """The token budgets, ascending, without duplicates."""
        return tuple(sorted({int(t) for t in self.tokens}))

    def fractions(self) -> tuple[float, ...]:
        """WSD branch fractions of the largest budget, ascending (the last is 1)."""
        b = self.budgets()
        return tuple(t / b[-1] for t in b)

    def lrs_for(self, batch_size: int) -> tuple[float, ...]:
        """The LR grid at one batch size."""
        if self.lr_center is None:
            return tuple(float(x) for x in self.lrs or ())
        ref = self.lr_center_batch or min(self.batch_sizes)
        c = float(self.lr_center) * (batch_size / ref) ** float(self.lr_batch_exponent)
        # 12 significant digits: one LR reached from two batches is one float (grouping by lr)
        return tuple(float(f"{c * 2.0 ** float(o):.12g}") for o in self.log2_lr_offsets)

    def _width_batches(self) -> list[tuple[int | None, tuple[int, ...]]]:
        batches = tuple(int(b) for b in self.batch_sizes)
        out: list[tuple[int | None, tuple[int, ...]]] = [(self.width, batches)]
        if self.check_width is not None:
            check = self.check_batch_sizes
            if check is None:
                ordered = sorted(set(batches))
                check = (ordered[(len(ordered) - 1) // 2],)
            out.append((int(self.check_width), tuple(int(b) for b in check)))
        return out

    def warmup_steps(self, batch_size: int) -> int:
        tokens = self.warmup_tokens if self.warmup_tokens is not None else round(0.1 * self.budgets()[0])
        return max(0, round(tokens / (batch_size * self.seq_len())))

    # -- enumeration --------------------------------------------------------------------
    def grid_dims(self) -> list[tuple[str, tuple[Any, ...]]]:
        pairs = self._width_batches()
        widths = tuple(w for w, _ in pairs if w is not None)
        batches = tuple(sorted({b for _, bs in pairs for b in bs}))
        dims: list[tuple[str, tuple[Any, ...]]] = []
        if widths:
            dims.append(("width", widths))
        dims += [("batch_size", batches), ("seed", tuple(self.seeds))]
        if not self.adaptive:
            dims.append(("lr", tuple(sorted({lr for b in batches for lr in self.lrs_for(b)}))))
        return dims

    def points(self) -> list[dict[str, Any]]:
        d_max = self.budgets()[-1]
        pts: list[dict[str, Any]] = []
        for width, batches in self._width_batches():
            for b in batches:
                extra = {"tokens": d_max, "warmup_steps": self.warmup_steps(b),
                         "eval_batches": max(1, math.ceil(self.eval_sequences / b)),
                         "parametrization": self.parametrization, **self._accum(b)}
                for seed in self.seeds:
                    head = ({"width": width} if width is not None else {}) | {"batch_size": b, "seed": seed}
                    if self.adaptive:
                        pts.append(head | extra)
                    else:
                        pts += [head | {"lr": lr} | extra for lr in self.lrs_for(b)]
        b = self.tau_batch()  # the weight-decay axis: one batch, the base width
        for lam in self.extra_weight_decays():
            extra = {"tokens": d_max, "warmup_steps": self.warmup_steps(b),
                     "eval_batches": max(1, math.ceil(self.eval_sequences / b)),
                     "parametrization": self.parametrization, "weight_decay": lam, **self._accum(b)}
            for seed in self.seeds:
                head = ({"width": self.width} if self.width is not None else {}) | {"batch_size": b,
                                                                                    "seed": seed}
                if self.adaptive:
                    pts.append(head | extra)
                else:
                    pts += [head | {"lr": lr} | extra for lr in self.lrs_for(b)]
        return pts

    def grad_accum_for(self, batch_size: int) -> int:
        """Micro-batches a batch of ``batch_size`` sequences accumulates: the base's
        ``grad_accum`` where it divides the batch, else the largest number that divides both
        (batch 1: 1, a row without its gradient noise scale). A small batch is where B* sits
        on small proxies, so it is run, not refused for want of a second micro-batch."""
        ga = int(self.base.get("grad_accum", 1))
        return ga if batch_size % ga == 0 else math.gcd(int(batch_size), ga)

    def _accum(self, batch_size: int) -> dict[str, int]:
        """The point's own ``grad_accum`` where it differs from the base's (else nothing, so
        the points of batches the base divides keep their keys)."""
        ga = self.grad_accum_for(batch_size)
        return {} if ga == int(self.base.get("grad_accum", 1)) else {"grad_accum": ga}

    def tau_batch(self) -> int:
        """The batch (sequences) of the ``weight_decays`` runs: ``tau_batch_size`` or the
        middle batch, where B* is most likely to lie (so tau* is measured near it)."""
        if self.tau_batch_size is not None:
            return int(self.tau_batch_size)
        ordered = sorted({int(b) for b in self.batch_sizes})
        return ordered[(len(ordered) - 1) // 2]

    def extra_weight_decays(self) -> tuple[float, ...]:
        """The ``weight_decays`` other than ``base``'s (that one runs at every batch)."""
        lam0 = self.base.get("weight_decay")
        return tuple(float(x) for x in dict.fromkeys(self.weight_decays or ()) if x != lam0)

    def search(self) -> dict[str, tuple[float, float]]:
        if not self.adaptive:
            return {}
        return {"lr": (2.0**self.log2_lr_min, 2.0**self.log2_lr_max)}

    def group_keys(self) -> list[str]:
        return [n for n, _ in self.grid_dims() if n in ("width", "batch_size")]

    # -- validation ---------------------------------------------------------------------
    def _validate(self) -> None:
        if self.parametrization not in PARAMETRIZATIONS:
            raise ValueError(f"unknown parametrization {self.parametrization!r}; "
                             f"choose from {', '.join(PARAMETRIZATIONS)}")
        for name in ("tokens", "batch_sizes", "check_batch_sizes", "seeds"):
            for v in getattr(self, name) or ():
                if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "seeds" else 1):
                    what = "a non-negative" if name == "seeds" else "a positive"
                    raise ValueError(f"{name}: {v!r} must be {what} integer")
        if len(self.budgets()) < 3:
            raise ValueError(f"a scaling sweep needs >= 3 token budgets for the fits, "
                             f"got {list(self.tokens)}")
        if len(set(self.batch_sizes)) < 3:
            raise ValueError(f"a scaling sweep needs >= 3 batch sizes for the fits, "
                             f"got {list(self.batch_sizes)}")
        for name, low in (("width", 1), ("check_width", 1), ("lr_center_batch", 1), ("warmup_tokens", 0)):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < low):
                raise ValueError(f"{name} {v!r} must be an integer >= {low}")
        if self.check_width is not None and self.width is not None and self.check_width <= self.width:
            raise ValueError(f"check_width {self.check_width} must be wider than the base width {self.width}")
        if not isinstance(self.eval_sequences, int) or self.eval_sequences < 1:
            raise ValueError(f"eval_sequences {self.eval_sequences!r} must be a positive integer")
        if self.lr_center is not None:
            self._check_lr_center()
        _check_lrs(self)
        if self.weight_decays is not None or self.tau_batch_size is not None:
            self._check_weight_decays()
        for name in ("tokens", "steps"):
            if name in self.base:
                raise ValueError(f"base must not set {name!r}: the scaling sweep derives it from tokens")
        branches = self.base.get("wsd_branches")
        try:
            same = [float(x) for x in branches] == list(self.fractions())
        except (TypeError, ValueError):
            same = False
        if not same:
            raise ValueError(f"base wsd_branches {branches!r} must be the budgets' fractions "
                             f"{list(self.fractions())} (leave it out: the sweep sets it)")
        if not _TRUSTED:
            self._check_points()

    def _check_weight_decays(self) -> None:
        for x in self.weight_decays or ():
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (0 < x < math.inf):
                raise ValueError(f"weight_decays: {x!r} must be a positive finite number "
                                 "(tau = B/(eta·lambda·D) needs lambda > 0)")
        b = self.tau_batch_size
        if b is not None and b not in self.batch_sizes:
            raise ValueError(f"tau_batch_size {b!r} must be one of batch_sizes {list(self.batch_sizes)}")
        if self.weight_decays is None:
            raise ValueError("tau_batch_size needs weight_decays (the weight decays to run there)")
        lam0 = self.base.get("weight_decay")
        lams = {float(x) for x in self.weight_decays} | ({float(lam0)} if lam0 else set())
        if len(lams) < 3:
            raise ValueError(f"weight_decays {list(self.weight_decays)} with base weight_decay {lam0!r} give "
                             f"{len(lams)} positive value(s); tau* needs at least 3")
        if self.base.get("wd_mode", "coupled") != "coupled":
            raise ValueError(f"weight_decays needs wd_mode coupled (tau = B/(eta·lambda·D)), "
                             f"got {self.base.get('wd_mode')!r}")

    def _check_lr_center(self) -> None:
        if self.lrs is not None:
            raise ValueError("give either lrs (one grid for every batch) or lr_center (a grid per "
                             "batch), not both")
        c = self.lr_center
        if not (isinstance(c, (int, float)) and c > 0 and math.isfinite(c)):
            raise ValueError(f"lr_center {c!r} must be a positive finite number")
        e = self.lr_batch_exponent
        if not (isinstance(e, (int, float)) and math.isfinite(e)):
            raise ValueError(f"lr_batch_exponent {e!r} must be a finite number")
        for o in self.log2_lr_offsets:
            if not (isinstance(o, (int, float)) and math.isfinite(o)):
                raise ValueError(f"log2_lr_offsets: {o!r} must be a finite number")
        for b in self.batch_sizes:
            try:
                grid = self.lrs_for(int(b))
            except OverflowError:
                grid = (math.inf,)
            if not all(0 < x < math.inf for x in grid):
                raise ValueError(f"the LR grid at batch {b} leaves the floats (lr_center {c!r} x (batch / "
                                 f"lr_center_batch)^lr_batch_exponent {e!r} x 2^log2_lr_offsets)")

    def _check_points(self) -> None:
        """Every grid point resolves to a valid TrainConfig and every WSD branch has a
        stable phase: checked before any study exists (one error naming the point)."""
        from mutransfer.models import get_preset

        cfg = get_preset(self.preset)
        if "seq_len" not in self.base and not hasattr(cfg, "seq_len") and self.model is None:
            raise ValueError(f"preset {self.preset!r} has no seq_len; the scaling sweep trains GPTs")
        seq = self.seq_len()
        d_min, d_max = self.budgets()[0], self.budgets()[-1]
        decay = float(self.base.get("decay_fraction", 0.2))
        try:
            from mutransfer.train import TrainConfig
        except ImportError:  # pragma: no cover - sweeps without the trainer
            TrainConfig = None  # type: ignore[assignment,misc]  # noqa: N806
        seen: set[tuple[Any, ...]] = set()
        for p in self.points():
            b = int(p["batch_size"])
            if d_min < b * seq:
                raise ValueError(f"token budget {d_min} is below one batch of {b} x {seq} = {b * seq} tokens")
            steps = round(d_max / (b * seq))
            warm = int(p["warmup_steps"])
            for f, d in zip(self.fractions(), self.budgets()):
                length = max(1, round(f * steps))
                start = length - round(decay * length)
                if warm >= start:
                    raise ValueError(
                        f"token budget {d} at batch {b} is {length} steps: warmup {warm} + cooldown "
                        f"{length - start} leave no stable phase; lower warmup_tokens or raise the budget")
            key = (p.get("width"), b)
            if TrainConfig is None or key in seen:
                continue
            seen.add(key)
            over = {"preset": self.preset, **_source(self), **{k: v for k, v in self.base.items()
                                              if k not in PSEUDO_FIELDS}, **p, "steps": steps}
            over.pop("tokens", None)
            over.setdefault("lr", 1e-3)
            try:
                TrainConfig.from_overrides(None, over)
            except ValueError as exc:
                raise ValueError(f"grid point width={p.get('width')} batch_size={b}: {exc}") from None


def _check_lrs(spec: Any) -> None:
    for x in spec.lrs or ():
        if not (isinstance(x, (int, float)) and x > 0 and math.isfinite(x)):
            raise ValueError(f"learning rate {x!r} must be a positive finite number")
    if spec.adaptive and not spec.log2_lr_min < spec.log2_lr_max:
        raise ValueError(f"log2 LR range is empty: min {spec.log2_lr_min} >= max {spec.log2_lr_max}")


def _default_bases(spec: Any) -> None:
    """muP needs a fixed base shape across the ladder: base_width = the smallest width
    (and base_depth = the smallest depth) unless ``base`` says otherwise. Without it the
    trainer uses each trial's own width as its base, and muP degenerates to SP."""
    base = dict(spec.base or {})
    if getattr(spec, "widths", None) and "base_width" not in base:
        base["base_width"] = min(int(w) for w in spec.widths)
    if getattr(spec, "depths", None) and "base_depth" not in base:
        base["base_depth"] = min(int(d) for d in spec.depths)
    object.__setattr__(spec, "base", base)


KINDS: dict[str, type[SweepSpec]] = {"lr": LRSweep, "batch": BatchSweep, "scaling": ScalingSweep,
                                     "run": GridSweep, "multipliers": MultiplierSweep}


def spec_from_dict(data: Mapping[str, Any], kind: str | None = None) -> SweepSpec:
    """Build a spec from a plain mapping (``kind`` key or argument); unknown keys -> ValueError."""
    data = dict(data)
    k = data.pop("kind", None) or kind
    if kind is not None and k != kind:
        raise ValueError(f"spec kind {k!r} does not match the command {kind!r}")
    if k not in KINDS:
        raise ValueError(f"unknown sweep kind {k!r}; choose from {', '.join(KINDS)}")
    cls = KINDS[k]
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown field(s) in {k} sweep spec: {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(names))})")
    data = {name: _field_value(cls, k, name, v) for name, v in data.items()}
    try:
        return cls(**data)
    except TypeError as exc:  # wrong value types that slipped past validation
        raise ValueError(f"bad {k} sweep spec: {exc}") from None
    except OverflowError:  # an LR grid beyond floats: the log2 fields are bounded, the product may not be
        raise ValueError(f"{k} sweep spec: the LR grid overflows (lr_center x (batch / lr_center_batch) "
                         "^ lr_batch_exponent x 2^offset); check those fields") from None


#: log2 LR fields lie in [-LOG2_LR_LIMIT, LOG2_LR_LIMIT]: 2^64 is no learning rate, and 2^2000
#: is beyond a float.
LOG2_LR_LIMIT = 64.0


def _field_value(cls: type, kind: str, name: str, value: Any) -> Any:
    """Check one spec field against its declared type before the spec is built, so a bad
    value is named by its field (``log2_lr_min: abc``, ``base: abc``), used or not. Numbers
    written as text (YAML 1.1 reads ``1e6`` as a string) become numbers."""
    tp = typing.get_type_hints(cls).get(name)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        if value is None:
            return None
        tp = args[0]
    where = f"{kind} sweep spec field {name!r}"
    origin = typing.get_origin(tp)
    if tp in (int, float):
        value = _number(value, tp, where)
        if name.startswith("log2_lr") and name != "log2_lr_step" and abs(value) > LOG2_LR_LIMIT:
            raise ValueError(f"{where}: {value!r} is outside [-{LOG2_LR_LIMIT:g}, {LOG2_LR_LIMIT:g}]")
        return value
    if origin is tuple and typing.get_args(tp)[:1] and typing.get_args(tp)[0] in (int, float):
        inner = typing.get_args(tp)[0]
        items = _as_tuple(name, value) or ()
        out = tuple(_number(v, inner, f"{where} item") for v in items)
        if name == "log2_lr_offsets" and any(abs(o) > LOG2_LR_LIMIT for o in out):
            raise ValueError(f"{where}: {list(out)!r} must lie in [-{LOG2_LR_LIMIT:g}, {LOG2_LR_LIMIT:g}]")
        return out
    if tp is str and not isinstance(value, str):
        raise ValueError(f"{where}: {value!r} is not a string")
    if origin in (Mapping, dict) or tp in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: {value!r} is not a mapping of KEY: VALUE")
    return value


def _number(value: Any, tp: type, where: str) -> Any:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"{where}: {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: {value!r} is not a number")
    if not math.isfinite(value):
        raise ValueError(f"{where}: {value!r} must be finite")
    if tp is int:
        if value != int(value):
            raise ValueError(f"{where}: {value!r} is not an integer")
        return int(value)
    return value


def load_spec(path: str | Path, kind: str | None = None) -> SweepSpec:
    """Load a spec from YAML (``yaml.safe_load``; JSON is YAML too)."""
    from mutransfer._io import read_yaml_mapping

    return spec_from_dict(read_yaml_mapping(path, "spec file"), kind)


# ---- config resolution: spec + grid point -> TrainConfig overrides ---------------------------

_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def resolve_config(spec: SweepSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """TrainConfig overrides of one trial: preset + spec.base + the trial's parameters.

    The pseudo-field ``tokens`` becomes ``steps = round(tokens / (batch_size * seq_len))``.
    """
    cfg: dict[str, Any] = {"preset": spec.preset, **_source(spec), **dict(spec.base), **dict(params)}
    tokens = cfg.pop("tokens", None)
    if tokens is not None:
        bs = cfg.get("batch_size") or _train_default("batch_size", 32)
        seq = cfg.get("seq_len") or default_seq_len(spec)
        steps = round(int(tokens) / (int(bs) * int(seq)))
        if steps < 1:
            raise ValueError(f"token budget {tokens} is below one step of {bs} x {seq} tokens")
        cfg["steps"] = steps
    return cfg


def train_config(spec: SweepSpec, point: Mapping[str, Any]) -> Any:
    """The :class:`mutransfer.train.TrainConfig` of a grid point (adaptive dimensions such
    as a searched lr take their lower bound, else the base value)."""
    params = {**{k: lo for k, (lo, _) in spec.search().items()}, **dict(point)}
    cfg = resolve_config(spec, params)
    cfg.pop("wsd_branches", None)  # the runner's pseudo-field (one row per branch), not the trainer's
    return to_train_config(cfg)


def to_train_config(config: Mapping[str, Any]) -> Any:
    """``TrainConfig.from_flat(config)``, resolved once per process for equal configs.

    One fused trial's config is needed by the claim (its fusion key, K), by its
    provenance attrs and by the runner; TrainConfig is frozen, so all of them share one
    resolution. Keys are sorted (the order of overrides does not matter) and hold each
    value's type (``1`` and ``True`` are equal and hash alike but are not the same
    override); a config with unhashable values is not cached."""
    items = tuple(sorted((k, type(v), v) for k, v in config.items()))
    try:
        hash(items)
    except TypeError:
        from mutransfer.config import TrainConfig

        return TrainConfig.from_flat(config)
    return _to_train_config(items)


@functools.lru_cache(maxsize=1024)
def _to_train_config(items: tuple[tuple[str, type, Any], ...]) -> Any:
    from mutransfer.config import TrainConfig

    return TrainConfig.from_flat({k: v for k, _, v in items})


def check_trials(spec: SweepSpec) -> int:
    """Resolve the whole trial config of every grid point (and both ends of a searched
    range) and validate it as the trainer will, before any study exists; returns the
    number of points. The first bad point -> ValueError naming it and its bad value."""
    dims = {n for n, _ in spec.grid_dims()} | set(spec.search())
    if not dims:
        raise ValueError("empty grid: the sweep has no dimension (give grid: {field: [values]})")
    both = sorted(dims & set(spec.base) - {"base_width", "base_depth"})
    if "tokens" in dims and "steps" in spec.base:  # a token budget sets the steps
        both.append("steps (from tokens)")
    if both:
        raise ValueError(f"{', '.join(both)} is set in base and is also a sweep dimension; "
                         "set it in one place")
    device = spec.base.get("device")
    if device is not None and not (isinstance(device, str) and _DEVICE.fullmatch(device)):
        raise ValueError(f"device must be auto, cpu, cuda[:N] or mps, got {device!r}")
    ends = [dict(zip(spec.search(), combo)) for combo in itertools.product(*spec.search().values())]
    points = spec.points()
    for point in points:
        for end in ends or [{}]:
            try:
                train_config(spec, {**point, **end})
            except ValueError as exc:
                where = ", ".join(f"{k}={v}" for k, v in {**point, **end}.items()) or "the base config"
                raise ValueError(f"trial {where}: {exc}") from None
    return len(points)


def _train_default(name: str, fallback: Any) -> Any:
    """The default of the TrainConfig field with flat name ``name`` (``fallback`` without
    the trainer or for an unknown name)."""
    try:
        from mutransfer.config import ALIASES, SECTIONS  # type: ignore[import-not-found]
    except ImportError:
        return fallback
    if name not in ALIASES:
        return fallback
    sec, fname = ALIASES[name]
    for f in dataclasses.fields(SECTIONS[sec]):  # type: ignore[arg-type]
        if f.name == fname and f.default is not dataclasses.MISSING:
            return f.default
    return fallback


def _source(spec: SweepSpec) -> dict[str, Any]:
    """The trials' ``source`` config field: the spec's model, if not a preset."""
    model = getattr(spec, "model", None)
    return {"source": model} if model is not None else {}


def default_seq_len(spec: SweepSpec) -> int:
    """The trials' context when ``base`` sets none: the preset's, or the trainer's for the
    spec's model (the preset's capped at an hf: config's own context)."""
    if getattr(spec, "model", None) is None:
        return int(preset_attr(spec.preset, "seq_len", 64))
    from mutransfer.config import ModelSection

    section = ModelSection(preset=spec.preset, source=spec.model, head_rule=spec.base.get("head_rule"))
    return section.shape().seq_len


def preset_attr(preset: str, name: str, fallback: Any) -> Any:
    try:
        from mutransfer.models import get_preset

        return getattr(get_preset(preset), name, fallback)
    except Exception:
        return fallback
