"""A sweep worker trains a width ladder one trial after another in one process: with
``compile`` on, every trial must stay compiled (dynamo's recompile limit never hit), so
nothing that changes from step to step may be a guard (the max-logit flag was one). When
a run does fall back to eager, it says so: one warning per process and the reason on
every run that ran eager (:mod:`mutransfer.training.compile_watch`).

Dynamo's guards and recompiles are the same whatever backend compiles the graphs: the
tests use the ``eager`` backend, so they take seconds on a CPU instead of an inductor C++
build per graph."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo

import mutransfer.training.compile_watch as compile_watch
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.train_result import TrainResult
from mutransfer.training.trainer import Trainer


@pytest.fixture
def eager_compile(monkeypatch: pytest.MonkeyPatch):
    """Compile with the eager backend, from an empty dynamo cache, no warning given yet."""
    monkeypatch.setattr(compile_watch, "BACKEND", "eager")
    monkeypatch.setattr(compile_watch, "_warned", False)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def ladder(widths: tuple[int, ...], parametrizations: tuple[str, ...] = ("mup",)) -> list[TrainResult]:
    data = load_dataset(DataConfig(max_bytes=300_000))
    results = []
    for par in parametrizations:
        for width in widths:
            cfg = TrainConfig.from_flat(dict(
                preset="gpt-tiny", width=width, depth=1, head_dim=16, seq_len=16, batch_size=2, steps=4,
                eval_every=0, eval_sequences=4, threads=1, data_max_bytes=300_000, device="cpu",
                compile=True, max_logit_every=2, parametrization=par, lr=1e-3))
            results.append(Trainer(cfg, data=data).run())
    return results


def test_a_six_width_ladder_in_one_process_stays_compiled(eager_compile: None) -> None:
    # fail_on_recompile_limit_hit: hitting the limit raises instead of falling back to eager
    with warnings.catch_warnings(record=True) as caught, \
            torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        warnings.simplefilter("always")
        results = ladder((16, 32, 48, 64, 80, 96), ("mup", "sp"))
    assert all(r.steps_done == 4 and not r.diverged for r in results)
    # the max logit is still read on its steps only (steps 0 and 2 of 4)
    assert [h["max_attn_logit"] is not None for h in results[-1].history] == [True, False, True, False]
    # and nothing says it fell back
    assert [r.compile_fallback for r in results] == [None] * 12
    assert all("compile_fallback" not in r.to_row() for r in results)
    assert not [w for w in caught if "fell back to eager" in str(w.message)]


def test_a_fallback_past_the_recompile_limit_warns_once_and_is_recorded(eager_compile: None) -> None:
    # a recompile limit of 1: the first width compiles, the next ones cannot
    with warnings.catch_warnings(record=True) as caught, torch._dynamo.config.patch(recompile_limit=1):
        warnings.simplefilter("always")
        results = ladder((16, 32, 48))
    said = [str(w.message) for w in caught if "fell back to eager" in str(w.message)]
    assert len(said) == 1 and "\n" not in said[0]
    assert "model gpt-tiny" in said[0] and "recompile_limit=1" in said[0]
    assert results[0].compile_fallback is None
    # the third trial never asks dynamo again (the forward's code runs eager for good): still recorded
    for r in results[1:]:
        assert r.compile_fallback is not None and "recompile_limit=1" in r.compile_fallback
        assert r.to_row()["compile_fallback"] == r.compile_fallback
    assert all(r.steps_done == 4 for r in results)


def test_a_graph_break_in_the_forward_is_a_fallback_too(eager_compile: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import mutransfer.models.gpt as gpt

    real = gpt.MLP.forward

    def broken(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()  # eager code between two graphs, as an unsupported op makes
        return real(self, x)

    monkeypatch.setattr(gpt.MLP, "forward", broken)
    with pytest.warns(RuntimeWarning, match="fell back to eager for model gpt-tiny: graph break"):
        (r,) = ladder((32,))
    assert r.compile_fallback is not None and r.compile_fallback.startswith("graph break")
    assert r.steps_done == 4
