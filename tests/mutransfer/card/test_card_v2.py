"""Card v2: the target is a model and a token budget,
the projection comes from the scaling fit, one validator guards every field, and
``apply`` returns a working optimizer and scheduler. The FIT.json here is synthetic (the
contract of ``mutransfer fit scaling``), so the known answers follow from its laws."""

from __future__ import annotations

import copy
import json
import math
from statistics import NormalDist
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
import yaml

from mutransfer.card.apply import apply_card
from mutransfer.card.build import load_card, save_card
from mutransfer.card.schema import SCHEMA_V1, SCHEMA_V2, schedule_config
from mutransfer.card.target import build_target_model
from mutransfer.models.gpt import GPT
from mutransfer.models.presets import get_preset
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.training.schedules import Schedule
from mutransfer_cli import main

DATA = Path(__file__).resolve().parents[2] / "data" / "cards"
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
PROXY = ["--preset", "gpt-tiny", "--lr", "0.01", "--proxy-batch-tokens", "1024",
         "--proxy-tokens", "2e6"]


def write_fit(tmp_path: Path, doc: dict[str, Any] = FIT) -> Path:
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(doc))
    return path


def transfer(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["transfer", *args])
    return code, capsys.readouterr().err


# ---- the projection ---------------------------------------------------------------------


def test_batch_law_in_doubt_falls_back_to_the_published_laws_in_tokens(tmp_path: Path, capsys) -> None:
    """25x beyond the measured budgets with a limit of 10x (and, separately, a best batch
    at the grid's edge at most budgets): the batch is the published laws' in the token
    budget (DeepSeek LLM's B_opt written in D, interval to Step Law's B(D)), the fitted
    B*(D) stays beside it as batch_fit, and a warning names why."""
    from analysis.baselines import published_batch

    fit = write_fit(tmp_path)
    out = tmp_path / "card.yaml"
    code, err = transfer([*PROXY, "--set", "width=256", "--tokens", "2e8", "--scaling-fit", str(fit),
                          "--extrapolation-limit", "10", "--out", str(out)], capsys)
    assert code == 0, err
    card = load_card(out)
    n = card["target"]["n_params_nonembed"]
    pub = published_batch(2e8)
    b_ds = 0.0869 * 2e8**0.6876  # DeepSeek's B_opt at the compute whose optimal data is D
    assert pub["batch_tokens"] == pytest.approx(b_ds, rel=2e-3)
    assert pub["lo"] == pytest.approx(0.58 * 2e8**0.571) and pub["hi"] == pub["batch_tokens"]
    # in sequences, rounded to a multiple of 8 (dp 1, no --micro-batch) inside its interval,
    # whose top the published value is: rounded down
    assert card["batch"]["sequences"] == max(8, math.floor(pub["batch_tokens"] / 64 / 8) * 8)
    assert card["projected"]["batch_tokens"]["lo"] == pytest.approx(pub["lo"])
    assert n > 0
    proj = card["projected"]
    assert "DeepSeek" in proj["batch_tokens"]["source"] and "25x beyond" in proj["batch_tokens"]["source"]
    assert proj["batch_fit"]["value"] == pytest.approx(2.0 * 2e8**0.4, rel=1e-9)
    assert "not from the fitted B*(D)" in err
    # inside the limit but at the grid's edge at 3 of 4 budgets: in doubt too
    edged = {**FIT, "budgets": [{"tokens": t, "edge": e} for t, e in
                                ((1e6, "low"), (2e6, "low"), (4e6, ""), (8e6, "low"))]}
    code, err = transfer([*PROXY, "--set", "width=256", "--tokens", "4e6", "--scaling-fit",
                          str(write_fit(tmp_path, edged)), "--out", str(out)], capsys)
    assert code == 0, err
    assert "edge of the batch grid at 3 of 4 budgets" in load_card(out)["projected"]["batch_tokens"]["source"]


def test_inside_the_limit_our_batch_law_carries_the_batch_even_when_its_exponent_is_uncertain(plan_kw) -> None:
    """An exponent interval that reaches 0 is a wide interval, not a reason to borrow DeepSeek's
    law: inside the extrapolation limit the card's batch is B*(D) (with a warning saying the
    growth is unresolved); beyond the limit, or with B* at the grid's edge at most budgets,
    the published laws in tokens are the flagged fallback."""
    from analysis.baselines import published_batch
    from analysis.scaling_fit import ScalingLawFit
    
    loose = {**FIT, "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}, "ci": {"tokens": [-0.05, 0.85]}}}
    laws = ScalingLawFit.from_dict(loose)
    kw = {"proxy_lr": 0.01, "proxy_lr_interval": None, "seq_len": 64, "laws": laws,
          "proxy_batch_tokens": 1024.0, "proxy_tokens": 8e6, "n_params": 5e6}
    plan = plan_kw(tokens=6.4e7, **kw)  # 8x the largest budget, limit 100x
    b_fit = 2.0 * 6.4e7**0.4
    assert "B*(D)" in plan.projected["batch_tokens"]["source"] and "batch_fit" not in plan.projected
    assert plan.batch_sequences == 8 * round(b_fit / 64 / 8)
    assert any("no growth with D is resolved" in w for w in plan.warnings)
    assert not any("batch from DeepSeek" in w for w in plan.warnings)
    # beyond the limit: DeepSeek's, flagged, ours beside it
    far = plan_kw(tokens=6.4e7, extrapolation_limit=4.0, **kw)
    b_ds = published_batch(6.4e7)["batch_tokens"]
    assert "DeepSeek" in far.projected["batch_tokens"]["source"] and "8x beyond" in far.warnings[0]
    assert far.projected["batch_fit"]["value"] == pytest.approx(b_fit, rel=1e-9)
    assert far.batch_sequences == 8 * math.floor(b_ds / 64 / 8)  # the top of its interval: rounded down
    # B* a bound at 2 of 4 budgets: DeepSeek's, inside the limit too
    edged = ScalingLawFit.from_dict({**loose, "budgets": [{"tokens": t, "edge": e} for t, e in
                                                        ((1e6, "low"), (2e6, ""), (4e6, ""), (8e6, "low"))]})
    assert "DeepSeek" in plan_kw(tokens=6.4e7, **{**kw, "laws": edged}).projected["batch_tokens"]["source"]


def test_projection_from_the_scaling_fit_has_the_known_answers(tmp_path: Path, capsys) -> None:
    out = tmp_path / "card.yaml"
    code, err = transfer([*PROXY, "--set", "width=256", "--tokens", "2e8", "--dp-size", "8",
                          "--scaling-fit", str(write_fit(tmp_path)), "--extrapolation-limit", "10",
                          "--batch-rule", "fit",
                          "--study", "lr-sweep", "--storage", "postgresql://me:s3cret@db/sweeps",
                          "--out", str(out)], capsys)
    assert code == 0, err
    card = load_card(out)
    assert card["schema"] == SCHEMA_V2
    # B*(D) = 2 · D^0.4 = 4182 tokens -> 65.3 sequences of 64 -> a multiple of dp 8: 64.
    b_fit = 2.0 * 2e8**0.4
    seqs = card["batch"]["sequences"]
    assert seqs == 8 * round(b_fit / 64 / 8) == 64 and seqs % 8 == 0
    b = card["batch"]["tokens"]
    assert b == seqs * 64 and card["batch"]["dp_size"] == 8
    steps = card["schedule"]["total_steps"]
    assert steps == math.ceil(2e8 / b) and 0 <= steps * b - 2e8 < b
    # eta = proxy optimum × (B_t / B_p)^0.3 × (D_t / D_p)^-0.1
    # (the data's LR, before the published laws' prior is weighed in)
    lr_data = 0.01 * (b / 1024) ** 0.3 * (2e8 / 2e6) ** -0.1
    p = card["projected"]
    lo, hi = 0.01 * (b / 1024) ** 0.25 * 100 ** -0.15, 0.01 * (b / 1024) ** 0.35 * 100 ** -0.05
    assert p["lr"]["data"] == pytest.approx({"value": lr_data, "lo": lo, "hi": hi}, rel=1e-12)
    # the card's LR: the data weighed with the prior, in log space, by precision
    z = NormalDist().inv_cdf(0.95)
    sd_d, sd_p = math.log(hi / lo) / (2 * z), p["lr"]["prior"]["sd_log"]
    w = sd_d**-2 / (sd_d**-2 + sd_p**-2)
    lr = math.exp(w * math.log(lr_data) + (1 - w) * math.log(p["lr"]["prior"]["value"]))
    assert p["lr"]["weight_prior"] == pytest.approx(1 - w, rel=1e-9) and 0 < 1 - w < 0.5
    assert card["optimizer"]["lr"] == pytest.approx(lr, rel=1e-12) == p["lr"]["value"]
    assert p["lr"]["hi"] / p["lr"]["lo"] < hi / lo  # the prior only narrows
    # lambda = B / (eta · tau · D), tau recorded; its interval follows tau's.
    assert card["optimizer"]["tau"] == 0.2
    assert card["optimizer"]["weight_decay"] == pytest.approx(b / (lr * 0.2 * 2e8), rel=1e-12)
    assert p["weight_decay"]["lo"] < card["optimizer"]["weight_decay"] < p["weight_decay"]["hi"]
    assert card["schedule"]["kind"] == "wsd" and card["schedule"]["decay_fraction"] == 0.15
    # warmup: one token per (non-embedding) parameter, whole steps (Porian et al. 2024)
    n = card["target"]["n_params_nonembed"]
    assert card["schedule"]["warmup_steps"] == math.ceil(n / b)
    assert card["schedule"]["warmup_tokens"] == math.ceil(n / b) * b
    # 2e8 tokens are 25x the largest measured budget: beyond the limit of 10 -> flagged.
    assert p["extrapolation"]["tokens"] == pytest.approx(25.0)
    assert p["extrapolated"] is True
    assert any("tokens" in w and "25" in w for w in p["warnings"]) and "25" in err
    assert p["batch_tokens"]["lo"] < b_fit < p["batch_tokens"]["hi"]
    assert p["baselines"]["sqrt_rule"]["lr"] == pytest.approx(0.01 * (b / 1024) ** 0.5)
    assert set(p["baselines"]) == {"sqrt_rule", "linear_rule", "deepseek", "step_law", "power_lines"}
    # provenance: study and storage, never the password
    assert card["provenance"]["study"] == "lr-sweep"
    assert "s3cret" not in out.read_text() and "db/sweeps" in card["provenance"]["storage"]
    assert card["provenance"]["git_revision"]
    assert card["target"]["tokens_per_param"] == pytest.approx(2e8 / card["target"]["n_params"])


def test_v2_round_trip_and_apply_gives_optimizer_and_scheduler(tmp_path: Path, capsys) -> None:
    out = tmp_path / "card.json"
    code, err = transfer([*PROXY, "--set", "width=128", "--set", "d_ff=384", "--tokens", "5e4",
                          "--batch-size", "4", "--warmup-tokens", "2560", "--decay-fraction", "0.5",
                          "--weight-decay", "0.1", "--out", str(out)], capsys)
    assert code == 0, err
    card = load_card(out)
    assert json.loads(out.read_text()) == card
    again = tmp_path / "again.yaml"
    assert load_card(save_card(card, again)) == card
    assert card["target"]["model"]["mlp_ratio"] == 3.0  # d_ff 384 at width 128
    torch.manual_seed(0)
    applied = apply_card(build_target_model(card), card)
    assert applied.model.blocks[0].mlp.c_fc.weight.shape == (384, 128)
    assert isinstance(applied.scheduler, torch.optim.lr_scheduler.LambdaLR)
    assert applied.optimizer.defaults["betas"] == (0.9, 0.95)
    schedule = Schedule(schedule_config(card["schedule"]))
    assert card["schedule"]["warmup_steps"] == 10 and card["schedule"]["total_steps"] == math.ceil(5e4 / 256)
    card_lr = {g["name"]: g["lr"] for g in card["param_groups"]}
    x = torch.randint(0, 256, (2, 16))
    for step in range(card["schedule"]["total_steps"]):
        want = schedule(step)
        for g in applied.optimizer.param_groups:
            assert g["lr"] == pytest.approx(card_lr[g["names"][0]] * want, rel=1e-12, abs=0.0)
        if step < 3:  # the optimizer really trains with these groups
            loss = applied.model(x)[0].float().pow(2).mean()
            loss.backward()
            applied.optimizer.step()
            applied.optimizer.zero_grad()
        applied.scheduler.step()
    assert schedule(0) == pytest.approx(0.1) and schedule(card["schedule"]["total_steps"] - 1) == 0.0
    # Per-group λ_g = λ / lr_mult (was one λ for all): every decaying group keeps lr_g·λ_g = lr·λ.
    decayed = [g for g in applied.param_groups if g["weight_decay"]]
    assert {g["role"] for g in applied.param_groups if not g["weight_decay"]} == {"vector"}
    for g in decayed:
        assert g["lr"] * g["weight_decay"] == pytest.approx(card["optimizer"]["lr"] * 0.1, rel=1e-12)
    assert {g["role"] for g in decayed} == {"input", "hidden", "output"}
    assert max(g["weight_decay"] for g in decayed) > 0.1  # hidden matrices: lr_mult < 1, λ_g > λ


def test_v1_card_still_loads_and_applies() -> None:
    card = load_card(DATA / "card_v1.yaml")
    assert card["schema"] == SCHEMA_V1 and "audit" not in card
    cfg = get_preset("gpt-tiny")
    torch.manual_seed(0)
    applied = apply_card(GPT(cfg.replace(width=128)), card)
    lrs = {g["names"][0]: g["lr"] for g in applied.param_groups}
    assert lrs["blocks.0.attn.c_q.weight"] == pytest.approx(0.004 / 4)  # muP: base / m, m = 128/32
    total = card["schedule"]["total_steps"]
    assert applied.optimizer.param_groups[0]["lr"] == pytest.approx(
        applied.param_groups[0]["lr"] * Schedule(schedule_config(card["schedule"]))(0))
    assert total == 489


def test_depth_change_uses_completep_and_warns_for_a_mup_proxy(tmp_path: Path, capsys) -> None:
    out = tmp_path / "card.yaml"
    code, err = transfer([*PROXY, "--base-width", "32", "--set", "width=256", "--set", "depth=8",
                          "--tokens", "1e7", "--batch-size", "16", "--out", str(out)], capsys)
    assert code == 0, err
    card = load_card(out)
    assert "tuned under plain muP" in err
    assert any("CompleteP" in w for w in card["projected"]["warnings"])
    assert card["parametrization"]["kind"] == "completep"
    assert (card["parametrization"]["depth"], card["parametrization"]["base_depth"]) == (8, 2)
    cfg = get_preset("gpt-tiny")
    pz = Parametrization(lambda w, d: GPT(cfg.replace(width=w, depth=d)), width=256, base_width=32,
                         kind="completep", depth=8, base_depth=2)
    groups = {g["name"]: g for g in card["param_groups"]}
    for spec in pz.specs.values():
        assert groups[spec.name]["lr"] == pytest.approx(0.01 * spec.lr_mult, rel=1e-12), spec.name
        assert groups[spec.name]["eps"] == pytest.approx(1e-8 * spec.eps_mult, rel=1e-12), spec.name
    # CompleteP (Dey et al. 2025, alpha = 1): hidden eps × 1/m_in × 1/m_L, branches × 1/m_L.
    assert groups["blocks.0.attn.c_q.weight"]["eps"] == pytest.approx(1e-8 / 8 / 4)
    scales = {h["module"]: h["scale"] for h in card["forward_multipliers"]["hooks"]}
    assert scales["blocks.7.mlp"] == pytest.approx(0.25)
    # A completep proxy moved in depth: no warning (at 977 steps, inside the longest horizon
    # measured, 2,000 steps; past it the card warns of that, trust.MEASURED_HORIZON).
    code, err = transfer([*PROXY, "-p", "completep", "--base-width", "32", "--set", "depth=8",
                          "--tokens", "1e6", "--batch-size", "16", "--weight-decay", "0.1",
                          "--out", str(out)], capsys)
    assert code == 0 and "warning" not in err


def test_model_config_file_and_tokens_per_param(tmp_path: Path, capsys) -> None:
    cfg_file = tmp_path / "model.yaml"
    cfg_file.write_text(yaml.safe_dump({"preset": "gpt-tiny", "d_model": 192, "n_layers": 3,
                                        "n_heads": 4, "vocab": 512}))
    out = tmp_path / "card.yaml"
    args = [*PROXY, "--model-config", str(cfg_file), "--tokens-per-param", "20", "--batch-tokens", "3990",
            "--out", str(out)]
    code, err = transfer(args, capsys)  # vocab 512 against the proxy's 256
    assert code == 2 and "--allow-vocab-change" in err and not out.exists()
    code, err = transfer([*args, "--allow-vocab-change"], capsys)
    assert code == 0, err
    card = load_card(out)
    assert card["target"]["vocab_change"]
    model = card["target"]["model"]
    assert (model["width"], model["depth"], model["n_head"], model["vocab_size"]) == (192, 3, 4, 512)
    net = build_target_model(card)
    assert card["target"]["n_params"] == sum(p.numel() for p in net.parameters())
    assert card["target"]["tokens"] == pytest.approx(20 * card["target"]["n_params"])
    assert card["batch"]["tokens"] == 64 * 64  # 3990 tokens: 62.3 sequences, rounded to a multiple of 8
    # heads of 48 against the proxy's 16: muP's attention scale is sqrt(16)/48
    scale = next(iter(card["forward_multipliers"]["attention"].values()))
    assert scale == pytest.approx(4 / 48)


# ---- the validator --------------------------------------------------------


@pytest.fixture(scope="module")
def good_card(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("card") / "good.yaml"
    assert main(["transfer", *PROXY, "--set", "width=128", "--tokens", "1e6", "--batch-size", "16",
                 "--weight-decay", "0.1", "--out", str(out)]) == 0
    return load_card(out)


def _set(card: dict[str, Any], path: str, value: Any) -> None:
    obj: Any = card
    keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
    for k in keys[:-1]:
        obj = obj[k]
    obj[keys[-1]] = value


BAD = [  # (field path, bad value, words the error must hold)
    ("optimizer.lr", float("inf"), "optimizer.lr"),
    ("optimizer.lr", float("nan"), "optimizer.lr"),
    ("optimizer.lr", "fast", "optimizer.lr"),
    ("optimizer.lr", -0.1, "optimizer.lr"),
    ("optimizer.weight_decay", -1.0, "optimizer.weight_decay"),
    ("optimizer.betas", "x", "optimizer.betas"),
    ("optimizer.name", "adamax", "optimizer.name"),
    ("param_groups[0].init", "scale:nan", "param_groups[0] (wte.weight).init"),
    ("param_groups[0].init", "normal:-1", "param_groups[0] (wte.weight).init"),
    ("param_groups[0].init", "uniform", "param_groups[0] (wte.weight).init"),
    ("param_groups[0].lr", float("inf"), "param_groups[0] (wte.weight).lr"),
    ("param_groups[0].weight_decay", -0.5, "param_groups[0] (wte.weight).weight_decay"),
    ("param_groups[0].shape", "big", "param_groups[0] (wte.weight).shape"),
    ("param_groups[0]", 5, "param_groups[0]"),
    ("param_groups", {"a": 1}, "param_groups"),
    ("schedule.kind", "bogus", "schedule.kind"),
    ("schedule.total_steps", "many", "schedule.total_steps"),
    ("schedule.warmup_steps", 10**9, "schedule"),
    ("schedule", [1, 2], "schedule"),
    ("batch.sequences", 0, "batch.sequences"),
    ("batch.sequences", "8", "batch.sequences"),
    ("target.tokens", -5, "target.tokens"),
    ("forward_multipliers.hooks", None, "forward_multipliers.hooks"),
    ("parametrization.kind", 3, "parametrization.kind"),
    ("parametrization.multipliers.output", float("nan"), "parametrization.multipliers.output"),
    ("audit.passed", "yes", "audit.passed"),
    ("projected.lr.hi", float("inf"), "projected.lr.hi"),
]


@pytest.mark.parametrize(("path", "value", "words"), BAD, ids=[f"{p}={v!r}" for p, v, _ in BAD])
def test_the_validator_names_each_bad_field(path: str, value: Any, words: str, tmp_path: Path,
                                            good_card: dict[str, Any]) -> None:
    card = good_card
    bad = copy.deepcopy(card)
    _set(bad, path, value)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(bad, sort_keys=False))  # .inf / .nan as YAML writes them
    with pytest.raises(ValueError, match="card field") as exc:
        load_card(f)
    assert words in str(exc.value) and str(f) in str(exc.value)
    with pytest.raises(ValueError, match="card field"):  # on write, too
        save_card(bad, tmp_path / "never.yaml")
    assert not (tmp_path / "never.yaml").exists()
    with pytest.raises(ValueError, match="card field"):
        apply_card(build_target_model(card), bad)


# ---- bad input to the CLI ---------------------------------------------------------------


def _sweep(tmp_path: Path, **bad: Any) -> Path:
    rows = [{"width": w, "lr": 2.0**k, "loss": 3 + 0.05 * (k + 7) ** 2, "seed": 0,
             "parametrization": "mup", "diverged": False}
            for w in (32, 64) for k in range(-10, -3)]
    for col, value in bad.items():
        rows[3][col] = value
    path = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


CLI_BAD = {
    "width below the proxy": (["--set", "width=16", "--base-width", "64", "--tokens", "1e6",
                               "--batch-size", "8"], ["smaller than the proxy", "16"]),
    "depth below the proxy": (["--set", "depth=1", "--tokens", "1e6", "--batch-size", "8"],
                              ["smaller than the proxy", "depth 1"]),
    "budget below one batch": (["--tokens", "1000", "--batch-size", "64"],
                               ["below one batch", "4096"]),
    "no batch and no scaling fit": (["--tokens", "1e6"], ["--scaling-fit", "B*(D)", "--batch-tokens"]),
    "scaling fit without proxy batch": (["--tokens", "1e7", "--scaling-fit", "FIT"],
                                        ["--proxy-batch-tokens", "--proxy-tokens"]),
    "negative weight decay": (["--tokens", "1e6", "--batch-size", "8", "--weight-decay", "-1"],
                              ["--weight-decay", "-1"]),
    "batch not a multiple of dp": (["--tokens", "1e6", "--batch-size", "10", "--dp-size", "8"],
                                   ["--batch-size 10", "--dp-size 8"]),
    "bogus schedule": (["--tokens", "1e6", "--batch-size", "8", "--schedule", "bogus"],
                       ["--schedule", "bogus"]),
    "bad decay fraction": (["--tokens", "1e6", "--batch-size", "8", "--decay-fraction", "2"],
                           ["--decay-fraction", "2"]),
    "unknown model field": (["--tokens", "1e6", "--batch-size", "8", "--set", "widht=128"],
                            ["widht"]),
    "muon with a depth change": (["-p", "muon", "--set", "depth=4", "--tokens", "1e6",
                                  "--batch-size", "8"], ["muon", "depth"]),
}


@pytest.mark.parametrize("case", list(CLI_BAD))
def test_cli_bad_input_exits_2_and_writes_nothing(case: str, tmp_path: Path, capsys) -> None:
    args, words = CLI_BAD[case]
    args = [str(write_fit(tmp_path)) if a == "FIT" else a for a in args]
    out = tmp_path / "card.yaml"
    lr = ["--lr", "0.01"] if "--scaling-fit" in args else PROXY[2:]
    code, err = transfer(["--preset", "gpt-tiny", *lr, *args, "--out", str(out)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and all(w in err for w in words), err
    assert not out.exists() and list(tmp_path.glob("*.tmp")) == []


@pytest.mark.parametrize(("bad", "words"), [
    ({"loss": float("nan")}, ["'loss'", "non-finite"]),
    ({"lr": "fast"}, ["'lr'", "non-numeric", "'fast'"]),
])
def test_cli_refuses_a_results_table_that_fit_refuses(bad: dict[str, Any], words: list[str],
                                                     tmp_path: Path, capsys) -> None:
    results = _sweep(tmp_path, **bad)
    out = tmp_path / "card.yaml"
    code, err = transfer(["--results", str(results), "--preset", "gpt-tiny", "--tokens", "1e6",
                          "--batch-size", "8", "--out", str(out)], capsys)
    assert code == 2 and all(w in err for w in words), err
    assert not out.exists()
    code, err = transfer(["--results", str(results), "--preset", "gpt-tiny", "--tokens", "1e6",
                          "--batch-size", "8", "--out", str(results)], capsys)
    assert code == 2 and "refusing to overwrite" in err


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda d: d["lr"]["exponents"].pop("tokens"), ["lr.exponents.tokens"]),
    (lambda d: d["measured"].update(tokens="many"), ["measured.tokens"]),
    (lambda d: d.update(kind="optimum"), ["not the output of `mutransfer fit scaling`"]),
    (lambda d: d["decay_fraction"].update(value=1.5), ["decay_fraction"]),
])
def test_cli_names_the_bad_field_of_a_scaling_fit(mutate: Any, words: list[str], tmp_path: Path,
                                                  capsys) -> None:
    doc = copy.deepcopy(FIT)
    mutate(doc)
    out = tmp_path / "card.yaml"
    code, err = transfer([*PROXY, "--tokens", "1e7", "--scaling-fit", str(write_fit(tmp_path, doc)),
                          "--out", str(out)], capsys)
    assert code == 2 and all(w in err for w in words), err
    assert not out.exists()


def test_cli_records_the_audit_and_refuses_a_nan_one(tmp_path: Path, capsys) -> None:
    rows = [{"method": "ours", "axis": "tokens", "pred_lr": 0.011, "meas_lr": 0.01, "lr_ratio": 1.1,
             "pred_batch_tokens": 2048, "meas_batch_tokens": 2048, "batch_ratio": 1.0,
             "loss_gap": 0.001},
            {"method": "sqrt_rule", "axis": "tokens", "pred_lr": 0.03, "meas_lr": 0.01, "lr_ratio": 3.0,
             "pred_batch_tokens": 2048, "meas_batch_tokens": 2048, "batch_ratio": 1.0,
             "loss_gap": None}]
    audit = tmp_path / "audit.json"
    audit.write_text(json.dumps(rows))
    out = tmp_path / "card.yaml"
    code, err = transfer([*PROXY, "--tokens", "1e7", "--batch-size", "8", "--audit", str(audit),
                          "--out", str(out)], capsys)
    assert code == 0, err
    card = load_card(out)
    assert card["audit"] == {"holdout": rows, "passed": True}  # ours within 1.3x; baselines not judged
    rows[0]["lr_ratio"] = float("nan")
    audit.write_text(json.dumps(rows))
    out.unlink()
    code, err = transfer([*PROXY, "--tokens", "1e7", "--batch-size", "8", "--audit", str(audit),
                          "--out", str(out)], capsys)
    assert code == 2 and "lr_ratio" in err and not out.exists()
    del rows[1]["axis"]
    rows[0]["lr_ratio"] = 1.0
    audit.write_text(json.dumps({"holdout": rows}))
    code, err = transfer([*PROXY, "--tokens", "1e7", "--batch-size", "8", "--audit", str(audit),
                          "--out", str(out)], capsys)
    assert code == 2 and "row 1 lacks ['axis']" in err and not out.exists()


# ---- end to end with `mutransfer fit scaling` -------------------------------------------


def test_card_from_a_real_scaling_fit_lands_on_the_true_laws(tmp_path: Path, capsys,
                                                              scaling_sweep) -> None:
    """Sweep on known laws, eta* = 2^-12·B^0.5·D^-0.25 and B* = 16·D^0.5 (tokens, as in
    the fit's own tests) -> `fit scaling` -> `transfer`: the card's batch at an 8x larger
    budget is the law's value, and its LR the law's at that budget and at the largest
    measured batch (the LR law is not extrapolated in batch; the sweep has no GNS)."""
    sweep = tmp_path / "scaling.csv"
    scaling_sweep().to_csv(sweep, index=False)
    fit = tmp_path / "fit.json"
    assert main(["fit", "scaling", str(sweep), "--n-boot", "50", "--out", str(fit), "--quiet"]) == 0
    out = tmp_path / "card.yaml"
    proxy_lr = 2.0 ** (-12 + 13 * 0.5 - 21 * 0.25)  # the proxy's optimum at B = 2^13, D = 2^21
    code, err = transfer(["--preset", "gpt-tiny", "--seq-len", "128", "--lr", repr(proxy_lr),
                          "--proxy-batch-tokens", str(2**13), "--proxy-tokens", str(2**21),
                          "--set", "width=128", "--tokens", str(2**26), "--dp-size", "8",
                          "--scaling-fit", str(fit), "--out", str(out)], capsys)
    assert code == 0, err
    card = load_card(out)
    assert card["batch"]["tokens"] == pytest.approx(16 * 2**13, rel=0.15)  # B*(2^26) = 2^17
    assert card["batch"]["sequences"] % 8 == 0
    b_top = json.loads(fit.read_text())["measured"]["batch_tokens"][1]
    assert b_top < card["batch"]["tokens"]
    # eta*(B_top, 2^26): the LR held at the largest measured batch
    assert card["optimizer"]["lr"] == pytest.approx(2.0**-12 * b_top**0.5 * 2.0 ** (-26 * 0.25), rel=0.15)
    assert "held at the saturation batch" in card["projected"]["lr"]["source"]
    lr = card["projected"]["lr"]
    assert lr["lo"] < card["optimizer"]["lr"] < lr["hi"]
    assert card["projected"]["extrapolation"]["tokens"] == pytest.approx(8.0)
    assert card["projected"]["extrapolated"] is False
    # the sweep ran one weight decay (0.1): its tau was not optimised, so the card takes the
    # published per-step eta·lambda 4e-5, names it and warns; the trust block gives no interval
    assert json.loads(fit.read_text())["tau"]["source"] == "default λ"
    assert card["optimizer"]["weight_decay"] == pytest.approx(4e-5 / card["optimizer"]["lr"], rel=1e-12)
    assert "OLMo-1B" in card["projected"]["weight_decay"]["source"]
    assert any(w.startswith("weight decay not optimised") for w in card["projected"]["warnings"])
    assert card["trust"]["intervals"]["weight_decay"]["factor"] is None


def test_an_optimum_at_the_grid_edge_keeps_its_interval_open(tmp_path: Path, capsys) -> None:
    """The loss still falls at the largest LR: the optimum is flagged at the edge and its
    open interval side is written as null (never .inf), with or without a scaling fit."""
    rows = [{"width": w, "lr": 2.0**k, "loss": 3 - 0.05 * k, "seed": s, "parametrization": "mup",
             "diverged": False} for w in (32, 64) for k in range(-10, -3) for s in (0, 1)]
    results = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(results, index=False)
    for extra in ([], ["--scaling-fit", str(write_fit(tmp_path)), "--proxy-batch-tokens", "1024",
                       "--proxy-tokens", "2e6"]):
        out = tmp_path / "card.yaml"
        code, err = transfer(["--results", str(results), "--preset", "gpt-tiny", "--set", "width=128",
                              "--tokens", "1e7", "--batch-size", "16", *extra, "--out", str(out)], capsys)
        assert code == 0, err
        lr = load_card(out)["projected"]["lr"]
        assert lr["at_edge"] is True
        assert None in (lr["lo"], lr["hi"]) and ".inf" not in out.read_text()


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_apply_a_muon_card_schedules_both_optimizers(tmp_path: Path, capsys) -> None:
    out = tmp_path / "card.yaml"
    code, err = transfer([*PROXY, "-p", "muon", "--set", "width=128", "--tokens", "2e4",
                          "--batch-size", "16", "--warmup-tokens", "4096", "--out", str(out)], capsys)
    assert code == 0, err
    card = load_card(out)
    applied = apply_card(build_target_model(card), card)
    assert [type(o).__name__ for o in applied.optimizer] == ["Muon", "AdamW"]
    schedule = Schedule(schedule_config(card["schedule"]))
    card_lr = {g["name"]: g["lr"] for g in card["param_groups"]}
    for step in range(card["schedule"]["total_steps"]):
        for g in applied.optimizer.param_groups:
            assert g["lr"] == pytest.approx(card_lr[g["names"][0]] * schedule(step), rel=1e-12)
        applied.scheduler.step()
    assert applied.scheduler.last_epoch == card["schedule"]["total_steps"]
