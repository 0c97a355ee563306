"""``mutransfer plot``: figures of the fits, straight from a results table.

Kinds: ``lr-curves`` (loss against log2 LR, one line per width with a seed band and the
optima, SP and μP side by side), ``optimum`` (optimum against width with the power law,
its band and the projected target), ``critical-batch`` (S(B) and the S–E trade-off) and
``loss-law`` (iso-FLOP curves of the Chinchilla fit, compute-optimal N and D). The file
format follows the suffix of ``--out`` (.png, .pdf or .svg); it is written atomically.
Each figure renders exactly the data object that the fit returns; ``--json`` prints that
data (the numbers drawn), which is what the tests check.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from analysis.critical_batch import fit_critical_batch
from analysis.loss_law import ChinchillaFit
from analysis.optimum import OptimumFit
from analysis.plots import (
    isoflop_curves,
    lr_curve_data,
    optimum_series,
    plot_critical_batch,
    plot_isoflop,
    plot_lr_panels,
    plot_optimum_series,
)
from analysis.results import read_results
from analysis.scaling_plots import plot_scaling
from analysis.table import group_dict, num, pair
from mutransfer._io import check_output, plain
from mutransfer_cli._common import bounded_int, float_list, number_in, positive_float, print_json
from mutransfer_cli._table import (
    add_scaling_columns,
    add_table_flags,
    check_level,
    column_flag,
    columns,
    read_table,
    scaling_fit,
)

HELP = "render LR curves, optimum vs width, critical batch, loss laws, scaling laws"
FORMATS = (".png", ".pdf", ".svg")


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="FILE", help="figure path: .png, .pdf or .svg")
    p.add_argument("--json", action="store_true", help="print the plotted data as JSON")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors (and --json)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="kind", metavar="KIND", required=True)

    lr = sub.add_parser("lr-curves", help="loss vs log2 LR per width, seed bands, optima; "
                        "one panel per parametrization",
                        description="Loss against log2 LR, one line per group (width) with a "
                        "band of ±1 sd over seeds and a dot at each fitted optimum; one panel per "
                        "value of --panel (default: parametrization, when the table has it), side "
                        "by side as in Tensor Programs V, figure 1.")
    add_table_flags(lr, n_boot=200)
    lr.add_argument("--x", default="lr", help="swept column (default lr)")
    lr.add_argument("--y", default="loss", help="objective column (default loss)")
    lr.add_argument("--group", default="width", help="one line per value (default width)")
    lr.add_argument("--panel", default=None,
                    help="one panel per value (default parametrization if present; 'none': one panel)")
    lr.add_argument("--seed-col", default="seed", help="seed column (default seed)")
    _output(lr)

    op = sub.add_parser("optimum", help="optimum vs width with the power law, its band and "
                        "the projected target",
                        description="Optimal x against width (or size) on log-log axes with "
                        "bootstrap intervals, the power-law fit and its confidence band, and the "
                        "projected optimum at --target with its prediction interval.")
    add_table_flags(op, n_boot=200)
    op.add_argument("--x", default="lr", help="swept column (default lr)")
    op.add_argument("--y", default="loss", help="objective column (default loss)")
    op.add_argument("--across", default="width", help="width or size column (default width)")
    op.add_argument("--by", default=None,
                    help="one series per value (default parametrization if present; 'none')")
    op.add_argument("--target", type=positive_float, default=None,
                    help="project the optimum to this width/size")
    op.add_argument("--interval", type=float, default=0.9,
                    help="level of the law's bands (default 0.9)")
    op.add_argument("--seed-col", default="seed", help="seed column (default seed)")
    _output(op)

    cb = sub.add_parser("critical-batch", help="S(B) with B_crit, and the S-vs-E trade-off curves",
                        description="Steps to target against batch size with the fit S = S_min + "
                        "E_min/B per group, and the time/compute trade-off S against E = B·S.")
    add_table_flags(cb, n_boot=100)
    cb.add_argument("--batch", default="batch_size", help="batch-size column (default batch_size)")
    cb.add_argument("--steps", default="steps_to_target", help="steps column (default steps_to_target)")
    cb.add_argument("--group", type=columns, default=None, metavar="COLS", help="e.g. model")
    cb.add_argument("--b0", type=positive_float, default=256.0, help="reference batch (default 256)")
    _output(cb)

    ll = sub.add_parser("loss-law", help="iso-FLOP curves of L(N, D) and the compute-optimal N, D",
                        description="Fits L(N, D) = E + A/N^alpha + B/D^beta (as `mutransfer fit "
                        "loss`) and draws the loss along iso-FLOP lines D = C/(6N) with each "
                        "minimum, and N_opt(C), D_opt(C) with bootstrap bands.")
    add_table_flags(ll, n_boot=100)
    ll.add_argument("--n", default="n_params", help="model-size column (default n_params)")
    ll.add_argument("--d", default="tokens", help="data column (default tokens)")
    ll.add_argument("--loss", default="loss", help="loss column (default loss)")
    ll.add_argument("--compute", type=float_list, default=None, metavar="C1,C2,...",
                    help="FLOP budgets of the iso-FLOP lines (default: 5 spanning the data)")
    ll.add_argument("--n-jobs", type=bounded_int(1, 1024, "--n-jobs"), default=2,
                    help="threads for the start grid (default 2)")
    _output(ll)

    sc = sub.add_parser("scaling", help="eta*(B, D) per budget and B*(D), with bootstrap bands",
                        description="Fits the scaling laws as `mutransfer fit scaling` does and "
                        "draws the optimal LR against batch (one line per budget, measured "
                        "per-cell optima with intervals) and the optimal batch against tokens.")
    add_table_flags(sc, n_boot=200)
    add_scaling_columns(sc)
    sc.add_argument("--band", type=number_in(0.0, 1.0), default=0.0025,
                    help="near-optimal band (default 0.0025)")
    sc.set_defaults(level=0.9)  # the bands' level
    sc.add_argument("--method", choices=("optima", "band"), default="optima",
                    help="how the near-optimal runs are picked (default optima)")
    _output(sc)


def _auto(value: str | None, df_columns: Any, default: str) -> str | None:
    if value is None:
        return default if default in df_columns else None
    return None if value.lower() == "none" else value


def _lists(a: Any) -> list[Any]:
    return [num(v) for v in a]


def plot_lr(args: argparse.Namespace) -> dict[str, Any]:
    head = read_results(args.results, required=())
    panel = _auto(args.panel, head.columns, "parametrization")
    group = [c for c in (panel, args.group) if c]
    df, counts = read_table(args, [args.x, args.y], group, keep_diverged=True)
    diverged = column_flag(args.diverged)
    fit = OptimumFit(x=args.x, y=args.y, group_by=tuple(group), diverged=diverged,
                     seed=args.seed_col, n_boot=args.n_boot, level=args.level,
                     random_state=args.seed).fit(df)
    curves = lr_curve_data(fit, df, panel=panel)
    plot_lr_panels(curves, args.out, x_name=args.x, y_name=args.y)
    return {"panel": panel, "group": args.group, **counts, "curves": [{
        "panel": plain(c.panel, nonfinite_to_none=True) if panel else None,
        "group": plain(c.group, nonfinite_to_none=True), "x": _lists(c.x),
        "mean": _lists(c.mean), "lo": _lists(c.lo), "hi": _lists(c.hi),
        "n_seeds": [int(v) for v in c.n_seeds], "x_opt": num(c.x_opt),
        "loss_opt": num(c.loss_opt), "ci": [num(c.ci[0]) if c.ci[0] > 0 else None, num(c.ci[1])],
        "at_edge": bool(c.at_edge)} for c in curves]}


def plot_optimum(args: argparse.Namespace) -> dict[str, Any]:
    check_level(args.interval, "--interval")
    head = read_results(args.results, required=())
    by = _auto(args.by, head.columns, "parametrization")
    group = [c for c in (by, args.across) if c]
    df, counts = read_table(args, [args.x, args.y, args.across], group, keep_diverged=True)
    diverged = column_flag(args.diverged)
    fit = OptimumFit(x=args.x, y=args.y, group_by=tuple(group), diverged=diverged,
                     seed=args.seed_col, n_boot=args.n_boot, level=args.level,
                     random_state=args.seed).fit(df)
    series = optimum_series(fit, across=args.across, by=by, target=args.target,
                            level=args.interval)
    plot_optimum_series(series, args.out, x_name=args.x)
    return {"across": args.across, "by": by, "interval": args.interval, **counts, "series": [{
        "name": plain(s.name, nonfinite_to_none=True) if by else None, "across": _lists(s.across),
        "x_opt": _lists(s.x_opt), "ci_lo": [num(v) if v > 0 else None for v in s.ci_lo],
        "ci_hi": _lists(s.ci_hi), "at_edge": [bool(v) for v in s.at_edge],
        "drift_octaves": num(s.octaves), "slope": None if s.slope is None else num(s.slope),
        "slope_ci": None if s.slope_ci is None else pair(*s.slope_ci),
        "target": None if s.target is None else {
            args.across: num(s.target_across), "x_opt": num(s.target[0]),
            "interval": pair(s.target[1], s.target[2]), "extrapolation": num(s.extrapolation)},
    } for s in series]}


def plot_cbs(args: argparse.Namespace) -> dict[str, Any]:
    group = list(args.group or [])
    df, counts = read_table(args, [args.batch, args.steps], group, inf_ok=[args.steps])
    res = fit_critical_batch(df, group_by=tuple(group), batch=args.batch, steps=args.steps,
                             b0=args.b0, diverged=None, n_boot=args.n_boot, level=args.level,
                             random_state=args.seed)
    plot_critical_batch(res, args.out)
    fits = []
    for key, f in res.fits.items():
        p = f.params_
        fits.append({"group": group_dict(group, key), "batch": _lists(f.batch_data_),
                     "steps": _lists(f.steps_data_), "S_min": num(p["S_min"]),
                     "E_min": num(p["E_min"]), "B_crit": num(p["B_crit"]),
                     "cbs_20": num(p["CBS"]), "knee": [num(2 * p["E_min"]), num(2 * p["S_min"])]})
    return {**counts, "fits": fits}


def plot_loss(args: argparse.Namespace) -> dict[str, Any]:
    if args.n_jobs < 1:
        raise ValueError(f"--n-jobs must be >= 1, got {args.n_jobs}")
    df, counts = read_table(args, [args.n, args.d, args.loss], [])
    fit = ChinchillaFit(args.n, args.d, args.loss, n_boot=args.n_boot, level=args.level,
                        random_state=args.seed, diverged=None, n_jobs=args.n_jobs).fit(df)
    curves = isoflop_curves(fit, args.compute)
    plot_isoflop(curves, args.out)
    return {**counts, "params": {k: num(v) for k, v in fit.params_.items()},
            "compute": _lists(curves.compute), "n_opt": _lists(curves.n_opt),
            "d_opt": _lists(curves.d_opt), "loss_opt": _lists(curves.loss_opt),
            "n_interval": [pair(a, b) for a, b in zip(curves.n_lo, curves.n_hi, strict=True)],
            "curve_min_n": _lists(curves.n[range(curves.compute.size), curves.loss.argmin(axis=1)])}


def plot_scaling_laws(args: argparse.Namespace) -> dict[str, Any]:
    fit, counts = scaling_fit(args)
    curves = fit.curves_()
    plot_scaling(curves, args.out)
    cells = curves.cells
    return {**counts, "lr_law": curves.lr_law, "batch_law": curves.batch_law,
            "level": curves.level,
            "cells": [{"batch_tokens": num(r.batch_tokens), "tokens": num(r.tokens),
                       "lr_opt": num(r.lr_opt), "ci": pair(r.lr_lo, r.lr_hi),
                       "edge": r.edge or None} for r in cells.itertuples()],
            "budgets": [{"tokens": num(r.tokens), "batch_opt": num(r.batch_opt),
                         "ci": pair(r.lo, r.hi), "edge": r.edge or None}
                        for r in curves.budgets.itertuples()],
            "batch_line": {"tokens": _lists(curves.batch_line["tokens"]),
                           "batch": _lists(curves.batch_line["batch"]),
                           "lo": _lists(curves.batch_line["lo"]),
                           "hi": _lists(curves.batch_line["hi"])}}


PLOTTERS = {"lr-curves": plot_lr, "optimum": plot_optimum, "critical-batch": plot_cbs,
            "loss-law": plot_loss, "scaling": plot_scaling_laws}


def run(args: argparse.Namespace) -> int:
    if Path(args.out).suffix.lower() not in FORMATS:
        raise ValueError(f"--out {args.out!r} must end in .png, .pdf or .svg")
    check_level(args.level)
    check_output(args.out, inputs=[args.results])
    import matplotlib

    matplotlib.use("Agg", force=True)
    data = PLOTTERS[args.kind](args)
    result = {"plot": args.kind, "out": str(args.out), "results": str(args.results), **data}
    if args.json:
        print_json(result)
    elif not args.quiet:
        print(f"wrote {args.out}")
    return 0
