"""``mutransfer transfer``: project the proxy's optimum to a target model; write the card."""

from __future__ import annotations

import argparse
import math

from mutransfer.cli._common import MAX_DEPTH, MAX_WIDTH, bounded_int, positive_float, positive_int, print_json

HELP = "project to the target scale and write the transfer card (YAML)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--results", help="results table (CSV/Parquet) of an LR sweep")
    src.add_argument("--fit", metavar="F.json",
                     help="optimum JSON of `mutransfer fit optimum` (the widest group, or --group)")
    src.add_argument("--lr", type=positive_float, help="use this base LR instead of fitting one")
    p.add_argument("--group", default=None, metavar="KEY=VALUE[,KEY=VALUE]",
                   help="with --fit: the group to take the optimum from (default: the largest width "
                   "of this parametrization)")
    p.add_argument("--preset", default="gpt-small", help="proxy model preset (default gpt-small)")
    p.add_argument("--parametrization", "-p", default="mup", help="mup | completep | muon (default mup)")
    p.add_argument("--base-width", type=positive_int, default=None,
                   help="base width of the sweep (default: the smallest width in the results)")
    p.add_argument("--base-depth", type=positive_int, default=None, help="base depth (completep)")
    p.add_argument("--target-width", type=bounded_int(1, MAX_WIDTH, "--target-width"), required=True,
                   help="width of the big model")
    p.add_argument("--target-depth", type=bounded_int(1, MAX_DEPTH, "--target-depth"), default=None,
                   help="depth of the big model")
    p.add_argument("--tokens", type=positive_float, required=True, help="training tokens of the big run")
    p.add_argument("--seq-len", type=positive_int, default=None, help="context (default: preset's)")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="sequences per step (default: the sweep's)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="weight decay (default 0)")
    p.add_argument("--wd-mode", choices=("coupled", "independent"), default="coupled")
    p.add_argument("--schedule", default="cosine", help="schedule kind for the big run (default cosine)")
    p.add_argument("--warmup-fraction", type=float, default=0.01, help="warmup share of steps (0.01)")
    p.add_argument("--out", required=True, help="card path (.yaml, or .json)")
    p.add_argument("--json", action="store_true", help="also print the card as JSON")


def run(args: argparse.Namespace) -> int:
    from mutransfer._io import check_output
    from mutransfer.card import build_card, save_card
    from mutransfer.models import GPT, MLP, GPTConfig, get_preset
    from mutransfer.parametrization import KINDS, Parametrization

    if args.parametrization not in KINDS or args.parametrization == "sp":
        raise ValueError(f"parametrization {args.parametrization!r} does not transfer; use mup, "
                         "completep or muon")
    if not 0 <= args.warmup_fraction < 1:
        raise ValueError(f"--warmup-fraction must be in [0, 1), got {args.warmup_fraction}")
    if args.group and not args.fit:
        raise ValueError("--group only goes with --fit")
    check_output(args.out, inputs=[args.results, args.fit])  # before the work, never onto an input
    cfg = get_preset(args.preset)
    seq_len = args.seq_len or getattr(cfg, "seq_len", 1)
    source: dict = {"preset": args.preset}
    projected: dict = {}
    batch_size = args.batch_size
    base_width = args.base_width
    if args.results:
        from analysis import OptimumFit, read_results

        df = read_results(args.results, required=("lr", "loss", "width"))
        if "parametrization" in df.columns:
            df = df[df["parametrization"] == args.parametrization]
        if df.empty:
            raise ValueError(f"{args.results} has no rows with parametrization {args.parametrization!r}")
        fit = OptimumFit(x="lr", y="loss", group_by=("width",), n_boot=300).fit(df)
        widest = max(fit.params_)
        lr = float(fit.params_[widest])
        lo, hi = fit.ci_[widest]
        drift = fit.drift("width") if len(fit.params_) >= 2 else None
        base_width = base_width or int(df["width"].min())
        batch_size = batch_size or int(df["batch_size"].mode().iloc[0]) if "batch_size" in df else batch_size
        source.update({"results": str(args.results), "n_trials": int(len(df)),
                       "proxy_widths": sorted(int(w) for w in fit.params_),
                       "optimum_per_width": {str(int(k)): float(v) for k, v in fit.params_.items()}})
        projected["lr"] = {"value": lr, "interval": [float(lo), float(hi)],
                           "method": f"muP optimum at the widest proxy (width {int(widest)})",
                           "at_edge": bool(fit.group(widest).at_edge)}
        if drift is not None:
            projected["drift"] = drift.to_dict()
    elif args.fit:
        lr, proj, src_info, widths = optimum_from_fit(args.fit, args.group, args.parametrization)
        projected.update(proj)
        source.update(src_info)
        if widths:
            base_width = base_width or int(min(widths))
    else:
        lr = args.lr
        projected["lr"] = {"value": lr, "interval": None, "method": "given (--lr)"}
    base_width = base_width or cfg.width
    batch_size = batch_size or 32
    if base_width > args.target_width:
        raise ValueError(f"base width {base_width} is larger than the target width {args.target_width}")
    cls = GPT if isinstance(cfg, GPTConfig) else MLP
    depth = args.target_depth
    kw = {}
    extra = {"seq_len": seq_len} if cls is GPT else {}
    if depth is not None or args.parametrization == "completep":
        depth = depth or cfg.depth
        kw = {"depth": depth, "base_depth": args.base_depth or cfg.depth}
        builder = lambda w, d: cls(cfg.replace(width=w, depth=d, **extra))  # noqa: E731
    else:
        builder = lambda w: cls(cfg.replace(width=w, **extra))  # noqa: E731
    pz = Parametrization(builder, width=args.target_width, base_width=base_width,
                         kind=args.parametrization, **kw)
    import torch

    with torch.device("meta"):
        meta = builder(args.target_width, depth) if depth is not None else builder(args.target_width)
    n_params = sum(p.numel() for p in meta.parameters())
    n_nonembed = meta.num_params(non_embedding=True) if hasattr(meta, "num_params") else n_params
    batch_tokens = batch_size * seq_len
    steps = max(1, math.ceil(args.tokens / batch_tokens))
    target = {"width": args.target_width, "depth": depth or getattr(cfg, "depth", None),
              "n_params": n_params, "n_params_nonembed": n_nonembed, "tokens": args.tokens,
              "seq_len": seq_len}
    schedule = {"kind": args.schedule, "warmup_steps": int(round(args.warmup_fraction * steps)),
                "decay_fraction": 1.0 if args.schedule == "cosine" else 0.2, "total_steps": steps}
    card = build_card(
        pz, lr=lr, optimizer={"name": "muon" if args.parametrization == "muon" else "adamw",
                              "weight_decay": args.weight_decay, "wd_mode": args.wd_mode},
        schedule=schedule, batch={"sequences": batch_size, "tokens": batch_tokens},
        target=target, source=source, projected=projected)
    path = save_card(card, args.out)
    if args.json:
        print_json(card)
    else:
        print(f"wrote {path}: base lr {lr:.4g} for width {args.target_width} "
              f"({n_params / 1e6:.1f}M params), {steps} steps of {batch_tokens} tokens")
    return 0


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
    import json
    from pathlib import Path

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"fit file {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"fit file {path!r} is not valid JSON: {exc}") from None
    fits = doc.get("fits") if isinstance(doc, dict) else None
    if not isinstance(fits, list) or not fits or not all(
            isinstance(f, dict) and "x_opt" in f for f in fits):
        raise ValueError(f"{path} is not the output of `mutransfer fit optimum` (no fits with x_opt)")
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
    source: dict = {"fit": str(path), "fit_group": chosen.get("group")}
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
