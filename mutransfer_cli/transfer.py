"""``mutransfer transfer``: project the proxy's optimum to a target model; write the card.

The target is a whole model (a preset plus ``--set KEY=VALUE`` overrides, or
``--model-config FILE``) and a token budget. The base LR is the proxy's μP optimum
(``--results``, ``--fit`` or ``--lr``), moved to the target's batch and tokens by the
η*(B, D) law of ``--scaling-fit`` (``mutransfer fit scaling``), which also gives the batch
B*(D), the weight decay through tau, the warmup and the WSD decay fraction. A depth
change uses CompleteP's rules. The pieces live in :mod:`mutransfer.target` and
:mod:`mutransfer.card`; this module reads flags and files and writes the card.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from mutransfer.models.presets import DEFAULT_PRESET
from mutransfer_cli._common import (
    MAX_DEPTH,
    MAX_WIDTH,
    bounded_int,
    key_value,
    positive_float,
    positive_int,
    print_json,
)

HELP = "project to the target model and token budget and write the transfer card (YAML)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--results", help="results table (CSV/Parquet) of an LR sweep")
    src.add_argument("--fit", metavar="F.json",
                     help="optimum JSON of `mutransfer fit optimum` (the widest group, or --group)")
    src.add_argument("--lr", type=positive_float, help="use this base LR instead of fitting one")
    p.add_argument("--group", default=None, metavar="KEY=VALUE[,KEY=VALUE]",
                   help="with --fit: the group to take the optimum from (default: the largest width "
                   "of this parametrization)")
    g = p.add_argument_group("proxy")
    g.add_argument("--proxy-config", metavar="FILE", default=None,
                   help="the tuned proxy's training config (YAML/JSON of TrainConfig fields, e.g. "
                   "best.yaml of `mutransfer sweep multipliers`): its forward and per-role LR "
                   "multipliers, readout init, Adam betas and eps, and weight-decay timescale go into "
                   "the card; its preset, parametrization, base width and context are the defaults of "
                   "the flags below, and its lr is the base LR when no --results/--fit/--lr is given")
    g.add_argument("--preset", default=None,
                   help=f"proxy model preset, as the sweep used (default: --proxy-config's, else "
                   f"{DEFAULT_PRESET})")
    g.add_argument("--parametrization", "-p", default=None,
                   help="mup | completep | muon (default: --proxy-config's, else mup)")
    g.add_argument("--base-width", type=positive_int, default=None,
                   help="base width of the sweep (default: the smallest width in the results)")
    g.add_argument("--base-depth", type=positive_int, default=None,
                   help="depth the proxy was tuned at (default: the preset's)")
    g.add_argument("--seq-len", type=positive_int, default=None,
                   help="the proxy's context (default: the preset's); also the target's unless --set "
                   "seq_len=...")
    g.add_argument("--proxy-batch-tokens", type=positive_float, default=None,
                   help="batch (tokens) the proxy's LR was tuned at (default: from --results)")
    g.add_argument("--proxy-tokens", type=positive_float, default=None,
                   help="token budget the proxy's LR was tuned at (default: from --results)")
    t = p.add_argument_group("target")
    t.add_argument("--target-preset", default=None, help="preset the target starts from (default: --preset)")
    t.add_argument("--set", dest="overrides", action="append", type=key_value, default=[],
                   metavar="KEY=VALUE",
                   help="target model field (repeatable): width, depth, n_head or head_dim, d_ff, "
                   "seq_len, vocab_size, ... e.g. --set depth=24")
    t.add_argument("--model-config", metavar="FILE", default=None,
                   help="target model config (YAML/JSON mapping of model fields, optional preset)")
    t.add_argument("--model", metavar="hf:PATH", default=None,
                   help="the full-size target as a local transformers config (hf:PATH/config.json, never "
                   "a hub id): the card holds that model's own parameter names; the proxy is the same "
                   "architecture scaled down (--head-rule)")
    t.add_argument("--head-rule", choices=("keep_head_dim", "keep_heads"), default="keep_head_dim",
                   help="with --model: how the scaled-down proxy's heads follow width (keep_head_dim)")
    t.add_argument("--tokenizer", default=None, metavar="NAME",
                   help="the target's tokenizer (recorded as target.tokenizer; a warning when it differs "
                   "from the results table's tokenizer column)")
    t.add_argument("--allow-vocab-change", action="store_true",
                   help="accept a target vocabulary other than the proxy's (recorded in the card)")
    t.add_argument("--target-width", type=bounded_int(1, MAX_WIDTH, "--target-width"), default=None,
                   help="same as --set width=N")
    t.add_argument("--target-depth", type=bounded_int(1, MAX_DEPTH, "--target-depth"), default=None,
                   help="same as --set depth=N")
    budget = t.add_mutually_exclusive_group(required=True)
    budget.add_argument("--tokens", type=positive_float, help="training tokens of the target run")
    budget.add_argument("--tokens-per-param", type=positive_float,
                        help="training tokens per target parameter, all parameters counted "
                        "(e.g. 20, Chinchilla)")
    t.add_argument("--dp-size", type=positive_int, default=None,
                   help="data-parallel ranks: the batch is rounded to a multiple of it")
    t.add_argument("--micro-batch", type=positive_int, default=None,
                   help="sequences per rank per forward: the batch is rounded to a multiple of dp_size x "
                   "micro_batch (default: a power-of-two-friendly multiple of 8, said so in the card)")
    t.add_argument("--batch-size", type=positive_int, default=None, help="sequences per step (fixed)")
    t.add_argument("--batch-tokens", type=positive_float, default=None,
                   help="tokens per step (fixed; rounded to whole sequences)")
    j = p.add_argument_group("projection")
    j.add_argument("--scaling-fit", metavar="FIT.json", default=None,
                   help="laws of `mutransfer fit scaling`: batch, LR vs batch and tokens, tau, warmup, decay")
    j.add_argument("--batch-rule", choices=("auto", "fit", "deepseek"), default="auto",
                   help="where the batch comes from without --batch-size/--batch-tokens: fit = the "
                   "fitted B*(D); deepseek = DeepSeek LLM's B_opt(C); auto (default) = fit unless it "
                   "is at the grid's edge, unresolved or beyond --extrapolation-limit, then deepseek")
    j.add_argument("--accept-edge", action="append", default=[], choices=("batch", "lr"),
                   help="with --batch-rule fit: take the fit's batch (or LR law) although `fit scaling` "
                   "flagged it as at its grid's edge, a bound rather than an optimum (repeatable; "
                   "recorded in the card's projected.accepted_edges and warned about); without it such a "
                   "value exits 2")
    j.add_argument("--audit", metavar="AUDIT.json", default=None,
                   help="held-out audit to record in the card (rows of the audit table)")
    j.add_argument("--extrapolation-limit", type=positive_float, default=100.0,
                   help="warn when the target lies this many times beyond the measured range (100)")
    j.add_argument("--weight-decay", type=float, default=None,
                   help="weight decay (default: from the fitted tau, else 0)")
    j.add_argument("--wd-mode", choices=("coupled", "independent"), default=None,
                   help="coupled (torch AdamW: per-step decay lr x wd) or independent (wd x schedule); "
                   "default: --proxy-config's, else coupled")
    j.add_argument("--schedule", default="wsd", help="schedule kind: wsd (default), cosine, linear, "
                   "constant, inverse_sqrt")
    j.add_argument("--decay-fraction", type=float, default=None,
                   help="WSD cooldown share of the steps (default: fitted, else 0.2)")
    j.add_argument("--decay-shape", default="1-sqrt", help="WSD cooldown shape (default 1-sqrt)")
    j.add_argument("--min-lr-ratio", type=float, default=0.0, help="final LR / peak LR (default 0)")
    j.add_argument("--warmup-tokens", type=positive_float, default=None,
                   help="warmup length in tokens (default: fitted, else 1%% of the budget)")
    j.add_argument("--warmup-fraction", type=float, default=None,
                   help="warmup as a share of the token budget (instead of --warmup-tokens)")
    o = p.add_argument_group("provenance and output")
    o.add_argument("--study", default=None, help="name of the sweep's study (for provenance)")
    o.add_argument("--storage", default=None, help="the sweep's storage (recorded without credentials)")
    o.add_argument("--out", required=True, help="card path (.yaml, or .json)")
    o.add_argument("--json", action="store_true", help="also print the card as JSON")
    o.add_argument("--strict", action="store_true",
                   help="exit 1 when the card carries any warning (failed audit, extrapolation, a change of "
                   "context, vocabulary or tokenizer, ...): the card is still written, for inspection, but "
                   "the exit status says it is not to be trusted as is")


def check_flags(args: argparse.Namespace) -> None:
    """Every flag's range, before any work (one ValueError naming the flag)."""
    from mutransfer._io import check_output
    from mutransfer.parametrization import KINDS
    from mutransfer.schedules import DECAY_SHAPES, SCHEDULE_KINDS

    if not (args.results or args.fit or args.lr is not None or args.proxy_config):
        raise ValueError("give the proxy's LR: --results, --fit, --lr or --proxy-config")
    args.preset = args.preset or DEFAULT_PRESET
    args.parametrization = args.parametrization or "mup"
    if args.parametrization not in KINDS or args.parametrization == "sp":
        raise ValueError(f"parametrization {args.parametrization!r} does not transfer; use mup, "
                         "completep or muon")
    if args.schedule not in SCHEDULE_KINDS:
        raise ValueError(f"--schedule must be one of {', '.join(SCHEDULE_KINDS)}, got {args.schedule!r}")
    if args.decay_shape not in DECAY_SHAPES:
        raise ValueError(f"--decay-shape must be one of {', '.join(DECAY_SHAPES)}, got {args.decay_shape!r}")
    checks = [("--weight-decay", args.weight_decay, 0.0, math.inf),
              ("--decay-fraction", args.decay_fraction, 0.0, 1.0),
              ("--min-lr-ratio", args.min_lr_ratio, 0.0, 1.0),
              ("--warmup-fraction", args.warmup_fraction, 0.0, 0.999999)]
    for flag, value, low, high in checks:
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            bound = ">= 0" if high == math.inf else f"in [{low:g}, {high:g}]" if high == 1 else "in [0, 1)"
            raise ValueError(f"{flag} must be a finite number {bound}, got {value!r}")
    if args.group and not args.fit:
        raise ValueError("--group only goes with --fit")
    if args.batch_size is not None and args.batch_tokens is not None:
        raise ValueError("give --batch-size or --batch-tokens, not both")
    for what in dict.fromkeys(args.accept_edge):  # a bound taken as a value: only with the fit's rule
        if args.batch_rule != "fit":
            raise ValueError(f"--accept-edge {what} contradicts --batch-rule {args.batch_rule}: only "
                             "--batch-rule fit takes the fit's values as they are; drop one")
        given = "--batch-size" if args.batch_size is not None else "--batch-tokens" if (
            args.batch_tokens is not None) else None
        if what == "batch" and given:
            raise ValueError(f"--accept-edge batch contradicts {given}: the batch is given, not taken from "
                             "the fit; drop one")
        if not args.scaling_fit:
            raise ValueError(f"--accept-edge {what} needs --scaling-fit: there is no fit whose edge it "
                             "would accept")
    if args.warmup_tokens is not None and args.warmup_fraction is not None:
        raise ValueError("give --warmup-tokens or --warmup-fraction, not both")
    # before the work, never onto an input
    if args.model is not None and (args.model_config or args.target_preset or args.overrides
                                   or args.target_width or args.target_depth):
        raise ValueError("--model names the whole target; it does not take --model-config, --target-preset, "
                         "--set, --target-width or --target-depth (edit the config.json instead)")
    # before the work, never onto an input
    model_file = args.model[3:] if args.model and args.model.startswith("hf:") else None
    check_output(args.out, inputs=[("the --results", args.results), ("the --fit", args.fit),
                                   ("the --scaling-fit", args.scaling_fit), ("the --audit", args.audit),
                                   ("the --model-config", args.model_config),
                                   ("the --proxy-config", args.proxy_config), ("the --model", model_file)])


def run(args: argparse.Namespace) -> int:
    from mutransfer.card import build_card, save_card
    from mutransfer.models import get_preset
    from mutransfer.target import lr_sensitivity, plan_run, read_scaling_fit

    tuned = read_proxy_config(args) if args.proxy_config else None
    check_flags(args)
    proxy = tuned.model if tuned else get_preset(args.preset)  # the target starts from the proxy
    if args.seq_len is not None and hasattr(proxy, "seq_len"):
        proxy = proxy.replace(seq_len=args.seq_len)
    proxy_seq = getattr(proxy, "seq_len", 1)
    lr, lr_ci, projected, source, widths, proxy_b, proxy_d = proxy_optimum(args, proxy_seq, tuned)
    if tuned is None and source.get("proxy_settings"):
        tuned = tuned_proxy(source["proxy_settings"], lr=lr, model=proxy, batch_tokens=proxy_b,
                            tokens=proxy_d, args=args, origin=f"--results {args.results}")
    args.wd_mode = args.wd_mode or "coupled"
    base_width = args.base_width or (int(min(widths)) if widths else proxy.width)
    base_depth = args.base_depth or proxy.depth

    target, pz, warnings = target_parametrization(args, proxy, base_width, base_depth, tuned)
    cfg, kind = target.config, pz.kind
    width, depth = (target.width, target.depth) if target.kind == "hf" else (cfg.width, cfg.depth)
    vocab_change = check_vocab(args, proxy, target, source)
    n_params, n_nonembed = target.n_params()
    tokens = args.tokens if args.tokens is not None else args.tokens_per_param * n_params
    seq_len = (args.seq_len or proxy_seq) if target.kind == "hf" else getattr(cfg, "seq_len", 1)
    laws = read_scaling_fit(args.scaling_fit) if args.scaling_fit else None
    plan = plan_run(
        proxy_lr=lr, proxy_lr_interval=lr_ci, tokens=float(tokens), seq_len=seq_len, laws=laws,
        proxy_batch_tokens=args.proxy_batch_tokens or proxy_b,
        proxy_tokens=args.proxy_tokens or proxy_d, batch_tokens=args.batch_tokens,
        batch_sequences=args.batch_size, dp_size=args.dp_size, micro_batch=args.micro_batch,
        weight_decay=args.weight_decay,
        wd_mode=args.wd_mode, warmup_tokens=args.warmup_tokens, warmup_fraction=args.warmup_fraction,
        decay_fraction=args.decay_fraction, extrapolation_limit=args.extrapolation_limit,
        n_params=n_nonembed, batch_rule=args.batch_rule, proxy_tau=tuned.tau if tuned else None,
        accept_edge=tuple(dict.fromkeys(args.accept_edge)))
    warnings += plan.warnings
    at_edge = projected.pop("at_edge", None)
    sensitivity = projected.pop("sensitivity", None)
    projected.update(plan.projected)
    if at_edge is not None:
        projected["lr"]["at_edge"] = at_edge
    projected["lr"].update(lr_sensitivity(  # how far one seed moves the base LR
        sensitivity, laws, proxy_batch_tokens=plan.projected["proxy"]["batch_tokens"],
        proxy_tokens=plan.projected["proxy"]["tokens"], batch_tokens=plan.batch_tokens, tokens=float(tokens)))
    projected["warnings"] = warnings
    audit = read_audit(args.audit) if args.audit else None
    study, storage = provenance(args, source)
    source.update({"preset": args.preset, "width": int(max(widths)) if widths else base_width,
                   "depth": base_depth, "base_width": base_width, "base_depth": base_depth,
                   "seq_len": int(proxy_seq),
                   **({"proxy_widths": sorted(int(w) for w in widths)} if widths else {}),
                   "parametrization": args.parametrization, "study": study, "storage": storage})
    for flag in ("scaling_fit", "audit", "proxy_config"):
        if getattr(args, flag):
            source[flag] = str(getattr(args, flag))
    schedule: dict[str, Any] = {
        "kind": args.schedule, "warmup_steps": plan.warmup_steps, "warmup_tokens": plan.warmup_tokens,
        "decay_fraction": plan.decay_fraction if args.schedule == "wsd" else None,
        "decay_shape": args.decay_shape if args.schedule == "wsd" else None,
        "total_steps": plan.steps, "min_lr_ratio": args.min_lr_ratio}
    card = build_card(
        pz, lr=plan.lr,
        optimizer={"name": "muon" if kind == "muon" else "adamw", "weight_decay": plan.weight_decay,
                   "wd_mode": args.wd_mode, "tau": plan.tau,
                   **({"betas": tuned.betas, "eps": tuned.eps} if tuned else {})},
        schedule=schedule,
        batch={"sequences": plan.batch_sequences, "tokens": plan.batch_tokens, "seq_len": seq_len,
               "dp_size": args.dp_size, "micro_batch": plan.micro_batch,
               "grad_accum": plan.batch_sequences // ((args.dp_size or 1) * plan.micro_batch),
               "rounding": plan.projected["batch_split"]["rule"]},
        target={"model": target.to_dict(), "width": width, "depth": depth,
                **({"vocab_change": vocab_change} if vocab_change else {}),
                **({"tokenizer": args.tokenizer} if args.tokenizer else {}),
                "n_params": n_params, "n_params_nonembed": n_nonembed, "tokens": float(tokens),
                "tokens_per_param": float(tokens) / n_params, "seq_len": seq_len,
                "dp_size": args.dp_size},
        source=source, projected=projected, audit=audit,
        provenance={"study": study, "storage": storage},
        role_lr_mults=tuned.lr_mults if tuned else None)
    # What the assembled card says against itself, then how far to trust its values.
    from mutransfer.trust import card_warnings, trust_block

    warnings += [w for w in card_warnings(card) if w not in warnings]
    card["projected"]["warnings"] = warnings
    card["trust"] = trust_block(
        projected=card["projected"], laws=laws, proxy_lr_interval=lr_ci, proxy_lr=lr,
        proxy_batch_tokens=args.proxy_batch_tokens or proxy_b, proxy_tokens=args.proxy_tokens or proxy_d,
        batch_tokens=plan.batch_tokens, tokens=float(tokens), steps=plan.steps, n_warnings=len(warnings))
    card = _trust_first(card)
    path = save_card(card, args.out)
    for line in card["trust"]["summary"]:
        print(f"mutransfer transfer: trust: {line}", file=sys.stderr)
    for w in warnings:
        print(f"mutransfer transfer: warning: {w}", file=sys.stderr)
    if args.json:
        print_json(card)
    else:
        print(f"wrote {path}: base lr {plan.lr:.4g} for {target.kind} width {width} depth "
              f"{depth} ({n_params / 1e6:.1f}M params), {plan.steps} steps of "
              f"{plan.batch_sequences} x {seq_len} = {plan.batch_tokens} tokens, "
              f"{plan.warmup_steps} warmup steps, weight decay {plan.weight_decay:.4g}")
    if args.strict and warnings:
        print(f"mutransfer transfer: --strict: {len(warnings)} warning(s); {path} was written for "
              "inspection, but it is not to be trusted as is", file=sys.stderr)
        return 1
    return 0


def _trust_first(card: dict[str, Any]) -> dict[str, Any]:
    """The card with ``trust`` right after ``schema``: the first thing a reader sees."""
    head = {"schema": card["schema"], "trust": card["trust"]}
    return {**head, **{k: v for k, v in card.items() if k not in head}}



def _target_rules(args: argparse.Namespace, tuned: Any, width: int, depth: int, base_width: int,
                  base_depth: int) -> tuple[str, dict[str, Any], list[str]]:
    """(kind, depth keywords, warnings) for a target of ``width`` x ``depth``; a target
    smaller than the proxy is refused."""
    if base_width > width:
        raise ValueError(f"the target is smaller than the proxy: base width {base_width} is larger "
                         f"than the target width {width}")
    if depth < base_depth:
        raise ValueError(f"the target is smaller than the proxy: target depth {depth} is below "
                         f"the proxy's depth {base_depth}")
    kind, warnings = depth_rules(args.parametrization, base_depth, depth)
    depth_kw: dict[str, Any] = {"depth": depth, "base_depth": base_depth} if kind == "completep" else {}
    if tuned is not None and kind == "completep" and args.parametrization == "completep":
        depth_kw["depth_alpha"] = tuned.depth_alpha
    return kind, depth_kw, warnings


def target_parametrization(args: argparse.Namespace, proxy: Any, base_width: int, base_depth: int,
                           tuned: TunedProxy | None = None) -> tuple[Any, Any, list[str]]:
    """The target model, its Parametrization (CompleteP when the depth changes; the tuned
    proxy's forward multipliers and readout init) and any warning; a target smaller than
    the proxy is refused."""
    from mutransfer.parametrization import Parametrization
    from mutransfer.target import hf_transfer_builder, resolve_hf_target, resolve_target, transfer_builder

    extra = {"multipliers": tuned.multipliers, "readout_init": tuned.readout_init} if tuned else {}
    if args.model is not None:
        hft = resolve_hf_target(args.model, args.head_rule)
        kind, depth_kw, warnings = _target_rules(args, tuned, hft.width, hft.depth, base_width, base_depth)
        pz = Parametrization(hf_transfer_builder(hft), width=hft.width, base_width=base_width, kind=kind,
                             **depth_kw, **extra)
        return hft, pz, warnings
    overrides = dict(parse_sets(args))
    width = overrides.get("width")
    if isinstance(width, (int, float)) and width < base_width:  # before the config rejects it
        raise ValueError(f"the target is smaller than the proxy: base width {base_width} is larger "
                         f"than the target width {width:g}")
    target = resolve_target(proxy, preset=args.target_preset, overrides=overrides,
                            model_config=args.model_config, proxy_preset=args.preset)
    cfg = target.config
    kind, depth_kw, warnings = _target_rules(args, tuned, cfg.width, cfg.depth, base_width, base_depth)
    pz = Parametrization(transfer_builder(target, proxy), width=cfg.width, base_width=base_width,
                         kind=kind, **depth_kw, **extra)
    return target, pz, warnings


def check_vocab(args: argparse.Namespace, proxy: Any, target: Any, source: dict[str, Any]
                ) -> dict[str, Any] | None:
    """The proxy's vocabulary (the results table's ``vocab_size`` column, else the proxy
    model's) against the target's: a change alters the embedding and readout the LR was
    tuned with, so it is refused unless ``--allow-vocab-change`` (then it is recorded)."""
    proxy_vocab = source.get("proxy_vocab_size", getattr(proxy, "vocab_size", None))
    target_vocab = target.vocab_size if target.kind == "hf" else getattr(target.config, "vocab_size", None)
    if proxy_vocab is None or target_vocab is None or int(proxy_vocab) == int(target_vocab):
        return None
    where = "the results table's vocab_size" if "proxy_vocab_size" in source else "the proxy model's"
    if not args.allow_vocab_change:
        tok = f" (tokenizer {source['tokenizer']!r})" if source.get("tokenizer") else ""
        raise ValueError(f"the target's vocabulary {target_vocab} differs from the proxy's {proxy_vocab} "
                         f"({where}{tok}): the LR was tuned with another embedding and readout; pass "
                         "--allow-vocab-change to transfer anyway (it is recorded in the card)")
    return {"proxy": int(proxy_vocab), "target": int(target_vocab), "allowed": True, "proxy_from": where,
            **({"tokenizer": source["tokenizer"]} if source.get("tokenizer") else {})}


def parse_sets(args: argparse.Namespace) -> dict[str, Any]:
    """``--set`` overrides plus the ``--target-width``/``--target-depth`` shorthands and the
    proxy's ``--seq-len`` (the target's context unless it is set)."""
    from mutransfer.target import parse_overrides

    out = parse_overrides(args.overrides)
    for flag, key in (("target_width", "width"), ("target_depth", "depth")):
        value = getattr(args, flag)
        if value is not None:
            if key in out and out[key] != value:
                raise ValueError(f"--{flag.replace('_', '-')} {value} contradicts --set {key}={out[key]}")
            out[key] = value
    if args.seq_len is not None and args.model_config is None:
        out.setdefault("seq_len", args.seq_len)
    return out


def depth_rules(kind: str, base_depth: int, depth: int) -> tuple[str, list[str]]:
    """The parametrization for the target: CompleteP whenever the depth changes. A proxy
    tuned under plain μP is moved with CompleteP's rules too, with a warning (its LR was
    tuned without depth transfer); Muon has no depth rules here."""
    if depth == base_depth:
        return kind, []
    if kind == "completep":
        return kind, []
    if kind == "muon":
        raise ValueError(f"the depth changes from {base_depth} to {depth}, but the muon "
                         "parametrization has no depth rules; tune the proxy with -p completep")
    return "completep", [
        f"the proxy was tuned under plain muP (no depth transfer) at depth {base_depth}; the target "
        f"has depth {depth}, so CompleteP's rules (Dey et al. 2025) move the per-parameter LRs, but "
        "the base LR was not tuned under them: confirm with a depth sweep under -p completep"]


def provenance(args: argparse.Namespace, source: dict[str, Any]) -> tuple[str | None, str | None]:
    """Study name (flag, or the results' single study) and the storage without credentials."""
    study = args.study or source.pop("study", None)
    storage = None
    if args.storage:
        from sweeps.storage import mask_url

        storage = mask_url(args.storage)
    return study, storage


def read_audit(path: str) -> dict[str, Any]:
    """The held-out audit to record: a JSON list of rows (``analysis.holdout_audit``), or
    an object with ``holdout`` (rows) and optionally ``passed``. Without ``passed`` the
    verdict is computed on the rows of method ``ours`` (the baselines are shown, not
    judged): LR within 1.3× of the measured optimum and, where measured, a loss gap
    (loss / best − 1) of at most 0.25%."""
    import json

    from mutransfer._io import read_text

    try:
        doc = json.loads(read_text(path, "audit file"))
    except FileNotFoundError:
        raise ValueError(f"audit file {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"audit file {path!r} is not valid JSON: {exc}") from None
    rows = doc.get("holdout", doc.get("rows")) if isinstance(doc, dict) else doc
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"audit file {path!r} holds no audit rows (a list, or {{\"holdout\": [...]}})")
    from analysis.scaling import AUDIT_KEYS

    for i, r in enumerate(rows):
        missing = [k for k in AUDIT_KEYS if k not in r]
        if missing:
            raise ValueError(f"audit file {path!r}: row {i} lacks {missing} (rows of "
                             f"analysis.holdout_audit have {', '.join(AUDIT_KEYS)})")
        for key in ("lr_ratio", "batch_ratio", "loss_gap", "pred_lr", "meas_lr"):
            v = r.get(key)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and math.isfinite(v)):
                raise ValueError(f"audit file {path!r}: row {i} field {key} must be a finite number "
                                 f"or null, got {v!r}")
    passed = doc.get("passed") if isinstance(doc, dict) else None
    if passed is None:
        ours = [r for r in rows if r["method"] == "ours" and r["lr_ratio"] is not None]
        if ours:
            passed = all(1 / 1.3 <= r["lr_ratio"] <= 1.3 and (r.get("loss_gap") is None
                                                               or r["loss_gap"] <= 0.0025) for r in ours)
    return {"holdout": rows, "passed": passed}


def proxy_optimum(args: argparse.Namespace, seq_len: int, tuned: TunedProxy | None = None
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


def read_proxy_config(args: argparse.Namespace) -> TunedProxy:
    """Read ``--proxy-config`` (a TrainConfig file, validated as the trainer validates it)
    and fill the proxy flags left unset from it; a flag that contradicts it -> ValueError
    naming both values. Its weight decay becomes a timescale tau = B / (eta·lambda·D)
    (coupled) or B / (lambda·D) (independent) of its own run, which the target keeps."""
    from mutransfer.train import base_sizes, load_config

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
                tokens: float | None, args: argparse.Namespace, origin: str) -> TunedProxy:
    """The proxy settings the card carries (:data:`CARRIED`; absent ones take the
    TrainConfig defaults, checked as the trainer checks them). ``--wd-mode`` left unset
    takes the proxy's; one that contradicts it -> ValueError. A weight decay becomes its
    timescale tau = B / (eta·lambda·D) (coupled) or B / (lambda·D) (independent) over the
    proxy's own run, which the target keeps (None without the batch and budget)."""
    from analysis.scaling import tau_from
    from mutransfer.parametrization import Multipliers
    from mutransfer.train import TrainConfig

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
        batch_tokens=batch_tokens, tokens=tokens)


def optimum_from_results(args: argparse.Namespace, seq_len: int
                         ) -> tuple[float, list, dict, dict, list[float], float | None, float | None]:
    """Fit the optimum per width on an LR sweep's table, with the same checks as
    ``mutransfer fit`` (non-numeric lr, NaN loss not marked diverged: one error)."""
    from analysis import OptimumFit
    from analysis.table import load_table
    from mutransfer_cli._table import optimum_sensitivity

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
                                 "sensitivity": optimum_sensitivity(fit.group(widest))}
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
    for col, key in (("vocab_size", "proxy_vocab_size"), ("tokenizer", "tokenizer")):
        vals = df[col].dropna().unique() if col in df.columns else []
        if len(vals) > 1:
            raise ValueError(f"{args.results}: the {args.parametrization} rows mix {col} values "
                             f"{', '.join(sorted(map(str, vals)))}; one vocabulary per transfer")
        if len(vals) == 1:
            source[key] = int(vals[0]) if col == "vocab_size" else str(vals[0])
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

    from mutransfer._io import read_text

    try:
        doc = json.loads(read_text(path, "fit file"))
    except FileNotFoundError:
        raise ValueError(f"fit file {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"fit file {path!r} is not valid JSON: {exc}") from None
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
