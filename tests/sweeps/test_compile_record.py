"""A compiled sweep trial that ran eager says so on the trial: the worker stores the
reason as the ``compile_fallback`` user attr (and in its row); a trial that stayed
compiled has no such attr. Real journal storage, the real trainer, the worker in this
process (dynamo's cache is per process); graphs compiled by the ``eager`` backend."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import mutransfer.training.compile_watch as compile_watch
from sweeps import attrs
from sweeps.spec_kinds import LRSweep
from sweeps.study import prepare
from sweeps.worker import open_study, work


def test_a_trial_past_the_recompile_limit_records_its_fallback(tmp_path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_watch, "BACKEND", "eager")
    monkeypatch.setattr(compile_watch, "_warned", False)
    url = f"journal:{tmp_path / 'optuna.journal'}"
    spec = LRSweep(widths=(32, 64), parametrizations=("mup",), lrs=(2.0**-6,),
                   base={"steps": 2, "batch_size": 2, "eval_every": 0, "eval_sequences": 4, "seq_len": 16,
                         "depth": 1, "compile": True, "device": "cpu"})
    prepare(spec, url, runner="sweeps.runners:train_runner")
    torch._dynamo.reset()
    try:
        with pytest.warns(RuntimeWarning, match="fell back to eager"), \
                torch._dynamo.config.patch(recompile_limit=1):
            rep = work(url, None, fuse=1)
    finally:
        torch._dynamo.reset()
    assert rep.outcomes["complete"] == 2
    trials = sorted(open_study(url, None)[0].trials, key=lambda t: t.params["width"])
    assert attrs.COMPILE_FALLBACK not in trials[0].user_attrs
    why = trials[1].user_attrs[attrs.COMPILE_FALLBACK]
    assert "recompile_limit=1" in why and trials[1].user_attrs[attrs.ROW]["compile_fallback"] == why
