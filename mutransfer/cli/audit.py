"""``mutransfer audit``: is someone else's μP right? Per layer, with a verdict."""

from __future__ import annotations

import argparse
from typing import Any

from mutransfer.cli._common import int_list, positive_float, positive_int, print_json

HELP = "audit a muP implementation: per-parameter width exponents vs the rule table, verdict"


def add_arguments(p: argparse.ArgumentParser) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--model", default=None, metavar="MODEL",
                     help="module:function where function(width) returns (model, optimizer) (the current "
                          "directory is importable); or hf:PATH / a preset name: audit mutransfer's own "
                          "muP (AdamW) on that model")
    who.add_argument("--entry", default=None, metavar="MODULE:FUNCTION", help="the same as --model")
    p.add_argument("--widths", type=int_list, default=[32, 64, 128],
                   help="comma-separated widths to build (default 32,64,128)")
    p.add_argument("--base-width", type=positive_int, default=None,
                   help="the width where your muP equals SP (default: the smallest width)")
    p.add_argument("--input", default=None,
                   help="module:function where function(model) returns the input of one forward "
                        "(default: random token ids, or random features for a Linear first layer)")
    p.add_argument("--depths", type=int_list, default=None,
                   help="comma-separated depths: also audit depth transfer (CompleteP); the entry "
                        "is then function(width, depth)")
    p.add_argument("--depth-alpha", type=float, default=None,
                   help="the CompleteP alpha you use, 0.5 or 1 (default: measured)")
    p.add_argument("--no-coord-check", action="store_true", help="skip the coordinate check")
    p.add_argument("--steps", type=positive_int, default=3, help="coordinate-check steps (default 3)")
    p.add_argument("--seeds", type=positive_int, default=2, help="coordinate-check seeds (default 2)")
    p.add_argument("--tol", type=positive_float, default=0.2,
                   help="largest allowed gap between found and expected exponents (default 0.2)")
    p.add_argument("--coord-tol", type=positive_float, default=0.25,
                   help="largest allowed coordinate-check log2 slope (default 0.25)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from mutransfer.audit import audit, load_entry

    if len(set(args.widths)) < 2:
        raise ValueError(f"--widths needs at least 2 different widths, got {args.widths}")
    spec = args.model if args.model is not None else args.entry
    if args.entry is not None or (":" in spec and not spec.startswith(("hf:", "preset:"))):
        builder = load_entry(spec)
    else:
        builder = _ours(spec, min(args.widths) if args.base_width is None else args.base_width)
    example_input = load_entry(args.input) if args.input else None
    result = audit(builder, widths=args.widths, base_width=args.base_width,
                   example_input=example_input, coord_check=not args.no_coord_check,
                   steps=args.steps, seeds=args.seeds, tol=args.tol, coord_tol=args.coord_tol,
                   depths=args.depths, depth_alpha=args.depth_alpha, name=spec)
    if args.json:
        print_json(result.to_json_dict())
    else:
        print(result.report())
    return 0 if result.passed else 1


def _ours(spec: str, base_width: int) -> Any:
    """``builder(width) -> (model, optimizer)``: the model ``spec`` (``hf:PATH`` or a preset)
    under mutransfer's own μP and AdamW (LR 1e-2), at its own depth and a 256-token vocab."""
    from mutransfer.config import ModelSection
    from mutransfer.models import build_model, parse_model
    from mutransfer.optim import build_optimizer
    from mutransfer.parametrization import Parametrization

    source = parse_model(spec)
    _, depth = ModelSection(source=source.spec()).own_shape()

    def builder(width: int) -> tuple[Any, Any]:
        pz = Parametrization(lambda w: build_model(source, w, depth, vocab_size=256), width=width,
                             base_width=min(base_width, width))
        model = pz.build(seed=0)
        return model, build_optimizer(pz.param_groups(model, 1e-2), "adamw")

    return builder
