"""Benchmark: the whole-CLI audit. Every flag of every verb fed bad input; 0 fail is the target.

A table of cases, each ``(id, verb, argv, env, setup, expectation)``, is generated from the
CLI's own argument parsers (every verb and sub-verb, every flag): for a number flag 0, -1,
nan, inf, 1e300, ``abc`` and ``""``; for a choice flag a word it does not list; for a path a
file that is missing, a directory, empty, binary garbage or unreadable; hostile names (a
newline, ``$(touch PWNED)``); every ``MUTRANSFER_*`` variable the code reads, set badly;
hand-edited cards and results tables. Each case runs the real CLI (``mutransfer_cli.main``)
in its own process and folder, with work cut to tiny sizes so nothing trains for long, and
is classified:

* **pass**: exit 2 (or the case's documented code), stderr one line (argparse's usage block
  before it aside) naming the bad value, the flag, field or variable; no traceback; nothing
  half-written (no ``*.tmp``, no new file after a refusal); no ``PWNED``; no planted secret
  printed or written;
* **vague**: exit 2 and one line that names none of them;
* **fail**: anything else (a traceback, exit 0 or 1 on bad input, a hang past the timeout,
  a secret printed, a file half-written).

Cases run in a pool of ``--jobs`` processes that import the CLI's verbs once and fork one
child per case (a child is a whole process: its own folder, environment, stdio and process
group, killed with SIGKILL past its timeout); ``--cold`` starts each case as a fresh
``python -m mutransfer_cli`` instead (about 3 s more a case). Cases that need a dropped
capability (a file unreadable to root, a read-only database) always run cold, under
``setpriv``.

Run: ``python -m benchmarks cli_audit`` or ``python -m benchmarks.cli_audit [--jobs 2]
[--only VERB] [--cold]`` (writes ``benchmarks/results/cli_audit.json`` atomically: counts
per verb and class, each non-pass case's argv and stderr; a sample run with ``--only`` or
``--limit`` writes nothing unless ``--out`` is given).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "cli_audit.json"
#: A password planted in storage URLs: it must appear in no output and no written file.
SECRET = "S3CRETPW"
PWNED = "PWNED"
HOSTILE = ("a\nb", f"$(touch {PWNED})", f"`touch {PWNED}`;touch {PWNED}")
BAD_NUMBERS = ("0", "-1", "nan", "inf", "1e300", "abc", "")
BAD_INTS = ("0", "-1", "1.5", "abc", "", "99999999999999999999999")
DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class Case:
    """One audit case: run ``mutransfer ARGV`` in a fresh folder after ``setup``."""

    id: str
    """Unique name: verb, flag and value."""
    verb: str
    """The verb (``"sweep lr"``) the counts are grouped by."""
    argv: tuple[str, ...]
    """The arguments after ``mutransfer``; ``{d}`` stands for the case's folder."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables set for the case (on top of a clean ``MUTRANSFER_*``)."""
    setup: tuple[str, ...] = ()
    """Steps that prepare the folder (:func:`_setup`): ``card``, ``results``, ``study``..."""
    names: tuple[str, ...] = ()
    """Words of which the error line must hold one (the value, the flag, the field)."""
    rc: tuple[int, ...] = (2,)
    """Exit codes that are right; with 0 among them the input may also be accepted."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds before the case is killed and counted a hang."""
    cold: bool = False
    """Run as a fresh interpreter (with ``setpriv`` as root: no override of file modes)."""
    run_stdout: bool = False
    """A script printed on stdout (``sweep launch --dry-run``) is then run with bash."""


@dataclass
class Outcome:
    """What a case did and its class."""

    case: Case
    rc: int | None
    stderr: str
    klass: str
    why: str
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- classification
def error_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are the message: argparse's usage block (``usage:`` and its
    indented continuation lines) is dropped, as are blank lines."""
    out, in_usage = [], False
    for line in stderr.splitlines():
        if line.startswith("usage:"):
            in_usage = True
            continue
        if in_usage and line.startswith(" "):
            continue
        in_usage = False
        if line.strip():
            out.append(line)
    return out


def classify(case: Case, rc: int | None, stdout: str, stderr: str, *, timed_out: bool = False,
             pwned: bool = False, half_written: tuple[str, ...] = (),
             secret_in_files: tuple[str, ...] = ()) -> tuple[str, str]:
    """(class, reason) of a finished case; see the module docstring for the classes."""
    if timed_out:
        return "fail", f"hang: killed after {case.timeout:g} s"
    if pwned:
        return "fail", "a hostile name ran as a command (PWNED exists)"
    if "Traceback (most recent call last)" in stderr or "Traceback (most recent call last)" in stdout:
        return "fail", "traceback"
    if SECRET in stdout or SECRET in stderr:
        return "fail", "the planted password was printed"
    if secret_in_files:
        return "fail", f"the planted password was written to {', '.join(secret_in_files[:3])}"
    if rc not in case.rc:
        return "fail", f"exit {rc} (expected {' or '.join(map(str, case.rc))})"
    if rc == 0:
        return "pass", "accepted (a right answer for this input)"
    if half_written:
        return "fail", f"refused but left {', '.join(half_written[:3])}"
    lines = error_lines(stderr)
    if len(lines) != 1:
        return "fail", f"{len(lines)} error lines"
    low = lines[0].lower()
    wanted = [n for n in case.names if n]
    if any(n.lower() in low for n in wanted):
        return "pass", "one line naming it"
    return "vague", f"one line naming none of {wanted}"


# ---------------------------------------------------------------------------------- fixtures
def _results_frame() -> Any:
    import numpy as np
    import pandas as pd

    rows = []
    rng = np.random.default_rng(0)
    for w in (64, 128, 256):
        for t in np.arange(-12.0, -5.0):
            for s in range(2):
                rows.append(dict(parametrization="mup", width=w, lr=2.0**t, seed=s, batch_size=16,
                                 loss=3.0 + 0.02 * (t + 9.3) ** 2 + rng.normal(0, 0.002), diverged=False,
                                 N=1e6 * w, D=2e7 * w, n_params=1e6 * w, tokens=2e7 * w * (1 + s),
                                 batch=2.0 ** (t + 16), steps=100 + 20000 / 2.0 ** (t + 16)))
    return pd.DataFrame(rows)


def _scaling_frame() -> Any:
    """A batch x budget x LR sweep on known laws: eta* = 2^-12 B^0.5 D^-0.25, B* = 16 D^0.5."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = []
    for d in (2**20, 2**21, 2**22, 2**23):
        for b in (2.0**12, 2.0**13, 2.0**14, 2.0**15, 2.0**16):
            t_opt = np.log2(2.0**-12 * b**0.5 * d**-0.25)
            for t in np.arange(-14.0, -5.5):
                for s in range(2):
                    loss = 3 + 0.02 * (t - t_opt) ** 2 + 0.01 * (np.log2(b / (16 * d**0.5))) ** 2
                    rows.append(dict(lr=2.0**t, batch_tokens=b, tokens=d, loss=loss + rng.normal(0, 0.001), seed=s,
                                     diverged=False, weight_decay=0.1, seq_len=128))
    return pd.DataFrame(rows)


def build_fixtures(base: Path, python: str, needed: set[str] | None = None) -> dict[str, Path]:
    """The good files the cases start from, made once: a results table, a transfer card, a
    prepared study, a sweep spec, a tokenizer and its text, a training checkpoint (the last
    three by the CLI itself, only when ``needed`` names them; None: all)."""
    base.mkdir(parents=True, exist_ok=True)
    fx = {"results": base / "results.csv", "scaling": base / "scaling.csv", "card": base / "card.yaml", "study": base / "study",
          "spec": base / "spec.yaml", "tokenizer": base / "tok.json", "text": base / "text.txt",
          "checkpoint": base / "ckpt" / "checkpoint.pt", "cache": base / "cache"}
    _results_frame().to_csv(fx["results"], index=False)
    _scaling_frame().to_csv(fx["scaling"], index=False)
    fx["spec"].write_text(json.dumps({"kind": "run", "grid": {"lr": [0.01]},
                                      "base": {"steps": 2, "width": 16, "depth": 1, "batch_size": 2,
                                               "seq_len": 16}}))
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(63)} | {"[UNK]": 63}
    tk = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.save(str(fx["tokenizer"]))
    fx["text"].write_text(" ".join(f"w{i % 63}" for i in range(2000)), encoding="utf-8")
    env = {**_clean_env(), "MUTRANSFER_CACHE": str(fx["cache"])}
    made = {"card": ["transfer", "--lr", "1e-3", "--tokens", "1e8", "--batch-size", "32", "--out", str(fx["card"])],
            "study": ["sweep", "lr", "--widths", "16", "--lrs", "0.01", "--steps", "2", "--out", str(fx["study"]),
                      "--prepare-only", "--quiet"],
            "checkpoint": ["train", *TINY_TRAIN, "--set", "checkpoint_every=1", "--out",
                           str(fx["checkpoint"].parent)]}
    for name, argv in made.items():
        if needed is not None and name not in needed:
            continue
        p = subprocess.run([python, "-m", "mutransfer_cli", *argv], capture_output=True, text=True, env=env,
                           cwd=base, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"fixture `mutransfer {' '.join(argv)}` exited {p.returncode}: {p.stderr[-2000:]}")
    return fx


def fixtures_needed(cases: list[Case]) -> set[str]:
    """The fixtures made by the CLI that ``cases`` start from."""
    return {s.partition("=")[0] for c in cases for s in c.setup} | (
        {"card"} if any(s.startswith(("card:", "cardtext:")) for c in cases for s in c.setup) else set()) | (
        {"study"} if any(s.startswith("prep:") for c in cases for s in c.setup) else set())


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MUTRANSFER_", "WANDB_"))}
    env["PYTHONPATH"] = str(ROOT)
    env["WANDB_MODE"] = "offline"
    return env


def _edit_yaml(path: Path, dotted: str, value: Any) -> None:
    import yaml

    doc = yaml.safe_load(path.read_text())
    *head, last = dotted.split(".")
    node = doc
    for key in head:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


_DELETE = object()


def _setup(steps: tuple[str, ...], d: Path, fx: dict[str, Path]) -> None:
    """Prepare a case's folder. A step is ``NAME`` (copy that fixture), ``NAME=missing|dir|
    empty|garbage|unreadable`` (the fixture's file spoilt that way), ``card:FIELD=JSON`` (the
    card with one field set; ``"<del>"`` deletes it), ``cardtext:TEXT`` (lines appended to
    the card), ``csv:COLUMN=JSON`` (the results table with a column set)."""
    for step in steps:
        if step.startswith("card:"):
            path, _, value = step[5:].partition("=")
            _edit_yaml(d / "card.yaml", path, _DELETE if value == '"<del>"' else json.loads(value))
            continue
        if step.startswith("cardtext:"):
            with open(d / "card.yaml", "a", encoding="utf-8") as f:
                f.write(step[9:])
            continue
        if step.startswith("csv:"):
            import pandas as pd

            col, _, value = step[4:].partition("=")
            df = pd.read_csv(d / "results.csv")
            df[col] = json.loads(value) if value != "<del>" else None
            if value == "<del>":
                df = df.drop(columns=[col])
            df.to_csv(d / "results.csv", index=False)
            continue
        if step.startswith("prep:"):  # a study of this name, prepared by the CLI itself
            p = subprocess.run([sys.executable, "-m", "mutransfer_cli", *BASES["sweep lr"][0][:-4], "--storage",
                                str(d / "study" / "optuna.journal"), "--study", step[5:], "--prepare-only"],
                               capture_output=True, text=True, cwd=d, env={**_clean_env(), "MUTRANSFER_CACHE":
                                                                           str(fx["cache"])}, timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"setup {step!r}: {p.stderr[-500:]}")
            continue
        name, _, how = step.partition("=")
        if name.startswith("raw:"):  # a file of the user's, spoilt
            _spoil(d / name[4:], how, b"lr: 0.01\n")
            continue
        src = fx[name]
        dst = d / (src.name if name != "checkpoint" else "checkpoint.pt")
        if name == "study":
            dst = d / "study"
        if not how:
            (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
        else:
            _spoil(dst, how, src.read_bytes())


def _spoil(dst: Path, how: str, good: bytes) -> None:
    if how == "dir":
        dst.mkdir()
    elif how == "empty":
        dst.write_bytes(b"")
    elif how == "garbage":
        dst.write_bytes(bytes(range(256)) * 64 + b"\x00\xff" * 1000)
    elif how == "unreadable":
        dst.write_bytes(good)
        dst.chmod(0)
    elif how != "missing":
        raise ValueError(f"unknown spoiling {how!r}")


# ------------------------------------------------------------------------------ the cases
TINY_TRAIN = ("--set", "steps=2", "--set", "width=16", "--set", "depth=1", "--set", "batch_size=2",
              "--set", "seq_len=16", "--quiet")
STORE = "{d}/study/optuna.journal"
#: verb -> (the argv of a good, cheap run that the case's bad flag is added to, setup steps).
BASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "coord-check": (("coord-check", "--model", "mlp", "--widths", "16,32", "--steps", "1", "--n-seeds", "1",
                     "--no-plot", "--quiet", "--out", "{d}/cc"), ()),
    "audit": (("audit", "--model", "gpt-tiny", "--widths", "16,32", "--no-coord-check"), ()),
    "explain": (("explain",), ()),
    "data prepare": (("data", "prepare", "--tokenizer", "{d}/tok.json", "--text", "{d}/text.txt", "--out",
                      "{d}/tokens.bin", "--eos", "none", "--quiet"), ("tokenizer", "text")),
    "train": (("train", *TINY_TRAIN, "--out", "{d}/run"), ()),
    "sweep lr": (("sweep", "lr", "--widths", "16", "--lrs", "0.01", "--steps", "2", "--out", "{d}/sw",
                  "--prepare-only", "--quiet"), ()),
    "sweep batch": (("sweep", "batch", "--widths", "16", "--lrs", "0.01", "--batch-sizes", "2", "--steps", "2",
                     "--out", "{d}/sw", "--prepare-only", "--quiet"), ()),
    "sweep scaling": (("sweep", "scaling", "--out", "{d}/sw", "--prepare-only", "--quiet"), ()),
    "sweep run": (("sweep", "run", "{d}/spec.yaml", "--out", "{d}/sw", "--prepare-only", "--quiet"), ("spec",)),
    "sweep multipliers": (("sweep", "multipliers", "--trials", "2", "--steps", "2", "--out", "{d}/sw",
                           "--prepare-only", "--quiet"), ()),
    "sweep worker": (("sweep", "worker", "--storage", STORE, "--max-trials", "1", "--quiet"), ("study",)),
    "sweep launch": (("sweep", "launch", "--slurm", "--storage", STORE, "--workers", "1", "--dry-run"),
                     ("study",)),
    "sweep status": (("sweep", "status", "--storage", STORE), ("study",)),
    "sweep results": (("sweep", "results", "--storage", STORE, "--out", "{d}/r.csv"), ("study",)),
    "fit optimum": (("fit", "optimum", "{d}/results.csv", "--group", "width", "--n-boot", "20", "--out", "{d}/o.json",
                     "--quiet"), ("results",)),
    "fit power-law": (("fit", "power-law", "{d}/results.csv", "--x", "N", "--y", "lr", "--n-boot", "20",
                       "--out", "{d}/o.json", "--quiet"), ("results",)),
    "fit critical-batch": (("fit", "critical-batch", "{d}/results.csv", "--batch", "batch", "--steps",
                            "steps", "--n-boot", "20", "--out", "{d}/o.json", "--quiet"), ("results",)),
    "fit loss": (("fit", "loss", "{d}/results.csv", "--n", "n_params", "--d", "tokens", "--n-boot", "0",
                  "--out", "{d}/o.json", "--quiet"), ("results",)),
    "fit scaling": (("fit", "scaling", "{d}/scaling.csv", "--n-boot", "20", "--out", "{d}/o.json", "--quiet"),
                    ("scaling",)),
    "plot lr-curves": (("plot", "lr-curves", "{d}/results.csv", "--out", "{d}/p.png", "--quiet"), ("results",)),
    "plot optimum": (("plot", "optimum", "{d}/results.csv", "--n-boot", "20", "--out", "{d}/p.png",
                      "--quiet"), ("results",)),
    "plot critical-batch": (("plot", "critical-batch", "{d}/results.csv", "--batch", "batch", "--steps",
                             "steps", "--n-boot", "20", "--out", "{d}/p.png", "--quiet"), ("results",)),
    "plot loss-law": (("plot", "loss-law", "{d}/results.csv", "--n", "n_params", "--d", "tokens", "--n-boot",
                       "0", "--out", "{d}/p.png", "--quiet"), ("results",)),
    "plot scaling": (("plot", "scaling", "{d}/scaling.csv", "--n-boot", "20", "--out", "{d}/p.png",
                      "--quiet"), ("scaling",)),
    "demo": (("demo", "--size", "tiny", "--out", "{d}/demo", "--quiet"), ()),
    "tune": (("tune", "--preset", "gpt-tiny", "--target-width", "128", "--target-depth", "2", "--tokens", "1e8",
              "--budget", "60s", "--out", "{d}/tune", "--quiet"), ()),
    "transfer": (("transfer", "--lr", "1e-3", "--tokens", "1e8", "--batch-size", "32", "--out",
                  "{d}/card.yaml"), ()),
    "memory": (("memory", "--params", "7B"), ()),
    "fold": (("fold", "{d}/checkpoint.pt", "--out", "{d}/plain.pt", "--quiet"), ("checkpoint",)),
    "export": (("export", "{d}/card.yaml", "--to", "megatron", "--drop", "init", "--out", "{d}/mg.json",
                "--quiet"), ("card",)),
}
#: Verbs whose good run takes minutes (the demo, tune): only input that argparse or the
#: first checks refuse is fed to them; anything accepted is a hang by the case's timeout.
SLOW = {"demo", "tune"}

#: (verb, flag) -> values that are right there although they look bad (0 weight decay, a
#: negative exponent): they are fed anyway, but acceptance (exit 0) also passes.
FINE: dict[tuple[str, str], set[str]] = {
    ("transfer", "--weight-decay"): {"0"}, ("transfer", "--lr-floor"): {"0"},
    ("transfer", "--decay-fraction"): {"0"}, ("transfer", "--warmup-fraction"): {"0"},
    ("sweep scaling", "--lr-batch-exponent"): {"0", "-1"}, ("sweep scaling", "--lr-center"): set(),
    ("memory", "--width"): {"0"}, ("memory", "--adamw-fraction"): {"0"},
    ("data prepare", "--val-fraction"): {"0"},
    # an empty value is the flag left out: no group, the proxy's preset, no second variable
    ("transfer", "--group"): {""}, ("transfer", "--preset"): {""}, ("transfer", "--target-preset"): {""},
    ("fit power-law", "--x2"): {""}, ("fit power-law", "--weight"): {""},
}
#: Flags whose value is a name the user picks: hostile text must never run, and may be kept.
NAME_FLAGS = {"--study", "--tokenizer", "--partition", "--account", "--decay-shape", "--eos"}
INPUT_FILE_FLAGS = {"--config": "config.yaml", "--resume": "ckpt.pt", "--results": "results.csv",
                    "--fit": "fit.json", "--proxy-config": "proxy.yaml", "--model-config": "model.yaml",
                    "--scaling-fit": "fit.json", "--audit": "audit.json", "--hf-config": "config.json",
                    "--storage-file": "storage.txt", "--data": "tokens.bin", "--tokenizer": "tok.json",
                    "--text": "text.txt"}
OUTPUT_FLAGS = {"--out", "--audit-out"}


def _walk(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, [*path, name])
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield " ".join(path), action


def surface() -> list[tuple[str, argparse.Action]]:
    """(verb, action) for every flag and positional argument of every verb."""
    from mutransfer_cli import VERBS, build_parser

    out = []
    for verb in VERBS:
        parser = build_parser(verb)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out.extend(_walk(sub.choices[verb], [verb]))
    return out


def _with(base: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """``base`` with ``flag`` set to ``value`` (replacing the base's own value of it)."""
    argv = list(base)
    if flag in argv:
        i = argv.index(flag)
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            del argv[i:i + 2]
    return (*argv, f"{flag}={value}" if value.startswith("-") or not value else flag, *(
        () if value.startswith("-") or not value else (value,)))


def _parse_rejects(action: argparse.Action, value: str) -> bool:
    if action.choices is not None:
        return value not in action.choices
    if action.type is None:
        return False
    try:
        action.type(value)
    except (argparse.ArgumentTypeError, ValueError, TypeError, OverflowError):
        return True
    return False


def flag_cases() -> list[Case]:
    """Bad values for every flag of every verb, on the verb's good base run."""
    cases: list[Case] = []
    seen: set[tuple[str, str, str]] = set()
    for verb, action in surface():
        if verb not in BASES:
            continue
        base, setup = BASES[verb]
        flag = action.option_strings[0] if action.option_strings else None
        if flag is None or action.nargs == 0:
            continue
        # a flag that sibling sub-verbs share (one add_argument, one type) is fed once
        group = {"plot": "fit"}.get(verb.split()[0], verb.split()[0])  # fit and plot read one table alike
        shared = (group, flag, f"{getattr(action.type, '__name__', action.type)}{action.choices}")
        if " " in verb and shared in seen:
            continue
        seen.add(shared)
        words = (flag, flag.lstrip("-"), flag.lstrip("-").replace("-", "_"))
        numeric = action.type is not None and action.choices is None and getattr(
            action.type, "__name__", "") not in ("key_value", "columns")
        values: list[str] = []
        if action.choices is not None:
            values = ["bogus", ""]
        elif numeric:
            values = list(BAD_INTS if "int" in getattr(action.type, "__name__", str(action.type)) else BAD_NUMBERS)
        elif flag in OUTPUT_FLAGS:
            values = ["{d}", "{d}/file.txt/x", *HOSTILE]
        elif flag in INPUT_FILE_FLAGS or flag in ("--storage", "--model", "--entry", "--input", "--runner"):
            values = []  # the path and model cases below
        elif flag in NAME_FLAGS:
            values = ["", *HOSTILE]
        else:
            values = ["bogus", "", HOSTILE[1]]
        builtin = action.type in (int, float) or getattr(action.type, "__name__", "") == "_int"
        for value in values:
            parse_error = _parse_rejects(action, value)
            # a checked type that takes 0 or -1 declares them in its range (a seed, an offset)
            fine = value in FINE.get((verb, flag), set()) or (
                not builtin and not parse_error and value in ("0", "-1"))
            if verb in SLOW and not parse_error and flag not in NAME_FLAGS and flag not in OUTPUT_FLAGS:
                continue
            dir_out = flag == "--out" and verb.split()[0] in ("coord-check", "train", "sweep", "demo", "tune")
            accept = fine or (flag in NAME_FLAGS) or (flag in OUTPUT_FLAGS and value in HOSTILE) or (
                dir_out and value == "{d}")
            if verb in SLOW and accept:
                continue
            argv = _with(base, flag, value)
            if flag == "--audit-out":  # written by the held-out audit only, which --prepare-only never runs
                accept = True
            cases.append(Case(id=f"{verb} {flag}={value!r}", verb=verb, argv=argv, setup=setup,
                              names=(*words, repr(value), *((value,) if value not in ("", "0", "-1") else ())),
                              rc=(0, 2) if accept else (2,), timeout=60 if verb in SLOW else DEFAULT_TIMEOUT))
    return cases


def _file_cases() -> list[Case]:
    """Every input path flag given a missing, directory, empty, garbage and unreadable file."""
    cases: list[Case] = []
    where = {  # verb -> its input flags (a positional argument under its own name)
        "train": ["--config", "--resume"], "coord-check": ["--data"],
        "transfer": ["--results", "--fit", "--proxy-config", "--model-config", "--scaling-fit", "--audit"],
        "export": ["--hf-config", "card"], "fold": ["checkpoint"], "sweep run": ["spec"],
        "sweep status": ["--storage-file", "--storage"], "sweep worker": ["--storage"],
        "sweep results": ["--storage"], "sweep launch": ["--storage"],
        "data prepare": ["--tokenizer", "--text"], "fit optimum": ["results"],
        "fit loss": ["results"], "plot lr-curves": ["results"], "plot optimum": ["results"],
    }
    fixture_of = {"card": "card", "checkpoint": "checkpoint", "spec": "spec", "--tokenizer": "tokenizer",
                  "--text": "text", "results": "results"}
    for verb, flags in where.items():
        base, setup = BASES[verb]
        for flag in flags:
            for how in ("missing", "dir", "empty", "garbage", "unreadable"):
                if flag == "--storage":
                    if how == "unreadable":
                        continue
                    target = {"missing": "{d}/nope/optuna.journal", "dir": "{d}", "empty": "{d}/empty.journal",
                              "garbage": "{d}/garbage.journal"}[how]
                    pre = {"empty": "raw:empty.journal=empty", "garbage": "raw:garbage.journal=garbage"}.get(how)
                    cases.append(Case(id=f"{verb} {flag} {how}", verb=verb, argv=_with(base, flag, target),
                                      setup=(*setup, *((pre,) if pre else ())),
                                      names=("storage", "journal", target.split("/")[-1])))
                    continue
                if flag in fixture_of:
                    fx_name = fixture_of[flag]
                    steps = tuple(s for s in setup if s != fx_name) + (f"{fx_name}={how}",)
                    filename = {"card": "card.yaml", "checkpoint": "checkpoint.pt", "spec": "spec.yaml",
                                "--tokenizer": "tok.json", "--text": "text.txt", "results": "results.csv"}[flag]
                    argv = base if flag in ("card", "checkpoint", "spec", "results") else _with(
                        base, flag, "{d}/" + filename)
                else:
                    filename = INPUT_FILE_FLAGS[flag]
                    steps = (*setup, f"raw:{filename}={how}")
                    argv = _with(base, flag, "{d}/" + filename)
                # an empty YAML file is an empty mapping: every field at its default
                empty_ok = how == "empty" and flag in ("--config", "--proxy-config", "--model-config")
                cases.append(Case(id=f"{verb} {flag} {how}", verb=verb, argv=argv, setup=steps,
                                  names=(flag, flag.lstrip("-"), filename), cold=how == "unreadable",
                                  rc=(0, 2) if empty_ok else (2,)))
    return cases


def _model_cases() -> list[Case]:
    """Bad model specs, runners, storages (with a planted password) and tracker specs."""
    cases: list[Case] = []
    bad_models = ("nosuchpreset", "hf:{d}/missing.json", "nosuchmodule_xyz:build", "os:nosuchfunction",
                  "json:dumps", "", HOSTILE[1], "hf:{d}")
    model_verbs = ("coord-check", "audit", "explain", "train", "sweep lr", "sweep batch", "sweep scaling",
                   "sweep multipliers", "transfer", "demo", "tune")
    for verb in model_verbs:
        base, setup = BASES[verb]
        flag = "--model"
        for value in bad_models:
            if verb in SLOW and value == "json:dumps":
                continue
            cases.append(Case(id=f"{verb} --model={value!r}", verb=verb, argv=_with(base, flag, value),
                              setup=setup, names=("--model", "model", value.replace("{d}", "")) if value else (
                                  "--model", "model"), timeout=60 if verb in SLOW else DEFAULT_TIMEOUT))
    for verb in ("sweep lr", "sweep status", "sweep results", "sweep worker", "transfer"):
        base, setup = BASES[verb]
        for value in (f"postgresql://u:{SECRET}@127.0.0.1:1/db", f"mysql://u:{SECRET}@127.0.0.1:1/db",
                      "bogus://x", "sqlite:///{d}/nope/x.db", "redis://h/0"):
            if verb == "transfer" and not value.startswith("bogus"):
                continue
            argv = tuple(a for a in base if a not in ("--out", "{d}/sw")) if verb == "sweep lr" else base
            # a sweep makes a new SQLite file's folder; transfer only records the URL, masked
            made = (verb == "sweep lr" and value.startswith("sqlite")) or verb == "transfer"
            cases.append(Case(id=f"{verb} --storage={value.split(':')[0]}:{value[-12:]}", verb=verb,
                              argv=_with(argv, "--storage", value), setup=setup, timeout=90,
                              names=("storage", value.split(":")[0], "bogus"), rc=(0, 2) if made else (2,)))
    for verb in ("train", "sweep lr", "sweep worker"):
        base, setup = BASES[verb]
        for value in ("bogus", "wandb:", "tensorboard:", "tensorboard:{d}/file.txt/x", HOSTILE[1], "wandb:a/b/c"):
            cases.append(Case(id=f"{verb} --track={value!r}", verb=verb, argv=_with(base, "--track", value),
                              setup=(*setup, "raw:file.txt=empty"), names=("--track", "track", value),
                              rc=(0, 2) if value in ("wandb:", "tensorboard:", HOSTILE[1]) or (
                                  verb == "sweep lr" and value != "bogus") else (2,)))
    for verb in ("sweep lr", "sweep run"):
        base, setup = BASES[verb]
        for value in ("bogus", "nosuchmodule_xyz:run", "os:nosuchfunction", HOSTILE[1]):
            cases.append(Case(id=f"{verb} --runner={value!r}", verb=verb, argv=_with(base, "--runner", value),
                              setup=setup, names=("--runner", "runner", value)))
    base, setup = BASES["audit"]
    for value in ("nosuchmodule_xyz:f", "os:nosuchfunction", "json:dumps", "bogus", HOSTILE[1]):
        cases.append(Case(id=f"audit --entry={value!r}", verb="audit",
                          argv=_with(tuple(a for a in base if a not in ("--model", "gpt-tiny")), "--entry", value),
                          setup=setup, names=("--entry", "entry", "builder", value)))
    for value in ("nosuchmodule_xyz:f", "os:nosuchfunction", "bogus"):
        cases.append(Case(id=f"audit --input={value!r}", verb="audit", argv=_with(base, "--input", value),
                          setup=setup, names=("--input", "input", value)))
    return cases


def _set_cases() -> list[Case]:
    """``--set``/``--proxy-set`` with unknown fields, bad numbers and no ``=``."""
    cases: list[Case] = []
    sets = ("nosuchfield=1", "lr=abc", "lr=nan", "lr=-1", "lr=1e300", "steps=0", "steps=1.5", "width=0",
            "width=1e300", "depth=-1", "batch_size=0", "seq_len=abc", "=1", "lr", "warmup_steps=-1",
            "beta2=1.5", "eps=0", "weight_decay=-1", "data={d}/missing.bin", "grad_clip=inf")
    few = ("nosuchfield=1", "lr=nan", "width=1e300", "depth=-1", "=1", "lr", "seq_len=abc", "data={d}/missing.bin")
    for verb, flag in (("train", "--set"), ("sweep lr", "--set"), ("sweep run", "--set"), ("transfer", "--set"),
                       ("transfer", "--proxy-set"), ("tune", "--set")):
        base, setup = BASES[verb]
        for value in sets if verb in ("train", "sweep lr") else few:
            if verb == "tune" and value.split("=")[0] in ("lr", "steps", "width", "depth", "batch_size"):
                continue
            key = value.partition("=")[0] or value
            # a study prepared here may run on machines that hold the data: its path is theirs
            later = key == "data" and "--prepare-only" in base
            cases.append(Case(id=f"{verb} {flag} {value}", verb=verb, argv=(*base, flag, value), setup=setup,
                              names=(key, value, flag), timeout=60 if verb in SLOW else DEFAULT_TIMEOUT,
                              rc=(0, 2) if later else (2,)))
    return cases


def _env_cases() -> list[Case]:
    """Every ``MUTRANSFER_*`` variable the code reads, set badly, on a command that reads it."""
    cases: list[Case] = []
    sweep_run = ("sweep", "lr", "--widths", "16", "--lrs", "0.01", "--steps", "2", "--set", "batch_size=2",
                 "--set", "seq_len=16", "--set", "depth=1", "--out", "{d}/sw", "--workers", "1")
    for value in ("0", "-1", "nan", "inf", "1e300", "abc", "1e-300"):
        cases.append(Case(id=f"env MUTRANSFER_PROGRESS_INTERVAL={value}", verb="env", argv=sweep_run,
                          env=(("MUTRANSFER_PROGRESS_INTERVAL", value),),
                          names=("MUTRANSFER_PROGRESS_INTERVAL",)))
    for value in ("0", "-1", "nan", "inf", "1e300", "abc"):
        cases.append(Case(id=f"env MUTRANSFER_BUILD_TIMEOUT={value}", verb="env",
                          argv=("explain", "--model", "json:dumps"), env=(("MUTRANSFER_BUILD_TIMEOUT", value),),
                          names=("MUTRANSFER_BUILD_TIMEOUT",)))
    # set by --track for the workers a sweep starts (JSON); a worker started by hand reads it
    for value in ("bogus", "wandb:a/b/c", HOSTILE[1], '{"kind": "bogus", "target": "x"}', '{"kind": "wandb"}'):
        cases.append(Case(id=f"env MUTRANSFER_TRACK={value!r}", verb="env", argv=BASES["sweep worker"][0],
                          env=(("MUTRANSFER_TRACK", value),), setup=("study",), names=("MUTRANSFER_TRACK",)))
    for value in ("bogus://x", f"postgresql://u:{SECRET}@127.0.0.1:1/db", "", "{d}/nope/optuna.journal"):
        cases.append(Case(id=f"env MUTRANSFER_STORAGE={value[:30]!r}", verb="env",
                          argv=("sweep", "status"), env=(("MUTRANSFER_STORAGE", value),),
                          names=("MUTRANSFER_STORAGE", "storage", "journal file", *((value,) if value else ()))))
    cases.append(Case(id="env MUTRANSFER_STORAGE with --out", verb="env", argv=BASES["sweep lr"][0],
                      env=(("MUTRANSFER_STORAGE", "{d}/x.journal"),), names=("MUTRANSFER_STORAGE",)))
    for value in ("{d}/file.txt", "{d}/file.txt/sub"):
        cases.append(Case(id=f"env MUTRANSFER_CACHE={value}", verb="env", argv=BASES["train"][0],
                          env=(("MUTRANSFER_CACHE", value),), setup=("raw:file.txt=empty",),
                          names=("MUTRANSFER_CACHE", "cache", "file.txt")))
    for value in ("abc", "-1", "nan"):
        cases.append(Case(id=f"env MUTRANSFER_PARENT_PID={value}", verb="env",
                          argv=("sweep", "status", "--storage", STORE), setup=("study",),
                          env=(("MUTRANSFER_PARENT_PID", value),), names=("MUTRANSFER_PARENT_PID",), rc=(0, 2)))
    return cases


#: Hand edits of a good card -> the field the error must name.
CARD_EDITS: tuple[tuple[str, str], ...] = (
    ('card:optimizer.lr=1e300', "optimizer.lr"), ('card:optimizer.lr=-1', "optimizer.lr"),
    ('card:optimizer.lr="abc"', "optimizer.lr"), ('card:optimizer.lr=null', "optimizer.lr"),
    ('card:optimizer.eps=1e300', "optimizer.eps"), ('card:optimizer.weight_decay=1e300', "optimizer.weight_decay"),
    ('card:optimizer.betas=[0.9]', "optimizer.betas"), ('card:optimizer.betas=[0.9, 1.5]', "optimizer.betas"),
    ('card:optimizer.weight_dekay=0.1', "weight_dekay"), ('card:optimizer.name="adamz"', "optimizer.name"),
    ('card:schema="mutransfer.card/v9"', "schema"), ('card:bogus_section={}', "bogus_section"),
    ('card:batch.sequences=0', "batch.sequences"), ('card:batch.sequences=1e300', "batch.sequences"),
    ('card:batch.sequencez=4', "sequencez"), ('card:schedule.kind="bogus"', "schedule.kind"),
    ('card:schedule.warmup_steps=-1', "schedule.warmup_steps"), ('card:schedule.warmup_stepz=1', "warmup_stepz"),
    ('card:schedule.total_steps="<del>"', "total_steps"), ('card:target.width=0', "target.width"),
    ('card:target.widht=64', "widht"), ('card:target.tokens=-1', "target.tokens"),
    ('card:parametrization.kind="bogus"', "parametrization.kind"),
    ('card:parametrization.base_width=100000', "base_width"), ('card:parametrization.widht=64', "widht"),
    ('card:parametrization.multipliers.output=1e300', "multipliers.output"),
    ('card:parametrization.multipliers.outptu=2', "outptu"),
    ('card:param_groups.0.lr=1e300', "param_groups[0]"), ('card:param_groups.0.lrr=1', "lrr"),
    ('card:param_groups.0.init="bogus"', "param_groups[0]"), ('card:param_groups=[]', "param_groups"),
    ('card:forward_multipliers.hooks=[{"module": "lm_head", "kind": "pre", "scale": 1e300}]', "scale"),
    ('card:forward_multipliers.hookz=[]', "hookz"), ('card:audit.passed="yes"', "audit.passed"),
    ('card:audit.bogus=1', "audit.bogus"), ('card:provenance.bogus=1', "provenance.bogus"),
    ('card:trust.level=5', "trust.level"), ('card:trust.bogus=1', "trust.bogus"),
    ('card:source=[]', "source"), ('card:target.model.width=-1', "target.model.width"),
    ('cardtext:optimizer: {lr: 0.1}\n', "optimizer"), ('cardtext:\n\t- garbage: [\n', "card"),
    ('cardtext:x: !!python/object/apply:os.system ["touch PWNED"]\n', "card"),
)


def _card_cases() -> list[Case]:
    cases = []
    for verb, to in (("export", "megatron"), ("export", "hf")):
        base, setup = BASES[verb]
        argv = _with(base, "--to", to)
        for edit, name in CARD_EDITS if to == "megatron" else CARD_EDITS[::4]:
            cases.append(Case(id=f"{verb} --to {to} {edit[:60]}", verb="card", argv=argv, setup=(*setup, edit),
                              names=(name,)))
    return cases


#: Hand edits of a good results table -> the column the error must name.
CSV_EDITS = (("csv:loss=\"abc\"", "loss"), ("csv:lr=-1", "lr"), ("csv:lr=0", "lr"), ("csv:loss=<del>", "loss"),
             ("csv:lr=<del>", "lr"), ("csv:width=\"x\"", "width"), ("csv:lr=\"inf\"", "lr"),
             ("csv:seed=\"s\"", "seed"), ("csv:diverged=\"maybe\"", "diverged"))


def _csv_cases() -> list[Case]:
    cases = []
    for verb in ("fit optimum", "transfer"):
        base, setup = BASES[verb]
        if verb == "transfer":
            base = ("transfer", "--results", "{d}/results.csv", "--tokens", "1e8", "--batch-size", "32", "--out",
                    "{d}/card.yaml")
            setup = ("results",)
        for edit, name in CSV_EDITS:
            cases.append(Case(id=f"{verb} {edit}", verb="results", argv=base, setup=(*setup, edit),
                              names=(name,)))
    return cases


def _where_cases() -> list[Case]:
    cases = []
    for verb in ("fit optimum", "fit power-law"):
        base, setup = BASES[verb]
        for value in ("bogus", "nosuch=1", "lr>>3", "__import__('os').system('touch PWNED')", "width=abc",
                      "@os.system('touch PWNED')", "", "a\nb"):
            cases.append(Case(id=f"{verb} --where={value!r}", verb=verb, argv=(*base, "--where", value),
                              setup=setup, names=("--where", "where", value, value.partition("=")[0])))
        for flag in ("--x", "--y", "--group", "--seed-col"):
            if verb == "fit power-law" and flag == "--seed-col":
                continue
            cases.append(Case(id=f"{verb} {flag}=nosuchcolumn", verb=verb, argv=_with(base, flag, "nosuchcolumn"),
                              setup=setup, names=("nosuchcolumn",)))
    return cases


def _slurm_cases() -> list[Case]:
    """SLURM scripts from hostile study names, output folders, times and sbatch arguments; a
    script written is run with bash (a real worker on the tiny study) and must run nothing else."""
    base, setup = BASES["sweep launch"]
    cases = []
    for flag, value in (("--time", "-5"), ("--time", "abc"), ("--time", "1:2:3:4"), ("--time", HOSTILE[0]),
                        ("--sbatch-arg", "--array=0-999"), ("--sbatch-arg", HOSTILE[1]),
                        ("--sbatch-arg", HOSTILE[0]), ("--partition", HOSTILE[0]), ("--account", HOSTILE[1]),
                        ("--out", "{d}/a\nb"), ("--out", "{d}/$(touch PWNED)")):
        accept = flag in ("--partition", "--account", "--out") or value == HOSTILE[1]
        cases.append(Case(id=f"sweep launch {flag}={value!r}", verb="sweep launch",
                          argv=(*base, flag, value) if flag == "--sbatch-arg" else _with(base, flag, value),
                          setup=setup, names=(flag, flag.lstrip("-"), value), rc=(0, 2) if accept else (2,),
                          run_stdout=accept))
    cases.append(Case(id="sweep lr --study='a\\nb' (refused)", verb="sweep lr", argv=(*BASES["sweep lr"][0], "--study", "a\nb"),
                      names=("study",)))
    for name in HOSTILE[1:]:
        cases.append(Case(id=f"sweep launch --study={name!r} (script run)", verb="sweep launch",
                          argv=(*base, "--study", name), setup=(*setup, f"prep:{name}"), rc=(0, 2),
                          names=("study",), run_stdout=True, timeout=240))
    return cases


def all_cases() -> list[Case]:
    """The whole table, ids unique."""
    cases = [*flag_cases(), *_file_cases(), *_model_cases(), *_set_cases(), *_env_cases(), *_card_cases(),
             *_csv_cases(), *_where_cases(), *_slurm_cases()]
    seen: Counter[str] = Counter()
    out = []
    for c in cases:
        seen[c.id] += 1
        out.append(c if seen[c.id] == 1 else replace(c, id=f"{c.id} #{seen[c.id]}"))
    return out


# ---------------------------------------------------------------------------------- running
_WARM: dict[str, Any] = {}


def _warm(fixtures: dict[str, str]) -> None:
    """Pool initializer: import every verb once, so that each forked case starts warm."""
    import importlib

    os.environ.setdefault("MPLBACKEND", "Agg")
    from mutransfer_cli import VERBS

    for module, _ in VERBS.values():
        importlib.import_module(module)
    _WARM["fx"] = {k: Path(v) for k, v in fixtures.items()}


def _fill(text: str, d: Path) -> str:
    return text.replace("{d}", str(d))


def _files(d: Path) -> dict[str, int]:
    return {str(p.relative_to(d)): p.stat().st_size for p in d.rglob("*") if p.is_file() or p.is_symlink()}


def _setpriv() -> list[str]:
    """As root, the prefix that drops the capability to override file modes (as a user has
    none); empty for a user."""
    if os.geteuid() != 0:
        return []
    tool = shutil.which("setpriv")
    if tool is None:
        return []
    caps = "-dac_override,-dac_read_search"
    return [tool, f"--bounding-set={caps}", f"--inh-caps={caps}"]


def _child(argv: list[str], env: dict[str, str], d: Path, out: Path, err: Path) -> None:
    """In the forked child: become the CLI run in ``d`` and never return."""
    code = 1
    try:
        os.setsid()  # its own process group: a timeout kills the case and whatever it started
        os.chdir(d)
        for k in [k for k in os.environ if k.startswith("MUTRANSFER_")]:
            del os.environ[k]
        os.environ.update(env)
        fo, fe = os.open(out, os.O_WRONLY | os.O_CREAT, 0o644), os.open(err, os.O_WRONLY | os.O_CREAT, 0o644)
        os.dup2(fo, 1)
        os.dup2(fe, 2)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the child's own stdio
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        sys.argv = ["mutransfer", *argv]
        sys.path.insert(0, str(d))  # as `python -m` puts the current folder first
        from mutransfer_cli import main

        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
        except BaseException:  # what the interpreter would print at the top
            import traceback

            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _wait(pid: int, timeout: float) -> tuple[int | None, bool]:
    end = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > end:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # the group may be gone
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None, True
        time.sleep(0.02)


def run_case(case: Case, workdir: str, cold: bool = False) -> Outcome:
    """Run one case in a fresh folder under ``workdir`` and classify it."""
    fx = _WARM.get("fx") or {k: Path(v) for k, v in json.loads(os.environ["CLI_AUDIT_FIXTURES"]).items()}
    d = Path(tempfile.mkdtemp(prefix="case-", dir=workdir))
    t0 = time.perf_counter()
    try:
        _setup(case.setup, d, fx)
    except Exception as exc:  # a setup that cannot be made is the harness's fault, said as such
        return Outcome(case, None, "", "error", f"setup failed: {exc}", 0.0)
    if any("file.txt" in a for a in case.argv):  # a file that a path goes through, as if a folder
        (d / "file.txt").touch(exist_ok=True)
    argv = [_fill(a, d) for a in case.argv]
    env = {"MUTRANSFER_CACHE": str(fx["cache"]), **{k: _fill(v, d) for k, v in case.env}}
    before = _files(d)
    out, err = d.parent / f"{d.name}.out", d.parent / f"{d.name}.err"
    if cold or case.cold:
        full = {**{k: v for k, v in _clean_env().items()}, **env}
        try:
            p = subprocess.run([*_setpriv(), sys.executable, "-m", "mutransfer_cli", *argv], cwd=d, env=full,
                               stdout=open(out, "w"), stderr=open(err, "w"), timeout=case.timeout,  # noqa: SIM115
                               start_new_session=True)
            rc, timed_out = p.returncode, False
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
    else:
        pid = os.fork()
        if pid == 0:
            _child(argv, env, d, out, err)
        rc, timed_out = _wait(pid, case.timeout)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    extra: dict[str, Any] = {}
    if case.run_stdout and rc == 0 and stdout.startswith("#!"):
        try:
            s = subprocess.run(["bash", "-c", stdout], cwd=d, capture_output=True, text=True, timeout=case.timeout,
                               env={**_clean_env(), **env, "SLURM_ARRAY_TASK_ID": "0"}, start_new_session=True)
            extra["script_rc"] = s.returncode
        except subprocess.TimeoutExpired:
            extra["script_rc"] = "timeout"
    after = _files(d)
    new = tuple(sorted(k for k in after if k not in before))
    tmp = tuple(k for k in after if k.endswith((".tmp", ".part")) or ".tmp" in Path(k).name)
    half = tmp + (new if rc not in (0, None) else ())
    secret = tuple(k for k in after if _holds(d / k, SECRET))
    pwned = any(p.name == PWNED for p in d.rglob("*")) or Path(workdir, PWNED).exists()
    filled = tuple(n for v in case.names for n in (_fill(v, d), repr(_fill(v, d))[1:-1]))
    klass, why = classify(replace(case, names=filled), rc, stdout, stderr, timed_out=timed_out, pwned=pwned,
                          half_written=half,
                          secret_in_files=secret)
    if "script_rc" in extra and klass == "pass" and pwned:
        klass, why = "fail", "the written script ran a hostile name"
    shutil.rmtree(d, ignore_errors=True)
    for f in (out, err):
        f.unlink(missing_ok=True)
    return Outcome(case, rc, stderr[-3000:], klass, why, time.perf_counter() - t0, extra)


def _holds(path: Path, needle: str) -> bool:
    try:
        if path.is_symlink() or path.stat().st_size > 50_000_000:
            return False
        return needle.encode() in path.read_bytes()
    except OSError:
        return False


def _run_one(args: tuple[Case, str, bool]) -> Outcome:
    return run_case(*args)


def run_cases(cases: list[Case], *, jobs: int = 2, cold: bool = False, workdir: Path | None = None,
              fixtures: dict[str, Path] | None = None, progress: bool = True) -> list[Outcome]:
    """Run ``cases`` on ``jobs`` warm processes (each case forked from one), in order of
    submission; the fixtures are built first unless given."""
    import multiprocessing

    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="cli_audit_")) if workdir is None else workdir
    try:
        fx = fixtures or build_fixtures(workdir / "fixtures", sys.executable, fixtures_needed(cases))
        os.environ["CLI_AUDIT_FIXTURES"] = json.dumps({k: str(v) for k, v in fx.items()})
        os.environ["PYTHONPATH"] = str(ROOT)  # for the interpreters the CLI starts (contained builders)
        ctx = multiprocessing.get_context("fork")
        out: list[Outcome] = []
        t0 = time.perf_counter()
        with ctx.Pool(jobs, initializer=_warm, initargs=({k: str(v) for k, v in fx.items()},),
                      maxtasksperchild=50) as pool:
            for i, o in enumerate(pool.imap(_run_one, [(c, str(workdir), cold) for c in cases], chunksize=1)):
                out.append(o)
                if progress and (o.klass != "pass" or i % 25 == 0):
                    print(f"[{i + 1}/{len(cases)} {time.perf_counter() - t0:.0f} s] {o.klass:5s} {o.case.id}: "
                          f"{o.why} | {error_lines(o.stderr)[-1:] if o.stderr else ''}", file=sys.stderr, flush=True)
        return out
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def _revision() -> str | None:
    """The commit of the code audited (the checkout this file sits in), or None."""
    try:
        p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() or None


def report(outcomes: list[Outcome], wall: float, jobs: int, cold: bool) -> dict[str, Any]:
    """The JSON record: counts in all and per verb, each non-pass case in full."""
    counts = Counter(o.klass for o in outcomes)
    per_verb: dict[str, dict[str, int]] = {}
    for o in outcomes:
        per_verb.setdefault(o.case.verb, {"pass": 0, "vague": 0, "fail": 0})
        per_verb[o.case.verb][o.klass] = per_verb[o.case.verb].get(o.klass, 0) + 1
    import importlib.metadata as md

    versions = {}
    for pkg in ("torch", "optuna", "pandas"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {
        "benchmark": "cli_audit",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "versions": versions,
        "settings": {"jobs": jobs, "cold": cold, "timeout_s": DEFAULT_TIMEOUT},
        "code": _revision(),
        "passed": counts.get("fail", 0) == 0 and counts.get("error", 0) == 0,
        "figures": {"fail": counts.get("fail", 0), "vague": counts.get("vague", 0), "pass": counts.get("pass", 0),
                    "cases": len(outcomes), "harness_errors": counts.get("error", 0), "wall_s": round(wall, 1)},
        "per_verb": dict(sorted(per_verb.items())),
        "not_pass": [{"id": o.case.id, "class": o.klass, "why": o.why, "rc": o.rc, "argv": list(o.case.argv),
                      "env": dict(o.case.env), "setup": list(o.case.setup), "stderr": o.stderr[-1500:],
                      **o.extra} for o in outcomes if o.klass != "pass"],
    }


def run(jobs: int = 2, cold: bool = False, only: list[str] | None = None, limit: int | None = None,
        out: Path | None = RESULTS, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the audit and write its record (``out``; None: write nothing); ``before``, an
    earlier record of the same table, is kept in it as its counts (``before``)."""
    cases = all_cases()
    if only:
        cases = [c for c in cases if any(c.verb == v or c.verb.startswith(v + " ") for v in only)]
    if limit:
        cases = cases[:limit]
    t0 = time.perf_counter()
    outcomes = run_cases(cases, jobs=jobs, cold=cold)
    data = report(outcomes, time.perf_counter() - t0, jobs, cold)
    if before is not None:
        data["before"] = {k: before.get(k) for k in ("date", "figures", "per_verb", "code")}
    if out is not None:
        from mutransfer._io import atomic_write_text

        atomic_write_text(out, json.dumps(data, indent=2) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--cold", action="store_true", help="a fresh interpreter per case instead of a fork")
    ap.add_argument("--only", action="append", help="only this verb's cases (repeatable): 'sweep', 'env', 'card'")
    ap.add_argument("--limit", type=int, default=None, help="only the first N cases")
    ap.add_argument("--list", action="store_true", help="print the case ids and counts; run nothing")
    ap.add_argument("--before", type=Path, default=None,
                    help="an earlier record (the same table on older code): its counts go in this one's 'before'")
    ap.add_argument("--bases", action="store_true", help="run each verb's good run (every case spoils one)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"record (default {RESULTS.relative_to(ROOT)} for a whole run; nothing for a sample)")
    args = ap.parse_args(argv)
    if args.bases:  # each verb's good run, which every case of the verb spoils one way
        cases = [Case(id=f"base {v}", verb=v, argv=a, setup=s, rc=(0,), timeout=300) for v, (a, s) in BASES.items()
                 if v not in SLOW]
        for o in run_cases(cases, jobs=args.jobs, progress=False):
            print(f"{o.klass:5s} {o.rc} {o.seconds:5.1f} s {o.case.verb}: {error_lines(o.stderr)[-1:]}")
        return 0
    if args.list:
        cases = all_cases()
        for c in cases:
            print(f"{c.verb:20s} {c.id!r}")
        print(Counter(c.verb for c in cases), len(cases), file=sys.stderr)
        return 0
    sample = bool(args.only or args.limit)
    before = json.loads(args.before.read_text()) if args.before else None
    data = run(args.jobs, args.cold, args.only, args.limit, args.out or (None if sample else RESULTS),
               before=before)
    print(json.dumps({k: data[k] for k in ("figures", "per_verb")}, indent=2))
    return 0 if data["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
