"""The bookkeeping of the demo's stages: the progress line and the clock of each stage."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

from sweeps.progress import Progress, fmt_duration


def log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, flush=True)


class _StillRunning(Progress):
    """A stage without counts of its own (fits, card, plots): piped, a line every
    interval saying it is still running, so no stage is silent for long."""

    def line(self) -> str:
        return f"{self.desc}: still running, elapsed {fmt_duration(time.monotonic() - self._t0)}"


class Clock:
    """Wall and CPU seconds of each stage (CPU: this process and its finished workers).

    On a machine shared with other work the wall time says little; ``idle_estimate_s``
    (CPU seconds / the processes that ran in parallel) is what the stage would take on
    idle cores, an upper bound as far as contention also inflates CPU time.

    ``quiet`` False: a stage that reports no progress of its own (``reports=False``)
    prints a still-running line every progress interval when piped
    (:func:`sweeps.progress.progress_interval`); the sweeps and the audit print their own
    lines with counts, the best loss and an ETA."""

    def __init__(self, quiet: bool = True) -> None:
        self.stages: dict[str, dict[str, float]] = {}
        self.quiet = quiet

    @staticmethod
    def cpu() -> float:
        import resource  # POSIX only: imported when a stage is timed, not with the CLI

        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    @contextlib.contextmanager
    def stage(self, name: str, parallel: int = 1, reports: bool = False) -> Iterator[None]:
        w0, c0 = time.perf_counter(), self.cpu()
        # piped only: on a terminal the stage's own output and bars show it is alive
        piped = not (reports or self.quiet or sys.stderr.isatty())
        ticker = _StillRunning(1, name, unit="stage") if piped else None
        try:
            yield
        finally:
            if ticker is not None:
                ticker.close()
            wall, cpu = time.perf_counter() - w0, self.cpu() - c0
            # a stage run again (tune's second pass refits) adds to its first run's clock
            was = self.stages.get(name, {"wall_s": 0.0, "cpu_s": 0.0})
            wall, cpu = wall + was["wall_s"], cpu + was["cpu_s"]
            self.stages[name] = {"wall_s": wall, "cpu_s": cpu, "parallel": parallel,
                                 "idle_estimate_s": cpu / max(1, parallel)}
