"""``mutransfer export``: a transfer card as a training engine's config."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mutransfer.cli._common import add_output_flags, print_json

HELP = "write a card as an engine's config: megatron | torchtitan | hf"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("card", help="transfer card (YAML or JSON)")
    p.add_argument("--to", required=True, dest="engine", help="megatron | torchtitan | hf")
    p.add_argument("--out", required=True, help="file to write (.json, or .yaml)")
    p.add_argument("--hf-config", default=None,
                   help="a transformers config JSON: check the card against that model (names, shapes)")
    p.add_argument("--drop", action="append", default=[], metavar="FIELD",
                   help="export without a card field the engine cannot express (repeatable; "
                        "recorded in the export's 'dropped'); megatron: init, eps, lr, weight_decay, "
                        "residual_multiplier, target.model.<field>")
    add_output_flags(p)


def run(args: argparse.Namespace) -> int:
    from mutransfer._io import atomic_write_text
    from mutransfer.card import load_card
    from mutransfer.export import ENGINES, export_card

    if args.engine not in ENGINES:  # before reading anything
        raise ValueError(f"unknown engine {args.engine!r}; choose from {', '.join(ENGINES)}")
    card = load_card(args.card)
    model = None
    if args.hf_config:
        import torch
        import transformers

        cfg = transformers.AutoConfig.from_pretrained(args.hf_config)  # a local file: no download
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
    export = export_card(card, args.engine, model=model, drop=args.drop)
    out = Path(args.out)
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
