"""A sweep that names no device sizes and pins its workers for the device the trainers
will pick (one worker per GPU where ``auto`` finds one), not for the CPU."""

from __future__ import annotations

import torch

from sweeps.study import default_workers, trainer_device


def test_an_unnamed_device_is_the_trainers_choice() -> None:
    gpu = torch.cuda.is_available()
    assert trainer_device("auto") == ("cuda" if gpu else None)
    assert trainer_device("cpu") is None  # a sweep whose base says cpu keeps CPU workers
    want = max(1, torch.cuda.device_count()) if gpu else None
    if want is not None:  # on a GPU machine: one worker per GPU, however many cores there are
        assert default_workers(trainer_device("auto") or "cpu", 10_000) == want
