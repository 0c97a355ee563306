"""The shared part of every sweep spec: :class:`SweepSpec` (fields, validation, grid
enumeration, serialisation) and the vocabulary its kinds use.

A spec never touches Optuna; :meth:`SweepSpec.points` gives the deterministic, ordered
list of grid points (dicts of TrainConfig field -> value) and :meth:`SweepSpec.search`
the continuous (adaptive) dimensions, if any. The kinds live in :mod:`sweeps.spec_kinds`
and :mod:`sweeps.spec_scaling`; reading a spec from YAML in :mod:`sweeps.spec`.

The TrainConfig-, preset- and model-builder imports below are inside functions: they
import torch, and reading or checking a spec read back from a study must not pay for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mutransfer._io import plain

PARAMETRIZATIONS: tuple[str, ...] = ("sp", "mup", "completep", "muon")
SAMPLERS: tuple[str, ...] = ("grid", "tpe", "gp", "random")
PRUNERS: tuple[str, ...] = ("divergence", "median", "hyperband")

# Pseudo-fields a sweep may set: ``tokens`` becomes ``steps`` = tokens / (batch_size * seq_len);
# ``wsd_branches`` (fractions of the steps) makes the runner train WSD branches, one row each.
PSEUDO_FIELDS: frozenset[str] = frozenset({"tokens", "wsd_branches"})


def train_config_fields() -> frozenset[str]:
    """Names a sweep may set: TrainConfig's flat field names (:data:`mutransfer.training.config.ALIASES`,
    built from its section dataclasses)."""
    from mutransfer.training.config import ALIASES  # lazy: torch; sweeps.spec loads none

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


def is_trusted() -> bool:
    """Inside :func:`trusted`: the spec was checked when its study was made."""
    return _TRUSTED


def as_tuple(value: Any) -> tuple[Any, ...] | None:
    """A grid dimension's values as a tuple (one value -> a 1-tuple; None stays None)."""
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
    """Model preset of every trial (``mutransfer.models.presets.PRESETS``)."""
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
            from mutransfer.models.source import parse_model  # lazy: torch; sweeps.spec loads none

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
            object.__setattr__(self, fname, as_tuple(getattr(self, fname)))
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; choose from {', '.join(SAMPLERS)}")
        if self.pruner not in PRUNERS:
            raise ValueError(f"unknown pruner {self.pruner!r}; choose from {', '.join(PRUNERS)}")
        for name in ("trials", "sampler_seed"):
            v = getattr(self, name)
            if (v is not None or name == "sampler_seed") and (
                    isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "trials" else 0)):
                raise ValueError(f"{name} must be an integer >= {1 if name == 'trials' else 0}, got {v!r}")
        bad = [] if _TRUSTED else sorted(set(self.base) - (train_config_fields() | PSEUDO_FIELDS))
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
            width = self.base.get("width") or preset_attr(self.preset, "width", None)
            if self.model is not None and width is not None:  # one width (scaling, multipliers): probe it
                self._probe_builder([int(width)])
            return
        if self.model is not None:  # the config checks an hf: model at each width
            from mutransfer.training.model_section import ModelSection  # lazy: torch; sweeps.spec loads none

            for w in sorted(widths):
                try:
                    ModelSection(preset=self.preset, source=self.model, head_rule=self.base.get("head_rule"),
                                 width=w)
                except ValueError as exc:
                    raise ValueError(f"width {w} does not fit model {self.model}: {exc}") from None
            self._probe_builder(sorted(widths))
            return
        from mutransfer.models.presets import get_preset  # lazy: torch; sweeps.spec loads none

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
        from mutransfer.models.source import build_model, parse_model  # lazy: torch; sweeps.spec loads none

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



def lr_values(spec: Any) -> tuple[float, ...]:
    """The LR grid of an :class:`LRMixin` spec: its ``lrs``, else its log2 grid."""
    if spec.lrs is not None:
        return tuple(float(x) for x in spec.lrs)
    return log2_grid(spec.log2_lr_min, spec.log2_lr_max, spec.log2_lr_step)


@dataclass(frozen=True)
class LRMixin:
    """The LR fields of the kinds that grid or search the learning rate."""

    lrs: tuple[float, ...] | None = None
    """Explicit learning rates; default the log2 grid below."""
    log2_lr_min: float = -14.0
    log2_lr_max: float = -3.0
    log2_lr_step: float = 1.0


def check_lrs(spec: Any) -> None:
    """Every LR of the grid is a positive finite number; an adaptive search has a range."""
    for x in spec.lrs or ():
        if not (isinstance(x, (int, float)) and x > 0 and math.isfinite(x)):
            raise ValueError(f"learning rate {x!r} must be a positive finite number")
    if spec.adaptive and not spec.log2_lr_min < spec.log2_lr_max:
        raise ValueError(f"log2 LR range is empty: min {spec.log2_lr_min} >= max {spec.log2_lr_max}")


def default_bases(spec: Any) -> None:
    """muP needs a fixed base shape across the ladder: base_width = the smallest width
    (and base_depth = the smallest depth) unless ``base`` says otherwise. Without it the
    trainer uses each trial's own width as its base, and muP degenerates to SP."""
    base = dict(spec.base or {})
    if getattr(spec, "widths", None) and "base_width" not in base:
        base["base_width"] = min(int(w) for w in spec.widths)
    if getattr(spec, "depths", None) and "base_depth" not in base:
        base["base_depth"] = min(int(d) for d in spec.depths)
    object.__setattr__(spec, "base", base)


def model_fields(spec: SweepSpec) -> dict[str, Any]:
    """The trials' model config fields: ``preset`` for a built-in model; ``source`` (the
    model: ``hf:`` config or ``module:function``) for any other, with ``preset`` only where
    the spec names one other than the default (it then sets the context default). A
    default preset beside a source would read as the model trained (it is not: the
    trainer's rows drop it too), and the TrainConfig is the same without it."""
    if spec.model is None:
        return {"preset": spec.preset}
    default = SweepSpec.__dataclass_fields__["preset"].default
    return {"source": spec.model, **({"preset": spec.preset} if spec.preset != default else {})}


def default_seq_len(spec: SweepSpec) -> int:
    """The trials' context when ``base`` sets none: the preset's, or the trainer's for the
    spec's model (the preset's capped at an hf: config's own context)."""
    if spec.model is None:
        return int(preset_attr(spec.preset, "seq_len", 64))
    from mutransfer.training.model_section import ModelSection  # lazy: torch; sweeps.spec loads none

    section = ModelSection(preset=spec.preset, source=spec.model, head_rule=spec.base.get("head_rule"))
    return section.shape().seq_len


def preset_attr(preset: str, name: str, fallback: Any) -> Any:
    """Attribute ``name`` of preset ``preset``'s model config; ``fallback`` when the preset
    has no such attribute (an MLP has no ``seq_len``) or no such preset exists (the trial's
    config then names the unknown preset)."""
    from mutransfer.models.presets import get_preset  # lazy: torch; sweeps.spec loads none

    try:
        cfg = get_preset(preset)
    except ValueError:  # an unknown preset
        return fallback
    return getattr(cfg, name, fallback)
