"""Checkpoints: bit-identical resume on CPU, atomic writes, weights_only loading, corrupt
files -> ValueError."""

from __future__ import annotations

import pytest
import torch

from mutransfer.training.checkpoint import get_rng_state, load_checkpoint, save_checkpoint, set_rng_state
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, TokenDataset, load_dataset
from mutransfer.training.train import train


@pytest.fixture(scope="module")
def data() -> TokenDataset:
    return load_dataset(DataConfig(max_bytes=300_000))


def cfg(**kw: object) -> TrainConfig:
    base = dict(preset="gpt-tiny", width=32, depth=2, head_dim=16, seq_len=32, batch_size=8, steps=16,
                lr=1e-2, eval_every=8, eval_sequences=8, threads=1, grad_accum=2)
    return TrainConfig.from_flat({**base, **kw})


@pytest.mark.parametrize("parametrization", ["mup", "muon"])
def test_resume_is_bit_identical(data: TokenDataset, tmp_path, parametrization: str) -> None:
    full = train(cfg(parametrization=parametrization), data=data)
    out = tmp_path / "run"
    # Stop at step 8 (the callback prunes), as a killed run would have left it.
    first = train(cfg(parametrization=parametrization, out_dir=str(out), checkpoint_every=8),
                  callback=lambda step, m: step >= 8, data=data)
    assert first.steps_done == 8 and (out / "checkpoint.pt").is_file()
    resumed = train(cfg(parametrization=parametrization, resume=str(out / "checkpoint.pt")), data=data)
    assert resumed.steps_done == 16
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in full.history]  # exact
    assert [h["grad_norm"] for h in resumed.history] == [h["grad_norm"] for h in full.history]
    assert [h["gns"] for h in resumed.history] == [h["gns"] for h in full.history]
    assert resumed.loss == full.loss and resumed.evals == full.evals


def test_corrupt_or_foreign_checkpoints_raise_value_error(tmp_path, data: TokenDataset) -> None:
    good = tmp_path / "good.pt"
    save_checkpoint(good, {"model": {"w": torch.ones(2)}, "optimizer": {}, "step": 3, "data_offset": 0})
    assert load_checkpoint(good)["step"] == 3
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:100])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(1)}, foreign)
    for path, match in [(truncated, "corrupt"), (garbage, "corrupt"), (foreign, "not a mutransfer"),
                        (tmp_path / "missing.pt", "does not exist")]:
        with pytest.raises(ValueError, match=match):
            load_checkpoint(path)
    with pytest.raises(ValueError, match="corrupt"):
        train(cfg(resume=str(truncated)), data=data)


class Evil:
    def __reduce__(self):  # what an untrusted pickle would run on a plain torch.load
        return (print, ("pwned",))


def test_weights_only_refuses_pickled_code(tmp_path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"format": "mutransfer.checkpoint/v1", "model": {}, "optimizer": {}, "step": 0,
                "data_offset": 0, "x": Evil()}, path)
    with pytest.raises(ValueError, match="corrupt"):
        load_checkpoint(path)


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"model": {}, "optimizer": {}, "step": 1, "data_offset": 0})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError):
        save_checkpoint(path, {"model": {}, "optimizer": {}, "step": 2, "data_offset": 0})
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_rng_state_round_trips() -> None:
    import random

    import numpy as np

    state = get_rng_state()
    a = (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002
    set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a  # noqa: NPY002


def test_resume_refuses_a_changed_config_naming_the_field(data: TokenDataset, tmp_path) -> None:
    """A new lr would be ignored (the optimizer state restores the old base LR) while the row
    reports it; a new seed, batch size or parametrization would be half-applied. Only the
    resumable fields (steps, eval cadence, out dir, ...) may change."""
    out = tmp_path / "run"
    train(cfg(out_dir=str(out), checkpoint_every=8), callback=lambda step, m: step >= 8, data=data)
    ckpt = str(out / "checkpoint.pt")
    changes = {"lr": 3e-2, "seed": 1, "batch_size": 4, "parametrization": "sp", "weight_decay": 0.1}
    for field, value in changes.items():
        with pytest.raises(ValueError, match=rf"--resume cannot change {field} "):
            train(cfg(resume=ckpt, **{field: value}), data=data)
    with pytest.raises(ValueError, match="steps=4 is below the checkpoint's step 8"):
        train(cfg(resume=ckpt, steps=4), data=data)
    # steps, eval cadence and the output folder may change
    resumed = train(cfg(resume=ckpt, steps=20, eval_every=5, out_dir=str(tmp_path / "more")), data=data)
    assert resumed.steps_done == 20
