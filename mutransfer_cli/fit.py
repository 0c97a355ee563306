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
error unless ``--dropna`` drops it (:func:`analysis.table.load_table` checks the table).
"""

from __future__ import annotations

import argparse
from typing import Any

from analysis.critical_batch import CriticalBatchFit
from analysis.loss_law import ChinchillaFit, SaturatingPowerLawFit
from analysis.optimum import OptimumFit
from analysis.powerlaw import PowerLawFit
from analysis.table import dumps, group_dict, groups, in_group, num, pair
from mutransfer._io import atomic_write_text, check_output
from mutransfer_cli._common import bounded_int, number_in, positive_float, print_json
from mutransfer_cli._table import (
    add_scaling_columns,
    add_table_flags,
    check_level,
    column_flag,
    columns,
    read_table,
    scaling_fit,
)

HELP = "fit optimum | power-law | critical-batch | loss | scaling laws to a results table"
KINDS = ("optimum", "power-law", "critical-batch", "loss", "scaling")


# ----------------------------------------------------------------------- arguments
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
    o.add_argument("--band", type=number_in(0.0, 1.0), default=0.0025,
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
    sc.add_argument("--band", type=number_in(0.0, 1.0), default=0.0025,
                    help="near-optimal band, fraction of the minimum (default 0.0025)")
    sc.set_defaults(level=0.9)  # the scaling laws' bootstrap intervals
    sc.add_argument("--method", choices=("optima", "band"), default="optima",
                    help="optima: laws through the per-cell quadratic optima (default); band: "
                    "Step Law's regression on every run inside the band")
    _output_flags(sc)


# ----------------------------------------------------------------------- the fits
def fit_optimum(args: argparse.Namespace) -> dict[str, Any]:
    group = list(args.group or [])
    df, counts = read_table(args, [args.x, args.y], group, keep_diverged=True)
    diverged = column_flag(args.diverged)
    fit = OptimumFit(x=args.x, y=args.y, group_by=tuple(group), diverged=diverged,
                     seed=args.seed_col, band=args.band, n_boot=args.n_boot, level=args.level,
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
            "sensitivity": o.sensitivity_dict(),
        })
    return {"kind": "optimum", "x": args.x, "y": args.y, "group_by": group or None,
            "ci_level": args.level, "n_boot": args.n_boot, "band_fraction": args.band,
            "results": str(args.results), **counts, "fits": fits}


def fit_power_law(args: argparse.Namespace) -> dict[str, Any]:
    group = list(args.group or [])
    xs = [args.x] + ([args.x2] if args.x2 else [])
    if len(set(xs)) != len(xs):
        raise ValueError(f"--x and --x2 are both {args.x!r}; give two different columns")
    value_cols = [*xs, args.y] + ([args.weight] if args.weight else [])
    df, counts = read_table(args, value_cols, group)
    fits = []
    for key, g in groups(df, group):
        f = in_group(group, key, lambda g=g: PowerLawFit(
            xs, args.y, weight=args.weight, n_boot=args.n_boot, level=args.level,
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
    group = list(args.group or [])
    df, counts = read_table(args, [args.batch, args.steps], group, inf_ok=[args.steps])
    fits = []
    for key, g in groups(df, group):
        f = in_group(group, key, lambda g=g: CriticalBatchFit(
            args.batch, args.steps, b0=args.b0, overshoot=0.2, diverged=None,
            n_boot=args.n_boot, level=args.level, random_state=args.seed).fit(g))
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
    if args.n_jobs < 1:
        raise ValueError(f"--n-jobs must be >= 1, got {args.n_jobs}")
    xs = [args.n] if args.saturating else [args.n, args.d]
    if len(set(xs)) != len(xs):
        raise ValueError(f"--n and --d are both {args.n!r}; give two different columns")
    df, counts = read_table(args, [*xs, args.loss], [])
    kw = dict(n_boot=args.n_boot, level=args.level, random_state=args.seed, diverged=None,
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


def fit_scaling(args: argparse.Namespace) -> dict[str, Any]:
    fit, counts = scaling_fit(args)
    out = fit.to_dict()
    out["results"] = str(args.results)
    out["n_not_complete"] = counts["n_not_complete"]
    out["n_dropped"] = counts["n_dropped"]
    out["proxy"] = counts["proxy"]
    return out


FITTERS = {"optimum": fit_optimum, "power-law": fit_power_law,
           "critical-batch": fit_critical_batch, "loss": fit_loss, "scaling": fit_scaling}


def run(args: argparse.Namespace) -> int:
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
