"""``mutransfer transfer``: project the proxy's optimum to a target model; write the card.

The target is a whole model (a preset plus ``--set KEY=VALUE`` overrides, or
``--model-config FILE``) and a token budget. The base LR is the proxy's μP optimum
(``--results``, ``--fit`` or ``--lr``), moved to the target's batch and tokens by the
η*(B, D) law of ``--scaling-fit`` (``mutransfer fit scaling``), which also gives the batch
B*(D), the weight decay through tau, the warmup and the WSD decay fraction. A depth
change uses CompleteP's rules. This module checks the flags, turns them into a
:class:`mutransfer.card.make.TransferRequest` and makes one call,
:func:`mutransfer.card.make.make_card`, which applies every transfer rule; then it writes the
card and prints its trust lines and warnings. ``--strict`` writes no card the tool does not
stand behind (a warning, or :func:`mutransfer.card.trust.objections`): a file left at
``--out`` would be launched whatever the exit status said.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from mutransfer._io import check_output
from mutransfer.card.build import save_card
from mutransfer.card.make import TransferRequest, make_card
from mutransfer.card.request import BATCH_RULES, RunChoices
from mutransfer.card.target import PRECISION, parse_overrides
from mutransfer.card.trust import objections
from mutransfer.models.presets import DEFAULT_PRESET
from mutransfer.parametrize.specs import KINDS
from mutransfer.training.schedules import DECAY_SHAPES, SCHEDULE_KINDS
from mutransfer_cli._common import (
    MAX_DEPTH,
    MAX_SEQ_LEN,
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
    p.add_argument("--lr-interval", type=_interval, default=None, metavar="LO,HI",
                   help="with --lr: its interval, e.g. from your own sweep (LO or HI may be empty: open)")
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
    g.add_argument("--proxy-set", dest="proxy_overrides", action="append", type=key_value, default=[],
                   metavar="KEY=VALUE",
                   help="a proxy model field where it differs from --preset's (repeatable), e.g. "
                   "--proxy-set head_dim=16: μP's attention scale is anchored at the proxy's head dim")
    g.add_argument("--base-width", type=positive_int, default=None,
                   help="base width of the sweep (default: the smallest width in the results)")
    g.add_argument("--base-depth", type=positive_int, default=None,
                   help="depth the proxy was tuned at (default: the preset's)")
    g.add_argument("--seq-len", type=positive_int, default=None,
                   help="the proxy's context, as measured (default: the results rows' or fit's seq_len, "
                   "else the preset's; a value contradicting the rows exits 2); also a preset target's "
                   "unless --target-seq-len")
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
    t.add_argument("--head-rule", choices=("keep_head_dim", "keep_heads"), default=TransferRequest.head_rule,
                   help="with --model: how the scaled-down proxy's heads follow width (keep_head_dim)")
    t.add_argument("--tokenizer", default=None, metavar="NAME",
                   help="the target's tokenizer (recorded as target.tokenizer; a warning when it differs "
                   "from the results table's tokenizer column)")
    t.add_argument("--weights-dtype", choices=tuple(PRECISION), default=TransferRequest.weights_dtype,
                   help="the target's weights: float32 (default; mixed precision: fp32 master weights under "
                   "bf16 autocast) or bfloat16 (pure bf16); recorded as target.dtype, whatever the "
                   "config's torch_dtype says")
    t.add_argument("--allow-vocab-change", action="store_true",
                   help="accept a target vocabulary other than the proxy's (recorded in the card)")
    t.add_argument("--target-seq-len", type=bounded_int(1, MAX_SEQ_LEN, "--target-seq-len"), default=None,
                   help="the target's context (default: with --model, the config's "
                   "max_position_embeddings; else the proxy's); the card's source keeps the proxy's")
    t.add_argument("--allow-arch-change", action="store_true",
                   help="accept a proxy (results rows, fit or scaling fit) of another architecture than "
                   "the target's, or a scaling fit of another architecture than the LR's (recorded in "
                   "the card and warned about)")
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
    j.add_argument("--batch-rule", choices=BATCH_RULES, default=RunChoices.batch_rule,
                   help="where the batch comes from without --batch-size/--batch-tokens: fit = the "
                   "fitted B*(D); anchored = the proxy's largest bracketed B* grown as the published laws "
                   "grow in D (DeepSeek LLM's D^0.688, interval to Step Law's D^0.571); published = the "
                   "published laws in the token budget (DeepSeek LLM's in D, interval to Step Law's "
                   "B(D)); auto (default) = fit unless it is at the grid's edge, unresolved or beyond "
                   "--extrapolation-limit, then anchored when some budget's B* was bracketed, else published")
    j.add_argument("--no-published-prior", action="store_true",
                   help="with --scaling-fit: the LR the data give alone, not weighed against the published "
                        "laws (DeepSeek LLM, Step Law) as a prior (projected.lr.data, .prior, .weight_prior)")
    j.add_argument("--accept-edge", action="append", default=[], choices=("batch", "lr"),
                   help="with --batch-rule fit: take the fit's batch (or LR law) although `fit scaling` "
                   "flagged it as at its grid's edge, a bound rather than an optimum (repeatable; "
                   "recorded in the card's projected.accepted_edges and warned about); without it such a "
                   "value exits 2")
    j.add_argument("--audit", metavar="AUDIT.json", default=None,
                   help="held-out audit to record in the card (rows of the audit table)")
    j.add_argument("--extrapolation-limit", type=positive_float, default=RunChoices.extrapolation_limit,
                   help=f"warn when the target lies this many times beyond the measured range "
                   f"({RunChoices.extrapolation_limit:g})")
    j.add_argument("--weight-decay", type=float, default=None,
                   help="weight decay (default: from the fitted tau, else 0)")
    j.add_argument("--wd-mode", choices=("coupled", "independent"), default=None,
                   help="coupled (torch AdamW: per-step decay lr x wd) or independent (wd x schedule); "
                   "default: --proxy-config's, else coupled")
    j.add_argument("--schedule", default=RunChoices.schedule, help="schedule kind: wsd (default), cosine, linear, "
                   "constant, inverse_sqrt")
    j.add_argument("--decay-fraction", type=float, default=None,
                   help="WSD cooldown share of the steps (default: fitted, else 0.2)")
    j.add_argument("--decay-shape", default=RunChoices.decay_shape, help="WSD cooldown shape (default 1-sqrt)")
    j.add_argument("--lr-floor", dest="lr_floor", type=float, default=RunChoices.lr_floor,
                   help="final LR / peak LR (default 0)")
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
                   help="write the card only if the tool stands behind it: with any warning (extrapolation, "
                   "a change of context, vocabulary or tokenizer, ...) or objection (a value outside its "
                   "own interval, an LR 10x off the published ones, a held-out audit failed or missing) "
                   "it prints each one, writes no card and exits 1")


def _interval(text: str) -> tuple[float | None, float | None]:
    """``"LO,HI"`` -> (LO, HI), each a positive number or empty (an open side: None)."""
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"--lr-interval takes LO,HI, got {text!r}")
    out = []
    for part in parts:
        part = part.strip()
        if not part:
            out.append(None)
            continue
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--lr-interval takes LO,HI numbers, got {text!r}") from None
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"--lr-interval takes positive finite numbers, got {text!r}")
        out.append(v)
    return out[0], out[1]


def check_flags(args: argparse.Namespace) -> None:
    """Every flag's range and the flags' contradictions, before any work (one ValueError
    naming the flag); the transfer rules themselves are :func:`mutransfer.card.make.make_card`'s."""
    if not (args.results or args.fit or args.lr is not None or args.proxy_config):
        raise ValueError("give the proxy's LR: --results, --fit, --lr or --proxy-config")
    if args.parametrization is not None and (args.parametrization not in KINDS or args.parametrization == "sp"):
        raise ValueError(f"parametrization {args.parametrization!r} does not transfer; use mup, "
                         "completep or muon")
    if args.schedule not in SCHEDULE_KINDS:
        raise ValueError(f"--schedule must be one of {', '.join(SCHEDULE_KINDS)}, got {args.schedule!r}")
    if args.decay_shape not in DECAY_SHAPES:
        raise ValueError(f"--decay-shape must be one of {', '.join(DECAY_SHAPES)}, got {args.decay_shape!r}")
    checks = [("--weight-decay", args.weight_decay, 0.0, math.inf),
              ("--decay-fraction", args.decay_fraction, 0.0, 1.0),
              ("--lr-floor", args.lr_floor, 0.0, 1.0),
              ("--warmup-fraction", args.warmup_fraction, 0.0, 0.999999)]
    for flag, value, low, high in checks:
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            bound = ">= 0" if high == math.inf else f"in [{low:g}, {high:g}]" if high == 1 else "in [0, 1)"
            raise ValueError(f"{flag} must be a finite number {bound}, got {value!r}")
    if args.group and not args.fit:
        raise ValueError("--group only goes with --fit")
    if args.lr_interval is not None and args.lr is None:
        raise ValueError("--lr-interval only goes with --lr")
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
    # --set seq_len=N is the one target field a config.json leaves open: its training context
    only_seq = all(str(k).strip() == "seq_len" for k, _ in (
        x if isinstance(x, tuple) else x.partition("=")[::2] for x in args.overrides))
    if args.model is not None and (args.model_config or args.target_preset or not only_seq
                                   or args.target_width or args.target_depth):
        raise ValueError("--model names the whole target; it does not take --model-config, --target-preset, "
                         "--set (but seq_len), --target-width or --target-depth (edit the config.json "
                         "instead)")
    set_seq = [v for k, v in parse_overrides(args.overrides).items() if k == "seq_len"]
    if args.target_seq_len is not None and set_seq and set_seq[0] != args.target_seq_len:
        raise ValueError(f"--target-seq-len {args.target_seq_len} contradicts --set seq_len={set_seq[0]}")
    # before the work, never onto an input
    model_file = args.model[3:] if args.model and args.model.startswith("hf:") else None
    check_output(args.out, inputs=[("the --results", args.results), ("the --fit", args.fit),
                                   ("the --scaling-fit", args.scaling_fit), ("the --audit", args.audit),
                                   ("the --model-config", args.model_config),
                                   ("the --proxy-config", args.proxy_config), ("the --model", model_file)])


def request(args: argparse.Namespace) -> TransferRequest:
    """The flags as the library's :class:`~mutransfer.card.make.TransferRequest`."""
    overrides = parse_overrides(args.overrides)
    for flag, key in (("target_width", "width"), ("target_depth", "depth")):
        value = getattr(args, flag)
        if value is not None:
            if key in overrides and overrides[key] != value:
                raise ValueError(f"--{flag.replace('_', '-')} {value} contradicts --set {key}={overrides[key]}")
            overrides[key] = value
    run = RunChoices(
        schedule=args.schedule, decay_shape=args.decay_shape, lr_floor=args.lr_floor,
        batch_tokens=args.batch_tokens, batch_sequences=args.batch_size, dp_size=args.dp_size,
        micro_batch=args.micro_batch, weight_decay=args.weight_decay, wd_mode=args.wd_mode,
        warmup_tokens=args.warmup_tokens, warmup_fraction=args.warmup_fraction,
        decay_fraction=args.decay_fraction, extrapolation_limit=args.extrapolation_limit,
        batch_rule=args.batch_rule, accept_edge=tuple(args.accept_edge),
        published_prior=not args.no_published_prior)
    return TransferRequest(
        results=args.results, fit=args.fit, group=args.group, lr=args.lr, lr_interval=args.lr_interval, proxy_config=args.proxy_config,
        preset=args.preset, proxy_overrides=parse_overrides(args.proxy_overrides),
        parametrization=args.parametrization, base_width=args.base_width,
        base_depth=args.base_depth, seq_len=args.seq_len, proxy_batch_tokens=args.proxy_batch_tokens,
        proxy_tokens=args.proxy_tokens, target_preset=args.target_preset, overrides=overrides,
        model_config=args.model_config, model=args.model, head_rule=args.head_rule, tokenizer=args.tokenizer,
        weights_dtype=args.weights_dtype, allow_vocab_change=args.allow_vocab_change,
        target_seq_len=args.target_seq_len, allow_arch_change=args.allow_arch_change, tokens=args.tokens,
        tokens_per_param=args.tokens_per_param, scaling_fit=args.scaling_fit, audit=args.audit, run=run,
        study=args.study, storage=args.storage)


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    made = make_card(request(args))
    for note in made.notes:
        print(f"mutransfer transfer: note: {note}", file=sys.stderr)
    card, plan, warnings = made.card, made.plan, made.warnings
    against = objections(card)
    if args.strict and (warnings or against):  # a card not stood behind is not left to be launched
        for w in warnings:
            print(f"mutransfer transfer: warning: {w}", file=sys.stderr)
        for o in against:
            print(f"mutransfer transfer: objection: {o}", file=sys.stderr)
        older = (" (the file already there is an older card, left as it was)" if Path(args.out).exists()
                 else "")
        print(f"mutransfer transfer: --strict: {len(against)} objection(s), {len(warnings)} warning(s): no card "
              f"was written to {args.out}{older}; address each line above, or run without --strict to "
              "write the card for inspection", file=sys.stderr)
        return 1
    path = save_card(made, args.out)
    for line in card["trust"]["summary"]:
        print(f"mutransfer transfer: trust: {line}", file=sys.stderr)
    for w in warnings:
        print(f"mutransfer transfer: warning: {w}", file=sys.stderr)
    for o in against:  # said even without --strict: the card is written, but not stood behind
        print(f"mutransfer transfer: objection: {o}", file=sys.stderr)
    if args.json:
        print_json(card)
    else:
        seq_len = card["batch"]["seq_len"]
        print(f"wrote {path}: base lr {plan.lr:.4g} for {card['target']['model'].get('kind', 'model')} "
              f"width {made.width} depth {made.depth} ({made.n_params / 1e6:.1f}M params), {plan.steps} steps of "
              f"{plan.batch_sequences} x {seq_len} = {plan.batch_tokens} tokens, "
              f"{plan.warmup_steps} warmup steps, weight decay {plan.weight_decay:.4g}")
    return 0
