"""One progress bar across all workers, fed by polling the storage."""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sweeps import attrs

if TYPE_CHECKING:
    import optuna


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


class StudyBar:
    """A tqdm bar on stderr: done/total with running, failed, diverged and the best loss.
    A no-op when quiet or stderr is not a TTY."""

    def __init__(self, total: int, desc: str, quiet: bool = False, initial: int = 0) -> None:
        self._bar: Any = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, initial=initial, file=sys.stderr,
                             unit="trial", dynamic_ncols=True)
        self._n = initial

    def update(self, counts: Counts) -> None:
        if self._bar is None:
            return
        delta = counts.done - self._n
        if delta > 0:
            self._bar.update(delta)
            self._n = counts.done
        best = "-" if counts.best is None else f"{counts.best:.4f}"
        self._bar.set_postfix_str(f"run {counts.running} fail {counts.failed} "
                                  f"div {counts.diverged} best {best}", refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
