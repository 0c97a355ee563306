"""The tuned proxy reaches the card: `mutransfer sweep multipliers` writes the
best trial's config, and `mutransfer transfer --proxy-config` carries its forward and per-role
LR multipliers, Adam betas/eps and weight-decay timescale into the card. Oracle: a card made
for the proxy's own shape and budget rebuilds the trainer's optimizer groups and forward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from mutransfer.card.apply import apply_card
from mutransfer.card.build import load_card
from mutransfer.models.gpt import GPT
from mutransfer.training.config import TrainConfig
from mutransfer.training.trainer import Trainer
from mutransfer_cli import main

TUNED = {"preset": "gpt-tiny", "parametrization": "mup", "width": 32, "base_width": 32, "seq_len": 32,
         "steps": 40, "batch_size": 4, "lr": 0.02, "lr_mult_input": 6.5, "lr_mult_output": 0.5,
         "lr_mult_vector": 1.75, "input_mult": 1.3, "output_mult": 1.4, "attn_mult": 1.1,
         "readout_init": "zero", "weight_decay": 0.01, "beta2": 0.99, "eps": 2e-10,
         "data_max_bytes": 200_000, "eval_every": 0, "eval_sequences": 8}


def per_parameter(groups: list[dict[str, Any]]) -> dict[str, tuple[float, float, float]]:
    return {n: (g["lr"], g["weight_decay"], g["eps"]) for g in groups for n in g["names"]}


@pytest.mark.parametrize("wd_mode, readout_init, width", [("independent", "zero", 32),
                                                          ("coupled", "fan_in", 64)])
def test_card_of_the_tuned_proxy_rebuilds_the_trainers_groups_and_forward(
        wd_mode: str, readout_init: str, width: int, tmp_path: Path) -> None:
    """Also at a proxy wider than its base width, where fan_in's readout differs from constant."""
    tuned = {**TUNED, "wd_mode": wd_mode, "readout_init": readout_init, "width": width}
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(tuned))
    cfg = TrainConfig.from_overrides(None, tuned)
    trainer = Trainer(cfg)
    expected = per_parameter(trainer.opt.param_groups)
    run = cfg.run
    tokens = run.steps * run.batch_size * trainer.gcfg.seq_len  # the proxy's own budget: same tau, same wd
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--proxy-config", str(path), "--tokens", str(tokens),
                 "--batch-size", str(run.batch_size), "--schedule", "constant", "--out", str(out)]) == 0
    card = load_card(out)
    assert card["optimizer"]["lr"] == pytest.approx(0.02, rel=1e-12)  # the proxy's LR is the base LR
    assert card["optimizer"]["betas"] == [0.9, 0.99] and card["optimizer"]["eps"] == 2e-10
    assert card["optimizer"]["weight_decay"] == pytest.approx(0.01, rel=1e-9)
    assert card["optimizer"]["wd_mode"] == wd_mode
    assert card["parametrization"]["lr_mults"] == {"input": 6.5, "output": 0.5, "vector": 1.75}
    assert card["parametrization"]["multipliers"]["input"] == 1.3
    assert card["source"]["proxy_config"] == str(path)

    torch.manual_seed(run.seed)
    fresh = GPT(trainer.gcfg)
    got = per_parameter(apply_card(fresh, card).param_groups)
    assert got.keys() == expected.keys()
    roles = {g["name"]: g["role"] for g in card["param_groups"]}
    assert {roles[n] for n in got} >= {"input", "hidden", "output", "vector"}
    for name, (lr, wd, eps) in got.items():
        assert lr == pytest.approx(expected[name][0], rel=1e-12), name
        assert wd == pytest.approx(expected[name][1], rel=1e-9), name
        assert eps == pytest.approx(expected[name][2], rel=1e-12), name
    x = torch.randint(0, trainer.gcfg.vocab_size, (2, 16))
    proxy = trainer.raw_model.eval()
    fresh.eval()
    for (na, pa), (nb, pb) in zip(fresh.named_parameters(), proxy.named_parameters(), strict=True):
        assert na == nb and torch.equal(pa, pb), na
    with torch.no_grad():
        assert torch.equal(fresh(x)[0], proxy(x)[0])


def test_tuned_tau_moves_the_weight_decay_with_batch_and_budget(tmp_path: Path) -> None:
    """Independent decay keeps tau = B / (lambda D): 4x the tokens at 2x the batch halves lambda."""
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({**TUNED, "wd_mode": "independent"}))
    out = tmp_path / "card.yaml"
    tokens = 4 * TUNED["steps"] * TUNED["batch_size"] * TUNED["seq_len"]
    assert main(["transfer", "--proxy-config", str(path), "--tokens", str(tokens), "--set", "width=128",
                 "--batch-size", str(2 * TUNED["batch_size"]), "--out", str(out)]) == 0
    card = load_card(out)
    assert card["optimizer"]["weight_decay"] == pytest.approx(0.005, rel=1e-9)
    assert card["projected"]["tau"]["value"] == pytest.approx(1 / (0.01 * 40), rel=1e-9)


@pytest.mark.parametrize("flags, words", [
    (["--preset", "gpt-small"], ["--preset gpt-small", "gpt-tiny"]),
    (["--parametrization", "completep"], ["--parametrization completep", "mup"]),
    (["--wd-mode", "coupled"], ["--wd-mode coupled", "independent"]),
])
def test_a_flag_that_contradicts_the_proxy_config_exits_2(flags: list[str], words: list[str],
                                                          tmp_path: Path, capsys) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({**TUNED, "wd_mode": "independent"}))
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--proxy-config", str(path), "--tokens", "1e6", *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not out.exists()


def test_a_bad_proxy_config_exits_2_naming_the_field(tmp_path: Path, capsys) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({**TUNED, "lr_mult_input": -1.0}))
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--proxy-config", str(path), "--tokens", "1e6", "--out", str(out)]) == 2
    assert "lr_mult_input" in capsys.readouterr().err and not out.exists()


def test_sweep_multipliers_writes_the_best_trials_config(tmp_path: Path, capsys) -> None:
    import optuna

    out = tmp_path / "mult"
    assert main(["sweep", "multipliers", "--preset", "gpt-tiny", "--width", "32", "--steps", "4",
                 "--batch-size", "4", "--trials", "3", "--set", "seq_len=32", "--set", "eval_every=0",
                 "--set", "eval_sequences=8", "--set", "data_max_bytes=200000", "--workers", "1",
                 "--out", str(out), "--quiet"]) == 0
    best = yaml.safe_load((out / "best.yaml").read_text())
    study = optuna.load_study(study_name="multipliers",
                              storage=optuna.storages.JournalStorage(
                                  optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal"))))
    done = [t for t in study.trials if t.value is not None]
    assert len(done) == 3
    winner = min(done, key=lambda t: t.value)
    for key, value in winner.params.items():  # the searched values of the lowest-loss trial
        assert best[key] == pytest.approx(value, rel=1e-12), key
    from sweeps.spec_kinds import MULTIPLIER_SEARCH_SPACE

    assert set(winner.params) == set(MULTIPLIER_SEARCH_SPACE)
    assert best["parametrization"] == "mup" and best["wd_mode"] == "independent"
    assert best["width"] == best["base_width"] == 32 and "out_dir" not in best
    TrainConfig.from_overrides(None, best)  # a valid training config as it stands


@pytest.mark.parametrize("flags, words", [
    (["--sampler", "grid"], ["grid"]),
    (["--parametrization", "sp"], ["sp"]),
])
def test_sweep_multipliers_refuses_a_grid_or_sp(flags: list[str], words: list[str], tmp_path: Path,
                                               capsys) -> None:
    out = tmp_path / "mult"
    assert main(["sweep", "multipliers", "--preset", "gpt-tiny", "--steps", "4", *flags,
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not (out / "best.yaml").exists()


def test_the_documented_spec_searches_what_the_verb_searches() -> None:
    from sweeps.spec import load_spec
    from sweeps.spec_kinds import MULTIPLIER_SEARCH_SPACE

    spec = load_spec(Path(__file__).parents[3] / "docs" / "specs" / "multipliers.yaml")
    assert spec.search_space.keys() == MULTIPLIER_SEARCH_SPACE.keys()
    for key, (lo, hi) in MULTIPLIER_SEARCH_SPACE.items():
        assert spec.search_space[key] == (pytest.approx(lo), pytest.approx(hi)), key


def _sweep_table(path: Path, **extra: Any) -> Path:
    """A synthetic μP LR sweep (optimum 2^-6.6 at every width) whose rows carry ``extra``
    (a value, or a function of the width) as columns, as the trainer's rows do."""
    import numpy as np
    import pandas as pd

    rows = []
    for width in (32, 64, 128):
        for log2_lr in range(-10, -3):
            row = {"width": width, "lr": 2.0**log2_lr, "seed": 0, "parametrization": "mup",
                   "diverged": False, "batch_size": 16, "steps": 100,
                   "loss": 3.0 - 0.1 * np.log2(width) + 0.05 * (log2_lr + 6.6) ** 2}
            row.update({k: v(width) if callable(v) else v for k, v in extra.items()})
            rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_results_tables_proxy_settings_reach_the_card(tmp_path: Path) -> None:
    """A sweep run with --set readout_init=constant (mup's, not the default fan_in),
    output_mult=2, lr_mult_input=4 and independent decay: the card describes that model,
    not the defaults."""
    table = _sweep_table(tmp_path / "results.csv", readout_init="constant", output_mult=2.0,
                         lr_mult_input=4.0, wd_mode="independent", weight_decay=0.01, beta2=0.99)
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--results", str(table), "--preset", "gpt-tiny", "--base-width", "32",
                 "--target-width", "256", "--tokens", str(4 * 100 * 16 * 64), "--batch-size", "32",
                 "--out", str(out)]) == 0
    card = load_card(out)
    assert card["parametrization"]["readout_init"] == "constant"
    assert card["parametrization"]["multipliers"]["output"] == 2.0
    assert card["parametrization"]["lr_mults"]["input"] == 4.0
    assert card["optimizer"]["wd_mode"] == "independent" and card["optimizer"]["betas"] == [0.9, 0.99]
    # tau = B / (lambda D) of the proxy (16 x 64 tokens, 100 steps) kept at 2x the batch, 4x the tokens
    assert card["projected"]["tau"]["value"] == pytest.approx(1 / (0.01 * 100), rel=1e-9)
    assert card["optimizer"]["weight_decay"] == pytest.approx(0.01 * 2 / 4, rel=1e-9)
    assert card["source"]["proxy_settings"]["readout_init"] == "constant"
    embed = next(g for g in card["param_groups"] if g["role"] == "input")
    assert embed["lr_mult"] == pytest.approx(4.0)
    # fan_in (the default, a table without the setting): the readout is stored with std ~
    # sqrt(m) where constant keeps it at 1 (m = 256/32)
    plain = tmp_path / "plain.yaml"
    assert main(["transfer", "--results", str(_sweep_table(tmp_path / "plain.csv")), "--preset", "gpt-tiny",
                 "--base-width", "32", "--target-width", "256", "--tokens", "1e6", "--batch-size", "32",
                 "--out", str(plain)]) == 0
    assert load_card(plain)["parametrization"]["readout_init"] == "fan_in"
    readout = {c: next(g for g in load_card(p)["param_groups"] if g["role"] == "output")
               for c, p in (("constant", out), ("fan_in", plain))}
    assert readout["fan_in"]["init"] != readout["constant"]["init"]


def test_a_table_that_mixes_proxy_settings_exits_2_naming_the_column(tmp_path: Path, capsys) -> None:
    table = _sweep_table(tmp_path / "results.csv", output_mult=lambda w: 1.0 if w < 128 else 2.0)
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--results", str(table), "--preset", "gpt-tiny", "--base-width", "32",
                 "--target-width", "256", "--tokens", "1e6", "--batch-size", "32", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "output_mult" in err and "1.0, 2.0" in err and not out.exists()


def test_a_target_trained_4x_longer_gets_a_quarter_of_the_proxys_weight_decay(tmp_path: Path) -> None:
    """Known answer of the card's rule across run lengths (tau a fraction of the run,
    analysis.tau.TAU_RULE, which benchmarks/wd_horizon.py chose over eta·lambda per step):
    coupled decay, the proxy's batch and LR, 4x its tokens -> lambda / 4 (per step it would
    stay 0.01); its own tokens -> lambda unchanged. The source names the rule."""
    from analysis.tau import TAU_RULE

    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({**TUNED, "wd_mode": "coupled"}))
    proxy_tokens = TUNED["steps"] * TUNED["batch_size"] * TUNED["seq_len"]
    got = {}
    for times in (1, 4):
        out = tmp_path / f"card_{times}.yaml"
        assert main(["transfer", "--proxy-config", str(path), "--tokens", str(times * proxy_tokens),
                     "--set", "width=128", "--batch-size", str(TUNED["batch_size"]), "--out", str(out)]) == 0
        card = load_card(out)
        assert card["optimizer"]["lr"] == pytest.approx(TUNED["lr"], rel=1e-12)  # no laws: the LR stays
        assert card["schedule"]["total_steps"] == times * TUNED["steps"]
        assert TAU_RULE in card["projected"]["weight_decay"]["source"]
        got[times] = card["optimizer"]["weight_decay"]
    assert got[1] == pytest.approx(0.01, rel=1e-9) and got[4] == pytest.approx(0.01 / 4, rel=1e-9)
