"""Coordinate check: μP passes and SP fails on the same GPT; CompleteP passes over depth
and plain μP fails; the CLI writes its three files and exits as documented."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from mutransfer.checks.coord_check import (
    FINITE_WIDTH_KAPPA,
    TOL_INF,
    CoordCheckResult,
    coord_check,
    default_modules,
    fit_slopes,
    gpt_loss,
    ladder_tol,
    record_activations,
)
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer_cli import main

CFG = GPTConfig(width=32, depth=2, head_dim=16, seq_len=32, vocab_size=256)
ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
audit_variants = importlib.import_module("tests.mutransfer.checks.audit_variants")


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    data = load_dataset(DataConfig(max_bytes=200_000))
    return data.get_batch("train", 0, 4, CFG.seq_len, seed=0)


@pytest.fixture(scope="module")
def width_results(batch):
    out = {}
    for name, kind, kw in (("sp", "sp", {}), ("mup", "mup", {}),
                           ("mup_constant", "mup", {"readout_init": "constant"})):
        out[name] = coord_check(lambda w: GPT(CFG.replace(width=w)), batch, kind=kind,
                                widths=(32, 64, 128, 256), steps=3, seeds=2, lr=1e-2, **kw)
    return out


def test_mup_passes_and_sp_fails_on_the_same_gpt(width_results) -> None:
    sp, mu, const = width_results["sp"], width_results["mup"], width_results["mup_constant"]
    assert mu.passed and const.passed and not sp.passed
    # SP's hidden activations grow roughly linearly in width after a few Adam steps.
    assert sp.slopes["slope"].max() > 0.8
    assert mu.slopes["slope"].max() < 0.15
    # At init (step 0) both are the same model law except the readout: no blow-up yet.
    init = sp.slopes[(sp.slopes["step"] == 0) & (sp.slopes["module"] != "lm_head")]
    assert init["slope"].abs().max() < 0.15
    # mup's constant readout: the logits shrink like width^-1/2 at init (readout ×
    # 1/width_mult), as TP-V says; the default fan_in readout keeps SP's logit scale.
    def logits0(res: CoordCheckResult) -> float:
        return res.slopes[(res.slopes["step"] == 0) & (res.slopes["module"] == "lm_head")]["slope"].item()

    assert logits0(const) == pytest.approx(-0.5, abs=0.1)
    assert logits0(mu) == pytest.approx(0.0, abs=0.1)


def test_result_table_is_tidy(width_results) -> None:
    d = width_results["mup"].data
    assert list(d.columns[:6]) == ["width", "depth", "seed", "module", "step", "l1"]
    assert len(d) == 4 * 2 * 4 * d["module"].nunique()  # widths × seeds × (steps+1) × modules
    assert np.isfinite(d["l1"]).all() and (d["l1"] > 0).all()
    j = width_results["sp"].to_json_dict()
    assert j["parametrization"] == "sp" and j["passed"] is False
    assert j["slopes"]["blocks.0.mlp"] > 0.5


def test_completep_passes_over_depth_and_mup_fails(batch) -> None:
    results = {}
    for kind in ("mup", "completep"):
        results[kind] = coord_check(
            lambda w, d: GPT(CFG.replace(width=w, depth=d)), batch, kind=kind, widths=(64,),
            depths=(2, 4, 8), steps=3, seeds=3, lr=1e-2)
    assert results["completep"].passed and not results["mup"].passed
    mu_last = results["mup"].slopes.query("module == 'blocks.last' and step == 3")["slope"].item()
    assert mu_last > 0.5  # the residual stream grows with depth without the L^-alpha
    assert "depth_slopes" in results["completep"].to_json_dict()


def test_slope_fit_recovers_known_exponents() -> None:
    rows = [{"width": w, "depth": 0, "seed": s, "module": m, "step": 1, "l1": c * w**e}
            for w in (32, 64, 128) for s in (0, 1)
            for m, c, e in (("a", 2.0, 1.0), ("b", 0.5, -0.5), ("c", 3.0, 0.0))]
    slopes = fit_slopes(pd.DataFrame(rows)).set_index("module")["slope"]
    assert slopes.to_dict() == pytest.approx({"a": 1.0, "b": -0.5, "c": 0.0}, abs=1e-9)


def test_cli_writes_csv_png_json_and_exits_by_verdict(tmp_path, capsys) -> None:
    common = ["--widths", "32,64,128", "--steps", "2", "--n-seeds", "1", "--seq-len", "32",
              "--batch-size", "4", "--quiet"]
    assert main(["coord-check", *common, "--out", str(tmp_path / "mup")]) == 0
    for name in ("coord_check.csv", "coord_check.png", "coord_check.json"):
        assert (tmp_path / "mup" / name).stat().st_size > 0
    verdict = json.loads((tmp_path / "mup" / "coord_check.json").read_text())
    assert verdict["parametrization"] == "mup" and verdict["passed"] is True
    assert set(verdict["slopes"]) >= {"lm_head", "blocks.0.mlp", "wte"}
    assert (tmp_path / "mup" / "coord_check.png").read_bytes()[:4] == b"\x89PNG"
    assert verdict["settings"]["readout_init"] == "fan_in"
    # mup's readout by name: recorded, and its logits get the constant readout's allowance
    assert main(["coord-check", *common, "--readout-init", "constant", "--no-plot",
                 "--out", str(tmp_path / "const")]) == 0
    assert json.loads((tmp_path / "const" / "coord_check.json").read_text())["settings"]["readout_init"] == "constant"
    assert main(["coord-check", *common, "-p", "sp", "--strict", "--out", str(tmp_path / "sp")]) == 1
    assert json.loads((tmp_path / "sp" / "coord_check.json").read_text())["passed"] is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "ntk"], "unknown parametrization 'ntk'"),
        (["--widths", "32,40"], "width 40 is not divisible"),
        (["-p", "completep"], "needs --depths"),
        (["--widths", "32,x"], "'x' is not an integer"),
    ],
)
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, message) -> None:
    out = tmp_path / "out"
    assert main(["coord-check", *argv, "--out", str(out), "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_fan_in_readout_passes_without_the_readouts_vanishing_allowance(width_results) -> None:
    """Under the default readout_init="fan_in" the logits keep one init scale at every
    width (slope ~0 at step 0, where mup's constant-variance readout has its -1/2), and
    the check passes with the readout held to the same ±tol as every other module; the
    constant readout, named, keeps its allowance of -(1/2 + tol)."""
    fan_in, const = width_results["mup"], width_results["mup_constant"]
    assert fan_in.settings["readout_init"] == "fan_in" and fan_in.readout_modules == ()
    assert const.readout_modules == ("lm_head",)
    assert (fan_in.lower_bounds() == -fan_in.tol).all()
    assert fan_in.passed, fan_in.violations()
    s = const.slopes
    low = const.lower_bounds()
    assert (low[(s["axis"] == "width") & (s["module"] == "lm_head")] == -(0.5 + const.tol)).all()
    assert (low[s["module"] != "lm_head"] == -const.tol).all()

    def init_slope(res):
        s = res.slopes
        row = (s["axis"] == "width") & (s["module"] == "lm_head") & (s["step"] == 0)
        return float(s[row]["slope"].iloc[0])

    assert abs(init_slope(fan_in)) < 0.1
    assert init_slope(const) == pytest.approx(-0.5, abs=0.1)


# ---- the tolerance as a function of the ladder ------------------------------------------------


def test_ladder_tol_known_answers_and_limits() -> None:
    # Two widths: the OLS weights are -1, +1, so beta = 64^-1/2 - 32^-1/2.
    assert ladder_tol((32, 64)) == pytest.approx(0.25 + 4.5 * (32**-0.5 - 64**-0.5), abs=1e-12)
    assert ladder_tol((64, 32, 64)) == ladder_tol((32, 64))  # a set of widths, any order
    assert ladder_tol((64,)) == 0.25 and ladder_tol((32, 64), kappa=0.0) == 0.25
    # The README's numbers, shrinking toward tol_inf as the ladder moves up.
    bands = [ladder_tol(tuple(2**k for k in range(lo, lo + 4))) for lo in (5, 6, 7, 20)]
    assert [round(b, 3) for b in bands[:3]] == [0.421, 0.371, 0.335]
    assert bands[0] > bands[1] > bands[2] > bands[3] > 0.25 and bands[3] == pytest.approx(0.25, abs=1e-3)
    for bad in ((0, 32), (-8, 32)):
        with pytest.raises(ValueError, match="widths must be positive"):
            ladder_tol(bad)
    with pytest.raises(ValueError, match="kappa"):
        ladder_tol((32, 64), kappa=-1.0)


@pytest.mark.parametrize("widths", [(32, 64), (32, 64, 128), (32, 64, 128, 256), (64, 128, 256, 512)])
def test_ladder_tol_is_the_slope_of_a_kappa_over_sqrt_width_deviation(widths) -> None:
    """The allowance is what the check's own fit reads off a width-independent law that
    carries the finite-width correction kappa/sqrt(width) in log2: exactly -(tol - tol_inf)."""
    rows = [{"width": w, "depth": 0, "seed": 0, "module": "m", "step": 1,
             "l1": 0.3 * 2 ** (FINITE_WIDTH_KAPPA / math.sqrt(w))} for w in widths]
    slope = fit_slopes(pd.DataFrame(rows))["slope"].item()
    assert slope == pytest.approx(-(ladder_tol(widths) - TOL_INF), abs=1e-9)


def test_coord_check_defaults_to_the_ladder_tolerance(width_results, batch) -> None:
    mu = width_results["mup"]
    assert mu.tol == ladder_tol((32, 64, 128, 256)) and mu.settings["tol_rule"].startswith("ladder")
    assert mu.to_json_dict()["tol"] == mu.tol
    fixed = coord_check(lambda w: GPT(CFG.replace(width=w)), batch, widths=(32, 64), steps=1, seeds=1,
                        tol=0.3)
    assert fixed.tol == 0.3 and fixed.settings["tol_rule"] == "fixed"
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="tol must be a positive finite number"):
            coord_check(lambda w: GPT(CFG.replace(width=w)), batch, widths=(32, 64), steps=1, tol=bad)


VARIANT_WIDTHS = (32, 64, 128, 256)


def _variant_check(name: str) -> CoordCheckResult:
    """The coordinate check of an audit fixture ``fn(width) -> (model, optimizer)``, under
    the ladder tolerance (the audit's own check, on a real next-token batch)."""
    fn = getattr(audit_variants, name)
    x = torch.randint(0, audit_variants.CFG.vocab_size, (4, audit_variants.CFG.seq_len + 1),
                      generator=torch.Generator().manual_seed(0))
    rows = []
    for w in VARIANT_WIDTHS:
        torch.manual_seed(0)
        model, opt = fn(w)
        for step, module, l1, _loss in record_activations(model, opt, (x[:, :-1], x[:, 1:]), gpt_loss,
                                                         default_modules(model), 3):
            rows.append({"width": w, "depth": 0, "seed": 0, "module": module, "step": step, "l1": l1})
    data = pd.DataFrame(rows)
    return CoordCheckResult("mup", data, fit_slopes(data), ladder_tol(VARIANT_WIDTHS), {}, ("lm_head",))


@pytest.mark.parametrize("name", ["ours", "ours_fixed_heads", "table3_form", "mup_mureadout"])
def test_correct_variants_pass_under_the_ladder_tolerance(name: str) -> None:
    r = _variant_check(name)
    assert r.passed, r.violations()


@pytest.mark.parametrize("name", ["hidden_lr_not_scaled", "readout_multiplier_missing", "hf_constant_init",
                                  "tied_scaled_twice"])
def test_broken_variants_still_fail_under_the_ladder_tolerance(name: str) -> None:
    """The wider band on a short ladder from width 32 does not let a wrong exponent through."""
    r = _variant_check(name)
    assert not r.passed
    assert abs(r.worst()["slope"]) > ladder_tol(VARIANT_WIDTHS)
