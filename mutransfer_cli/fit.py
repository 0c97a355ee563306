"""``mutransfer fit``: optimum, power law, critical batch or loss law from a results table.

Four kinds, each writing one JSON document whose top-level shape is a contract (docs/architecture.md,
Fit JSON); extra keys may be added, the listed ones are always there:

* ``optimum``        ``{"fits": [{"group", "x_opt", "ci": [lo, hi], "y_opt", "at_edge"}]}``;
  each fit also has ``sensitivity`` (leave-one-seed-out: ``ratio`` = max/min of the
  optimum refitted without each seed, null with one seed)
* ``power-law``      ``{"fits": [{"group", "coefficient", "exponents": {COL: b}, "ci", "n_points"}]}``
* ``critical-batch`` ``{"fits": [{"group", "S_min", "E_min", "B_crit", "cbs_20"}]}``
* ``loss``           ``{"E", "A", "B", "alpha", "beta", "ci": {name: [lo, hi]}, "objective",
  "n_points"}``
* ``scaling``        ``{"lr": {"coef", "exponents": {"batch_tokens", "tokens"}, "ci"},
  "batch": {"coef", "exponents": {"tokens"}, "ci"}, "tau", "warmup", "decay_fraction",
  "measured", "n_rows", "n_in_band", "sensitivity"}`` (:meth:`analysis.ScalingLawFit.to_dict`;
  ``sensitivity`` holds the leave-one-seed-out spread of each value and each refit's laws)

``group`` is ``{column: value}`` for the ``--group`` columns (``null`` without
``--group``). Numbers are plain floats; an open side of an interval (an optimum at the
grid's edge) is ``null``, never NaN or infinity. Diverged rows (``diverged`` true) are
left out of every fit; a row with a non-finite value that is not marked diverged is an
error unless ``--dropna`` drops it. ``analysis`` is imported only inside :func:`run`.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from mutransfer_cli._common import MAX_N_BOOT, MAX_SEED, bounded_int, positive_float, print_json

if TYPE_CHECKING:
    import pandas as pd

HELP = "fit optimum | power-law | critical-batch | loss | scaling laws to a results table"
KINDS = ("optimum", "power-law", "critical-batch", "loss", "scaling")


# ----------------------------------------------------------------------- arguments
def columns(text: str) -> list[str]:
    """``"parametrization,width"`` -> ["parametrization", "width"]."""
    out = [c.strip() for c in text.split(",") if c.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names no column")
    return out




def add_table_flags(p: argparse.ArgumentParser, n_boot: int = 1000) -> None:
    """Flags every fit and plot kind shares: input, filters, bootstrap, output."""
    p.add_argument("results", metavar="RESULTS", help="results table (.csv or .parquet)")
    p.add_argument("--where", action="append", default=[], metavar="COL=VALUE",
                   help="keep only rows with COL equal to VALUE (repeatable), e.g. parametrization=mup")
    p.add_argument("--diverged", default="diverged", metavar="COL",
                   help="boolean column marking diverged runs, left out of fits (default diverged; "
                   "'none' to ignore)")
    p.add_argument("--state", default="state", metavar="COL",
                   help="trial-state column: only COMPLETE rows (or an empty state) are fitted, so "
                   "pruned/failed trials are left out and counted (default state; 'none' to ignore)")
    p.add_argument("--dropna", action="store_true",
                   help="drop rows with a missing/non-finite value in a fitted column instead of "
                   "failing")
    p.add_argument("--n-boot", type=bounded_int(0, MAX_N_BOOT, "--n-boot"), default=n_boot,
                   help=f"bootstrap resamples for the intervals (default {n_boot}; 0: no intervals)")
    p.add_argument("--level", "--ci", dest="level", type=float, default=0.95,
                   help="level of the intervals (default 0.95; 0.9 for scaling); --ci is the same flag")
    p.add_argument("--seed", type=bounded_int(0, MAX_SEED, "--seed"), default=0,
                   help="bootstrap seed (default 0)")


def _output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FIT.json", help="write the fit here (atomically)")
    p.add_argument("--json", action="store_true", help="print the fit as JSON to stdout")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors (and --json)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="kind", metavar="KIND", required=True)

    o = sub.add_parser("optimum", help="optimal x (LR, batch) per group: quadratic in log2 x, "
                       "bootstrap CI, edge flag",
                       description="Optimal x per group from a sweep: a quadratic in log2 x "
                       "fitted to the seed-averaged points near the minimum, a bootstrap CI over "
                       "seeds, the 0.25% near-optimal band; a minimum at the grid edge is "
                       "flagged (at_edge) with a one-sided interval, never extrapolated.")
    add_table_flags(o)
    o.add_argument("--x", default="lr", help="swept column (default lr)")
    o.add_argument("--y", default="loss", help="objective column (default loss)")
    o.add_argument("--group", type=columns, default=None, metavar="COLS",
                   help="comma-separated group columns, e.g. width or parametrization,width")
    o.add_argument("--seed-col", default="seed", help="seed column (default seed)")
    o.add_argument("--band", type=float, default=0.0025,
                   help="near-optimal band, fraction of the minimum (default 0.0025)")
    _output_flags(o)

    pl = sub.add_parser("power-law", help="y = k·x^b (·x2^c) by OLS in log space, bootstrap CIs",
                        description="Power law y = k·x^b or y = k·x^b·x2^c by (weighted) least "
                        "squares on log y, per group, with pairs-bootstrap intervals.")
    add_table_flags(pl)
    pl.add_argument("--x", required=True, help="x column")
    pl.add_argument("--x2", default=None, help="second x column (Step Law form)")
    pl.add_argument("--y", required=True, help="y column")
    pl.add_argument("--group", type=columns, default=None, metavar="COLS",
                    help="comma-separated group columns: one law per group")
    pl.add_argument("--weight", default=None, metavar="COL", help="optional column of weights")
    _output_flags(pl)

    cb = sub.add_parser("critical-batch", help="S(B) = S_min + E_min/B per group; "
                        "B_crit = E_min/S_min and the 20%% overshoot CBS",
                        description="Steps to a target loss against batch size, S = S_min + "
                        "E_min/B, fitted in log space (McCandlish et al. 2018; Zhang et al. 2024). "
                        "B_crit = E_min/S_min; cbs_20 = 1.2·B0 + 0.2·B_crit. A step count of inf "
                        "means the target was not reached: that row is dropped and counted.")
    add_table_flags(cb)
    cb.add_argument("--batch", default="batch_size", help="batch-size column (default batch_size)")
    cb.add_argument("--steps", default="steps_to_target",
                    help="steps-to-target column (default steps_to_target)")
    cb.add_argument("--group", type=columns, default=None, metavar="COLS",
                    help="comma-separated group columns, e.g. model")
    cb.add_argument("--b0", type=positive_float, default=256.0,
                    help="reference batch of the 20%% overshoot definition (default 256)")
    _output_flags(cb)

    lo = sub.add_parser("loss", help="Chinchilla L(N, D) = E + A/N^alpha + B/D^beta "
                        "(Huber on log loss, 4500 L-BFGS starts)",
                        description="Loss law L(N, D) = E + A/N^alpha + B/D^beta fitted as "
                        "Hoffmann et al. 2022 do: sum of Huber losses (delta 1e-3) on log loss, "
                        "L-BFGS from their 4500-point grid, bootstrap CIs over runs. With "
                        "--saturating: L(x) = E + A/x^alpha in the --n column only.")
    add_table_flags(lo)
    lo.add_argument("--n", default="n_params", help="model-size column (default n_params)")
    lo.add_argument("--d", default="tokens", help="data column (default tokens)")
    lo.add_argument("--loss", default="loss", help="loss column (default loss)")
    lo.add_argument("--saturating", action="store_true",
                    help="fit L(x) = E + A/x^alpha in --n alone (e.g. compute, for L(C))")
    lo.add_argument("--n-jobs", type=bounded_int(1, 1024, "--n-jobs"), default=2,
                    help="threads for the start grid (default 2)")
    _output_flags(lo)

    sc = sub.add_parser("scaling", help="eta*(B, D) and B*(D) power laws from a batch x budget x "
                        "LR sweep, the AdamW timescale tau, warmup and decay rules",
                        description="Optimal LR eta*(B, D) = c·B^a·D^b and optimal batch B*(D) = "
                        "c·D^g, fitted in log space on the near-optimal runs (Step Law, Li et al. "
                        "2025) with bootstrap intervals; tau = B/(eta·lambda·D) at the proxy "
                        "optimum (Wang & Aitchison 2024; Bergsma et al. 2025). Needs at least 3 "
                        "budgets and 3 batch sizes; B and D in tokens.")
    add_table_flags(sc)
    add_scaling_columns(sc)
    sc.add_argument("--band", type=float, default=0.0025,
                    help="near-optimal band, fraction of the minimum (default 0.0025)")
    sc.set_defaults(level=0.9)  # the scaling laws' bootstrap intervals
    sc.add_argument("--method", choices=("optima", "band"), default="optima",
                    help="optima: laws through the per-cell quadratic optima (default); band: "
                    "Step Law's regression on every run inside the band")
    _output_flags(sc)


def add_scaling_columns(p: argparse.ArgumentParser) -> None:
    """Column flags of a scaling sweep (shared by ``fit scaling`` and ``plot scaling``)."""
    p.add_argument("--lr", default="lr", help="LR column (default lr)")
    p.add_argument("--batch", default="batch_tokens",
                   help="batch column, in tokens (default batch_tokens)")
    p.add_argument("--tokens", default="tokens", help="token-budget column (default tokens)")
    p.add_argument("--loss", default="loss", help="loss column (default loss)")
    p.add_argument("--seed-col", default="seed", help="seed column (default seed)")
    p.add_argument("--weight-decay", default="weight_decay",
                   help="weight-decay column, for tau (default weight_decay; used when present)")
    p.add_argument("--seq-len", default="seq_len",
                   help="sequence-length column (default seq_len; used when present)")


# ----------------------------------------------------------------------- the table
def plain(v: Any) -> Any:
    """numpy scalars to Python; non-finite floats to None."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def num(v: Any) -> float | None:
    """A plain float, or None for a non-finite value (an open interval side)."""
    f = float(v)
    return f if math.isfinite(f) else None


def pair(lo: Any, hi: Any) -> list[float | None]:
    return [num(lo), num(hi)]


def group_dict(cols: Sequence[str], key: Hashable) -> dict[str, Any] | None:
    if not cols:
        return None
    vals = key if isinstance(key, tuple) else (key,)
    return {c: plain(v) for c, v in zip(cols, vals, strict=True)}


def _label(cols: Sequence[str], key: Hashable) -> str:
    vals = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{c}={v}" for c, v in zip(cols, vals, strict=True)) or "all"


def load_table(args: argparse.Namespace, value_cols: Sequence[str], group_cols: Sequence[str],
               *, inf_ok: Sequence[str] = (), keep_diverged: bool = False) -> tuple[pd.DataFrame, dict]:
    """Read, filter and check the results table; returns ``(rows to fit, counts)``.

    Rows whose ``--state`` is set and not ``COMPLETE`` (pruned or failed trials of a sweep
    export) are left out first and counted. Then checks, each a one-line ValueError:
    missing columns (named), rows of different tokenizers or models after ``--where``
    unless grouped by that column (:func:`analysis.check_single_valued`), non-numeric or non-finite
    values in ``value_cols`` (rows marked diverged excepted; ``--dropna`` drops them
    instead), ``--where`` matching nothing, a group whose every row diverged. Columns in
    ``inf_ok`` may hold ``+inf`` (e.g. steps never reaching the target); such rows are
    dropped and counted. With ``keep_diverged`` the diverged rows stay in (for
    :class:`analysis.OptimumFit`, which counts them itself).
    """
    import numpy as np
    import pandas as pd

    from analysis import check_single_valued, read_results

    diverged = None if args.diverged.lower() == "none" else args.diverged
    where = [_parse_where(w) for w in args.where]
    needed = list(dict.fromkeys([*value_cols, *group_cols, *(c for c, _ in where)]))
    df = read_results(args.results, required=needed)
    for col, val in where:
        df = df[_matches(df[col], val)]
        if df.empty:
            raise ValueError(f"no rows of {args.results} match --where {col}={val}")
    # A column fitted group by group (--group model) is not mixed: each fit sees one value.
    check_single_valued(df, columns=[c for c in ("tokenizer", "arch") if c not in group_cols],
                        where=f"results table {args.results}")
    if len(df) == 0:
        raise ValueError(f"{args.results} has no rows")
    n_not_complete = 0
    state = None if args.state.lower() == "none" else args.state
    if state is not None and state in df.columns:
        done = df[state].isna() | (df[state].astype(str).str.upper() == "COMPLETE")
        n_not_complete = int((~done).sum())
        df = df[done.to_numpy()]
        if df.empty:
            raise ValueError(f"none of the {n_not_complete} rows of {args.results} has "
                             f"{state}=COMPLETE (pass --state none to fit them anyway)")
    if diverged is not None and diverged in df.columns:
        div = df[diverged].fillna(False).astype(bool).to_numpy()
    else:
        div = np.zeros(len(df), dtype=bool)
    keep = ~div
    n_dropped = 0
    for col in value_cols:
        raw = df[col]
        vals = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        text = raw.notna().to_numpy() & np.isnan(vals) & ~div
        if text.any():
            i = int(np.flatnonzero(text)[0])
            raise ValueError(f"column {col!r} has a non-numeric value {raw.iloc[i]!r} "
                             f"(data row {i + 1})")
        allowed = np.isposinf(vals) if col in inf_ok else np.zeros(len(vals), dtype=bool)
        bad = ~np.isfinite(vals) & ~div & ~allowed
        if bad.any() and not args.dropna:
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"column {col!r} has {int(bad.sum())} missing or non-finite value(s) in rows not "
                f"marked diverged (first: {float(vals[i])!r} in data row {i + 1}); fix them, mark those "
                "runs diverged, or pass --dropna to drop them")
        drop = (bad | allowed) & keep
        n_dropped += int(drop.sum())
        keep &= ~drop
    if group_cols:
        flags = pd.Series(div, index=df.index)
        for key, g in _groups(df, group_cols):
            if flags.loc[g.index].all():
                raise ValueError(f"group {_label(group_cols, key)}: all {len(g)} rows diverged, "
                                 "so nothing can be fitted")
    elif div.all():
        raise ValueError(f"all {len(df)} rows of {args.results} diverged, so nothing can be fitted")
    if not keep.any():
        raise ValueError(f"no usable rows left in {args.results} after dropping "
                         f"{int(div.sum())} diverged and {n_dropped} incomplete row(s)")
    rows = df[keep | div] if keep_diverged else df[keep]
    counts = {"n_rows": int(len(df)), "n_diverged": int(div.sum()), "n_dropped": n_dropped,
              "n_not_complete": n_not_complete}
    return rows, counts


def _parse_where(text: str) -> tuple[str, str]:
    col, sep, val = text.partition("=")
    if not sep or not col.strip():
        raise ValueError(f"--where {text!r} must look like COL=VALUE")
    return col.strip(), val.strip()


def _matches(series: pd.Series, value: str) -> Any:
    import pandas as pd

    if pd.api.types.is_bool_dtype(series):
        return series == (value.lower() in ("1", "true", "yes"))
    if pd.api.types.is_numeric_dtype(series):
        try:
            return series == float(value)
        except ValueError:
            raise ValueError(f"--where value {value!r} is not a number, but column "
                             f"{series.name!r} is numeric") from None
    return series.astype(str) == value


def _groups(df: pd.DataFrame, cols: Sequence[str]) -> list[tuple[Hashable, pd.DataFrame]]:
    if not cols:
        return [((), df)]
    out = []
    for key, g in df.groupby(list(cols), sort=True, dropna=False):
        out.append((key[0] if isinstance(key, tuple) and len(key) == 1 else key, g))
    return out


def _in_group(cols: Sequence[str], key: Hashable, fn: Any) -> Any:
    try:
        return fn()
    except ValueError as err:
        if not cols or str(err).startswith("group "):
            raise
        raise ValueError(f"group {_label(cols, key)}: {err}") from err


# ----------------------------------------------------------------------- the fits
def fit_optimum(args: argparse.Namespace) -> dict[str, Any]:
    from analysis import OptimumFit

    group = list(args.group or [])
    df, counts = load_table(args, [args.x, args.y], group, keep_diverged=True)
    diverged = None if args.diverged.lower() == "none" else args.diverged
    fit = OptimumFit(x=args.x, y=args.y, group_by=tuple(group), diverged=diverged,
                     seed=args.seed_col, band=args.band, n_boot=args.n_boot, ci=args.level,
                     random_state=args.seed).fit(df)
    fits = []
    for o in fit.optima_:
        lo, hi = o.ci
        fits.append({
            "group": group_dict(group, o.key), "x_opt": num(o.x_opt),
            "ci": [num(lo) if lo > 0 else None, num(hi)], "y_opt": num(o.loss_opt),
            "at_edge": bool(o.at_edge), "edge": o.edge or None, "log2_x_opt": num(o.log2_x_opt),
            "method": o.method, "band": pair(*o.band), "n_x": int(o.x.size),
            "n_rows": int(o.n_rows), "n_diverged": int(o.n_diverged), "n_seeds": len(o.seeds),
            "sensitivity": optimum_sensitivity(o),
        })
    return {"kind": "optimum", "x": args.x, "y": args.y, "group_by": group or None,
            "ci_level": args.level, "n_boot": args.n_boot, "band_fraction": args.band,
            "results": str(args.results), **counts, "fits": fits}


def optimum_sensitivity(o: Any) -> dict[str, Any]:
    """The leave-one-seed-out spread of one :class:`analysis.GroupOptimum` as JSON: the
    refit optimum without each seed, ``ratio`` = max/min of them (null with one seed)."""
    if o.sensitivity is not None:
        return o.sensitivity.to_dict()
    return {"method": "leave-one-seed-out", "n_seeds": len(o.seeds), "left_out": {}, "n_failed": 0,
            "ratio": None, "octaves": None}


def fit_power_law(args: argparse.Namespace) -> dict[str, Any]:
    from analysis import PowerLawFit

    group = list(args.group or [])
    xs = [args.x] + ([args.x2] if args.x2 else [])
    if len(set(xs)) != len(xs):
        raise ValueError(f"--x and --x2 are both {args.x!r}; give two different columns")
    value_cols = [*xs, args.y] + ([args.weight] if args.weight else [])
    df, counts = load_table(args, value_cols, group)
    fits = []
    for key, g in _groups(df, group):
        f = _in_group(group, key, lambda g=g: PowerLawFit(
            xs, args.y, weight=args.weight, n_boot=args.n_boot, ci=args.level,
            random_state=args.seed).fit(g))
        names = f.param_names_[1:]
        ci: dict[str, Any] = {}
        if f.ci_:
            ci["coefficient"] = pair(*f.ci_["a"])
            ci.update({col: pair(*f.ci_[p]) for col, p in zip(xs, names, strict=True)})
        fits.append({
            "group": group_dict(group, key), "coefficient": num(f.params_["a"]),
            "exponents": {col: num(f.params_[p]) for col, p in zip(xs, names, strict=True)},
            "ci": ci, "n_points": int(f.n_), "r2": num(f.r2_), "sigma_log": num(f.sigma_),
            "x_range": {col: pair(*f.x_range_[col]) for col in xs},
        })
    return {"kind": "power-law", "x": xs, "y": args.y, "group_by": group or None,
            "ci_level": args.level, "n_boot": args.n_boot, "results": str(args.results), **counts,
            "fits": fits}


def fit_critical_batch(args: argparse.Namespace) -> dict[str, Any]:
    from analysis import CriticalBatchFit

    group = list(args.group or [])
    df, counts = load_table(args, [args.batch, args.steps], group, inf_ok=[args.steps])
    fits = []
    for key, g in _groups(df, group):
        f = _in_group(group, key, lambda g=g: CriticalBatchFit(
            args.batch, args.steps, b0=args.b0, overshoot=0.2, diverged=None,
            n_boot=args.n_boot, ci=args.level, random_state=args.seed).fit(g))
        p = f.params_
        rename = {"S_min": "S_min", "E_min": "E_min", "B_crit": "B_crit", "CBS": "cbs_20"}
        fits.append({
            "group": group_dict(group, key), "S_min": num(p["S_min"]), "E_min": num(p["E_min"]),
            "B_crit": num(p["B_crit"]), "cbs_20": num(p["CBS"]),
            "ci": {rename[k]: pair(*v) for k, v in f.ci_.items()},
            "n_points": int(f.n_), "batch_range": pair(*f.b_range_),
        })
    return {"kind": "critical-batch", "batch": args.batch, "steps": args.steps,
            "group_by": group or None, "b0": args.b0, "overshoot": 0.2, "ci_level": args.level,
            "n_boot": args.n_boot, "results": str(args.results), **counts, "fits": fits}


def fit_loss(args: argparse.Namespace) -> dict[str, Any]:
    from analysis import ChinchillaFit, SaturatingPowerLawFit

    if args.n_jobs < 1:
        raise ValueError(f"--n-jobs must be >= 1, got {args.n_jobs}")
    xs = [args.n] if args.saturating else [args.n, args.d]
    if len(set(xs)) != len(xs):
        raise ValueError(f"--n and --d are both {args.n!r}; give two different columns")
    df, counts = load_table(args, [*xs, args.loss], [])
    kw = dict(n_boot=args.n_boot, ci=args.level, random_state=args.seed, diverged=None,
              n_jobs=args.n_jobs)
    if args.saturating:
        fit: Any = SaturatingPowerLawFit(args.n, args.loss, **kw).fit(df)
    else:
        fit = ChinchillaFit(args.n, args.d, args.loss, **kw).fit(df)
    p = fit.params_
    out: dict[str, Any] = {k: num(v) for k, v in p.items()}
    out.update({
        "ci": {k: pair(*v) for k, v in fit.ci_.items()},
        "objective": num(fit.loss_), "n_points": int(fit.n_),
        "kind": "loss", "law": fit._law_text(), "columns": {"n": args.n, "loss": args.loss},
        "huber_delta": fit.delta, "n_starts": int(fit.n_starts_),
        "n_converged": int(fit.n_converged_), "ci_level": args.level, "n_boot": args.n_boot,
        "rms_residual_log": num((fit.residuals_**2).mean() ** 0.5),
        "x_range": {k: pair(*v) for k, v in fit.x_range_.items()},
        "results": str(args.results), **counts,
    })
    if not args.saturating:
        out["columns"]["d"] = args.d
        a, b = p["alpha"], p["beta"]
        if a > 0 and b > 0:
            # Hoffmann et al. 2022, eq. 4: N_opt = G (C/6)^(beta/(a+b)), D_opt = (C/6)^(a/(a+b)) / G
            out["compute_optimal"] = {
                "G": num((a * p["A"] / (b * p["B"])) ** (1.0 / (a + b))),
                "n_exponent": num(b / (a + b)), "d_exponent": num(a / (a + b)),
            }
    return out


def scaling_fit(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Load a scaling sweep and fit :class:`analysis.ScalingLawFit`; ``(fit, counts)``."""
    from analysis import ScalingLawFit

    check_level(args.level)
    if not (math.isfinite(args.band) and args.band >= 0):
        raise ValueError(f"--band must be a fraction >= 0, got {args.band}")
    df, counts = load_table(args, [args.lr, args.batch, args.tokens, args.loss], [],
                            keep_diverged=True)
    diverged = None if args.diverged.lower() == "none" else args.diverged
    fit = ScalingLawFit(band=args.band, n_boot=args.n_boot, level=args.level, seed=args.seed,
                        method=args.method).fit(
        df, lr=args.lr, batch=args.batch, tokens=args.tokens, loss=args.loss,
        seed_col=args.seed_col, diverged=diverged, weight_decay=args.weight_decay,
        seq_len=args.seq_len)
    return fit, counts


def fit_scaling(args: argparse.Namespace) -> dict[str, Any]:
    fit, counts = scaling_fit(args)
    out = fit.to_dict()
    out["results"] = str(args.results)
    out["n_not_complete"] = counts["n_not_complete"]
    out["n_dropped"] = counts["n_dropped"]
    return out


FITTERS = {"optimum": fit_optimum, "power-law": fit_power_law,
           "critical-batch": fit_critical_batch, "loss": fit_loss, "scaling": fit_scaling}


def dumps(obj: Any) -> str:
    """Strict JSON: a NaN or infinity anywhere is a bug, so it raises instead of writing."""
    return json.dumps(obj, indent=2, allow_nan=False) + "\n"


def check_level(level: float, flag: str = "--level (--ci)") -> None:
    if not 0 < level < 1:
        raise ValueError(f"{flag} must be in (0, 1), got {level}")


def run(args: argparse.Namespace) -> int:
    from mutransfer._io import atomic_write_text, check_output

    if not args.out and not args.json:
        raise ValueError("give --out FIT.json (or --json to print the fit)")
    check_output(args.out, inputs=[("the results table", args.results)])  # before the fit
    check_level(args.level)
    result = FITTERS[args.kind](args)
    text = dumps(result)
    if args.out:
        atomic_write_text(args.out, text)
    if args.json:
        print_json(result)
    elif not args.quiet:
        print(summary(result) + (f"\nwrote {args.out}" if args.out else ""))
    return 0


def summary(result: dict[str, Any]) -> str:
    """A few readable lines about a fit document."""
    kind = result["kind"]
    if kind == "scaling":
        lines = [result["lr"]["law"], result["batch"]["law"]]
        if result["tau"]["value"] is not None:
            t = result["tau"]
            ci = f" [{t['ci'][0]:.4g}, {t['ci'][1]:.4g}]" if t.get("ci") and None not in t["ci"] else ""
            lines.append(f"tau = B/(eta·lambda·D) = {t['value']:.4g}{ci} ({t.get('source') or 'default λ'})")
        lines.append(f"{result['n_rows']} rows, {result['n_in_band']} in the near-optimal band, "
                     f"{result['n_excluded']} excluded")
        spread = ((result.get("sensitivity") or {}).get("values") or {}).get("lr_at_reference") or {}
        if spread.get("ratio") is not None:
            lines.append(f"leave-one-seed-out: the law's LR at the reference point moves "
                         f"×{spread['ratio']:.3g}")
        lines += [f"WARNING: {w}" for w in result["warnings"]]
        return "\n".join(lines)
    if kind == "loss":
        names = [k for k in ("E", "A", "B", "alpha", "beta") if k in result]
        return f"{result['law']}: " + ", ".join(f"{k}={result[k]:.4g}" for k in names)
    lines = []
    for f in result["fits"]:
        label = ", ".join(f"{k}={v}" for k, v in (f["group"] or {}).items()) or "all"
        if kind == "optimum":
            flag = f"  [AT {f['edge'].upper()} EDGE]" if f["at_edge"] else ""
            ratio = (f.get("sensitivity") or {}).get("ratio")
            loso = f"  leave-one-seed-out ×{ratio:.3g}" if ratio is not None else ""
            lines.append(f"{label}: {result['x']}* = {f['x_opt']:.4g} ci {f['ci']}{loso}{flag}")
        elif kind == "power-law":
            ex = ", ".join(f"{k}^{v:.4g}" for k, v in f["exponents"].items())
            lines.append(f"{label}: {result['y']} = {f['coefficient']:.4g} · {ex}")
        else:
            lines.append(f"{label}: B_crit = {f['B_crit']:.5g}, cbs_20 = {f['cbs_20']:.5g}")
    return "\n".join(lines)
