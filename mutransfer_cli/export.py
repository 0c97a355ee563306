"""``mutransfer export``: a transfer card as a training engine's config."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mutransfer._io import atomic_write_text, check_output
from mutransfer.card.build import load_card
from mutransfer.card.export import ENGINES, export_card
from mutransfer.models.source import load_hf_config
from mutransfer_cli._common import add_output_flags, positive_int, print_json

HELP = "write a card as an engine's config: megatron | torchtitan | hf"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("card", help="transfer card (YAML or JSON)")
    p.add_argument("--to", required=True, dest="engine", help="megatron | torchtitan | hf")
    p.add_argument("--out", required=True, help="file to write (.json, or .yaml)")
    p.add_argument("--hf-config", default=None,
                   help="a transformers config JSON: check the card against that model (names, shapes)")
    p.add_argument("--dp-size", type=positive_int, default=None,
                   help="data-parallel ranks (default: the card's batch.dp_size, else 1)")
    p.add_argument("--micro-batch", type=positive_int, default=None,
                   help="sequences per rank per forward (default: the card's batch.micro_batch)")
    p.add_argument("--drop", action="append", default=[], metavar="FIELD",
                   help="let the export leave out this card field the engine cannot carry (repeatable; "
                   "recorded in the export's 'dropped' and warned about); without it such a field exits 2")
    add_output_flags(p)


def run(args: argparse.Namespace) -> int:
    if args.engine not in ENGINES:  # before reading anything
        raise ValueError(f"unknown engine {args.engine!r}; choose from {', '.join(ENGINES)}")
    if Path(args.out).suffix not in (".json", ".yaml", ".yml"):
        raise ValueError(f"--out {args.out!r} must end in .json, .yaml or .yml (the export is JSON or YAML "
                         "by its suffix)")
    check_output(args.out, inputs=[("the card", args.card), ("the --hf-config", args.hf_config)])
    if args.hf_config and not Path(args.hf_config).exists():  # a hub id: never a request
        raise ValueError(f"--hf-config {args.hf_config!r} is not a local file or folder; mutransfer never "
                         "downloads: give a config.json or a saved model's folder")
    card = load_card(args.card)
    model = None
    if args.hf_config:
        import torch
        import transformers

        cfg = load_hf_config(args.hf_config)  # a local file only: a hub id is refused
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export = export_card(card, args.engine, model=model, dp_size=args.dp_size,
                             micro_batch=args.micro_batch, drop=args.drop, validated=True)
    for w in caught:
        print(f"mutransfer export: warning: {w.message}", file=sys.stderr)
    out = Path(args.out)
    if isinstance(export.get("usage"), str):  # the usage snippet names this card and this file
        lines = export["usage"].split("\n")
        for i, line in enumerate(lines):
            if line.startswith("CARD = "):
                lines[i] = f"CARD = {str(Path(args.card).resolve())!r}"
            elif line.startswith("EXPORT = "):
                lines[i] = f"EXPORT = {str(out.resolve())!r}"
        export["usage"] = "\n".join(lines)
    if out.suffix in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(export, sort_keys=False)
    else:
        text = json.dumps(export, indent=2) + "\n"
    atomic_write_text(out, text)
    if args.json:
        print_json(export)
    elif not args.quiet:
        print(f"wrote {out} ({args.engine}; {export.get('verified_against')})")
    return 0
