"""``mutransfer explain``: what the parametrization does to every parameter."""

from __future__ import annotations

import argparse

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP
from mutransfer.models.presets import DEFAULT_PRESET, get_preset
from mutransfer.models.source import build_model, parse_model, valid_widths, widths_hint
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.rules import rules_table
from mutransfer.training.model_section import ModelSection
from mutransfer_cli._common import MAX_DEPTH, MAX_WIDTH, bounded_int, print_json

#: explain builds the model in memory (fp32): refuse one above this many parameters
MAX_PARAMS = 500_000_000

HELP = "print the per-parameter table: role, width dims, init std, LR multiplier, WD"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "--preset", dest="model", default=DEFAULT_PRESET,
                   help=f"a preset name (default {DEFAULT_PRESET}), hf:PATH (a local transformers "
                        "config.json) or module:function")
    p.add_argument("--head-rule", choices=("keep_head_dim", "keep_heads"), default="keep_head_dim",
                   help="hf: models: heads scale with width (keep_head_dim, default) or head_dim does")
    p.add_argument("--parametrization", "-p", default="mup", help="sp | mup | completep | muon")
    width = bounded_int(1, MAX_WIDTH, "width")
    depth = bounded_int(1, MAX_DEPTH, "depth")
    p.add_argument("--width", type=width, default=None, help="width to build (default: preset's)")
    p.add_argument("--base-width", type=width, default=None,
                   help="default: the preset's width; for hf: the smallest width the head rule allows "
                   "(at least 64), since the parametrization builds the base for real")
    p.add_argument("--depth", type=depth, default=None, help="depth (completep)")
    p.add_argument("--base-depth", type=depth, default=None, help="base depth (completep)")
    p.add_argument("--optimizer", choices=("adamw", "sgd", "muon"), default=None,
                   help="whose rules: adamw (Adam's), sgd, muon (default: muon for -p muon, else adamw)")
    p.add_argument("--tie-embeddings", action="store_true", help="tie the GPT's head to its embedding")
    p.add_argument("--rules", action="store_true", help="also print the scaling rules and the role rules")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def run(args: argparse.Namespace) -> int:
    optimizer = args.optimizer or ("muon" if args.parametrization == "muon" else "adamw")
    if (optimizer == "muon") != (args.parametrization == "muon"):
        raise ValueError(f"optimizer {optimizer!r} does not go with parametrization {args.parametrization!r}")
    rule_set = "sgd" if optimizer == "sgd" else "adam"  # Muon's non-matrix params follow Adam's rules

    source = parse_model(args.model, head_rule=args.head_rule)
    if not source.builtin:
        return _explain_user_model(args, source, rule_set)
    cfg = get_preset(source.ref)
    if isinstance(cfg, GPTConfig) and args.tie_embeddings:
        cfg = cfg.replace(tie_embeddings=True)
    width = args.width or cfg.width
    base_width = args.base_width or min(cfg.width, width)
    cls = GPT if isinstance(cfg, GPTConfig) else MLP
    _check_size(cls, cfg, width, args.depth)
    if args.depth is not None:
        pz = Parametrization(lambda w, d: cls(cfg.replace(width=w, depth=d)), width=width,
                             base_width=base_width, depth=args.depth,
                             base_depth=args.base_depth or cfg.depth, kind=args.parametrization,
                             optimizer=rule_set)
    else:
        pz = Parametrization(lambda w: cls(cfg.replace(width=w)), width=width, base_width=base_width,
                             kind=args.parametrization, optimizer=rule_set)
    return _print(args, pz, pz.build(seed=0))


def _explain_user_model(args: argparse.Namespace, source: object, rule_set: str) -> int:
    """An ``hf:`` config or a ``module:function`` builder, at its own shape unless told. The
    model at ``--width`` is only ever built on the meta device (its shapes and names; the
    table's init std is then the rule's); the parametrization builds the base and its
    delta for real, so an hf: base defaults to the smallest width the head rule allows."""
    import torch

    if args.tie_embeddings:
        raise ValueError("--tie-embeddings is for the built-in GPT; an hf: config says it itself")
    own_width, own_depth = ModelSection(  # type: ignore[attr-defined]
        source=source.spec(), head_rule=source.head_rule).own_shape()
    width, depth = args.width or own_width, args.depth or own_depth
    hint = None
    base_width = args.base_width
    if source.kind == "hf":  # type: ignore[attr-defined]
        config = source.hf_config()
        hint = widths_hint(config, source.head_rule, width)  # type: ignore[attr-defined]
        if base_width is None:
            ok = [w for w in valid_widths(config, source.head_rule, width) if w >= 64]  # type: ignore[attr-defined]
            base_width = ok[0] if ok else None
    base_width = base_width or min(own_width, width)
    with torch.device("meta"):
        n = sum(p.numel() for p in build_model(source, base_width, depth, device="meta").parameters())
    if n > MAX_PARAMS:
        raise ValueError(f"base width {base_width} builds {n:,} parameters, above explain's limit of "
                         f"{MAX_PARAMS:,} (the base is built in memory); give a smaller --base-width")
    if args.depth is not None:
        pz = Parametrization(lambda w, d: build_model(source, w, d), width=width, base_width=base_width,
                             depth=depth, base_depth=args.base_depth or own_depth,
                             kind=args.parametrization, optimizer=rule_set)
    else:
        pz = Parametrization(lambda w: build_model(source, w, depth), width=width, base_width=base_width,
                             kind=args.parametrization, optimizer=rule_set)
    if hint and not args.json:
        print(f"# {hint}")
    return _print(args, pz, None)


def _print(args: argparse.Namespace, pz: Parametrization, model: object) -> int:
    if args.json:
        print_json(pz.describe(model))
        return 0
    print(pz.table(model))
    if args.rules:
        print()
        print(rules_table())
        print("\n# role rules, first match wins")
        for i, r in enumerate(pz.rules_table()):
            print(f"{i:>3}  {r.role:<7} {r.source:<8} {r.pattern}")
    return 0


def _check_size(cls: type, cfg: object, width: int, depth: int | None) -> None:
    """Count the parameters on the meta device (no memory) before building for real."""
    import torch

    changes = {"width": width} if depth is None else {"width": width, "depth": depth}
    with torch.device("meta"):
        n = sum(p.numel() for p in cls(cfg.replace(**changes)).parameters())  # type: ignore[attr-defined]
    if n > MAX_PARAMS:
        raise ValueError(f"width {width} builds {n:,} parameters, above explain's limit of "
                         f"{MAX_PARAMS:,} (it builds the model in memory); the rules are the same at "
                         "any width, so explain a smaller one")
