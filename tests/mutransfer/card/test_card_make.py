"""mutransfer.card.build.assemble_card: the card assembled from resolved values (plan ->
build -> warnings -> trust block -> validated once). ``mutransfer transfer`` makes its card
through make_card, which resolves the rules and calls it, so the card it writes is the
assembly's for the same inputs (the oracle below)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mutransfer.card.build import load_card, save_card
from mutransfer.card.plan import read_scaling_fit
from mutransfer.card.target import resolve_target, transfer_builder
from mutransfer.card.trust import card_warnings
from mutransfer.models.presets import get_preset
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer_cli import main

FIT: dict[str, Any] = {
    "kind": "scaling",
    "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.3, "tokens": -0.1},
           "ci": {"batch_tokens": [0.25, 0.35], "tokens": [-0.15, -0.05]}},
    "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}, "ci": {"tokens": [0.35, 0.45]}},
    "tau": {"value": 0.2, "ci": [0.15, 0.3]},
    "warmup": {"per_param": 1.0, "fraction": 0.01, "max_fraction": 0.1, "min_steps": 1},
    "decay_fraction": {"value": 0.15, "ci": [0.1, 0.2]},
    "measured": {"tokens": [1e6, 8e6], "batch_tokens": [512, 8192], "seq_len": 64},
    "n_rows": 120, "n_in_band": 40,
}


def _undated(card: dict[str, Any]) -> dict[str, Any]:
    return {**card, "provenance": {k: v for k, v in card["provenance"].items() if k != "date"}}


@pytest.mark.parametrize("tokens", [2e8, 4e6])  # past the fit's limit (warnings), and inside it
def test_transfer_writes_make_cards_card(assemble_kw, tmp_path: Path, tokens: float,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(FIT))
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--preset", "gpt-tiny", "--lr", "0.01", "--proxy-batch-tokens", "1024",
                 "--proxy-tokens", "2e6", "--set", "width=256", "--tokens", f"{tokens:g}",
                 "--scaling-fit", str(fit), "--extrapolation-limit", "10", "--out", str(out)]) == 0
    written = load_card(out)
    proxy = get_preset("gpt-tiny")
    target = resolve_target(proxy, overrides={"width": 256}, proxy_preset="gpt-tiny")
    pz = Parametrization(transfer_builder(target, proxy), width=256, base_width=proxy.width, kind="mup")
    made = assemble_kw(pz, target, proxy_lr=0.01, proxy_batch_tokens=1024, proxy_tokens=2e6,
                     seq_len=proxy.seq_len, seq_len_from="the target model's seq_len", tokens=tokens,
                     laws=read_scaling_fit(str(fit)), extrapolation_limit=10.0,
                     source=written["source"], provenance={"study": None, "storage": None})
    assert _undated(written) == _undated(made.card)
    assert list(written)[:2] == ["schema", "trust"]  # trust first, as make_card orders it
    # the warnings the CLI printed are the card's, and the card's own checks are among them
    err = capsys.readouterr().err
    printed = [ln.split("warning: ", 1)[1] for ln in err.splitlines() if "transfer: warning: " in ln]
    assert printed == made.warnings == written["projected"]["warnings"]
    assert set(card_warnings(made.card)) <= set(made.warnings)
    assert made.card["trust"]["warnings"] == len(made.warnings)
    if tokens > 8e6 * 10:  # past the fit's measured budgets by more than the limit
        assert made.warnings
    assert (made.width, made.tokens, made.n_params) == (256, tokens, written["target"]["n_params"])
    assert made.plan.lr == written["optimizer"]["lr"]
    save_card(made.card, tmp_path / "again.yaml")  # writes as it validated
    assert _undated(load_card(tmp_path / "again.yaml")) == _undated(made.card)


def test_make_card_takes_one_budget(assemble_kw) -> None:
    proxy = get_preset("gpt-tiny")
    target = resolve_target(proxy, overrides={"width": 128}, proxy_preset="gpt-tiny")
    pz = Parametrization(transfer_builder(target, proxy), width=128, base_width=64, kind="mup")
    for kw in ({}, {"tokens": 1e6, "tokens_per_param": 20.0}):
        with pytest.raises(ValueError, match="tokens or tokens_per_param"):
            assemble_kw(pz, target, proxy_lr=0.01, seq_len=64, batch_sequences=8, **kw)
    made = assemble_kw(pz, target, proxy_lr=0.01, seq_len=64, batch_sequences=8, tokens_per_param=20.0)
    assert made.tokens == 20.0 * made.n_params == made.card["target"]["tokens"]


def test_validation_fills_the_card_defaults_once(tmp_path: Path) -> None:
    """A card may leave out the optimizer's name, betas, eps, weight decay and wd_mode, the
    schedule's warmup and LR floor, and each group's optimizer and eps: validate_card fills
    them (mutransfer.card.schema.DEFAULTS), a group's eps from the optimizer's, so apply and
    every export read the same values (apply once took 1e-8 for a group's missing eps where
    the hf export took the optimizer's)."""
    import yaml

    from mutransfer.card.apply import apply_card
    from mutransfer.card.export import export_card
    from mutransfer.card.schema import DEFAULTS, schedule_config, validate_card
    from mutransfer.models.gpt import GPT

    full = load_card(Path(__file__).resolve().parents[2] / "data" / "cards" / "card_v1.yaml")
    sparse = yaml.safe_load(yaml.safe_dump(full))
    sparse["optimizer"] = {"lr": full["optimizer"]["lr"], "eps": 3e-8}
    sparse["schedule"] = {k: v for k, v in full["schedule"].items() if k != "warmup_steps"}
    for g in sparse["param_groups"]:
        del g["eps"], g["optimizer"]
    card = validate_card(sparse)
    assert card["optimizer"] == {**DEFAULTS["optimizer"], "lr": full["optimizer"]["lr"], "eps": 3e-8}
    assert {(g["eps"], g["optimizer"]) for g in card["param_groups"]} == {(3e-8, "adamw")}
    assert (card["schedule"]["warmup_steps"], card["schedule"]["lr_floor"]) == (0, 0.0)
    assert schedule_config(sparse["schedule"]) == schedule_config(card["schedule"])
    assert validate_card(card) == card  # filled once: a second pass changes nothing
    applied = apply_card(GPT(get_preset("gpt-tiny").replace(width=128)), sparse)
    assert {g["eps"] for g in applied.optimizer.param_groups} == {3e-8}
    hf = export_card(sparse, "hf")
    assert hf["training_arguments"]["adam_epsilon"] == 3e-8
    assert {g["eps"] for g in hf["param_groups"]} == {3e-8}
