"""The ``mutransfer`` command.

Each verb lives in its own module under ``mutransfer_cli`` and defines

    HELP: str                                   # one line for ``mutransfer --help``
    def add_arguments(p: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int    # exit code

Verb modules are imported only when that verb runs: ``mutransfer --help`` lists each verb
with its module's ``HELP``, read from the module's source (:func:`verb_help`) rather than by
importing it, so the CLI starts fast (no torch, optuna, scipy or pandas). User-input errors raise
:class:`UsageError` or ``ValueError``; ``main`` prints one line and exits 2, as it does for
an ``OSError`` (an unwritable output path) that a verb did not catch first, and for a user's
``analysis.py`` or ``sweeps.py`` that shadows our package of that name (:func:`shadowed`).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import sys
from pathlib import Path

#: verb -> module, in the order of the user's day.
MODULES: dict[str, str] = {
    "coord-check": "mutransfer_cli.coord_check",
    "audit": "mutransfer_cli.audit",
    "explain": "mutransfer_cli.explain",
    "data": "mutransfer_cli.data",
    "train": "mutransfer_cli.train",
    "sweep": "mutransfer_cli.sweep",
    "fit": "mutransfer_cli.fit",
    "plot": "mutransfer_cli.plot",
    "demo": "mutransfer_cli.demo",
    "tune": "mutransfer_cli.tune",
    "transfer": "mutransfer_cli.transfer",
    "memory": "mutransfer_cli.memory",
    "fold": "mutransfer_cli.fold",
    "export": "mutransfer_cli.export",
}


def verb_help(module: str) -> str:
    """The ``HELP`` constant of a verb module, read from its source without importing it
    (a verb's imports load torch, optuna or pandas; the top-level help needs none of them)."""
    path = Path(__file__).with_name(module.rsplit(".", 1)[-1] + ".py")
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("HELP = ")), None)
    if start is None:
        raise RuntimeError(f"{path} defines no HELP constant")
    for end in range(start + 1, min(start + 8, len(lines)) + 1):  # a string literal, maybe wrapped
        try:
            value = ast.literal_eval("\n".join(lines[start:end]).removeprefix("HELP = "))
        except SyntaxError:
            continue
        return str(value)
    raise RuntimeError(f"{path}: HELP is not a string literal")


#: verb -> (module, its HELP line); the help is the verb module's own text.
VERBS: dict[str, tuple[str, str]] = {verb: (module, verb_help(module)) for verb, module in MODULES.items()}


class UsageError(ValueError):
    """Bad user input: the CLI prints the message and exits 2."""


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mutransfer",
        description="muP hyperparameter transfer: tune a small proxy, prove the transfer, "
        "fit the scaling laws, export a config for the big run.",
    )

    from mutransfer._version import __version__  # after the shadowing check (main)

    parser.add_argument("--version", action="version", version=f"mutransfer {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name, (module, help_) in VERBS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == verb:
            importlib.import_module(module).add_arguments(p)
    return parser


def shadowed() -> str | None:
    """The one error line when a user's ``analysis``/``sweeps`` file or folder comes first on
    ``sys.path`` (mutransfer._siblings), else None. This module imports nothing of the library
    at its top, so that ``main`` is reached and says so instead of a traceback."""
    try:
        from mutransfer._siblings import check_siblings  # importing mutransfer checks `analysis`

        check_siblings(("analysis", "sweeps"))
    except ImportError as exc:
        if getattr(exc, "shadowing", None) is None:
            raise
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    line = shadowed()
    if line is not None:
        print(line, file=sys.stderr)
        return 2
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
    args.raw_argv = argv  # a verb that resubmits itself (tune --slurm) runs what was typed
    module = importlib.import_module(VERBS[args.verb][0])
    # A module:function model builder is first imported and built in a child process
    # (mutransfer.contain): one that exits or hangs is an error line, not this verb's end.
    from mutransfer_cli import _common  # after the shadowing check

    try:  # a bad setting is named before the verb writes anything (a sweep's storage, a run folder)
        _common.check_settings()
    except ValueError as exc:
        print(f"mutransfer {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    try:
        with _common.default_build_timeout():
            return int(module.run(args) or 0)
    except SystemExit as exc:  # user code (a builder's forward, an entry) called sys.exit mid-run
        print(f"mutransfer {args.verb}: error: user code called sys.exit({exc.code!r}) during the run",
              file=sys.stderr)
        return 2
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
