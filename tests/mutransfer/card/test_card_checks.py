"""The card's checks beyond types: consistency of its fields with each other and with the
model it describes, sizes a real run could have, a fit's bound never taken as a value
without saying so, the warnings that make a card untrustworthy (and ``--strict``), and the
trust block's numbers on a synthetic fit with a known covariance."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
import yaml

from analysis.scaling_fit import ScalingLawFit
from mutransfer.card.apply import apply_card
from mutransfer.card.build import load_card, save_card
from mutransfer.card.schema import schedule_config, validate_card
from mutransfer.card.target import build_target_model
from mutransfer.card.trust import MEASURED_DEPTH_MOVE, card_warnings, trust_block
from mutransfer_cli import main

PROXY = ["--preset", "gpt-tiny", "--lr", "0.01", "--proxy-batch-tokens", "1024", "--proxy-tokens", "2e6"]
FIT: dict[str, Any] = {
    "kind": "scaling",
    "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.3, "tokens": -0.1},
           "ci": {"batch_tokens": [0.25, 0.35], "tokens": [-0.15, -0.05]}},
    "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}, "ci": {"tokens": [0.35, 0.45]}},
    "measured": {"tokens": [1e6, 8e6], "batch_tokens": [512, 8192], "seq_len": 64},
}


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A clean card for gpt-tiny at width 256 (hidden matrices 256 × 256)."""
    out = tmp_path_factory.mktemp("good") / "card.yaml"
    assert main(["transfer", *PROXY, "--set", "width=256", "--tokens", "1e6", "--batch-size", "16",
                 "--weight-decay", "0.1", "--out", str(out)]) == 0
    return load_card(out)


def _group(card: dict[str, Any], shape: list[int]) -> int:
    return next(i for i, g in enumerate(card["param_groups"]) if g["shape"] == shape)


# (what the ticket found exported with exit 0, how to break the card, the field the error names)
CRAFTED = {
    "total_steps 1e30": (lambda c: c["schedule"].update(total_steps=10**30), "schedule.total_steps"),
    "num_layers 1e20": (lambda c: c["target"]["model"].update(depth=10**20), "target.model.depth"),
    "vocab 1e15": (lambda c: c["target"]["model"].update(vocab_size=10**15), "target.model.vocab_size"),
    "width mismatch": (lambda c: c["target"].update(width=512), "target.width"),
    "shape [7, 7]": (lambda c: c["param_groups"][_group(c, [256, 256])].update(shape=[7, 7]), ".shape"),
    "optimizer.lr contradicts": (lambda c: c["optimizer"].update(lr=0.02), "disagrees with optimizer.lr"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
@pytest.mark.parametrize("engine", ["hf", "torchtitan", "megatron"])
def test_export_refuses_each_crafted_card_naming_the_field(case: str, engine: str, good: dict[str, Any],
                                                           tmp_path: Path, capsys) -> None:
    """Before: all three engines exported these with exit 0. After: exit 2 naming the field
    and both values, nothing written."""
    bad = copy.deepcopy(good)
    mutate, words = CRAFTED[case]
    mutate(bad)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    out = tmp_path / "out.json"
    code, err = run(["export", str(path), "--to", engine, "--out", str(out)], capsys)
    assert code == 2 and words in err and "card field" in err, err
    assert not out.exists()


def test_each_consistency_error_names_both_values(good: dict[str, Any]) -> None:
    bad = copy.deepcopy(good)
    i = _group(bad, [256, 256])
    name = bad["param_groups"][i]["name"]
    bad["param_groups"][i]["shape"] = [7, 7]
    with pytest.raises(ValueError, match=rf"param_groups\[{i}\] \({name}\)\.shape: .*\[256, 256\].*\[7, 7\]"):
        validate_card(bad)
    bad = copy.deepcopy(good)
    bad["target"]["width"] = 512
    with pytest.raises(ValueError, match=r"target\.width: disagrees with target\.model \(width 256\), "
                       r"got 512"):
        validate_card(bad)
    bad = copy.deepcopy(good)
    bad["optimizer"]["lr"] = 0.02
    g = bad["param_groups"][0]
    with pytest.raises(ValueError, match=rf"param_groups\[0\] \({g['name']}\)\.lr: disagrees with "
                       rf"optimizer\.lr 0\.02 × lr_mult .*got {g['lr']!r}"):
        validate_card(bad)
    bad = copy.deepcopy(good)
    bad["schedule"]["total_steps"] = 10**30
    with pytest.raises(ValueError, match=r"schedule\.total_steps: must be <= 1,000,000,000"):
        save_card(bad, "/nonexistent/never.yaml")  # refused before any write
    with pytest.raises(ValueError, match="schedule.total_steps"):  # apply validates too
        apply_card(build_target_model(good), bad)
    # a group lr off by more than 1e-9 relative is refused; within it, accepted
    near = copy.deepcopy(good)
    near["param_groups"][0]["lr"] *= 1 + 1e-12
    validate_card(near)
    near["param_groups"][0]["lr"] *= 1 + 1e-6
    with pytest.raises(ValueError, match="disagrees with optimizer.lr"):
        validate_card(near)


def test_an_hf_card_is_checked_against_its_own_config(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    cfg = {"model_type": "llama", "vocab_size": 128, "hidden_size": 128, "intermediate_size": 256,
           "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 16,
           "max_position_embeddings": 64, "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--model", f"hf:{path}", "--lr", "0.01", "--tokens", "1280", "--batch-size", "8",
                 "--seq-len", "16", "--base-depth", "2", "--base-width", "64", "--allow-vocab-change",
                 "--out", str(out)]) == 0
    card = load_card(out)
    for key, value, words in (("width", 256, "target.width: disagrees with target.model.config (width 128)"),
                              ("depth", 3, "target.depth: disagrees with target.model.config (depth 2)")):
        bad = copy.deepcopy(card)
        bad["target"][key] = value
        with pytest.raises(ValueError, match=re_escape(words)):
            validate_card(bad)
    bad = copy.deepcopy(card)
    bad["target"]["model"]["config"]["vocab_size"] = 10**15
    with pytest.raises(ValueError, match=r"target\.model\.config \(vocab_size\): must be <= 16,777,216"):
        validate_card(bad)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# ---- a bound is never a value -----------------------------------------------------------


def _fit(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({**FIT, **extra}))
    return path


EDGED = {"budgets": [{"tokens": 1e6, "edge": "low"}, {"tokens": 2e6, "edge": ""},
                     {"tokens": 4e6, "edge": ""}, {"tokens": 8e6, "edge": ""}]}


def test_batch_rule_fit_refuses_an_edge_batch_unless_accepted_and_recorded(tmp_path: Path, capsys) -> None:
    """Before: --batch-rule fit took a B* flagged at its grid's edge as the card's batch.
    After: exit 2 naming where the fit flags it; --accept-edge batch takes it, records it and warns."""
    fit = _fit(tmp_path, **EDGED)
    out = tmp_path / "card.yaml"
    base = ["transfer", *PROXY, "--set", "width=256", "--tokens", "4e6", "--scaling-fit", str(fit),
            "--batch-rule", "fit", "--out", str(out)]
    code, err = run(base, capsys)
    assert code == 2 and "budgets[0].edge 'low' (budget 1e+06 tokens)" in err and "--accept-edge batch" in err
    assert not out.exists()
    code, err = run([*base, "--accept-edge", "batch"], capsys)
    assert code == 0, err
    card = load_card(out)
    assert card["projected"]["accepted_edges"] == {"batch": ["budgets[0].edge 'low' (budget 1e+06 tokens)"]}
    assert any("--accept-edge batch" in w for w in card["projected"]["warnings"])
    b_fit = 2.0 * 4e6**0.4  # the fitted B*(D) in tokens, rounded to a multiple of 8 sequences of 64
    # 13.7 sequences in an interval of [13, 14] whole sequences: no multiple of 8 or 4 inside it,
    # so the multiple of 2 nearest it (16, the nearest multiple of 8, lay outside)
    assert card["batch"]["sequences"] == 14 and round(b_fit / 64 / 8) * 8 == 16
    # auto keeps today's rule: 1 edge of 4 budgets is not in doubt, so the fitted batch, no refusal
    code, err = run([*base[:-4], "--out", str(out)], capsys)
    assert code == 0, err


def test_batch_rule_fit_refuses_an_lr_law_on_bounds(tmp_path: Path, capsys) -> None:
    brk = {"bracketing": [{"tokens": 1e6, "batch": {"bracketed": True, "edge": "", "opt": 512},
                           "lr": {"bracketed": True, "edge_cells": 0, "edges": []}},
                          {"tokens": 8e6, "batch": {"bracketed": True, "edge": "", "opt": 2048},
                           "lr": {"bracketed": False, "edge_cells": 1,
                                  "edges": [{"batch_tokens": 8192, "edge": "high"}]}}],
           "bracketed": {"batch": True, "lr": False}}
    fit = _fit(tmp_path, **brk)
    out = tmp_path / "card.yaml"
    base = ["transfer", *PROXY, "--set", "width=256", "--tokens", "4e6", "--scaling-fit", str(fit),
            "--batch-rule", "fit", "--out", str(out)]
    code, err = run(base, capsys)
    assert code == 2 and "bracketing[1].lr.bracketed false" in err and "--accept-edge lr" in err
    code, err = run([*base, "--accept-edge", "lr"], capsys)
    assert code == 0, err
    assert load_card(out)["projected"]["accepted_edges"] == {"lr": ["bracketing[1].lr.bracketed false "
                                                                    "(budget 8e+06 tokens)"]}
    # under auto the same LR law is a warning, not a refusal
    code, err = run([*base[:-4], "--out", str(out)], capsys)
    assert code == 0 and "fitted LR law eta*(B, D) rests on bounds" in err


@pytest.mark.parametrize(("flags", "words"), [
    (["--batch-rule", "auto", "--accept-edge", "batch"], ["--accept-edge batch", "--batch-rule auto"]),
    (["--batch-rule", "published", "--accept-edge", "lr"], ["--accept-edge lr", "--batch-rule published"]),
    (["--batch-rule", "fit", "--accept-edge", "batch", "--batch-size", "16"],
     ["--accept-edge batch", "--batch-size"]),
])
def test_contradicting_flags_exit_2_naming_both(flags: list[str], words: list[str], tmp_path: Path,
                                                capsys) -> None:
    out = tmp_path / "card.yaml"
    code, err = run(["transfer", *PROXY, "--tokens", "4e6", "--scaling-fit", str(_fit(tmp_path, **EDGED)),
                     *flags, "--out", str(out)], capsys)
    assert code == 2 and all(w in err for w in words), err
    assert not out.exists()


# ---- warnings and --strict --------------------------------------------------------------


def _audit(tmp_path: Path, passed: bool) -> Path:
    row = {"method": "ours", "axis": "tokens", "pred_lr": 0.011, "meas_lr": 0.01, "lr_ratio": 1.1,
           "pred_batch_tokens": 1024, "meas_batch_tokens": 1024, "batch_ratio": 1.0,
           "loss_gap": 0.001 if passed else 0.005}
    path = tmp_path / f"audit_{passed}.json"
    path.write_text(json.dumps([row]))
    return path


def _optimum_fit(tmp_path: Path) -> Path:
    path = tmp_path / "opt.json"
    path.write_text(json.dumps({"x": "lr", "fits": [
        {"group": {"width": 32}, "x_opt": 0.01, "ci": [0.008, 0.0125]},
        {"group": {"width": 64}, "x_opt": 0.01, "ci": [0.008, 0.0125]}]}))
    return path


def test_each_warning_fires_on_its_input_and_not_on_a_clean_one(tmp_path: Path, capsys) -> None:
    out = tmp_path / "card.yaml"
    opt = str(_optimum_fit(tmp_path))
    base = ["transfer", "--fit", opt, "--preset", "gpt-tiny", "--base-width", "32", "--tokens", "1e6",
            "--batch-size", "16", "--weight-decay", "0.1", "--out", str(out)]
    code, err = run([*base, "--set", "width=64", "--audit", str(_audit(tmp_path, True))], capsys)
    assert code == 0 and "warning" not in err, err  # clean: the widest measured width, audit passed
    assert load_card(out)["projected"]["warnings"] == []
    cases = [
        (["--set", "width=512"], "the target width 512 is 8× beyond the widest measured width 64"),
        (["--set", "width=64", "--audit", str(_audit(tmp_path, False))], "the held-out audit failed"),
        (["--set", "width=64", "--set", "seq_len=128"], "the context changes from the proxy's 64 to the "
         "target's 128"),
        (["--set", "width=64", "--set", "vocab_size=512", "--allow-vocab-change"],
         "the vocabulary changes from the proxy's 256 to the target's 512"),
    ]
    for flags, words in cases:
        code, err = run([*base, *flags], capsys)
        assert code == 0 and f"warning: {words}" in err, (flags, err)
        card = load_card(out)
        assert any(words in w for w in card["projected"]["warnings"]) and card["trust"]["warnings"] >= 1
        out.unlink()
        code, err = run([*base, *flags, "--strict"], capsys)
        assert code == 1 and "--strict" in err and f"warning: {words}" in err, err
        assert not out.exists() and "no card was written" in err  # a card not stood behind is not left
    passed = ["--set", "width=64", "--audit", str(_audit(tmp_path, True))]
    code, err = run([*base, *passed, "--strict"], capsys)
    assert code == 0 and out.exists(), err
    # no audit: no warning, but an objection (nothing measured the projection held out)
    out.unlink()
    code, err = run([*base, "--set", "width=64", "--strict"], capsys)
    assert code == 1 and "objection: the held-out audit is missing" in err and not out.exists(), err
    assert "transfer: warning:" not in err


def test_tokenizer_and_batch_split_warnings_on_crafted_cards(good: dict[str, Any]) -> None:
    assert card_warnings(good) == []
    card = copy.deepcopy(good)
    card["source"]["tokenizer"], card["target"]["tokenizer"] = "bytes", "gpt2"
    assert card_warnings(card) == ["the tokenizer changes from the proxy's 'bytes' to the target's 'gpt2': "
                                   "the token statistics the LR was tuned on differ"]
    card = copy.deepcopy(good)
    card["batch"].update(sequences=12, dp_size=8, micro_batch=1)  # a hand-made card: 12 over 8 ranks
    assert card_warnings(card) == ["the batch of 12 sequences does not split across dp_size 8 × micro_batch "
                                   "1: each step would give the ranks unequal shares"]


def test_depth_warning_fires_beyond_the_measured_depth_change_and_names_its_measurement(
        good: dict[str, Any]) -> None:
    base, m = good["source"]["base_depth"], MEASURED_DEPTH_MOVE
    card = copy.deepcopy(good)
    card["target"]["depth"] = base * m["depth_ratio"]  # exactly the measured change: no warning
    assert card_warnings(card) == []
    card["target"]["depth"] = base * m["depth_ratio"] * 2
    (w,) = card_warnings(card)
    r = m["depth_ratio"]
    assert w.startswith(f"the target depth {base * r * 2} is {r * 2}× the proxy's {base}, beyond the "
                        f"largest depth change measured (depth ×{r}")
    assert f"{m['shift_octaves']:+.2f} octave" in w and m["source"] in w and "nan" not in w


# ---- the trust block --------------------------------------------------------------------


def test_trust_block_numbers_from_a_known_covariance(tmp_path: Path, capsys) -> None:
    """Known covariance of (ln c, a, b) = diag(0, 0.05², 0.02²): with the batch unchanged
    (x = (0, 0, ln D_t/D_p)) the LR ratio's 90% interval is exp(±z·0.02·ln 50), its factor
    exp(2z·0.02·ln 50); a budget at 4× the largest measured (3.2e7) leaves ln(1e8 / 3.2e7)."""
    fit = _fit(tmp_path, lr={**FIT["lr"], "cov_log": [[0, 0, 0], [0, 0.05**2, 0], [0, 0, 0.02**2]]},
               batch={**FIT["batch"], "cov_log": [[0.04, 0.0], [0.0, 0.01**2]]}, level=0.9)
    out = tmp_path / "card.yaml"
    code, err = run(["transfer", *PROXY, "--set", "width=256", "--tokens", "1e8", "--batch-size", "16",
                     "--scaling-fit", str(fit), "--out", str(out)], capsys)
    assert code == 0, err
    card = load_card(out)
    assert list(card)[:2] == ["schema", "trust"]  # the card leads with it
    z = NormalDist().inv_cdf(0.95)
    trust = card["trust"]
    # the data's interval, then weighed with the published laws' prior (sd_p): 1/sd² adds
    sd_p = card["projected"]["lr"]["prior"]["sd_log"]

    def post(sd_d: float) -> float:
        return math.exp(2 * z / math.sqrt(1 / sd_d**2 + 1 / sd_p**2))

    data = card["projected"]["lr"]["data"]
    assert data["hi"] / data["lo"] == pytest.approx(math.exp(2 * z * 0.02 * math.log(1e8 / 2e6)), rel=1e-9)
    before = post(0.02 * math.log(1e8 / 2e6))
    after = post(0.02 * math.log(1e8 / 3.2e7))
    assert trust["intervals"]["lr"]["factor"] == pytest.approx(before, rel=1e-9)
    best = trust["narrows_most"]
    assert best["measurement"].startswith("a budget at 4× the largest measured (3.2e+07 tokens)")
    assert best["lr_factor"] == pytest.approx(after, rel=1e-9)
    assert f"narrows the LR interval from {before:.3g}× to about {after:.3g}×" in trust["summary"][-1]
    assert trust["intervals"]["tokens"]["factor"] == 1.0
    assert "narrows the LR interval" in err
    # B*(D)'s interval at the target and at D_t / 4, from var = x'Cx with x = (1, ln D)
    laws = ScalingLawFit.from_dict(json.loads(fit.read_text()))
    proj = {"lr": {"value": 0.01, "lo": 0.005, "hi": 0.02, "level": 0.9},
            "batch_tokens": {"value": 2e4, "lo": 1e4, "hi": 4e4}}
    tb = trust_block(projected=proj, laws=laws, proxy_lr_interval=[0.005, 0.02], proxy_lr=0.01,
                     proxy_batch_tokens=1024, proxy_tokens=2e6, batch_tokens=2e4, tokens=1e9, steps=50_000,
                     n_warnings=0)
    budget = tb["options"][0]
    ln_d = math.log(1e9 / 4)
    assert budget["batch_factor"] == pytest.approx(math.exp(2 * z * math.sqrt(0.04 + ln_d**2 * 1e-4)))
    # the proxy's own factor (4×) stays; the law's shrinks with the distance. The law is
    # evaluated where the plan evaluates it: at 2e4 tokens held at the largest measured batch
    assert laws.lr_batch(2e4, 1e9) == 8192
    x_b, x_d = math.log(8192 / 1024), math.log(1e9 / 3.2e7)
    law = math.exp(2 * z * math.sqrt(x_b**2 * 0.05**2 + x_d**2 * 0.02**2))
    assert budget["lr_factor"] == pytest.approx(4 * law, rel=1e-9)
    assert tb["intervals"]["steps"]["lo"] == math.ceil(1e9 / 4e4)


def test_an_older_cards_min_lr_ratio_is_read_as_lr_floor(good: dict[str, Any]) -> None:
    """The schedule's LR floor is ``lr_floor``; a card written with the old name
    ``min_lr_ratio`` validates to the same schedule, and both names disagreeing is an error
    naming them."""
    old = copy.deepcopy(good)
    old["schedule"].pop("lr_floor", None)
    old["schedule"]["min_lr_ratio"] = 0.1
    card = validate_card(old)
    assert card["schedule"]["lr_floor"] == 0.1 and "min_lr_ratio" not in card["schedule"]
    assert old["schedule"]["min_lr_ratio"] == 0.1 and "lr_floor" not in old["schedule"]  # input untouched
    assert schedule_config(card["schedule"]).lr_floor == 0.1
    both = copy.deepcopy(old)
    both["schedule"]["lr_floor"] = 0.2
    with pytest.raises(ValueError, match=r"schedule\.min_lr_ratio: is the old name of schedule\.lr_floor"):
        validate_card(both)


# ---- hand edits of a card: ranges, cross-checks, unknown and repeated keys, sizes --------------

@pytest.fixture(scope="module")
def transfer_card_text(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("card") / "card.yaml"
    assert main(["transfer", "--lr", "0.01", "--tokens", "1e8", "--batch-size", "8", "--target-preset",
                 "gpt-small", "--out", str(out)]) == 0
    return out.read_text()


def _in(section: str, old: str, new: str) -> Any:
    """An edit of the first ``old`` inside top-level ``section``."""
    def edit(text: str) -> str:
        i = text.index(f"\n{section}:\n")
        return text[:i] + text[i:].replace(old, new, 1)
    return edit


@pytest.mark.parametrize(("edit", "needle"), [
    (_in("forward_multipliers", "    scale: 0.5", "    scale: 1.0e+300"),
     "card field forward_multipliers.hooks[0].scale: must be <= 1e+12, got 1e+300"),
    (_in("optimizer", "  eps: 1.0e-08", "  eps: 1.0e+300"), "card field optimizer.eps: must be <= 1"),
    (_in("optimizer", "  weight_decay: 0.004", "  weight_decay: 1.0e+300"),
     "card field optimizer.weight_decay: must be <= 100"),
    (_in("parametrization", "    output: 1.0", "    output: 2.0"),
     "card field forward_multipliers.hooks[0] (lm_head).scale: disagrees with "
     "parametrization.multipliers.output 2.0 × the mup output rule at width 128 / base 64 = 1.0, got 0.5"),
    (lambda t: t.replace("optimizer:\n  name: adamw\n", "optimizer:\n  name: adamw\n  wieght_decay: 0.1\n"),
     "card field optimizer.wieght_decay: is not a field of optimizer"),
    (_in("parametrization", "    output: 1.0", "    output: 1.0\n    outptu: 3.0"),
     "card field parametrization.multipliers.outptu: is not a field of parametrization.multipliers"),
    (lambda t: t.replace("optimizer:\n  name: adamw\n  lr: ", "optimizer:\n  name: adamw\n  lr: 0.5\n  lr: "),
     "holds the key 'lr' twice in one mapping (line "),
])
def test_a_hand_edited_transfer_card_is_refused_naming_the_field(edit, needle, transfer_card_text,
                                                                  tmp_path) -> None:
    assert load_card_ok(transfer_card_text, tmp_path)
    bad = tmp_path / "bad.yaml"
    text = edit(transfer_card_text)
    assert text != transfer_card_text
    bad.write_text(text)
    with pytest.raises(ValueError) as e:
        load_card(bad)
    assert needle in str(e.value) and len(str(e.value).splitlines()) == 1, str(e.value)


@pytest.mark.parametrize("path", ["target", "parametrization", "schedule", "batch", "param_groups.0",
                                  "forward_multipliers", "audit", "trust", "trust.intervals.lr", "provenance",
                                  "optimizer", "parametrization.multipliers", "forward_multipliers.hooks.0"])
def test_an_unknown_key_is_refused_in_every_section_whose_keys_are_known(path, transfer_card_text,
                                                                          tmp_path) -> None:
    import yaml

    card = yaml.safe_load(transfer_card_text)
    node = card
    for key in path.split("."):
        node = node[int(key)] if isinstance(node, list) else node[key]
    node["misspelt_fieldx"] = 1  # a misspelt name would otherwise be ignored
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(card, sort_keys=False))
    shown = path.replace(".0", "[0]")
    with pytest.raises(ValueError) as e:
        load_card(bad)
    assert f"card field {shown}.misspelt_fieldx: is not a field of {shown}" in str(e.value), str(e.value)
    assert len(str(e.value).splitlines()) == 1


def load_card_ok(text: str, tmp_path: Path) -> bool:
    (tmp_path / "ok.yaml").write_text(text)
    return isinstance(load_card(tmp_path / "ok.yaml"), dict)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_big_flat_list_is_refused_in_milliseconds_for_its_size(suffix, transfer_card_text,
                                                                  tmp_path) -> None:
    import time

    from mutransfer.card.build import MAX_CARD_BYTES

    # 1.9 M numbers in one list, under the byte cap (PyYAML took 35 s and 1.5 GB to call it "aliases")
    body = ",".join("1" for _ in range(1_900_000))
    bad = tmp_path / f"big{suffix}"
    if suffix == ".json":
        doc = json.dumps(yaml.safe_load(transfer_card_text))
        bad.write_text(doc[:-1] + f', "x": [{body}]}}')
    else:
        bad.write_text(transfer_card_text + f"extra: [{body}]\n")
    assert bad.stat().st_size < MAX_CARD_BYTES
    t0 = time.process_time()
    with pytest.raises(ValueError, match=r"holds 1,9\d\d,\d{3} list items and lines, above the limit "
                                         r"of 500,000"):
        load_card(bad)
    assert time.process_time() - t0 < 0.5
