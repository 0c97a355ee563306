"""What ``fit``, ``plot`` and ``transfer`` share: the flags that name a results table and its
filters, the table read with them (:func:`analysis.table.load_table` does the checks), and
the fit pieces more than one verb renders."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis.results import proxy_record
from analysis.scaling_fit import ScalingLawFit
from analysis.table import load_table
from mutransfer_cli._common import MAX_N_BOOT, MAX_SEED, bounded_int


def columns(text: str) -> list[str]:
    """``"parametrization,width"`` -> ["parametrization", "width"]."""
    out = [c.strip() for c in text.split(",") if c.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names no column")
    return out





def add_table_flags(p: argparse.ArgumentParser, n_boot: int = 1000) -> None:
    """Flags every fit and plot kind shares: input, filters, bootstrap, output."""
    p.add_argument("results", metavar="RESULTS", help="results table (.csv or .parquet)")
    p.add_argument("--where", action="append", default=[], metavar="COL=VALUE",
                   help="keep only rows with COL equal to VALUE (repeatable), e.g. parametrization=mup")
    p.add_argument("--diverged", default="diverged", metavar="COL",
                   help="boolean column marking diverged runs, left out of fits (default diverged; "
                   "'none' to ignore)")
    p.add_argument("--state", default="state", metavar="COL",
                   help="trial-state column: only COMPLETE rows (or an empty state) are fitted, so "
                   "pruned/failed trials are left out and counted (default state; 'none' to ignore)")
    p.add_argument("--dropna", action="store_true",
                   help="drop rows with a missing/non-finite value in a fitted column instead of "
                   "failing")
    p.add_argument("--n-boot", type=bounded_int(0, MAX_N_BOOT, "--n-boot"), default=n_boot,
                   help=f"bootstrap resamples for the intervals (default {n_boot}; 0: no intervals)")
    p.add_argument("--level", "--ci", dest="level", type=float, default=0.95,
                   help="level of the intervals (default 0.95; 0.9 for scaling); --ci is the same flag")
    p.add_argument("--seed", type=bounded_int(0, MAX_SEED, "--seed"), default=0,
                   help="bootstrap seed (default 0)")



def add_scaling_columns(p: argparse.ArgumentParser) -> None:
    """Column flags of a scaling sweep (shared by ``fit scaling`` and ``plot scaling``)."""
    p.add_argument("--lr", default="lr", help="LR column (default lr)")
    p.add_argument("--batch", default="batch_tokens",
                   help="batch column, in tokens (default batch_tokens)")
    p.add_argument("--tokens", default="tokens", help="token-budget column (default tokens)")
    p.add_argument("--loss", default="loss", help="loss column (default loss)")
    p.add_argument("--seed-col", default="seed", help="seed column (default seed)")
    p.add_argument("--weight-decay", default="weight_decay",
                   help="weight-decay column, for tau (default weight_decay; used when present)")
    p.add_argument("--seq-len", default="seq_len",
                   help="sequence-length column (default seq_len; used when present)")



def column_flag(text: str) -> str | None:
    """A column flag's value; ``none`` (any case) means no such column."""
    return None if text.lower() == "none" else text


def read_table(args: argparse.Namespace, value_cols: Sequence[str], group_cols: Sequence[str], *,
               inf_ok: Sequence[str] = (), keep_diverged: bool = False) -> tuple[pd.DataFrame, dict]:
    """:func:`analysis.table.load_table` with the table flags of :func:`add_table_flags`;
    the counts carry ``proxy``, what the rows say the proxy was (:func:`analysis.proxy_record`:
    architecture, tokenizer, vocabulary, context, dtype), which every fit records."""
    df, counts = load_table(args.results, value_cols, group_cols, where=args.where,
                            diverged=column_flag(args.diverged), state=column_flag(args.state),
                            dropna=args.dropna, inf_ok=inf_ok, keep_diverged=keep_diverged)
    check_named_columns(args, df.columns)
    return df, {**counts, "proxy": proxy_record(df)}


#: Column flags whose column is read only when the table has it: dest -> (flag, default).
OPTIONAL_COLUMNS = {"diverged": ("--diverged", "diverged"), "state": ("--state", "state"),
                    "seed_col": ("--seed-col", "seed"), "weight_decay": ("--weight-decay", "weight_decay"),
                    "seq_len": ("--seq-len", "seq_len")}


def check_named_columns(args: argparse.Namespace, columns: Sequence[str]) -> None:
    """A column the user named (not the default, not ``none``) must be in the table: a
    misspelt ``--diverged`` would otherwise fit diverged runs, silently."""
    for dest, (flag, default) in OPTIONAL_COLUMNS.items():
        value = getattr(args, dest, None)
        if value is None or value == default or column_flag(value) is None:
            continue
        if value not in columns:
            raise ValueError(f"{flag} {value!r} is not a column of the results table (it has "
                             f"{', '.join(map(str, list(columns)[:20]))}); 'none' to ignore it")


def check_level(level: float, flag: str = "--level (--ci)") -> None:
    if not 0 < level < 1:
        raise ValueError(f"{flag} must be in (0, 1), got {level}")



def scaling_fit(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Load a scaling sweep and fit :class:`analysis.ScalingLawFit`; ``(fit, counts)``."""
    check_level(args.level)
    if not (math.isfinite(args.band) and args.band >= 0):
        raise ValueError(f"--band must be a fraction >= 0, got {args.band}")
    df, counts = read_table(args, [args.lr, args.batch, args.tokens, args.loss], [], keep_diverged=True)
    diverged = column_flag(args.diverged)
    fit = ScalingLawFit(band=args.band, n_boot=args.n_boot, level=args.level, seed=args.seed,
                        method=args.method).fit(
        df, lr=args.lr, batch=args.batch, tokens=args.tokens, loss=args.loss,
        seed_col=args.seed_col, diverged=diverged, weight_decay=args.weight_decay,
        seq_len=args.seq_len)
    return fit, counts



