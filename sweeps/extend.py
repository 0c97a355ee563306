"""Extend a grid sweep until its optima are bracketed: an optimum at the edge of its grid is
only a bound, so the grid grows past that edge, one point at a time, until it is not.

After the grid is run, the analysis layer's own edge flags say which optima sit at an edge
(:meth:`analysis.ScalingLawFit.bracketing` for the ``scaling`` sweep: the best batch of each
budget and the best LR of each (batch, budget) cell; :class:`analysis.OptimumFit` for the
``lr`` sweep: the best LR of each width/depth/parametrization group). Each edge gets one
more grid point beyond it, at the grid's own log spacing there (a new batch brings its own
LR grid, as the spec makes it for any batch; a new LR is run at every seed of its batch or
group). The points are enqueued in the same study, with trial user attrs
:data:`~sweeps.attrs.EXTENDED_AXIS` and :data:`~sweeps.attrs.EXTENDED_ROUND`, run by the
same workers (any ``--workers``, any storage), and the table is checked again, until every
optimum is bracketed or a bound stops it (:class:`Bounds`: rounds per axis, a batch range,
a log2 LR range; a point already tried, e.g. one that diverged; a batch the spec refuses).

The study is the only record: re-running the same command finds the points it added
(every state counts as tried), so it repeats no work and resumes an interrupted extension.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analysis.optimum import OptimumFit
from analysis.scaling_fit import ScalingLawFit
from sweeps import attrs
from sweeps.holdout import fit_rows
from sweeps.resolve import train_config
from sweeps.results import results_table
from sweeps.spec_base import SweepSpec, point_key
from sweeps.spec_kinds import LRSweep
from sweeps.spec_scaling import ScalingSweep
from sweeps.study import SweepResult, run_sweep
from sweeps.worker import open_study

if TYPE_CHECKING:
    import pandas as pd

    from sweeps.lifecycle import SweepStudy

AXES: tuple[str, ...] = ("batch", "lr")
_ROUND = "__extended_round"  # a planned point's round, carried until it is enqueued
#: Rounds per axis by default: up to 3 grid points past each original edge (8x in batch at
#: a factor-2 grid).
DEFAULT_MAX_EXTEND = 3


@dataclass(frozen=True)
class Bounds:
    """How far an extension may go."""

    max_extend: int = DEFAULT_MAX_EXTEND
    """Rounds per grid: points added past the original edges of one batch grid, or of one
    LR grid (one per batch of a scaling sweep, one per group of an LR sweep); 0: never."""
    batch_range: tuple[int, int] | None = None
    """Batch sizes in sequences an added batch must lie in (None: 1 and up, as the spec's
    budgets, warmup and grad_accum allow)."""
    log2_lr_range: tuple[float, float] | None = None
    """log2 of the learning rates an added LR must lie in (None: any)."""

    def __post_init__(self) -> None:
        m = self.max_extend
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise ValueError(f"max_extend must be an integer >= 0, got {m!r}")
        if self.batch_range is not None:
            lo, hi = self.batch_range
            if any(isinstance(v, bool) or not isinstance(v, int) for v in (lo, hi)) or not 1 <= lo <= hi:
                raise ValueError(f"batch range {lo},{hi} must be integers with 1 <= LO <= HI")
        if self.log2_lr_range is not None:
            lo, hi = (float(v) for v in self.log2_lr_range)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f"log2 LR range {lo}:{hi} must be finite with LO <= HI")


@dataclass
class Bracketing:
    """Where the sweep stands: per budget (scaling) or per group (lr), is each optimum
    bracketed; what was added, and why an edge was not extended."""

    kind: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    """``scaling``: the fit's ``bracketing`` rows (:meth:`analysis.ScalingLawFit.to_dict`);
    ``lr``: ``{"group", "lr": {"bracketed", "edge", "opt"}}``."""
    rounds: dict[str, int] = field(default_factory=dict)
    """Per axis, the most points an extension added to one of its grids (every run)."""
    max_extend: int = DEFAULT_MAX_EXTEND
    extended_trials: int = 0
    """Trials in the study that an extension added (every run)."""
    added: int = 0
    """Of those, added by this run."""
    stopped: list[str] = field(default_factory=list)
    """Why an edge was left as it is (a bound, a diverged neighbour, a refused batch)."""
    error: str | None = None
    """Why the optima could not be located (then nothing was extended)."""

    @property
    def bracketed(self) -> dict[str, bool]:
        axes = ("batch", "lr") if self.kind == "scaling" else ("lr",)
        ok = self.error is None and bool(self.rows)
        return {a: ok and all(bool(r[a]["bracketed"]) for r in self.rows) for a in axes}

    def to_dict(self) -> dict[str, Any]:
        key = "budgets" if self.kind == "scaling" else "groups"
        return {key: self.rows, "bracketed": self.bracketed, "rounds": dict(self.rounds),
                "max_extend": self.max_extend, "extended_trials": self.extended_trials,
                "added": self.added, "stopped": list(self.stopped), "error": self.error}

    def lines(self) -> list[str]:
        """Readable report: one line per budget or group."""
        head = (f"bracketing: {self.extended_trials} trial(s) added past the grid's edges "
                f"({', '.join(f'{a} {n}/{self.max_extend} rounds' for a, n in self.rounds.items())})")
        out = [head]
        if self.error:
            return [*out, f"  not located: {self.error}"]
        for r in self.rows:
            if self.kind == "scaling":
                b, lr = r["batch"], r["lr"]
                bs = "bracketed" if b["bracketed"] else f"NOT bracketed ({b['edge']} edge)"
                ls = ("bracketed" if lr["bracketed"] else
                      f"NOT bracketed at {lr['edge_cells']} batch(es)")
                out.append(f"  tokens {r['tokens']:.6g}: B* = {b['opt']:.4g} tokens {bs}; LR* {ls}")
            else:
                g = ", ".join(f"{k}={v}" for k, v in r["group"].items()) or "all"
                lr = r["lr"]
                s = "bracketed" if lr["bracketed"] else f"NOT bracketed ({lr['edge']} edge)"
                out.append(f"  {g}: LR* = {lr['opt']:.4g} {s}")
        out += [f"  stopped: {s}" for s in self.stopped]
        return out


def extendable(spec: SweepSpec) -> bool:
    """Grid ``scaling`` and ``lr`` sweeps extend; adaptive searches have no grid edge."""
    return isinstance(spec, (ScalingSweep, LRSweep)) and not spec.adaptive


# ------------------------------------------------------------------ what the study holds
@dataclass
class _Tried:
    """Every point in the study (any state), and those an extension added."""

    points: list[dict[str, Any]]
    keys: set[str]
    extended: list[tuple[str, dict[str, Any]]]

    def rounds(self, axis: str, on: list[dict[str, Any]]) -> int:
        """Points an extension added to one grid (``on``: the grid's points)."""
        col = "batch_size" if axis == "batch" else "lr"
        keys = {point_key(p) for p in on}
        return len({p[col] for a, p in self.extended if a == axis and point_key(p) in keys})


def _tried(study: SweepStudy) -> _Tried:
    pts, keys, ext = [], set(), []
    for t in study.get_trials(deepcopy=False):
        p = t.user_attrs.get(attrs.POINT)
        if isinstance(p, Mapping):
            pts.append(dict(p))
            if t.user_attrs.get(attrs.EXTENDED_AXIS) in AXES:
                ext.append((t.user_attrs[attrs.EXTENDED_AXIS], dict(p)))
        k = t.user_attrs.get(attrs.POINT_KEY)
        if k is not None:
            keys.add(k)
    return _Tried(pts, keys, ext)


def _beyond(grid: Iterable[float], edge_value: float, side: str) -> tuple[float | None, float | None]:
    """``(tried, step)``: the grid value already past ``edge_value`` on ``side`` (None if none),
    and the grid's ratio at that edge (None with fewer than 2 values)."""
    g = sorted({float(v) for v in grid})
    past = [v for v in g if (v < edge_value * (1 - 1e-9) if side == "low" else v > edge_value * (1 + 1e-9))]
    if past:
        return (max(past) if side == "low" else min(past)), None
    if len(g) < 2:
        return None, None
    return None, (g[1] / g[0] if side == "low" else g[-1] / g[-2])


# ------------------------------------------------------------------ scaling sweep
def _finished(table: pd.DataFrame) -> pd.DataFrame:
    if "state" in table.columns:
        table = table[table["state"] == "COMPLETE"]
    return table


def _scaling_plan(spec: ScalingSweep, table: pd.DataFrame, tried: _Tried, bounds: Bounds,
                  rep: Bracketing) -> list[tuple[str, dict[str, Any]]]:
    try:
        fit = ScalingLawFit(n_boot=0).fit(fit_rows(_finished(table), spec))
    except ValueError as exc:
        rep.error = str(exc)
        return []
    doc = fit.to_dict()
    rep.rows = doc["bracketing"]
    seq = spec.seq_len()
    base = [p for p in tried.points if p.get("width") == spec.width]
    new: list[tuple[str, dict[str, Any]]] = []
    # the batch axis: one batch past each edge where B* is only a bound
    sides = sorted({r["batch"]["edge"] for r in rep.rows if r["batch"]["edge"]})
    for side in sides:
        edge_b = [r["batch"]["opt"] / seq for r in rep.rows if r["batch"]["edge"] == side]
        e = min(edge_b) if side == "low" else max(edge_b)
        new += [("batch", p) for p in _next_batch(spec, base, e, side, tried, bounds, rep)]
    # the LR axis: one LR past each edge of each (batch, budget) cell
    cells = fit.cells_[fit.cells_["edge"] != ""]
    done: set[tuple[int, str]] = set()
    for c in cells.to_dict("records"):
        b = int(round(c["batch_tokens"] / seq))
        if (b, c["edge"]) in done:
            continue
        done.add((b, c["edge"]))
        at = [p for p in base if int(p["batch_size"]) == b]
        where = f"batch {b} (tokens {c['tokens']:.6g})"
        nxt = _next_lr(spec, at, float(c["lr_opt"]), c["edge"], where, tried, bounds, rep)
        new += [("lr", p) for p in nxt]
    return new


def _next_batch(spec: ScalingSweep, base: list[dict[str, Any]], e: float, side: str, tried: _Tried,
                bounds: Bounds, rep: Bracketing) -> list[dict[str, Any]]:
    what = f"the best batch at the {side} edge ({e:g} sequences)"
    done = tried.rounds("batch", base)
    if done >= bounds.max_extend:
        rep.stopped.append(f"{what}: --max-extend {bounds.max_extend} rounds reached")
        return []
    past, step = _beyond((p["batch_size"] for p in base), e, side)
    if past is not None:
        rep.stopped.append(f"{what}: batch {past:g} past it was already run and gave no usable optimum")
        return []
    if step is None:
        return []
    b = int(round(e / step if side == "low" else e * step))
    lo, hi = bounds.batch_range or (1, None)
    if b < 1:  # nothing below one sequence: the smallest batch there is
        rep.stopped.append(f"{what}: no batch below one sequence (B* is at most 1 sequence here)")
        return []
    if b == int(e) or b < lo or (hi is not None and b > hi):
        rep.stopped.append(f"{what}: the next batch {b} is outside the batch range "
                           f"{lo},{hi if hi is not None else 'inf'}")
        return []
    kw: dict[str, Any] = {"batch_sizes": (*spec.batch_sizes, b)}
    if spec.lr_center is not None:  # the LR grid of every batch stays where it was
        kw["lr_center_batch"] = spec.lr_center_batch or min(spec.batch_sizes)
    try:
        grown = dataclasses.replace(spec, **kw)
    except ValueError as exc:
        rep.stopped.append(f"{what}: the next batch {b} is refused: {exc}")
        return []
    pts = [p for p in grown.points() if int(p["batch_size"]) == b and p.get("width") == spec.width]
    return [{**p, _ROUND: done + 1} for p in pts if point_key(p) not in tried.keys]


def _next_lr(spec: SweepSpec, at: list[dict[str, Any]], e: float, side: str, where: str,
             tried: _Tried, bounds: Bounds, rep: Bracketing) -> list[dict[str, Any]]:
    what = f"the best LR of {where} at the {side} edge ({e:.4g})"
    done = tried.rounds("lr", at)
    if done >= bounds.max_extend:
        rep.stopped.append(f"{what}: --max-extend {bounds.max_extend} rounds reached")
        return []
    past, step = _beyond((p["lr"] for p in at), e, side)
    if past is not None:
        rep.stopped.append(f"{what}: LR {past:.4g} past it was already run (diverged or failed)")
        return []
    if step is None:
        return []
    lr = float(f"{(e / step if side == 'low' else e * step):.12g}")
    if bounds.log2_lr_range is not None:
        lo, hi = bounds.log2_lr_range
        if not lo - 1e-9 <= math.log2(lr) <= hi + 1e-9:
            rep.stopped.append(f"{what}: the next LR 2^{math.log2(lr):.3g} is outside the log2 LR "
                               f"range {lo:g}:{hi:g}")
            return []
    out, seen = [], set()
    for p in at:
        q = {**p, "lr": lr}
        k = point_key(q)
        if k in seen or k in tried.keys:
            continue
        try:
            train_config(spec, q)
        except ValueError as exc:
            rep.stopped.append(f"{what}: the next LR {lr:.4g} is refused: {exc}")
            return []
        seen.add(k)
        out.append({**q, _ROUND: done + 1})
    return out


# ------------------------------------------------------------------ lr sweep
def _lr_plan(spec: LRSweep, table: pd.DataFrame, tried: _Tried, bounds: Bounds,
             rep: Bracketing) -> list[tuple[str, dict[str, Any]]]:
    df = _finished(table)
    keys = [k for k in spec.group_keys() if k in df.columns]
    try:
        if df.empty:
            raise ValueError("no finished trials")
        of = OptimumFit(x="lr", y="loss", group_by=keys, n_boot=0).fit(df)
    except ValueError as exc:
        rep.error = str(exc)
        return []
    new: list[tuple[str, dict[str, Any]]] = []
    for o in of.optima_:
        kv = o.key if isinstance(o.key, tuple) else (o.key,)
        group = {k: (v.item() if hasattr(v, "item") else v) for k, v in zip(keys, kv, strict=True)}
        rep.rows.append({"group": group, "lr": {"bracketed": not o.at_edge, "edge": o.edge,
                                                "opt": float(o.x_opt)}})
        if not o.at_edge:
            continue
        at = [p for p in tried.points if all(p.get(k) == v for k, v in group.items())]
        new += [("lr", p) for p in _next_lr(spec, at, float(o.x_opt), o.edge, o.label, tried, bounds, rep)]
    return new


# ------------------------------------------------------------------ the loop
def check_bracketing(spec: SweepSpec, study: SweepStudy, bounds: Bounds,
                     ) -> tuple[Bracketing, list[tuple[str, dict[str, Any]]]]:
    """Locate the optima of the study's finished trials; ``(report, [(axis, point), ...])``
    with the points one more round of extension would add (none when bracketed or bound)."""
    rep = Bracketing(kind=spec.kind, max_extend=bounds.max_extend)
    tried = _tried(study)
    rep.extended_trials = len(tried.extended)
    rep.rounds = dict.fromkeys(("batch", "lr") if isinstance(spec, ScalingSweep) else ("lr",), 0)
    grids: dict[tuple[str, tuple[Any, ...]], set[Any]] = {}
    for axis, p in tried.extended:  # the most points added to one grid, per axis
        grid = () if axis == "batch" else tuple(p.get(k) for k in spec.group_keys())
        grids.setdefault((axis, grid), set()).add(p["batch_size" if axis == "batch" else "lr"])
    for (axis, _), values in grids.items():
        rep.rounds[axis] = max(rep.rounds.get(axis, 0), len(values))
    table = results_table(study)
    if isinstance(spec, ScalingSweep):
        plan = _scaling_plan(spec, table, tried, bounds, rep)
    else:
        plan = _lr_plan(spec, table, tried, bounds, rep)  # type: ignore[arg-type]
    return rep, plan


def enqueue_extension(study: SweepStudy, spec: SweepSpec, plan: list[tuple[str, dict[str, Any]]]) -> int:
    """Enqueue the planned points as WAITING trials of the study; returns how many.

    Under the storage's lock (as :func:`sweeps.study.prepare`), and a point that already
    has a live trial (waiting, running or finished) is skipped: two launches of one sweep
    that plan the same extension enqueue it once."""
    from optuna.trial import TrialState

    group_keys = spec.group_keys()
    n = 0
    alive = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
    with study.location.lock(study.study_name):
        have = {t.user_attrs.get(attrs.POINT_KEY) for t in study.get_trials(deepcopy=False, states=alive)}
        for axis, planned in plan:
            point = {k: v for k, v in planned.items() if k != _ROUND}
            key = point_key(point)
            if key in have:
                continue
            have.add(key)
            group = {k: point[k] for k in group_keys if k in point}
            study.enqueue_trial(point, user_attrs={attrs.POINT: point, attrs.POINT_KEY: key,
                                                   attrs.GROUP: group, attrs.EXTENDED_AXIS: axis,
                                                   attrs.EXTENDED_ROUND: int(planned[_ROUND])})
            n += 1
    return n


def run_bracketed(spec: SweepSpec, bounds: Bounds | None = None, **run_kwargs: Any,
                  ) -> tuple[SweepResult, Bracketing | None]:
    """:func:`sweeps.study.run_sweep`, then extend the grid past every edge optimum and
    run again, until bracketed or bound. ``run_kwargs`` go to ``run_sweep`` unchanged (the
    workers, storage and runner of the extension are the sweep's). The report is None for
    a sweep that does not extend (:func:`extendable`)."""
    bounds = bounds or Bounds()
    t0 = time.perf_counter()
    res = run_sweep(spec, **run_kwargs)
    if not extendable(spec):
        return res, None
    added = 0
    while True:
        study, _ = open_study(res.plan.storage, res.plan.study_name)
        rep, plan = check_bracketing(spec, study, bounds)
        rep.added = added
        if not res.complete or not plan:
            if not res.complete:
                rep.stopped.append("the sweep has unfinished trials; re-run the command to resume")
            return dataclasses.replace(res, wall_s=time.perf_counter() - t0), rep
        added += enqueue_extension(study, spec, plan)
        res = run_sweep(spec, **run_kwargs)
