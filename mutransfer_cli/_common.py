"""Helpers shared by CLI verbs: typed list flags, progress bars, JSON output."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mutransfer.contain import BUILD_TIMEOUT_ENV, DEFAULT_BUILD_TIMEOUT, build_timeout
from mutransfer.training.tracking import TRACK_ENV, check_installed, env_spec, parse_track
from sweeps.progress import Progress, progress_interval


def check_settings() -> None:
    """The environment's settings that every verb may read, checked before it runs (one
    ValueError naming the variable): ``$MUTRANSFER_PROGRESS_INTERVAL`` (read by the first
    progress line, after a sweep has written its storage) and ``$MUTRANSFER_BUILD_TIMEOUT``."""
    progress_interval()
    build_timeout()


@contextlib.contextmanager
def default_build_timeout() -> Iterator[None]:
    """``$MUTRANSFER_BUILD_TIMEOUT`` at its default for the verb when the user set none (a
    ``module:function`` builder is first built in a contained child, :mod:`mutransfer.contain`:
    one that exits or hangs is an error line, not the verb's end); the user's value is kept."""
    set_here = BUILD_TIMEOUT_ENV not in os.environ
    if set_here:
        os.environ[BUILD_TIMEOUT_ENV] = f"{DEFAULT_BUILD_TIMEOUT:g}"
    try:
        yield
    finally:
        if set_here:
            os.environ.pop(BUILD_TIMEOUT_ENV, None)


def key_value(text: str) -> tuple[str, str]:
    """The one ``--set KEY=VALUE`` flag of every verb (train, sweep, transfer):
    ``"warmup-steps=10"`` -> ``("warmup_steps", "10")``. The value stays text: the library
    reads it by the field it sets (:meth:`mutransfer.training.config.TrainConfig.from_overrides` for a
    training field, :func:`mutransfer.card.target.parse_overrides` for a target's model field)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set {text!r} must look like KEY=VALUE (e.g. --set lr=3e-3)")
    return key.strip().replace("-", "_"), value


def _ints(text: str, minimum: int, what: str, maximum: int | None = None) -> list[int]:
    top = MAX_COUNT if maximum is None else maximum
    out = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}{item!r} is not an integer (in {text!r})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what}{value} must be >= {minimum} (in {text!r})")
        if value > top:
            raise argparse.ArgumentTypeError(f"{what}{value} is above the limit {top:,} (in {text!r})")
        out.append(value)
    return out


def int_list(text: str) -> list[int]:
    """``"64,128,256"`` -> [64, 128, 256]; a bad item is named in the error."""
    return _ints(text, 1, "")


def seed_list(text: str) -> list[int]:
    """``"0,1,2"`` -> [0, 1, 2]: the ``--seeds`` of every verb (a count is ``--n-seeds``)."""
    return _ints(text, 0, "seed ", MAX_SEED)


def float_list(text: str, *, high: float = float("inf"), what: str = "value") -> list[float]:
    """``"0.25,0.5,1"`` -> [0.25, 0.5, 1.0]; each item must lie in (0, high] (finite)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not a number (in {text!r})") from None
        if not (0 < value <= min(high, MAX_FLOAT)):
            bound = f"positive, at most {MAX_FLOAT:g}" if high == float("inf") else f"in (0, {high:g}]"
            raise argparse.ArgumentTypeError(f"{what} {item!r} must be {bound} (in {text!r})")
        out.append(value)
    return out


#: The largest value a number flag takes: past it (``--tol 1e300``, ``--timeout 1e300``,
#: ``--tokens 1e300``) no setting means anything, and arithmetic on it overflows.
MAX_FLOAT = 1e30
#: The largest count a flag takes (steps, seeds, sizes): 2^31 - 1, far above any real run;
#: ``--n-seeds 1e23`` overflowed numpy and ``--steps 1e23`` never ended.
MAX_COUNT = (1 << 31) - 1


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number")
    if value > MAX_FLOAT:
        raise argparse.ArgumentTypeError(f"{text!r} is above the limit {MAX_FLOAT:g}")
    return value


def number_in(low: float, high: float, *, open_low: bool = False, open_high: bool = False,
              only: tuple[float, ...] = ()) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (an end open when asked), or one of
    ``only`` when given; outside -> one line naming the range (argparse names the flag)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if only and value not in only:
            raise argparse.ArgumentTypeError(f"{text!r} must be one of {', '.join(f'{v:g}' for v in only)}")
        below = value <= low if open_low else value < low
        above = value >= high if open_high else value > high
        if not math.isfinite(value) or below or above:
            lo, hi = "(" if open_low else "[", ")" if open_high else "]"
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number in {lo}{low:g}, {high:g}{hi}")
        return value

    parse.__name__ = f"number_in({low:g}, {high:g})"
    return parse


def _int_at_least(text: str, minimum: int, maximum: int = MAX_COUNT) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= {minimum}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"{text!r} is above the limit {maximum:,}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


#: Upper bounds of size flags: beyond them a command would allocate or loop without end
#: (``explain --width 1e8`` asked for 102 GB). Far above any real model or need.
MAX_WIDTH = 1 << 20
MAX_DEPTH = 10_000
MAX_N_BOOT = 100_000
MAX_SEQ_LEN = 1 << 24


#: Seeds end where numpy's do (``np.random.default_rng`` takes any non-negative int, but
#: ``np.random.seed`` and most samplers stop at 2**32 - 1).
MAX_SEED = (1 << 32) - 1


def bounded_int(low: int, high: int, what: str = "value") -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]; outside -> one line naming the limit."""
    def parse(text: str) -> int:
        value = _int_at_least(text, low, max(high, MAX_COUNT))
        if value > high:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is above the limit {high:,}")
        return value

    parse.__name__ = f"bounded_int({low}, {high})"
    return parse


def add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the machine-readable result to stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def progress(total: int, desc: str, quiet: bool, *, unit: str = "run", tty_bar: bool = True) -> Progress:
    """The one progress report of every long verb (:class:`sweeps.progress.Progress`, as the
    sweeps and the demo use): a bar on stderr on a terminal; piped, a line every
    ``$MUTRANSFER_PROGRESS_INTERVAL`` seconds (default 20) with the count, best loss,
    elapsed time and ETA, so a verb is never silent for long; nothing when ``quiet``.
    ``tty_bar=False``: the piped lines only (the work draws its own bar on a terminal, as
    the trainer does). Feed it with ``advance``/``set``; use it as a context manager."""
    return Progress(total, desc, unit=unit, quiet=quiet or (not tty_bar and sys.stderr.isatty()))


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=float))


def add_track_flag(p: argparse.ArgumentParser) -> None:
    """``--track tensorboard[:DIR] | wandb[:PROJECT]`` (:mod:`mutransfer.training.tracking`)."""
    p.add_argument("--track", default=None, metavar="tensorboard[:DIR]|wandb[:PROJECT]",
                   help="log every run's curves (train and held-out loss, LR per group, grad norm, GNS, "
                        "spikes): TensorBoard event files in DIR (default OUT/tensorboard), or a W&B run "
                        "in PROJECT (default mutransfer; offline unless $WANDB_MODE says otherwise). "
                        "Needs pip install 'mutransfer[track]'")


def _check_makeable(folder: str, what: str) -> None:
    """``folder`` exists as a directory or could be made: its first existing ancestor is a
    directory (a file on the way is a ValueError naming ``what``). Nothing is made."""
    path = Path(folder).resolve()
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{what}: cannot make the folder {str(path)!r}: {str(parent)!r} is a file")
            return


@contextlib.contextmanager
def tracking(text: str | None, out: str | os.PathLike[str] | None) -> Iterator[Any]:
    """Parse ``--track`` (bad text or a missing package: ValueError, one line) and set
    ``$MUTRANSFER_TRACK`` for this process and the workers it starts, until the block
    ends (a later command in the same process is not tracked); yields the TrackSpec, or
    None without ``--track``."""
    if text is None:
        inherited = env_spec()  # set by hand or by a parent: malformed is named here, once
        if inherited is not None:
            check_installed(inherited.kind)
        yield None
        return
    spec = parse_track(text, out)
    if spec.kind == "tensorboard":  # else every run fails in turn, each at its tracker's start
        _check_makeable(spec.target, f"--track {text!r}")
    old = os.environ.get(TRACK_ENV)
    os.environ[TRACK_ENV] = spec.to_env()
    try:
        yield spec
    finally:
        if old is None:
            os.environ.pop(TRACK_ENV, None)
        else:
            os.environ[TRACK_ENV] = old
