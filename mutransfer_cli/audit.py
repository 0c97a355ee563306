"""``mutransfer audit``: is someone else's μP right? Per layer, with a verdict."""

from __future__ import annotations

import argparse
from typing import Any

from mutransfer.contain import run_child
from mutransfer.entry import load_entry
from mutransfer_cli._common import (
    int_list,
    number_in,
    positive_float,
    positive_int,
    print_json,
    progress,
    seed_list,
)

HELP = "audit a muP implementation: per-parameter width exponents vs the rule table, verdict"


def add_arguments(p: argparse.ArgumentParser) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--model", default=None, metavar="MODEL",
                     help="module:function where function(width) returns (model, optimizer); or hf:PATH "
                          "/ a preset name: audit mutransfer's own muP (AdamW) on that model. A "
                          "module:function is imported and run with your permissions (its top level too), "
                          "in a child process; the current directory comes first on the import path, so "
                          "a file there shadows any installed module of the same name")
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
    p.add_argument("--depth-alpha", type=number_in(0.5, 1.0, only=(0.5, 1.0)), default=None,
                   help="the CompleteP alpha you use, 0.5 or 1 (default: measured)")
    p.add_argument("--no-coord-check", action="store_true", help="skip the coordinate check")
    p.add_argument("--steps", type=positive_int, default=3, help="coordinate-check steps (default 3)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=seed_list, default=None,
                       help="comma-separated coordinate-check seeds, e.g. 0,1 (as in coord-check and sweep)")
    seeds.add_argument("--n-seeds", type=positive_int, default=None,  # None: argparse sees a 2 given
                       help=f"coordinate-check seeds 0..N-1 (default {DEFAULT_N_SEEDS})")
    p.add_argument("--tol", type=positive_float, default=0.2,
                   help="largest allowed gap between found and expected exponents (default 0.2)")
    p.add_argument("--coord-tol", type=positive_float, default=0.25,
                   help="largest allowed coordinate-check log2 slope (default 0.25)")
    p.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT,
                   help=f"seconds the entry's child process may take (default {DEFAULT_TIMEOUT:g}); "
                        "past it the child is killed and the audit exits 2")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    if len(set(args.widths)) < 2:
        raise ValueError(f"--widths needs at least 2 different widths, got {args.widths}")
    spec = args.model if args.model is not None else args.entry
    user_code = args.entry is not None or (":" in spec and not spec.startswith(("hf:", "preset:")))
    flag = "--entry" if args.entry is not None else "--model"
    for name, entry in ((flag, spec if user_code else None), ("--input", args.input)):
        if entry is not None and not all(entry.partition(":")[::2]):  # before any user code runs
            raise ValueError(f"entry point {entry!r} is not of the form module:function ({name})")
    seeds = args.seeds if args.seeds is not None else list(range(args.n_seeds or DEFAULT_N_SEEDS))
    options = {**vars(args), "entry": spec, "user_code": user_code, "seeds": seed_count(seeds)}
    # the audit trains in a child process: the parent reports that it is alive meanwhile
    with progress(1, "audit", False, unit="check") as bar:  # on stderr: --json stays clean
        bar.set(extra="training the coordinate check's models")
        kind, payload = run_contained(options, args.timeout)
    if kind != "done":
        raise ValueError(payload)
    if args.json:
        print_json(payload["json"])
    else:
        print(payload["report"])
    return 0 if payload["passed"] else 1


def seed_count(seeds: list[int]) -> int:
    """The audit's coordinate check runs seeds 0..N-1 (:func:`mutransfer.checks.audit.audit` takes a
    count): ``[0, 1]`` -> 2; any other list is refused, naming it, rather than run as other
    seeds than asked (``--seeds 2`` is the seed 2, not two seeds)."""
    if seeds != list(range(len(seeds))):
        listed = ",".join(map(str, seeds))
        raise ValueError(f"--seeds {listed}: the audit's coordinate check runs seeds 0..N-1; give "
                         f"--seeds {','.join(map(str, range(len(seeds))))} or --n-seeds N")
    return len(seeds)


#: Coordinate-check seeds without --seeds or --n-seeds.
DEFAULT_N_SEEDS = 2
#: Seconds the user's entry may take in its child process (``--timeout``).
DEFAULT_TIMEOUT = 300.0
#: Traceback lines of a failed entry shown under the error's first line.
TRACEBACK_TAIL = 8


def run_contained(options: dict[str, Any], timeout: float) -> tuple[str, Any]:
    """Run the audit of ``options["entry"]`` in a child process
    (:func:`mutransfer.contain.run_child`), so the user's code (its module's top level
    included) can neither end this process with ``sys.exit`` nor hang it, and dies with it.
    Returns ``("done", result)`` only for a finished audit; anything else (an exception of
    any type, ``sys.exit``, a crash, the timeout) is ``("error", message)``: a first line
    naming the entry, then its traceback tail."""
    entry = options["entry"]
    out = run_child(_child, {k: v for k, v in options.items() if k != "func"}, timeout)
    if out.kind == "timeout":
        return "error", (f"--entry {entry} did not finish within {timeout:g} s; it was stopped "
                         "(raise --timeout if it is only slow)")
    if out.kind == "ended":  # the child ended without a word: os._exit, a signal, a crash
        return "error", (f"--entry {entry} ended the audit's process (exit code {out.exit_code}) "
                         "before the audit finished")
    kind, payload = out.value
    return kind, payload


def _child(options: dict[str, Any]) -> list[Any]:
    """The child's side of :func:`run_contained`: ``[kind, payload]`` (JSON)."""
    import traceback

    entry = options["entry"]
    try:
        return ["done", _audit(options)]
    except SystemExit as exc:
        return ["error", f"--entry {entry} called sys.exit({exc.code!r}) before the audit "
                         "finished; an audit that did not run is not a pass"]
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is reported
        text = f"{type(exc).__name__}: {exc}"
        frames = traceback.extract_tb(exc.__traceback__)
        ours = bool(frames) and "/mutransfer/" in frames[-1].filename.replace("\\", "/")
        if "set_base_shapes" in text or "infshape" in text:
            return ["error", f"--entry {entry}: the model has mup layers but no base shapes; call "
                             "mup.set_base_shapes(model, base_model) in the entry before building "
                             "the optimizer"]
        if ours and isinstance(exc, ValueError):  # our own check of what the entry returned
            return ["error", str(exc)]
        tail = traceback.format_exception(type(exc), exc, exc.__traceback__)
        lines = "".join(tail).rstrip().splitlines()[-TRACEBACK_TAIL:]
        return ["error", f"--entry {entry} raised {text.splitlines()[0]}\n"
                         + "\n".join("  | " + ln for ln in lines)]


def _audit(options: dict[str, Any]) -> dict[str, Any]:
    # imported here, in the spawned child that runs the audit: the parent process only
    # waits for its answer and never loads torch
    from mutransfer.checks.audit import audit  # lazy: torch (the child's import, see above)

    if options["user_code"]:
        builder = load_entry(options["entry"])
    else:
        builder = _ours(options["entry"], min(options["widths"]) if options["base_width"] is None
                        else options["base_width"])
    example_input = load_entry(options["input"]) if options["input"] else None
    result = audit(builder, widths=options["widths"], base_width=options["base_width"],
                   example_input=example_input,
                   coord_check=not options["no_coord_check"], steps=options["steps"],
                   seeds=options["seeds"], tol=options["tol"], coord_tol=options["coord_tol"],
                   depths=options["depths"], depth_alpha=options["depth_alpha"], name=options["entry"])
    return {"json": result.to_json_dict(), "report": result.report(), "passed": bool(result.passed)}


def _ours(spec: str, base_width: int) -> Any:
    """``builder(width) -> (model, optimizer)``: the model ``spec`` (``hf:PATH`` or a preset)
    under mutransfer's own μP and AdamW (LR 1e-2), at its own depth and a 256-token vocab.
    Runs in the audit's child process (see :func:`_audit`)."""
    from mutransfer.models.source import build_model, parse_model  # lazy: torch (child)
    from mutransfer.parametrize.parametrization import Parametrization  # lazy: torch (child)
    from mutransfer.training.model_section import ModelSection  # lazy: torch (child)
    from mutransfer.training.optim import build_optimizer  # lazy: torch (child)

    source = parse_model(spec)
    _, depth = ModelSection(source=source.spec()).own_shape()

    def builder(width: int) -> tuple[Any, Any]:
        pz = Parametrization(lambda w: build_model(source, w, depth, vocab_size=256), width=width,
                             base_width=min(base_width, width))
        model = pz.build(seed=0)
        return model, build_optimizer(pz.param_groups(model, 1e-2), "adamw")

    return builder
