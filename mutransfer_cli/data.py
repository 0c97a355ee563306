"""``mutransfer data prepare``: your text, your tokenizer -> a token memmap the trainer reads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mutransfer.training.prepare import prepare_tokens
from mutransfer_cli._common import add_output_flags, print_json, progress

HELP = "prepare your own tokens: text + a local tokenizer.json -> tokens.bin + sidecar"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="data_cmd", metavar="CMD", required=True)
    q = sub.add_parser("prepare", help="tokenize text files into a .bin memmap with a JSON sidecar",
                       description="Tokenize a text file or a folder of text files with a LOCAL "
                       "tokenizers file (tokenizer.json; nothing is downloaded) into OUT (.bin, uint16 "
                       "or uint32) and OUT.json (vocab_size, dtype, n_tokens, the tokenizer's sha256, "
                       "end-of-text handling, the train/val boundary). Train on it with "
                       "`mutransfer train --set data=OUT`.")
    q.add_argument("--tokenizer", required=True, help="a tokenizer.json file (or a folder holding one)")
    q.add_argument("--text", required=True,
                   help="a UTF-8 text file, or a folder of them (one file = one document)")
    q.add_argument("--out", required=True, help="the token file to write (.bin); the sidecar is OUT.json")
    q.add_argument("--eos", default="auto",
                   help="token appended after every document: auto (the tokenizer's <|endoftext|>, </s>, "
                   "... whichever it has), a token string, or none")
    q.add_argument("--val-fraction", type=float, default=0.02,
                   help="held-out fraction: by file for a folder, the tail for one file (default 0.02)")
    add_output_flags(q)


def run(args: argparse.Namespace) -> int:
    eos = None if args.eos.lower() == "none" else args.eos
    src = Path(args.text)
    total = (src.stat().st_size if src.is_file()
             else sum(f.stat().st_size for f in src.rglob("*") if f.is_file()) if src.is_dir() else 0)
    with progress(total, "tokenizing", args.quiet, unit="char") as bar:
        side = prepare_tokens(args.tokenizer, args.text, args.out, eos=eos, val_fraction=args.val_fraction,
                              progress=bar.advance)
    summary = {"out": args.out, "sidecar": args.out + ".json", "n_tokens": side["n_tokens"],
               "n_train": side["split"]["n_train"], "n_val": side["split"]["n_val"],
               "vocab_size": side["vocab_size"], "dtype": side["dtype"],
               "tokenizer": side["tokenizer"]["hash"], "tokenizer_name": side["tokenizer"]["name"],
               "eos": side["eos"]["token"] if side["eos"] else None, "seconds": side["build_seconds"]}
    if args.json:
        print_json(summary)
    elif not args.quiet:
        print(f"wrote {summary['n_tokens']:,} tokens ({summary['n_train']:,} train, "
              f"{summary['n_val']:,} val; "
              f"{summary['dtype']}, vocab {summary['vocab_size']:,}, tokenizer {summary['tokenizer_name']} "
              f"{summary['tokenizer']}) to {args.out} in {summary['seconds']:.1f} s", file=sys.stderr)
    return 0
