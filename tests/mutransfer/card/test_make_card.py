"""make_card(TransferRequest): the one call that makes a card, with every transfer rule.

Oracle: for the same inputs the CLI's card, the library's, the demo's and the card-regret
benchmark's are the same card (date and revision aside), for a target deeper than its
proxy, a vocabulary change and a context change."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.holdout import audit_verdict
from mutransfer.card.build import load_card, save_card
from mutransfer.card.make import TransferRequest, make_card
from mutransfer.card.request import RunChoices
from mutransfer_cli import main


def _same(card: dict[str, Any]) -> dict[str, Any]:
    """The card less what differs between two makings of it: the date and the revision."""
    prov = {k: v for k, v in card["provenance"].items() if k not in ("date", "git_revision")}
    return {**card, "provenance": prov}


def _results(path: Path, *, widths: tuple[int, ...] = (64, 128), seq_len: int = 64, vocab: int = 256,
             arch: str = "gpt-tiny") -> Path:
    """An LR sweep's table with a known optimum (2^-6 at every width, μP), two seeds."""
    rows = []
    for w in widths:
        for seed in (0, 1):
            for lg in (-8.0, -7.0, -6.0, -5.0, -4.0):
                rows.append({"study": "lr", "trial": len(rows), "state": "COMPLETE", "diverged": False,
                             "arch": arch, "parametrization": "mup", "width": w, "depth": 2,
                             "tokens": 2**16, "steps": 64, "batch_size": 16, "seq_len": seq_len,
                             "batch_tokens": 16 * seq_len, "lr": 2.0**lg, "seed": seed,
                             "loss": 2.0 + 0.05 * (lg + 6.0) ** 2 + 0.001 * seed - 0.01 * np.log2(w),
                             "vocab_size": vocab, "tokenizer": "bytes"})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


CASES = {
    # a target 4x deeper than its plain-μP proxy: CompleteP's rules, with the warning
    "deeper": (["--set", "width=256", "--set", "depth=8"], {"overrides": {"width": 256, "depth": 8}}),
    # another vocabulary, allowed and recorded
    "vocab": (["--set", "width=256", "--set", "vocab_size=512", "--allow-vocab-change"],
              {"overrides": {"width": 256, "vocab_size": 512}, "allow_vocab_change": True}),
    # a longer context than the proxy's
    "context": (["--set", "width=256", "--set", "seq_len=256"], {"overrides": {"width": 256, "seq_len": 256}}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cli_and_the_library_make_the_same_card(tmp_path: Path, case: str) -> None:
    results = _results(tmp_path / "results.csv")
    flags, fields = CASES[case]
    out = tmp_path / "cli.yaml"
    assert main(["transfer", "--results", str(results), "--preset", "gpt-tiny", "--tokens-per-param", "20",
                 "--batch-size", "32", *flags, "--out", str(out)]) == 0
    made = make_card(TransferRequest(results=str(results), preset="gpt-tiny", tokens_per_param=20.0,
                                     run=RunChoices(batch_sequences=32), **fields))
    assert _same(load_card(out)) == _same(made.card)
    card = made.card
    if case == "deeper":
        assert card["parametrization"]["kind"] == "completep" and card["parametrization"]["depth"] == 8
        assert any("CompleteP" in w for w in made.warnings)
    if case == "vocab":
        assert card["target"]["vocab_change"]["target"] == 512
    if case == "context":
        assert card["batch"]["seq_len"] == 256 and card["source"]["seq_len"] == 64
        assert any("context" in w for w in made.warnings)


def test_a_plain_mup_proxy_for_a_deeper_target_gets_completep_and_its_warning() -> None:
    """make_card applies the depth rule (it once made a plain-μP card, 0 warnings, from a
    depth-2 proxy for a depth-8 target, while `transfer` switched to CompleteP)."""
    made = make_card(TransferRequest(lr=0.01, preset="gpt-tiny", parametrization="mup", proxy_batch_tokens=1024,
                                     proxy_tokens=2e6, overrides={"width": 256, "depth": 8},
                                     tokens_per_param=20.0, run=RunChoices(batch_sequences=8)))
    pz = made.card["parametrization"]
    assert (pz["kind"], pz["depth"], pz["base_depth"]) == ("completep", 8, 2)
    assert any("tuned under plain muP" in w for w in made.warnings)
    assert made.card["trust"]["warnings"] == len(made.warnings) >= 1


def test_the_rules_refuse_by_name() -> None:
    with pytest.raises(ValueError, match="smaller than the proxy"):
        make_card(TransferRequest(lr=0.01, preset="gpt-tiny", overrides={"depth": 1}, tokens=1e6,
                                  run=RunChoices(batch_sequences=8)))
    with pytest.raises(ValueError, match="vocabulary 512 differs"):
        make_card(TransferRequest(lr=0.01, preset="gpt-tiny", overrides={"vocab_size": 512}, tokens=1e6,
                                  run=RunChoices(batch_sequences=8)))
    with pytest.raises(ValueError, match="does not transfer"):
        make_card(TransferRequest(lr=0.01, parametrization="sp", tokens=1e6))
    with pytest.raises(ValueError, match="one source of the proxy's LR"):
        TransferRequest(lr=0.01, results="r.csv", tokens=1e6)
    with pytest.raises(ValueError, match="batch_rule must be one of"):
        RunChoices(batch_rule="biggest")


def test_the_demo_makes_the_cli_card(tmp_path: Path) -> None:
    """The demo's card is the one `mutransfer transfer` writes on its files (it once built
    an argv and reloaded the card; now it makes the request the CLI would)."""
    from mutransfer_cli._demo_sizes import SIZES
    from mutransfer_cli.demo import demo_request

    sz = SIZES["tiny"]
    _results(tmp_path / "results.csv", widths=sz.widths, seq_len=sz.seq_len, arch=sz.preset)
    made = make_card(demo_request(tmp_path, sz, "demo-lr", {}))
    sc = sz.scaling
    out = tmp_path / "cli.yaml"
    assert main(["transfer", "--results", str(tmp_path / "results.csv"), "--preset", sz.preset,
                 "--seq-len", str(sz.seq_len), "--set", f"width={sc.target_width}",
                 "--set", f"depth={sc.target_depth}", "--set", f"seq_len={sc.target_seq_len}",
                 "--parametrization", "mup", "--base-width", str(sz.widths[0]),
                 "--tokens-per-param", str(sc.tokens_per_param), "--study", "demo-lr",
                 "--storage", f"journal:{tmp_path / 'sweep' / 'optuna.journal'}",
                 "--batch-size", str(sz.batch_size), "--out", str(out)]) == 0
    assert _same(load_card(out)) == _same(made.card)
    assert made.card["parametrization"]["kind"] == "completep"  # 24 blocks from a 2-block proxy


def test_the_card_regret_benchmark_makes_the_cli_card(tmp_path: Path) -> None:
    from benchmarks.card_regret import SIZES, card_request, proxy_optimum

    sz = SIZES["cpu"]
    doc = _regret_fit(sz.seq_len)
    opt = proxy_optimum(doc)
    req = card_request(sz, doc, opt)
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(doc))
    made = make_card(dataclasses.replace(req, scaling_fit=str(fit)))
    out = tmp_path / "cli.yaml"
    assert main(["transfer", "--lr", repr(opt["lr"]), "--lr-interval", f"{opt['lr_lo']!r},{opt['lr_hi']!r}",
                 "--proxy-batch-tokens", repr(opt["batch_tokens"]), "--proxy-tokens", repr(opt["tokens"]),
                 "--preset", sz.preset, "--seq-len", str(sz.seq_len), "-p", "completep",
                 "--base-width", str(sz.width), "--base-depth", str(sz.depth), "--proxy-set", f"width={sz.width}",
                 "--proxy-set", f"depth={sz.depth}", "--proxy-set", f"head_dim={sz.head_dim}",
                 "--proxy-set", f"seq_len={sz.seq_len}",
                 "--set", f"width={8 * sz.width}", "--set", f"depth={4 * sz.depth}",
                 "--tokens", repr(req.tokens), "--scaling-fit", str(fit), "--decay-shape", "linear",
                 "--out", str(out)]) == 0
    cli = load_card(out)
    assert _same(cli) == _same(made.card)
    # the benchmark's own card (its fit given as the object, not a file) has the same values;
    # only the texts that name the fit's source differ
    own = make_card(req).card
    for section in ("target", "parametrization", "optimizer", "schedule", "batch", "param_groups",
                    "forward_multipliers"):
        assert own[section] == cli[section], section


def _regret_fit(seq: int) -> dict[str, Any]:
    """A synthetic scaling fit of the benchmark's proxy (known laws, as its own test)."""
    import math

    budgets = (2048, 4096, 8192, 2**14)
    cells = [{"batch_tokens": b, "tokens": d, "lr_opt": 0.01 * (b / 16) ** 0.5, "lr_lo": 0.008, "lr_hi": 0.012,
              "edge": "", "loss_opt": 2.5 - 0.1 * math.log2(d / 2048) + 0.01 * abs(math.log2(b / 32))}
             for b in (16, 32, 64, 128) for d in budgets]
    return {"kind": "scaling",
            "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.5, "tokens": -0.25},
                   "ci": {"batch_tokens": [0.4, 0.6], "tokens": [-0.3, -0.2]}},
            "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}, "ci": {"tokens": [0.3, 0.5]}},
            "tau": {"value": 0.2, "ci": [0.15, 0.3]},
            "measured": {"tokens": [2048, 2**14], "batch_tokens": [16, 128], "seq_len": seq},
            "cells": cells, "budgets": [{"tokens": d, "edge": ""} for d in budgets]}


AUDIT = [{"method": "ours", "axis": "tokens", "pred_lr": 0.011, "meas_lr": 0.01, "lr_ratio": 1.1,
          "pred_batch_tokens": None, "meas_batch_tokens": None, "batch_ratio": None, "loss_gap": None}]


def test_the_audit_verdict_exists_once_and_an_unmeasured_gap_is_undecided(tmp_path: Path) -> None:
    """LR 1.1x with no loss gap measured: undecided in AUDIT.json and in the card (the card
    once said passed where sweeps said undecided)."""
    assert audit_verdict(AUDIT) is None
    assert audit_verdict([{**AUDIT[0], "loss_gap": 0.001}]) is True
    assert audit_verdict([{**AUDIT[0], "loss_gap": 0.01}]) is False
    assert audit_verdict([{**AUDIT[0], "lr_ratio": 1.5}]) is False  # a miss is a miss, gap or not
    assert audit_verdict([]) is None
    path = tmp_path / "AUDIT.json"
    path.write_text(json.dumps({"holdout": AUDIT}))
    made = make_card(TransferRequest(lr=0.01, preset="gpt-tiny", overrides={"width": 128}, tokens=1e6,
                                     audit=str(path), run=RunChoices(batch_sequences=8)))
    assert made.card["audit"]["passed"] is None


def test_a_card_is_validated_once_per_transfer_and_once_per_export(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import mutransfer.card.build as build
    import mutransfer.card.export as export
    import mutransfer.card.schema as schema

    calls = []
    real = schema.validate_card

    def counting(card: Any) -> Any:
        calls.append(1)
        return real(card)

    for module in (build, export):  # the engines validate nothing: export_card did
        monkeypatch.setattr(module, "validate_card", counting)
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--lr", "0.01", "--preset", "gpt-tiny", "--set", "width=128", "--tokens", "1e6",
                 "--batch-size", "8", "--out", str(out)]) == 0
    assert len(calls) == 1
    calls.clear()
    assert main(["export", str(out), "--to", "hf", "--out", str(tmp_path / "hf.json")]) == 0
    assert len(calls) == 1


def test_the_card_file_is_readable_utf8(tmp_path: Path) -> None:
    made = make_card(TransferRequest(lr=0.01, preset="gpt-tiny", overrides={"width": 128}, tokens=1e6,
                                     run=RunChoices(batch_sequences=8)))
    text = save_card(made, tmp_path / "card.yaml").read_text(encoding="utf-8")
    assert "\\x" not in text and "\\u" not in text
    assert "×" in text or "μ" in text  # the card's own words, as written
    assert _same(load_card(tmp_path / "card.yaml")) == _same(made.card)


LLAMA_3_2_1B = {  # the released config's shape and rope scaling (no weights: built on meta)
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "hidden_act": "silu", "torch_dtype": "bfloat16",
}


def test_a_llama_3_2_targets_its_pretraining_context_not_the_extended_one(tmp_path: Path) -> None:
    """Llama 3.x configs carry the extended 131,072 in max_position_embeddings; they were
    pretrained at 8,192 (rope_scaling.original_max_position_embeddings). A batch of 4 x 64
    ranks of 131,072 tokens was 33.5M tokens."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA_3_2_1B))
    made = make_card(TransferRequest(lr=0.01, preset="llama-small", base_width=256, model=f"hf:{cfg}",
                                     allow_vocab_change=True, tokens_per_param=20.0,
                                     run=RunChoices(batch_sequences=128)))
    assert made.card["batch"]["seq_len"] == made.card["target"]["seq_len"] == 8192
    assert "original_max_position_embeddings" in made.card["target"]["seq_len_from"]
    given = make_card(TransferRequest(lr=0.01, preset="llama-small", base_width=256, model=f"hf:{cfg}",
                                      allow_vocab_change=True, tokens_per_param=20.0, target_seq_len=4096,
                                      run=RunChoices(batch_sequences=128)))
    assert given.card["batch"]["seq_len"] == 4096


# ---- arguments checked before any arithmetic -----------------------------------------------------

BASE_REQ: dict[str, Any] = {"lr": 0.01, "tokens": 1e8, "target_preset": "gpt-small"}


@pytest.mark.parametrize(("kw", "exc", "needle"), [
    ({"seq_len": 0}, ValueError, "seq_len must be an integer >= 1, got 0"),
    ({"target_seq_len": 0}, ValueError, "target_seq_len must be an integer >= 1, got 0"),
    ({"base_width": "64"}, TypeError, "base_width must be an integer >= 1, got str '64'"),
    ({"base_depth": 2.5}, TypeError, "base_depth must be an integer >= 1, got float 2.5"),
    ({"weights_dtype": "int8"}, ValueError, "weights_dtype must be one of float32, bfloat16, float16"),
    ({"lr": "0.01"}, ValueError, "lr must be a positive finite number, got '0.01'"),
    ({"tokens": None, "tokens_per_param": "x"}, ValueError, "tokens_per_param must be a positive finite"),
    ({"proxy_batch_tokens": -1}, ValueError, "proxy_batch_tokens must be a positive finite number, got -1"),
    ({"lr_interval": 5}, TypeError, "lr_interval must be a pair (lo, hi)"),
    ({"lr_interval": (0.01, -1)}, ValueError, "lr_interval must hold positive finite numbers or None"),
    ({"proxy_widths": 5}, TypeError, "proxy_widths must be a sequence of widths, got 5"),
    ({"proxy_widths": (64, 0)}, ValueError, "proxy_widths must be an integer >= 1, got 0"),
    ({"overrides": None}, TypeError, "overrides must be a mapping of model fields, got None"),
    ({"proxy_overrides": [1]}, TypeError, "proxy_overrides must be a mapping of model fields"),
    ({"head_rule": "bad"}, ValueError, "head_rule must be one of keep_head_dim, keep_heads, got 'bad'"),
    ({"preset": 5}, TypeError, "preset must be a string (a path or a name) or None, got int 5"),
    ({"run": None}, TypeError, "run must be a RunChoices, got NoneType"),
    ({"allow_vocab_change": "yes"}, TypeError, "allow_vocab_change must be True or False, got 'yes'"),
])
def test_a_bad_request_names_its_field_before_any_rule_runs(kw, exc, needle) -> None:
    with pytest.raises(exc) as e:
        TransferRequest(**{**BASE_REQ, **kw})
    assert needle in str(e.value) and type(e.value) is exc


@pytest.mark.parametrize(("kw", "exc", "needle"), [
    ({"batch_sequences": 0}, ValueError, "batch_sequences must be an integer >= 1, got 0"),
    ({"extrapolation_limit": -1}, ValueError, "extrapolation_limit must be a finite number > 0, got -1"),
    ({"accept_edge": "lr"}, ValueError, "accept_edge takes a sequence of batch, lr"),
    ({"lr_floor": "x"}, ValueError, "lr_floor must be a finite number >= 0 and <= 1, got 'x'"),
])
def test_bad_run_choices_name_their_field(kw, exc, needle) -> None:
    with pytest.raises(exc, match=None) as e:
        RunChoices(**kw)
    assert needle in str(e.value)
    assert RunChoices(accept_edge=None).accept_edge == ()  # None is "none accepted", not a crash


def test_a_valid_request_with_numpy_integers_is_taken() -> None:
    req = TransferRequest(**{**BASE_REQ, "seq_len": np.int64(64), "base_width": np.int64(64),
                             "proxy_widths": (np.int64(64), 128), "run": RunChoices(batch_sequences=8)})
    assert make_card(req).card["batch"]["seq_len"] == 64
