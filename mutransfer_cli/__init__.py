"""The ``mutransfer`` command.

Each verb lives in its own module under ``mutransfer_cli`` and defines

    HELP: str                                   # one line for ``mutransfer --help``
    def add_arguments(p: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int    # exit code

Verb modules are imported only when that verb runs (``--help`` of the top level reads
only ``VERBS`` below), so the CLI starts fast. User-input errors raise
:class:`UsageError` or ``ValueError``; ``main`` prints one line and exits 2, as it does for
an ``OSError`` (an unwritable output path) that a verb did not catch first.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# verb -> (module, one-line help). Keep in the order of the user's day.
VERBS: dict[str, tuple[str, str]] = {
    "coord-check": ("mutransfer_cli.coord_check", "coordinate check: is the parametrization right?"),
    "audit": ("mutransfer_cli.audit", "is someone else's muP right? per layer, with a verdict"),
    "explain": ("mutransfer_cli.explain", "print the per-parameter table of roles, init std, LR mult, WD"),
    "data": ("mutransfer_cli.data", "prepare your own tokens: text + a local tokenizer.json -> tokens.bin"),
    "train": ("mutransfer_cli.train", "train one proxy on the embedded corpus or your data"),
    "sweep": ("mutransfer_cli.sweep", "Optuna sweeps: lr | batch | run | worker | status | export"),
    "fit": ("mutransfer_cli.fit", "fit optimum | power-law | critical-batch | loss laws to a results table"),
    "plot": ("mutransfer_cli.plot", "render LR curves, optimum vs width, critical batch, loss laws"),
    "demo": ("mutransfer_cli.demo", "all of it, end to end, on the embedded corpus"),
    "transfer": ("mutransfer_cli.transfer", "project to the target scale and write the transfer card"),
    "memory": ("mutransfer_cli.memory", "optimizer memory bill: bytes per parameter and total"),
    "fold": ("mutransfer_cli.fold", "fold the μP forward multipliers into the weights: a plain checkpoint"),
    "export": ("mutransfer_cli.export", "write a card as an engine's config: megatron | torchtitan | hf"),
}


class UsageError(ValueError):
    """Bad user input: the CLI prints the message and exits 2."""


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mutransfer",
        description="muP hyperparameter transfer: tune a small proxy, prove the transfer, "
        "fit the scaling laws, export a config for the big run.",
    )
    from mutransfer import __version__

    parser.add_argument("--version", action="version", version=f"mutransfer {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name, (module, help_) in VERBS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == verb:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = next((a for a in argv if not a.startswith("-")), None)
    if verb is not None and verb not in VERBS:
        print(f"mutransfer: error: unknown command {verb!r}; choose from {', '.join(VERBS)}",
              file=sys.stderr)
        return 2
    parser = build_parser(verb)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad flags, 0 on --help
        return int(exc.code or 0)
    if args.verb is None:
        parser.print_help()
        return 2
    module = importlib.import_module(VERBS[args.verb][0])
    try:
        return int(module.run(args) or 0)
    except (UsageError, ValueError) as exc:
        print(f"mutransfer {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `mutransfer ... --json | head`: the reader left, not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
    except OSError as exc:  # a directory where a file should go, permission denied, disk full
        where = f"{exc.filename!s}: " if exc.filename is not None else ""
        print(f"mutransfer {args.verb}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mutransfer {args.verb}: interrupted", file=sys.stderr)
        return 130
