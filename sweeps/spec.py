"""Sweep specs: frozen dataclasses (also loadable from YAML) that enumerate grid points.

Three kinds:

* ``lr`` (:class:`LRSweep`): log2 learning-rate grid (default 2^-14 ... 2^-3 in steps of 1)
  or an adaptive TPE/GP search over the same range, x widths (x depths) x
  parametrizations x seeds. The muTransfer check and proxy tuning.
* ``batch`` (:class:`BatchSweep`): learning rate x batch size x widths and/or token
  budgets, for eta*(N, D), B*(D) and B_crit.
* ``run`` (:class:`GridSweep`): any TrainConfig field (or multiplier) as a dimension.

A spec never touches Optuna; :meth:`SweepSpec.points` gives the deterministic, ordered
list of grid points (dicts of TrainConfig field -> value) and :meth:`SweepSpec.search`
the continuous (adaptive) dimensions, if any.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

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
# Pseudo-fields a sweep may set: ``tokens`` becomes ``steps`` = tokens / (batch_size * seq_len).
PSEUDO_FIELDS: frozenset[str] = frozenset({"tokens"})


def train_config_fields() -> frozenset[str]:
    """Names a sweep may set: the real TrainConfig's fields if it imports, else the contract's."""
    try:
        from mutransfer.train import TrainConfig  # type: ignore[import-not-found]
    except ImportError:
        return CONTRACT_FIELDS
    return frozenset(f.name for f in dataclasses.fields(TrainConfig))


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
            d[f.name] = _plain(getattr(self, f.name))
        return d


def _plain(v: Any) -> Any:
    """Tuples -> lists, mappings -> dicts, recursively (what JSON and YAML give back)."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


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


KINDS: dict[str, type[SweepSpec]] = {"lr": LRSweep, "batch": BatchSweep, "run": GridSweep}


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
    try:
        return cls(**data)
    except TypeError as exc:  # wrong value types that slipped past validation
        raise ValueError(f"bad {k} sweep spec: {exc}") from None


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
    cfg: dict[str, Any] = {"preset": spec.preset, **dict(spec.base), **dict(params)}
    tokens = cfg.pop("tokens", None)
    if tokens is not None:
        bs = cfg.get("batch_size") or _train_default("batch_size", 32)
        seq = cfg.get("seq_len") or preset_attr(spec.preset, "seq_len", 64)
        steps = round(int(tokens) / (int(bs) * int(seq)))
        if steps < 1:
            raise ValueError(f"token budget {tokens} is below one step of {bs} x {seq} tokens")
        cfg["steps"] = steps
    return cfg


def train_config(spec: SweepSpec, point: Mapping[str, Any]) -> Any:
    """The :class:`mutransfer.train.TrainConfig` of a grid point (adaptive dimensions such
    as a searched lr take their lower bound, else the base value)."""
    from mutransfer.train import TrainConfig

    params = {**{k: lo for k, (lo, _) in spec.search().items()}, **dict(point)}
    return TrainConfig.from_overrides(None, resolve_config(spec, params))


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
    try:
        from mutransfer.train import TrainConfig  # type: ignore[import-not-found]

        for f in dataclasses.fields(TrainConfig):
            if f.name == name and f.default is not dataclasses.MISSING:
                return f.default
    except ImportError:
        pass
    return fallback


def preset_attr(preset: str, name: str, fallback: Any) -> Any:
    try:
        from mutransfer.models import get_preset

        return getattr(get_preset(preset), name, fallback)
    except Exception:
        return fallback
