"""The ``scaling`` sweep spec (:class:`ScalingSweep`): token budget D (WSD branches: one run,
several budgets) x batch size B x an LR grid around the optimum at the base width, plus a
check at one wider width, every run logging its gradient noise scale: eta*(B, D), B*(D),
B_crit, and optionally a weight-decay axis for the AdamW timescale tau*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from sweeps.spec_base import (
    PARAMETRIZATIONS,
    PSEUDO_FIELDS,
    LRMixin,
    SweepSpec,
    check_lrs,
    default_seq_len,
    is_trusted,
    lr_values,
    model_fields,
)

#: AdamW weight decay of a scaling sweep unless ``base`` sets one (the common 0.1).
DEFAULT_SCALING_WEIGHT_DECAY = 0.1


@dataclass(frozen=True)
class ScalingSweep(SweepSpec, LRMixin):
    """Token budget D x batch size B x LR at the base width, plus a check at one wider width.

    What muP does not fix: the LR optimum eta*(B, D), the batch optimum B*(D)
    and the critical batch. Each trial is one (width, batch, seed, lr) and trains the
    largest budget with a WSD schedule; its WSD branches (:func:`mutransfer.training.train.
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
    the grid point as ``warmup_steps`` and ``eval_sequences``. The weight decay defaults to
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
            object.__setattr__(self, "lrs", lr_values(self))
        if not is_trusted():
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
                         "eval_sequences": self.eval_sequences,
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
                     "eval_sequences": self.eval_sequences,
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
        check_lrs(self)
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
        if not is_trusted():
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
        from mutransfer.models.presets import get_preset  # lazy: torch; sweeps.spec loads none

        cfg = get_preset(self.preset)
        if "seq_len" not in self.base and not hasattr(cfg, "seq_len") and self.model is None:
            raise ValueError(f"preset {self.preset!r} has no seq_len; the scaling sweep trains GPTs")
        seq = self.seq_len()
        d_min, d_max = self.budgets()[0], self.budgets()[-1]
        decay = float(self.base.get("decay_fraction", 0.2))
        from mutransfer.training.config import TrainConfig  # lazy: torch; sweeps.spec loads none
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
            if key in seen:
                continue
            seen.add(key)
            over = {**model_fields(self), **{k: v for k, v in self.base.items()
                                              if k not in PSEUDO_FIELDS}, **p, "steps": steps}
            over.pop("tokens", None)
            over.setdefault("lr", 1e-3)
            try:
                TrainConfig.from_overrides(None, over)
            except ValueError as exc:
                raise ValueError(f"grid point width={p.get('width')} batch_size={b}: {exc}") from None


