"""The grid kinds of sweep spec: ``lr`` (:class:`LRSweep`), ``batch`` (:class:`BatchSweep`),
``run`` (:class:`GridSweep`) and ``multipliers`` (:class:`MultiplierSweep`).

* ``lr``: log2 learning-rate grid (default 2^-14 ... 2^-3 in steps of 1) or an adaptive
  TPE/GP search over the same range, x widths (x depths) x parametrizations x seeds. The
  muTransfer check and proxy tuning.
* ``batch``: learning rate x batch size x widths and/or token budgets, for eta*(N, D),
  B*(D) and B_crit.
* ``run``: any TrainConfig field (or multiplier) as a dimension.
* ``multipliers``: an adaptive search over μP's multipliers at the base width.

The ``scaling`` kind is :mod:`sweeps.spec_scaling`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sweeps.spec_base import (
    PARAMETRIZATIONS,
    PSEUDO_FIELDS,
    LRMixin,
    SweepSpec,
    as_tuple,
    check_lrs,
    default_bases,
    is_trusted,
    lr_values,
    train_config_fields,
)


@dataclass(frozen=True)
class LRSweep(SweepSpec, LRMixin):
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
            object.__setattr__(self, "lrs", lr_values(self))
        if not is_trusted():
            default_bases(self)
        super().__post_init__()

    def _validate(self) -> None:
        for p in self.parametrizations or ():
            if p not in PARAMETRIZATIONS:
                raise ValueError(f"unknown parametrization {p!r}; choose from {', '.join(PARAMETRIZATIONS)}")
        check_lrs(self)

    def search(self) -> dict[str, tuple[float, float]]:
        if not self.adaptive:
            return {}
        return {"lr": (2.0**self.log2_lr_min, 2.0**self.log2_lr_max)}


@dataclass(frozen=True)
class BatchSweep(SweepSpec, LRMixin):
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
            object.__setattr__(self, "lrs", lr_values(self))
        if not is_trusted():
            default_bases(self)
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
        check_lrs(self)

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
        grid = {k: tuple(as_tuple(v) or ()) for k, v in (self.grid or {}).items()}
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "search_space",
                           {k: tuple(float(x) for x in v) for k, v in (self.search_space or {}).items()})
        super().__post_init__()

    def _validate(self) -> None:
        dims = set(self.grid) | set(self.search_space)
        bad = [] if is_trusted() else sorted(dims - (train_config_fields() | PSEUDO_FIELDS))
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


