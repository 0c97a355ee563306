"""A results row names the model it trained: a preset's row its preset, a row of the
user's model (``module:function`` here, ``hf:PATH`` alike) its ``arch`` and ``source`` and
no ``preset`` (the config's default gpt-tiny would name another model)."""

from __future__ import annotations

from mutransfer.training.config import TrainConfig
from mutransfer.training.train import train

BUILDER = '''
from mutransfer.models.gpt import GPT, GPTConfig


def build(width, depth):
    return GPT(GPTConfig(width=width, depth=depth, head_dim=16, vocab_size=256, seq_len=16))
'''
FLAT = {"width": 32, "depth": 1, "steps": 2, "batch_size": 2, "seq_len": 16, "eval_every": 2}


def test_a_user_models_row_names_it_and_no_preset(tmp_path, monkeypatch) -> None:
    (tmp_path / "rowmod.py").write_text(BUILDER)
    monkeypatch.syspath_prepend(str(tmp_path))
    row = train(TrainConfig.from_flat({**FLAT, "source": "rowmod:build"})).to_row()
    assert "preset" not in row
    assert row["arch"] == "builder:rowmod:build" and row["source"] == "rowmod:build"
    preset = train(TrainConfig.from_flat({**FLAT, "preset": "gpt-tiny"})).to_row()
    assert preset["preset"] == preset["arch"] == "gpt-tiny" and "source" not in preset
