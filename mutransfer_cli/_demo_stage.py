"""The bookkeeping of the demo's stages: the progress line and the clock of each stage."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


def log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, flush=True)


class Clock:
    """Wall and CPU seconds of each stage (CPU: this process and its finished workers).

    On a machine shared with other work the wall time says little; ``idle_estimate_s``
    (CPU seconds / the processes that ran in parallel) is what the stage would take on
    idle cores, an upper bound as far as contention also inflates CPU time."""

    def __init__(self) -> None:
        self.stages: dict[str, dict[str, float]] = {}

    @staticmethod
    def cpu() -> float:
        import resource  # POSIX only: imported when a stage is timed, not with the CLI

        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    @contextlib.contextmanager
    def stage(self, name: str, parallel: int = 1) -> Iterator[None]:
        w0, c0 = time.perf_counter(), self.cpu()
        try:
            yield
        finally:
            wall, cpu = time.perf_counter() - w0, self.cpu() - c0
            self.stages[name] = {"wall_s": wall, "cpu_s": cpu, "parallel": parallel,
                                 "idle_estimate_s": cpu / max(1, parallel)}
