"""The leave-one-seed-out (LOSO) spread travels from the fits to the card: `fit optimum` and
`fit scaling` write it, `transfer` carries it into ``projected.lr.loso_ratio``, and
``validate_card`` checks it. Known answers as in tests/analysis/test_seed_sensitivity.py:
each seed's loss is the true bowl plus a linear tilt in log2 lr, so the refit optima are
exact."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mutransfer.card.build import load_card
from mutransfer.card.schema import validate_card
from mutransfer_cli import main

T_STAR, C, K = -7.3, 0.02, 0.04  # true optimum, curvature, seed 0's tilt


def lr_sweep(path: Path, tilts: list[float]) -> Path:
    """μP LR sweep at widths 32 and 64: loss = 3 + c·(t − t*)² + k_s·(t − t*), t = log2 lr."""
    rows = [{"parametrization": "mup", "width": w, "lr": 2.0**t, "seed": s, "diverged": False,
             "loss": 3 + C * (t - T_STAR) ** 2 + k * (t - T_STAR)}
            for w in (32, 64) for t in np.arange(-10.0, -3.0) for s, k in enumerate(tilts)]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def transfer(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    out = Path(args[args.index("--out") + 1])
    code = main(["transfer", "--preset", "gpt-tiny", "--set", "width=128", "--tokens", "1e7", *args])
    assert code == 0, capsys.readouterr().err
    return load_card(out)


def test_fit_optimum_json_and_the_card_carry_the_proxy_spread(tmp_path: Path, capsys) -> None:
    """One tilted seed of four: the refit optima span k/(6c) = 1/3 octave, so the ratio is
    2^(1/3) in `fit optimum`'s JSON and in the card, from --results and from --fit alike."""
    results = lr_sweep(tmp_path / "results.csv", [K, 0.0, 0.0, 0.0])
    fit = tmp_path / "fit.json"
    assert main(["fit", "optimum", str(results), "--group", "width", "--where", "parametrization=mup",
                 "--n-boot", "0", "--out", str(fit), "--quiet"]) == 0
    f = json.loads(fit.read_text())["fits"][-1]
    assert f["n_seeds"] == 4 and f["sensitivity"]["ratio"] == pytest.approx(2 ** (1 / 3))
    assert f["sensitivity"]["left_out"]["0"] == pytest.approx(2.0**T_STAR)
    for src in (["--results", str(results)], ["--fit", str(fit)]):
        card = transfer([*src, "--batch-size", "16", "--out", str(tmp_path / "card.yaml")], capsys)
        lr = card["projected"]["lr"]
        assert lr["loso_ratio"] == pytest.approx(2 ** (1 / 3)) and lr["loso_octaves"] == pytest.approx(1 / 3)
        assert lr["loso"]["proxy"]["n_seeds"] == 4 and lr["loso"]["complete"] is True
        assert "law" not in lr["loso"]  # no scaling fit: the LR is the proxy's


def test_identical_seeds_give_ratio_one_and_a_single_seed_none(tmp_path: Path, capsys) -> None:
    card = transfer(["--results", str(lr_sweep(tmp_path / "same.csv", [0.01, 0.01])), "--batch-size", "16",
                     "--out", str(tmp_path / "a.yaml")], capsys)
    assert card["projected"]["lr"]["loso_ratio"] == 1.0
    card = transfer(["--results", str(lr_sweep(tmp_path / "one.csv", [0.01])), "--batch-size", "16",
                     "--out", str(tmp_path / "b.yaml")], capsys)
    lr = card["projected"]["lr"]
    assert lr["loso_ratio"] is None and lr["loso"]["complete"] is False


def test_card_spread_multiplies_the_proxy_and_the_law_refits(tmp_path: Path, capsys, scaling_sweep) -> None:
    """With a 2-seed scaling fit the card's ratio is the proxy's × max/min of the LR ratio
    redone with each refit's exponents (read back from FIT.json's sensitivity.loso)."""
    sweep = tmp_path / "scaling.csv"
    scaling_sweep().to_csv(sweep, index=False)
    fit = tmp_path / "scaling_fit.json"
    assert main(["fit", "scaling", str(sweep), "--n-boot", "50", "--out", str(fit), "--quiet"]) == 0
    doc = json.loads(fit.read_text())
    assert doc["sensitivity"]["n_seeds"] == 2 and len(doc["sensitivity"]["loso"]) == 2
    results = lr_sweep(tmp_path / "results.csv", [K, 0.0, 0.0, 0.0])
    pb, pd_, d = 2**13, 2**21, 2**26
    card = transfer(["--results", str(results), "--seq-len", "128", "--proxy-batch-tokens", str(pb),
                     "--proxy-tokens", str(pd_), "--tokens", str(d), "--scaling-fit", str(fit),
                     "--out", str(tmp_path / "card.yaml")], capsys)
    b = card["batch"]["tokens"]
    ratios = [(b / pb) ** e["lr"]["exponents"]["batch_tokens"] * (d / pd_) ** e["lr"]["exponents"]["tokens"]
              for e in doc["sensitivity"]["loso"]]
    law = max(ratios) / min(ratios)
    lr = card["projected"]["lr"]
    assert law > 1.0 and lr["loso"]["law"]["ratio"] == pytest.approx(law, rel=1e-9)
    assert lr["loso_ratio"] == pytest.approx(2 ** (1 / 3) * law, rel=1e-9)
    assert lr["loso"]["complete"] is True and lr["loso_octaves"] == pytest.approx(math.log2(lr["loso_ratio"]))


@pytest.mark.parametrize(("field", "value", "words"), [
    ("loso_ratio", 0.5, "projected.lr.loso_ratio"),
    ("loso_octaves", 3.0, "projected.lr.loso_octaves"),
    ("loso", {"complete": "yes"}, "projected.lr.loso.complete"),
])
def test_validate_card_names_a_bad_sensitivity_field(tmp_path: Path, capsys, field: str, value: object,
                                                     words: str) -> None:
    card = transfer(["--results", str(lr_sweep(tmp_path / "r.csv", [K, 0.0])), "--batch-size", "16",
                     "--out", str(tmp_path / "c.yaml")], capsys)
    validate_card(card)
    bad = copy.deepcopy(card)
    bad["projected"]["lr"][field] = value
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        validate_card(bad)
