"""What the sweeps' kill tests share: the check that a study survived a SIGKILLed worker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from sweeps.spec_base import point_key

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from sweeps.spec_kinds import LRSweep


def check_survived_a_kill(study: optuna.Study, spec: LRSweep, victim_trial: int, codes: list[int],
                          workers: int) -> tuple[list[FrozenTrial], FrozenTrial, FrozenTrial]:
    """After one of ``workers`` workers was SIGKILLed in trial ``victim_trial``: the others
    exited 0 (``codes``), nothing is left running or waiting, every point of ``spec``
    completed exactly once, the killed trial failed and was retried once, to completion.
    Returns (every trial, the killed one, its retry) for the test's own checks."""
    from optuna.trial import TrialState

    assert codes == [0] * (workers - 1)
    trials = study.get_trials(deepcopy=False)
    by_state = Counter(t.state for t in trials)
    assert by_state[TrialState.RUNNING] == 0 and by_state[TrialState.WAITING] == 0
    complete = Counter(t.user_attrs["point_key"] for t in trials if t.state == TrialState.COMPLETE)
    assert complete == Counter({point_key(pt): 1 for pt in spec.points()})  # each exactly once
    killed = next(t for t in trials if t.number == victim_trial)
    assert killed.state == TrialState.FAIL
    retry = [t for t in trials if t.user_attrs.get("retry_of") == victim_trial]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE
    return trials, killed, retry[0]


@pytest.fixture
def survived_a_kill() -> Callable[..., tuple[list[FrozenTrial], FrozenTrial, FrozenTrial]]:
    """:func:`check_survived_a_kill`, for the tests (conftest is not imported by name)."""
    return check_survived_a_kill
