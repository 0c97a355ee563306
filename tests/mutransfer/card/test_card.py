"""The transfer card: build from a sweep table, save/load safely, apply to a model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from mutransfer.card.apply import apply_card
from mutransfer.card.build import build_card, load_card, save_card
from mutransfer.card.schema import SCHEMA
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import Multipliers
from mutransfer.training.optim import build_optimizer
from mutransfer_cli import main

CFG = GPTConfig(width=32, depth=2, head_dim=16, seq_len=16, vocab_size=64)


def make_card(**kw):
    pz = Parametrization(lambda w: GPT(CFG.replace(width=w)), width=128, base_width=32,
                         multipliers=Multipliers(output=2.0))
    card = build_card(pz, lr=0.01, optimizer={"weight_decay": 0.1},
                      schedule={"kind": "cosine", "total_steps": 100},
                      batch={"sequences": 8, "tokens": 128}, target={"width": 128}, **kw)
    return pz, card


def test_apply_reproduces_the_parametrization(tmp_path) -> None:
    pz, card = make_card()
    path = save_card(card, tmp_path / "card.yaml")
    loaded = load_card(path)
    assert loaded == card and loaded["schema"] == SCHEMA
    torch.manual_seed(0)
    model = GPT(CFG.replace(width=128))
    applied = apply_card(model, loaded)
    assert applied.model is model
    groups = applied.param_groups
    ref = pz.build(seed=0)
    x = torch.randint(0, 64, (2, 16))
    torch.testing.assert_close(model(x)[0], ref(x)[0])
    lrs = {g["names"][0]: g["lr"] for g in groups}
    assert lrs["blocks.0.attn.c_q.weight"] == pytest.approx(0.01 / 4)
    assert lrs["lm_head.weight"] == pytest.approx(0.01)
    decays = {g["names"][0]: g["weight_decay"] for g in groups}
    assert decays["blocks.0.ln_1.weight"] == 0.0 and decays["wte.weight"] == 0.1
    build_optimizer(groups).step()  # the groups are usable as they are
    model(x)[0].float().pow(2).mean().backward()
    applied.optimizer.step()
    applied.scheduler.step()
    with pytest.raises(ValueError, match="already parametrized"):
        apply_card(model, loaded)


def test_card_errors_are_clear(tmp_path) -> None:
    _, card = make_card()
    with pytest.raises(ValueError, match="does not match the card"):
        apply_card(GPT(CFG.replace(width=128, depth=3)), card)
    with pytest.raises(ValueError, match="unsupported card schema"):
        load_card(_write(tmp_path / "a.yaml", {**card, "schema": "other/v9"}))
    with pytest.raises(ValueError, match="missing section"):
        load_card(_write(tmp_path / "b.yaml", {k: v for k, v in card.items() if k != "batch"}))
    evil = tmp_path / "evil.yaml"
    evil.write_text("!!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_card(evil)


def test_the_library_names_a_wrong_argument_type(tmp_path) -> None:
    _, card = make_card()
    with pytest.raises(TypeError, match="apply_card's model must be a torch.nn.Module .*got NoneType"):
        apply_card(None, card)
    path = save_card(card, tmp_path / "card.yaml")
    with pytest.raises(TypeError, match="apply_card takes the card itself; read .* with load_card first"):
        apply_card(GPT(CFG.replace(width=128)), str(path))
    with pytest.raises(TypeError, match="load_card takes the card's path .*got NoneType"):
        load_card(None)
    with pytest.raises(ValueError, match="a transfer card must be a mapping, got list"):
        apply_card(GPT(CFG.replace(width=128)), [card])


def _write(path, obj):
    path.write_text(yaml.safe_dump(obj))
    return path


def test_cli_builds_the_card_from_a_sweep_table(tmp_path, capsys) -> None:
    rows = []
    rng = np.random.default_rng(0)
    for width in (32, 64, 128):
        for seed in (0, 1):
            for log2_lr in range(-10, -3):
                loss = 3.0 - 0.1 * np.log2(width) + 0.05 * (log2_lr + 6.6) ** 2 + rng.normal(0, 1e-3)
                rows.append({"width": width, "lr": 2.0**log2_lr, "loss": loss, "seed": seed,
                             "parametrization": "mup", "diverged": False, "batch_size": 16})
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--results", str(tmp_path / "results.csv"), "--preset", "gpt-tiny",
                 "--target-width", "1024", "--tokens", "1e8", "--batch-size", "16",
                 "--out", str(out)]) == 0
    card = load_card(out)
    assert np.log2(card["optimizer"]["lr"]) == pytest.approx(-6.6, abs=0.05)
    lo, hi = card["projected"]["lr"]["interval"]
    assert lo < card["optimizer"]["lr"] < hi
    assert card["projected"]["drift"]["drift_octaves"] < 0.1
    assert card["batch"] == {"sequences": 16, "tokens": 16 * 64, "seq_len": 64, "dp_size": None,
                             "micro_batch": 8, "grad_accum": 2, "rounding": "given (--batch-size)"}
    assert card["schedule"]["total_steps"] == int(np.ceil(1e8 / (16 * 64)))
    assert card["parametrization"]["base_width"] == 32 and card["target"]["width"] == 1024
    assert main(["transfer", "--lr", "0.01", "--target-width", "16", "--base-width", "64",
                 "--tokens", "1e6", "--out", str(tmp_path / "bad.yaml")]) == 2
    assert "base width 64 is larger than the target width 16" in capsys.readouterr().err
    assert not (tmp_path / "bad.yaml").exists()
