"""``mutransfer memory``: bytes per parameter and total training memory per optimizer."""

from __future__ import annotations

import argparse
import json

from mutransfer._io import atomic_write_text, check_output
from mutransfer.training.memory import GB, GIB, OPTIMIZERS, PRECISIONS, MemoryEstimate, training_memory
from mutransfer_cli._common import MAX_WIDTH, bounded_int, number_in

HELP = "bytes per parameter and total model-state memory of training, per optimizer"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``mutransfer memory``."""
    p.add_argument(
        "--params",
        required=True,
        metavar="N",
        help="number of parameters: 7e9, 7000000000, 7B, 125M, ...",
    )
    # No argparse `choices`: an unknown name goes to training_memory, whose ValueError
    # names it in one line (exit 2), like every other bad value.
    p.add_argument(
        "--optimizer",
        default="adamw",
        metavar="NAME",
        help=f"one of {', '.join(OPTIMIZERS)} (default: adamw)",
    )
    p.add_argument(
        "--precision",
        default="mixed",
        metavar="P",
        help=f"one of {', '.join(PRECISIONS)}: mixed = bf16 weights/grads + fp32 master "
        "copy and state (default); fp32 = fp32 everything, no master copy",
    )
    p.add_argument(
        "--width",
        type=bounded_int(0, MAX_WIDTH, "--width"),
        default=None,
        help="model width; sizes Adafactor's factored second moment as 8/width "
        "bytes/param (default: taken as 0)",
    )
    p.add_argument(
        "--adafactor-momentum",
        action="store_true",
        help="Adafactor with a first moment (beta1 > 0): +4 bytes/param",
    )
    p.add_argument(
        "--adamw-fraction",
        type=number_in(0.0, 1.0),
        default=0.0,
        metavar="F",
        help="Muon only: share of parameters (embeddings, readout, vectors) kept "
        "on AdamW, each paying 4 more bytes (default: 0)",
    )
    p.add_argument("--json", action="store_true", help="print the breakdown as JSON")
    p.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="also write the JSON breakdown to FILE (atomically)",
    )


def _table(est: MemoryEstimate) -> str:
    head = (
        f"{est.optimizer}, {est.precision} precision, {est.n_params:.4g} parameters "
        "(GB = 1e9 bytes, GiB = 2^30 bytes)"
    )
    rows = [f"{'component':<44}{'bytes/param':>12}{'GB':>12}{'GiB':>12}"]
    for c in est.components:
        total = c.bytes_per_param * est.n_params
        rows.append(
            f"{c.name + ' [' + c.dtype + ']':<44}{c.bytes_per_param:>12.4g}"
            f"{total / GB:>12.2f}{total / GIB:>12.2f}"
        )
    rows.append(
        f"{'total':<44}{est.bytes_per_param:>12.4g}{est.total_gb:>12.2f}{est.total_gib:>12.2f}"
    )
    notes = [f"note: {n}" for n in est.notes]
    notes.append("excludes activations, temporary buffers, CUDA context and fragmentation")
    return "\n".join([head, *rows, *notes])


def run(args: argparse.Namespace) -> int:
    """Print the breakdown (table or ``--json``); bad values raise ValueError (exit 2)."""
    check_output(args.out)
    est = training_memory(
        args.params,
        args.optimizer,
        args.precision,
        width=args.width,
        adafactor_momentum=args.adafactor_momentum,
        adamw_fraction=args.adamw_fraction,
    )
    doc = json.dumps(est.to_dict(), indent=2) + "\n"
    if args.out:
        atomic_write_text(args.out, doc)
    if args.json:
        print(doc, end="")
    else:
        print(_table(est))
    return 0
