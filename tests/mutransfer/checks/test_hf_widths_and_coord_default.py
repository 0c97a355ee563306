"""Widths a user can pick and a coordinate check that passes a correct μP at its defaults on
HF models (real GQA shapes allow few widths, and the check once failed a correct μP at its
default LR): the valid widths of a config under each head rule,
said in the error with the other rule suggested; the check's default LR scaled to the
model's init; its verdict line names the band it judged by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mutransfer.checks.coord_check import LR_PER_INIT_STD, default_lr, init_std
from mutransfer_cli import main

tf = pytest.importorskip("transformers", reason="the [engines] extra is not installed")

LLAMA_1B = {"model_type": "llama", "vocab_size": 256, "hidden_size": 2048, "intermediate_size": 8192,
            "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
            "max_position_embeddings": 131072}
QWEN_05B = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 896, "intermediate_size": 4864,
            "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
            "max_position_embeddings": 32768}


def _cfg(tmp_path: Path, fields: dict, name: str) -> Path:
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(fields))
    return tmp_path / name


def test_valid_widths_follow_the_gqa_and_head_dim_rules() -> None:
    from mutransfer.models.source import valid_widths, widths_hint

    llama = tf.AutoConfig.for_model(**LLAMA_1B)
    qwen = tf.AutoConfig.for_model(**QWEN_05B)
    # head_dim 64 with 32:8 heads: a KV head per 256 of width
    assert valid_widths(llama) == list(range(256, 2049, 256))
    # 14:2 heads of 64: a KV head per 448; keep_heads: head_dim 64·w/896 and the MLP 38/7·w whole
    assert valid_widths(qwen) == [448, 896]
    assert valid_widths(qwen, "keep_heads") == list(range(14, 897, 14))
    assert "fewer than 3" not in widths_hint(llama)
    hint = widths_hint(qwen)
    assert "448, 896" in hint and "try --head-rule keep_heads" in hint and "multiples of 14" in hint


def test_a_width_the_rule_cannot_take_lists_the_valid_ones(tmp_path, capsys) -> None:
    llama = _cfg(tmp_path, LLAMA_1B, "llama")
    code = main(["sweep", "lr", "--model", f"hf:{llama}", "--widths", "32,64,128", "--lrs", "0.01",
                 "--out", str(tmp_path / "sw"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "width 32" in err and "multiples of 256" in err
    qwen = _cfg(tmp_path, QWEN_05B, "qwen")
    code = main(["coord-check", "--model", f"hf:{qwen}", "--widths", "224,448", "--depths", "2",
                 "--out", str(tmp_path / "cc")])
    err = capsys.readouterr().err
    assert code == 2 and "448, 896" in err and "--head-rule keep_heads" in err


def test_explain_takes_head_rule_and_never_builds_the_target(tmp_path, capsys, monkeypatch) -> None:
    """The Qwen2.5-0.5B shape at its own width under keep_heads: the width-896 model is
    built on the meta device only (every real build is the base or its delta)."""
    import mutransfer.models.source as src

    qwen = _cfg(tmp_path, dict(QWEN_05B, num_hidden_layers=2), "qwen")
    real = []
    build = src.build_model

    def spy(source, width, depth, **kw):  # records which widths are built off the meta device
        model = build(source, width, depth, **kw)
        if next(model.parameters()).device.type != "meta":
            real.append(width)
        return model

    monkeypatch.setattr("mutransfer_cli.explain.build_model", spy)
    assert main(["explain", "--model", f"hf:{qwen}", "--head-rule", "keep_heads"]) == 0
    out = capsys.readouterr().out
    assert "keep_heads takes widths" in out and "width 896 over base 70" in out
    assert real and 896 not in real


def test_default_lr_is_a_share_of_the_init() -> None:
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(tf.AutoConfig.for_model(
        **dict(LLAMA_1B, hidden_size=128, intermediate_size=256, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, num_hidden_layers=2)))
    assert init_std(model) == pytest.approx(0.02, rel=0.05)  # HF's initializer_range
    assert default_lr(model) == pytest.approx(LR_PER_INIT_STD * 0.02) == pytest.approx(2e-3)
    assert default_lr(model, "sgd") == 0.1


def test_the_verdict_names_the_band_it_judged_by(tmp_path, capsys) -> None:
    """μP at the default LR on a tiny HF Llama passes; the line gives the LR and the band,
    with the readout's own lower bound when the worst row is the readout."""
    cfg = _cfg(tmp_path, dict(LLAMA_1B, hidden_size=128, intermediate_size=512, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=32, num_hidden_layers=2,
                              max_position_embeddings=256), "tiny")
    code = main(["coord-check", "--model", f"hf:{cfg}", "--widths", "64,128,256", "--n-seeds", "1",
                 "--steps", "3", "--no-plot", "--out", str(tmp_path / "cc")])
    line = capsys.readouterr().out.splitlines()[0]
    assert code == 0 and line.startswith("coord-check mup: PASSED at lr 0.002") and "allowed [" in line
    doc = json.loads((tmp_path / "cc" / "coord_check.json").read_text())
    assert doc["passed"] and doc["settings"]["lr"] == 2e-3 and "init std" in doc["settings"]["lr_rule"]
    worst, tol = doc["worst"], doc["tol"]
    if worst["slope"] < -tol:  # only the readout may sit below -tol, and the line says why
        assert worst["module"] == "lm_head" and "width^-1/2" in line
    else:
        assert abs(worst["slope"]) <= tol
