"""Shared parts of the fidelity benchmarks: a resumable LR scan of small proxy runs and the
record's machine/date/versions block.

A scan starts on a short log2-LR grid around a guess and widens it one octave at a time
while the best point sits on an edge, so the optimum is bracketed without paying for a
wide grid at every depth or horizon. Every finished trial is appended to a JSONL file, so
an interrupted benchmark resumes where it stopped.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

Rows = list[dict[str, Any]]


def int_list(text: str, minimum: int = 1) -> list[int]:
    """A ladder flag: ``"2,4,8"`` -> [2, 4, 8]; a bad item is named in the error."""
    out = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not an integer (in {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum} (in {text!r})")
        out.append(value)
    return out


def seed_list(text: str) -> list[int]:
    """``"0,1"`` -> [0, 1]: seeds are integers >= 0."""
    return int_list(text, minimum=0)


def finite_or_none(x: float) -> float | None:
    """JSON has no NaN or inf: a missing bound is null."""
    return float(x) if math.isfinite(x) else None

def record_header(name: str) -> dict[str, Any]:
    """``benchmark``, ``machine``, ``date`` and ``versions`` of a result record."""
    import torch

    import mutransfer

    cuda = torch.cuda.is_available()
    return {
        "benchmark": name,
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                    "device": torch.cuda.get_device_name() if cuda else "cpu"},
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "mutransfer": mutransfer.__version__},
    }


class TrialLog:
    """Append-only JSONL of finished trials keyed by a JSON string of their point."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.rows: dict[str, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.rows[row["key"]] = row

    @staticmethod
    def key(point: Mapping[str, Any]) -> str:
        return json.dumps(dict(point), sort_keys=True)

    def get(self, point: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.rows.get(self.key(point))

    def add(self, point: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
        row = {"key": self.key(point), **point, **values}
        with self.path.open("a") as f:  # one line per trial: a torn last line is just re-run
            f.write(json.dumps(row) + "\n")
        self.rows[row["key"]] = row
        return row


def bracket_scan(run_at: Callable[[float], Sequence[float]], start: Sequence[float],
                 lo: float, hi: float, step: float = 1.0) -> dict[float, float]:
    """Seed-averaged loss at each log2 LR, widening ``start`` while the best is on an edge.

    ``run_at(log2_lr)`` returns the losses of that LR's seeds (diverged runs count as
    their reported, large loss). The grid grows by ``step`` octaves past whichever edge
    holds the minimum, never beyond ``[lo, hi]``.
    """
    losses: dict[float, float] = {}

    def at(t: float) -> None:
        if t not in losses:
            v = list(run_at(t))
            losses[t] = sum(v) / len(v)

    for t in start:
        at(float(t))
    while True:
        ts = sorted(losses)
        best = min(ts, key=losses.__getitem__)
        if best == ts[0] and ts[0] - step >= lo - 1e-9:
            at(ts[0] - step)
        elif best == ts[-1] and ts[-1] + step <= hi + 1e-9:
            at(ts[-1] + step)
        else:
            return losses


def bracket_scans(run_at: Callable[[object, float], Sequence[float]],
                  starts: dict[object, Sequence[float]], lo: dict[object, float], hi: dict[object, float],
                  step: float = 1.0, fetch: Callable[[list[tuple[object, float]]], None] | None = None
                  ) -> dict[object, dict[float, float]]:
    """:func:`bracket_scan` for several keys in lock step: each round asks every unfinished
    key for the one LR its scan needs next and hands the whole round to ``fetch`` (which
    may train them in parallel) before reading them through ``run_at(key, log2_lr)``.
    The grids are exactly those of one :func:`bracket_scan` per key."""

    class _Need(Exception):
        pass

    done: dict[object, set[float]] = {k: set() for k in starts}

    def cached(k: object) -> Callable[[float], Sequence[float]]:
        def at(t: float) -> Sequence[float]:
            if t not in done[k]:
                raise _Need(t)
            return run_at(k, t)
        return at

    while True:
        need: list[tuple[object, float]] = []
        out: dict[object, dict[float, float]] = {}
        for k, start in starts.items():
            try:
                out[k] = bracket_scan(cached(k), start, lo[k], hi[k], step)
            except _Need as e:
                need += [(k, float(t)) for t in start if float(t) not in done[k]] or [(k, float(e.args[0]))]
        if not need:
            return out
        if fetch is not None:
            fetch(need)
        for k, t in need:
            run_at(k, t)
            done[k].add(t)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
