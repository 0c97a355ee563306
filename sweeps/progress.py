"""Progress of long stages: a bar on a terminal, a line every few seconds when piped.

:class:`Progress` counts units done (trials, runs) out of a total, with the best loss so
far and an ETA from the rate since it started (units already done when it started count
toward the total, not toward the rate). On a TTY it draws a tqdm bar on stderr; piped
(a file, a CI log) a daemon thread prints one line every :func:`progress_interval`
seconds (default 20, so at least one every 30 s), with the same figures, so a long stage
is never silent. ``quiet`` silences both. :class:`StudyBar` is one fed by polling a
study's storage (:func:`study_counts`), across all workers.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TextIO

from sweeps import attrs

if TYPE_CHECKING:
    import optuna

#: Seconds between two progress lines when stderr is not a terminal (a positive number).
PROGRESS_INTERVAL_ENV = "MUTRANSFER_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 20.0
#: The shortest interval taken: below it the progress thread would print without pause.
MIN_INTERVAL_S = 0.1


def progress_interval() -> float:
    """Seconds between piped progress lines: ``$MUTRANSFER_PROGRESS_INTERVAL`` (a number
    of seconds in [:data:`MIN_INTERVAL_S`, 86400]; anything else is an error naming it), else
    :data:`DEFAULT_INTERVAL_S`."""
    text = os.environ.get(PROGRESS_INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    # a thread's wait takes no 1e300 s, and 1e-300 s between lines is a hot loop printing
    if not (math.isfinite(value) and MIN_INTERVAL_S <= value <= 86400):
        raise ValueError(f"${PROGRESS_INTERVAL_ENV}={text!r} must be a positive number of seconds, "
                         f"at least {MIN_INTERVAL_S:g} and at most 86400 (a day)")
    return value


def fmt_duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``42s``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


@dataclass(frozen=True)
class Counts:
    """Trials of a study by state; ``done`` = finished for good (complete + pruned)."""

    complete: int = 0
    diverged: int = 0
    pruned: int = 0
    failed: int = 0
    running: int = 0
    waiting: int = 0
    best: float | None = None

    @property
    def done(self) -> int:
        return self.complete + self.pruned

    @property
    def pending(self) -> int:
        return self.running + self.waiting

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "done": self.done}


def study_counts(study: optuna.Study) -> Counts:
    from optuna.trial import TrialState

    c = {s: 0 for s in ("complete", "diverged", "pruned", "failed", "running", "waiting")}
    best: float | None = None
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.COMPLETE:
            c["complete"] += 1
            if t.user_attrs.get(attrs.DIVERGED):
                c["diverged"] += 1
            elif t.value is not None and math.isfinite(t.value) and (best is None or t.value < best):
                best = t.value
        elif t.state == TrialState.PRUNED:
            c["pruned"] += 1
        elif t.state == TrialState.FAIL:
            c["failed"] += 1
        elif t.state == TrialState.RUNNING:
            c["running"] += 1
        elif t.state == TrialState.WAITING:
            c["waiting"] += 1
    return Counts(best=best, **c)


class Progress:
    """Units done out of ``total`` with the best loss so far and an ETA.

    On a TTY (``stream.isatty()``): a tqdm bar. Otherwise a daemon thread prints
    :meth:`line` every ``interval`` seconds (default :func:`progress_interval`), first
    calling ``poll`` (if given) for fresh figures; a failing poll keeps the last ones.
    ``quiet``: nothing at all. Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, total: int, desc: str, *, unit: str = "trial", quiet: bool = False,
                 initial: int = 0, poll: Callable[[], None] | None = None,
                 interval: float | None = None, stream: TextIO | None = None) -> None:
        self.total, self.desc, self.unit = max(0, int(total)), desc, unit
        self.done = self._initial = min(max(0, int(initial)), self.total)
        self.best: float | None = None
        self.extra = ""
        self._poll = poll
        self._stream = stream if stream is not None else sys.stderr
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar: Any = None
        self._thread: threading.Thread | None = None
        if quiet:
            return
        if _isatty(self._stream):
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=desc, initial=self.done, file=self._stream,
                             unit=unit, dynamic_ncols=True)
        else:
            self._interval = progress_interval() if interval is None else float(interval)
            self._thread = threading.Thread(target=self._loop, name="mutransfer-progress", daemon=True)
            self._thread.start()

    # ---- figures ---------------------------------------------------------------------------

    def set(self, done: int | None = None, best: float | None = None, extra: str | None = None) -> None:
        """New figures: ``done`` so far (never goes back), the best loss, a short note."""
        with self._lock:
            if done is not None and done > self.done:
                if self._bar is not None:
                    self._bar.update(min(done, self.total) - self.done)
                self.done = min(done, self.total)
            if best is not None and math.isfinite(best) and (self.best is None or best < self.best):
                self.best = best
            if extra is not None:
                self.extra = extra
            if self._bar is not None:
                self._bar.set_postfix_str(self._postfix(with_eta=False), refresh=True)

    def extend(self, n: int) -> None:
        """``n`` more units to do than planned (work found on the way, e.g. a check run again
        at a lowered LR): the total grows, so ``done`` never reads past it."""
        with self._lock:
            self.total += max(0, int(n))
            if self._bar is not None:
                self._bar.total = self.total
                self._bar.refresh()

    def advance(self, n: int = 1, loss: float | None = None) -> None:
        """``n`` more units done, one of them with ``loss``."""
        self.set(done=self.done + n, best=loss)

    def eta_s(self) -> float | None:
        """Seconds left at the rate since the start; None before the first unit is done."""
        fresh = self.done - self._initial
        if self.done >= self.total:
            return 0.0
        if fresh <= 0:
            return None
        return (time.monotonic() - self._t0) / fresh * (self.total - self.done)

    def _postfix(self, with_eta: bool) -> str:
        best = "-" if self.best is None else f"{self.best:.4f}"
        parts = [self.extra] if self.extra else []
        parts.append(f"best {best}")
        if with_eta:
            parts += [f"elapsed {fmt_duration(time.monotonic() - self._t0)}",
                      f"ETA {fmt_duration(self.eta_s())}"]
        return ", ".join(parts)

    def line(self) -> str:
        """``DESC: 3/10 trials, run 2, best 2.5000, elapsed 1m05s, ETA 2m31s``."""
        return f"{self.desc}: {self.done}/{self.total} {self.unit}s, {self._postfix(with_eta=True)}"

    # ---- output ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            if self._poll is not None:
                try:
                    self._poll()
                except Exception:  # progress never kills the work it reports on
                    pass
            with self._lock:
                text = self.line()
            try:
                print(text, file=self._stream, flush=True)
            except (OSError, ValueError):  # the stream is gone: stop reporting
                return

    def close(self) -> None:
        """Stop the thread and close the bar (no final line: the caller prints its summary)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class StudyBar(Progress):
    """A :class:`Progress` of a study's trials: done/total with running, failed, diverged
    and the best loss, from :func:`study_counts` (``poll``: fresh counts, called between
    the piped lines, so a line reports the storage's state even while a trial runs)."""

    def __init__(self, total: int, desc: str, quiet: bool = False, initial: int = 0,
                 poll: Callable[[], Counts] | None = None, interval: float | None = None,
                 stream: TextIO | None = None) -> None:
        fetch = (lambda: self.update(poll())) if poll is not None else None
        super().__init__(total, desc, unit="trial", quiet=quiet, initial=initial, poll=fetch,
                         interval=interval, stream=stream)

    def update(self, counts: Counts) -> None:
        self.set(done=counts.done, best=counts.best,
                 extra=f"run {counts.running} fail {counts.failed} div {counts.diverged}")
