"""CLI verbs of the parametrization layer: explain, and coord-check on the MLP."""

from __future__ import annotations

import json

import pytest

from mutransfer_cli import main


def test_explain_prints_every_parameter_with_its_role(capsys) -> None:
    assert main(["explain", "--preset", "gpt-tiny", "--width", "256", "--rules"]) == 0
    out = capsys.readouterr().out
    assert "mup (adam rules): width 256 over base 64" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("blocks.0.attn.c_q.weight"))
    assert "hidden" in line and "0.25" in line  # LR × 1/width_mult
    assert "first match wins" in out


def test_explain_json_rows(capsys) -> None:
    assert main(["explain", "--preset", "mlp-tiny", "--width", "128", "--optimizer", "sgd", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["fc_in.weight"]["role"] == "input" and rows["fc_in.weight"]["lr_mult"] == 2.0
    assert rows["fc_out.bias"]["role"] == "vector" and rows["fc_out.bias"]["lr_mult"] == 1.0


def test_explain_bad_preset_exits_2(capsys) -> None:
    assert main(["explain", "--preset", "gpt-9b"]) == 2
    assert "unknown model 'gpt-9b': not a preset" in capsys.readouterr().err


def test_coord_check_on_the_mlp(tmp_path) -> None:
    args = ["coord-check", "--model", "mlp", "--widths", "64,256,1024", "--steps", "3", "--n-seeds", "2",
            "--quiet", "--no-plot"]
    verdicts = {}
    for name, extra in (("mup", []), ("sp", ["-p", "sp"]), ("mup-sgd", ["--optimizer", "sgd"]),
                        ("mup-sgd-constant", ["--optimizer", "sgd", "--readout-init", "constant"]),
                        ("sp-sgd", ["-p", "sp", "--optimizer", "sgd"])):
        assert main([*args, *extra, "--out", str(tmp_path / name)]) == 0
        verdicts[name] = json.loads((tmp_path / name / "coord_check.json").read_text())
    assert verdicts["mup"]["passed"] and not verdicts["sp"]["passed"]
    assert verdicts["sp"]["slopes"]["fc_out"] > 1.0  # SP-Adam logits grow ~linearly in width
    assert verdicts["mup-sgd"]["passed"] and verdicts["mup-sgd-constant"]["passed"]
    # SP-SGD's readout drifts up with width too, more slowly; μP-SGD's with mup's constant
    # readout does not. (With the default fan_in readout, SP's init, μP-SGD's readout slope is
    # SP-SGD's, ~0.2, inside the tolerance: the fan_in evidence is Adam's.)
    assert (verdicts["sp-sgd"]["slopes"]["fc_out"]
            > verdicts["mup-sgd-constant"]["slopes"]["fc_out"] + 0.1)
    assert not (tmp_path / "mup" / "coord_check.png").exists()


def test_explain_takes_the_users_hf_config(tmp_path, capsys) -> None:
    """``explain --model hf:PATH``: the user's own parameter names and μP's values for them."""
    pytest.importorskip("transformers")
    cfg = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "max_position_embeddings": 64}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    argv = ["explain", "--model", f"hf:{tmp_path}", "--width", "128", "--base-width", "64", "--json"]
    assert main(argv) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["model.layers.1.mlp.down_proj.weight"]["role"] == "hidden"
    assert rows["model.layers.1.mlp.down_proj.weight"]["lr_mult"] == pytest.approx(0.5)
    assert rows["lm_head.weight"]["role"] == "output" and rows["model.embed_tokens.weight"]["lr_mult"] == 1
    assert main(["explain", "--model", "hf:org/not-local"]) == 2
