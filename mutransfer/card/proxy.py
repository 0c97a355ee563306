"""The proxy side of a transfer: its base LR and where it comes from (an LR sweep's table,
a ``fit optimum`` document, a given LR), and the settings of a tuned proxy (its training
config, or the table's columns) that the card must carry.

The functions read a request's fields (:class:`mutransfer.card.make.TransferRequest`,
flattened into the names of ``mutransfer transfer``'s flags) and fill the ones left open."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from analysis.optimum import OptimumFit
from analysis.results import proxy_record
from analysis.table import load_table
from analysis.tau import tau_from
from mutransfer._io import read_json
from mutransfer.parametrize.specs import Multipliers
from mutransfer.training.config import TrainConfig, load_config
from mutransfer.training.trainer import base_sizes


def proxy_optimum(args: Any, seq_len: int, tuned: TunedProxy | None = None
                  ) -> tuple[float, list | None, dict, dict, list[float], float | None, float | None]:
    """The proxy's base LR and where it comes from: ``(lr, interval, projected, source,
    proxy widths, proxy batch tokens, proxy tokens)``. The tuned proxy's own LR, batch
    and token budget are the fallbacks."""
    projected: dict[str, Any] = {}
    source: dict[str, Any] = {}
    if args.results:
        return optimum_from_results(args, seq_len)
    batch, tokens = (tuned.batch_tokens, tuned.tokens) if tuned else (None, None)
    if args.fit:
        lr, proj, src, widths = optimum_from_fit(args.fit, args.group, args.parametrization)
        extra = {"at_edge": proj["lr"]["at_edge"], **({"drift": proj["drift"]} if "drift" in proj else {}),
                 **({"sensitivity": proj["sensitivity"]} if "sensitivity" in proj else {})}
        return lr, proj["lr"]["interval"], extra, src, widths, batch, tokens
    if args.lr is None and tuned is not None:
        return tuned.lr, None, projected, source, [float(tuned.width)], batch, tokens
    return args.lr, None, projected, source, [], batch, tokens


class TunedProxy(NamedTuple):
    """What the card takes from a tuned proxy's training config (``--proxy-config``)."""

    lr: float
    width: int
    model: Any
    multipliers: Any
    readout_init: str
    depth_alpha: float
    lr_mults: dict[str, float]
    betas: list[float]
    eps: float
    tau: float | None
    batch_tokens: float | None
    tokens: float | None
    weight_decay: float | None = None


def read_proxy_config(args: Any) -> TunedProxy:
    """Read ``--proxy-config`` (a TrainConfig file, validated as the trainer validates it)
    and fill the proxy flags left unset from it; a flag that contradicts it -> ValueError
    naming both values. Its weight decay becomes a timescale tau = B / (eta·lambda·D)
    (coupled) or B / (lambda·D) (independent) of its own run, which the target keeps."""
    path = args.proxy_config
    if not Path(path).is_file():
        raise ValueError(f"--proxy-config {path!r} does not exist")
    try:
        cfg = load_config(path)
    except ValueError as exc:
        raise ValueError(f"--proxy-config {path}: {exc}") from None
    model = cfg.model_config()
    base_width, base_depth = base_sizes(cfg, model)  # the trainer's rule
    for flag, attr, value in (("--preset", "preset", cfg.model.preset),
                              ("--parametrization", "parametrization", cfg.parametrization.kind),
                              ("--base-width", "base_width", base_width),
                              ("--base-depth", "base_depth", base_depth),
                              ("--seq-len", "seq_len", model.seq_len)):
        given = getattr(args, attr)
        if given is None:
            setattr(args, attr, value)
        elif given != value:
            raise ValueError(f"{flag} {given} contradicts --proxy-config {path} ({attr}: {value})")
    batch_tokens = float(cfg.run.batch_size * model.seq_len)
    return tuned_proxy(cfg.to_flat(), lr=cfg.optim.lr, model=model, batch_tokens=batch_tokens,
                       tokens=batch_tokens * cfg.run.steps, args=args, origin=f"--proxy-config {path}")


#: Results-table columns (TrainConfig fields) that configure the proxy beyond its LR and
#: shape: a card must carry them, or it describes a different model than the one tuned.
CARRIED = ("input_mult", "output_mult", "attn_mult", "residual_mult", "lr_mult_input", "lr_mult_output",
           "lr_mult_vector", "readout_init", "depth_alpha", "beta1", "beta2", "eps", "wd_mode",
           "weight_decay")


def tuned_proxy(values: Mapping[str, Any], *, lr: float, model: Any, batch_tokens: float | None,
                tokens: float | None, args: Any, origin: str) -> TunedProxy:
    """The proxy settings the card carries (:data:`CARRIED`; absent ones take the
    TrainConfig defaults, checked as the trainer checks them). ``--wd-mode`` left unset
    takes the proxy's; one that contradicts it -> ValueError. A weight decay becomes its
    timescale tau = B / (eta·lambda·D) (coupled) or B / (lambda·D) (independent) over the
    proxy's own run, which the target keeps (None without the batch and budget)."""
    flat = {k: values[k] for k in CARRIED if k in values}
    try:
        cfg = TrainConfig.from_overrides(None, {"parametrization": args.parametrization or "mup", **flat})
    except ValueError as exc:
        raise ValueError(f"{origin}: {exc}") from None
    par, opt = cfg.parametrization, cfg.optim
    if args.wd_mode is None:
        args.wd_mode = opt.wd_mode
    elif args.wd_mode != opt.wd_mode:
        raise ValueError(f"--wd-mode {args.wd_mode} contradicts {origin} (wd_mode: {opt.wd_mode})")
    tau = None
    if opt.weight_decay > 0 and batch_tokens and tokens:
        # independent decay is lambda per step, not eta·lambda: tau_from with eta = 1
        tau = tau_from(batch_tokens, 1.0 if opt.wd_mode == "independent" else lr, opt.weight_decay, tokens)
    return TunedProxy(
        lr=float(lr), width=int(model.width), model=model,
        multipliers=Multipliers(par.input_mult, par.output_mult, par.attn_mult, par.residual_mult),
        readout_init=par.readout_init, depth_alpha=float(par.depth_alpha),
        lr_mults={"input": float(par.lr_mult_input), "output": float(par.lr_mult_output),
                  "vector": float(par.lr_mult_vector)},
        betas=[float(opt.beta1), float(opt.beta2)], eps=float(opt.eps), tau=tau,
        batch_tokens=batch_tokens, tokens=tokens, weight_decay=float(opt.weight_decay))


def optimum_from_results(args: Any, seq_len: int
                         ) -> tuple[float, list, dict, dict, list[float], float | None, float | None]:
    """Fit the optimum per width on an LR sweep's table, with the same checks as
    ``mutransfer fit`` (non-numeric lr, NaN loss not marked diverged: one error)."""
    df, _ = load_table(args.results, ("lr", "loss"), ("width",), keep_diverged=True)
    if "parametrization" in df.columns:
        df = df[df["parametrization"] == args.parametrization]
    if df.empty:
        raise ValueError(f"{args.results} has no rows with parametrization {args.parametrization!r}")
    fit = OptimumFit(x="lr", y="loss", group_by=("width",), n_boot=300).fit(df)
    widest = max(fit.params_)
    lr = float(fit.params_[widest])
    lo, hi = (float(v) if math.isfinite(v) else None for v in fit.ci_[widest])  # open side: None
    projected: dict[str, Any] = {"at_edge": bool(fit.group(widest).at_edge),
                                 "sensitivity": fit.group(widest).sensitivity_dict()}
    if len(fit.params_) >= 2:
        projected["drift"] = fit.drift("width").to_dict()
    source = {"results": str(args.results), "n_trials": int(len(df)),
              "proxy_widths": sorted(int(w) for w in fit.params_),
              "optimum_per_width": {str(int(k)): float(v) for k, v in fit.params_.items()}}
    settings = {}
    for col in CARRIED:  # the proxy's settings beyond LR and shape, one value per table
        vals = df[col].dropna().unique() if col in df.columns else []
        if len(vals) > 1:
            raise ValueError(f"{args.results}: the {args.parametrization} rows mix {col} values "
                             f"{', '.join(sorted(map(str, vals)))}; transfer one proxy setting at a time "
                             "(filter the table first)")
        if len(vals) == 1:
            settings[col] = vals[0].item() if hasattr(vals[0], "item") else vals[0]
    if settings:
        source["proxy_settings"] = settings
    source.update(recorded_proxy(proxy_record(df), f"{args.results}: the {args.parametrization} rows"))
    if "study" in df.columns and df["study"].nunique() == 1:
        source["study"] = str(df["study"].iloc[0])

    def mode(col: str) -> float | None:
        if col not in df.columns:
            return None
        vals = df[col].dropna()
        return float(vals.mode().iloc[0]) if len(vals) else None

    batch = mode("batch_tokens") or ((mode("batch_size") or 0) * (mode("seq_len") or seq_len) or None)
    tokens = mode("tokens") or ((mode("steps") or 0) * (batch or 0) or None)
    return lr, [lo, hi], projected, source, [float(w) for w in fit.params_], batch, tokens


def optimum_from_scaling(doc: Mapping[str, Any]) -> dict[str, float]:
    """The proxy's best config in a scaling fit's document (FIT.json of ``fit scaling``):
    at its largest budget, the best batch (a measured grid batch, by its cell's fitted best
    loss) and that cell's LR optimum with its interval. It was measured with the recipe the
    target runs (WSD at the budget), so it is the card's anchor, as the card-regret
    benchmark anchors its card: ``{tokens, batch_tokens, lr, lr_lo, lr_hi, loss}``."""
    cells = doc.get("cells") if isinstance(doc, Mapping) else None
    if not cells:
        raise ValueError("the scaling fit has no cells (LR optima per batch and budget) to take the proxy's "
                         "best config from")
    d_max = max(c["tokens"] for c in cells)
    best = min((c for c in cells if c["tokens"] == d_max), key=lambda c: c["loss_opt"])
    return {"tokens": float(d_max), "batch_tokens": float(best["batch_tokens"]), "lr": float(best["lr_opt"]),
            "lr_lo": float(best["lr_lo"]), "lr_hi": float(best["lr_hi"]), "loss": float(best["loss_opt"])}


def _selects(group: dict | None, sel: dict[str, str]) -> bool:
    group = group or {}
    for key, want in sel.items():
        if key not in group:
            return False
        have = group[key]
        if isinstance(have, (int, float)) and not isinstance(have, bool):
            try:
                if float(want) != float(have):
                    return False
            except ValueError:
                return False
        elif str(have) != want:
            return False
    return True


def optimum_from_fit(path: str, group: str | None, parametrization: str
                     ) -> tuple[float, dict, dict, list[float]]:
    """Read an optimum JSON of ``mutransfer fit optimum`` and pick the group to transfer.

    Selection: ``--group KEY=VALUE[,...]`` if given; else the groups of this
    parametrization (when the fit is grouped by ``parametrization``), and among them the
    largest ``width``. Returns ``(lr, projected, source, widths of the candidates)``.
    """
    doc = read_json(path, "fit file")
    fits = doc.get("fits") if isinstance(doc, dict) else None
    if not isinstance(fits, list) or not fits or not all(
            isinstance(f, dict) and "x_opt" in f for f in fits):
        raise ValueError(f"{path} is not the output of `mutransfer fit optimum` (no fits with x_opt)")
    _check_fit_entries(path, fits)
    x = doc.get("x")
    if x is not None and "lr" not in str(x).lower() and "learning" not in str(x).lower():
        raise ValueError(f"{path} holds the optimum of {x!r}, not of a learning rate")
    cands = fits
    if group:
        sel = {}
        for item in group.split(","):
            key, eq, val = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"--group {group!r} must look like KEY=VALUE[,KEY=VALUE]")
            sel[key.strip()] = val.strip()
        cands = [f for f in fits if _selects(f.get("group"), sel)]
        if not cands:
            raise ValueError(f"no group of {path} matches --group {group}")
    elif any("parametrization" in (f.get("group") or {}) for f in fits):
        cands = [f for f in fits if (f.get("group") or {}).get("parametrization") == parametrization]
        if not cands:
            raise ValueError(f"{path} has no group with parametrization {parametrization!r}")
    widths = [float(f["group"]["width"]) for f in cands if "width" in (f.get("group") or {})]
    if len(cands) > 1:
        if len(widths) != len(cands):
            raise ValueError(f"{path} has {len(cands)} groups and no width to choose by; "
                             "pick one with --group KEY=VALUE")
        chosen = max(cands, key=lambda f: float(f["group"]["width"]))
    else:
        chosen = cands[0]
    lr = chosen["x_opt"]
    if not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
        raise ValueError(f"{path}: group {chosen.get('group')} has no usable optimum ({lr!r})")
    ci = chosen.get("ci") or [None, None]
    label = ", ".join(f"{k}={v}" for k, v in (chosen.get("group") or {}).items()) or "all"
    projected: dict = {"lr": {"value": float(lr), "interval": list(ci),
                              "method": f"muP optimum of group {label} from {Path(path).name}",
                              "at_edge": bool(chosen.get("at_edge", False))}}
    if isinstance(chosen.get("sensitivity"), dict):  # leave-one-seed-out spread of the optimum
        projected["sensitivity"] = chosen["sensitivity"]
    source: dict = {"fit": str(path), "fit_group": chosen.get("group")}
    if isinstance(doc.get("proxy"), dict):  # what the fitted rows say the proxy was
        source.update(recorded_proxy(doc["proxy"], f"fit file {path!r}"))
    if widths:
        source["proxy_widths"] = sorted(int(w) for w in widths)
        per = {str(int(f["group"]["width"])): f["x_opt"] for f in cands}
        source["optimum_per_width"] = per
        if len(cands) >= 2:
            logs = [math.log2(v) for v in per.values() if v and v > 0]
            projected["drift"] = {"across": "width", "drift_octaves": max(logs) - min(logs),
                                  "ci": None, "n_groups": len(cands),
                                  "any_at_edge": any(bool(f.get("at_edge")) for f in cands),
                                  "slope": None, "slope_ci": None}
    return float(lr), projected, source, widths


def _check_fit_entries(path: str, fits: list[dict]) -> None:
    """Each fit of an optimum JSON has the shape `fit optimum` writes: a ``group`` mapping
    (or null) whose ``width`` is a positive number, ``x_opt`` a number or null, ``ci`` a pair
    of numbers or nulls. One ValueError naming the field, never a TypeError later."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    for i, f in enumerate(fits):
        where = f"fit file {path!r}: fits[{i}]"
        group = f.get("group")
        if group is not None and not isinstance(group, dict):
            raise ValueError(f"{where}.group must be a mapping of column: value, got {group!r}")
        width = (group or {}).get("width")
        if width is not None and not (number(width) and 0 < width < math.inf):
            raise ValueError(f"{where}.group.width must be a positive number, got {width!r}")
        if f["x_opt"] is not None and not number(f["x_opt"]):
            raise ValueError(f"{where}.x_opt must be a number or null, got {f['x_opt']!r}")
        ci = f.get("ci")
        if ci is not None and not (isinstance(ci, list) and len(ci) == 2
                                   and all(v is None or number(v) for v in ci)):
            raise ValueError(f"{where}.ci must be an interval [lo, hi] (numbers or null), got {ci!r}")


#: The card's ``source`` keys of what the rows recorded about the proxy
#: (:data:`analysis.PROXY_COLUMNS` -> card key).
RECORDED = {"arch": "arch", "tokenizer": "tokenizer", "vocab_size": "proxy_vocab_size",
            "seq_len": "proxy_seq_len", "compute_dtype": "dtype", "depth": "proxy_depth"}


def recorded_proxy(record: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The proxy's architecture, tokenizer, vocabulary, context and dtype as the rows (or a
    fit's ``proxy`` block) recorded them, under the card's ``source`` keys; a column with
    several values -> ValueError naming it: one proxy per transfer."""
    out: dict[str, Any] = {}
    for col, key in RECORDED.items():
        value = record.get(col)
        if value is None:
            continue
        if isinstance(value, list) and col == "depth":
            continue  # a depth ladder: the base depth is --base-depth's
        if isinstance(value, list):
            raise ValueError(f"{where}: {col} takes several values ({', '.join(map(str, value))}); transfer "
                             f"one proxy {'context' if col == 'seq_len' else col} at a time (filter the "
                             "table first)")
        out[key] = int(value) if col in ("vocab_size", "seq_len", "depth") else str(value)
    return out
