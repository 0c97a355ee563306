from __future__ import annotations

import json

import numpy as np
import pytest

from analysis import project
from analysis.loss_law import ChinchillaFit, LossPrediction
from analysis.powerlaw import PowerLawFit

WIDTHS = np.array([128.0, 256, 512, 1024])


@pytest.fixture(scope="module")
def laws() -> dict[str, PowerLawFit]:
    rng = np.random.default_rng(0)
    lr = PowerLawFit("width", "lr", n_boot=50).fit(
        WIDTHS, 3e-3 * (WIDTHS / 128) ** -0.02 * np.exp(rng.normal(0, 0.02, 4)))
    tokens = np.geomspace(1e8, 1e10, 6)
    batch = PowerLawFit("tokens", "batch_size", n_boot=50).fit(
        tokens, 0.6 * tokens**0.3 * np.exp(rng.normal(0, 0.05, 6)))
    cbs = PowerLawFit("tokens", "CBS", n_boot=50).fit(
        tokens, 0.5 * tokens**0.35 * np.exp(rng.normal(0, 0.05, 6)))
    return {"lr": lr, "batch_size": batch, "critical_batch": cbs}


def test_projection_values_intervals_and_steps(laws: dict[str, PowerLawFit]) -> None:
    target = {"width": 2048, "tokens": 2e10, "seq_len": 1024}
    p = project(target, **laws, reference={"lr": 3e-3, "batch_size": 64})
    lr = p.values["lr"]
    assert lr.lo < lr.value < lr.hi
    assert lr.value == pytest.approx(laws["lr"].predict(2048)[0])
    bs = p.values["batch_size"]
    steps = p.values["steps"]
    assert steps.value == pytest.approx(2e10 / (bs.value * 1024))
    assert steps.lo == pytest.approx(2e10 / (bs.hi * 1024))
    assert p.values["warmup_steps"].value == pytest.approx(0.01 * steps.value)
    assert "rule of thumb" in p.values["warmup_steps"].source
    assert not p.extrapolated  # 2048 is 2x the largest width, 2e10 is 2x the largest D
    # Textbook baselines sit beside the fitted LR, they do not replace it.
    ratio = bs.value / 64
    assert p.baselines["lr_sgd_linear"]["value"] == pytest.approx(3e-3 * ratio)
    assert p.baselines["lr_adam_sqrt"]["value"] == pytest.approx(3e-3 * ratio**0.5)
    assert p.values["lr"].value != pytest.approx(p.baselines["lr_adam_sqrt"]["value"])


def test_extrapolation_beyond_k_is_flagged(laws: dict[str, PowerLawFit]) -> None:
    p = project({"width": 65536}, lr=laws["lr"])
    assert p.extrapolated
    assert p.values["lr"].extrapolation == pytest.approx(64.0)
    assert any("lr is extrapolated 64" in w for w in p.warnings)
    assert not project({"width": 65536}, lr=laws["lr"], k=100).extrapolated


def test_to_dict_is_json_safe(laws: dict[str, PowerLawFit]) -> None:
    p = project({"width": 4096, "tokens": 1e11, "seq_len": 2048}, **laws)
    d = p.to_dict()
    text = json.dumps(d, allow_nan=False)
    back = json.loads(text)
    assert back["values"]["lr"]["value"] == pytest.approx(p.values["lr"].value)
    assert set(back["values"]["lr"]) == {"value", "lo", "hi", "level", "source",
                                         "extrapolation"}
    assert isinstance(back["extrapolated"], bool)
    assert "WARNING" in p.report() or not p.warnings


def test_batch_above_critical_batch_warns(laws: dict[str, PowerLawFit]) -> None:
    p = project({"tokens": 1e9, "batch_size": 1e6, "seq_len": 512},
                critical_batch=laws["critical_batch"])
    assert any("exceeds the projected critical batch" in w for w in p.warnings)


def test_missing_target_value_is_named(laws: dict[str, PowerLawFit]) -> None:
    with pytest.raises(ValueError, match=r"\['width'\]"):
        project({"tokens": 1e9}, lr=laws["lr"])
    with pytest.raises(ValueError, match="width=-1"):
        project({"width": -1}, lr=laws["lr"])
    with pytest.raises(ValueError, match="at least one fit"):
        project({"width": 1})


def test_compute_target_uses_chinchilla_allocation() -> None:
    fit = ChinchillaFit(n_boot=0)
    fit.params_ = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
    fit.boot_ = np.empty((0, 5))
    fit.x_range_ = {"n_params": (1e7, 1e10), "tokens": (1e9, 1e12)}
    fit.predict = lambda n, d, level=None: LossPrediction(  # type: ignore[method-assign]
        np.atleast_1d(1.69 + 406.4 / n**0.34 + 410.7 / d**0.28),
        np.atleast_1d(1.6), np.atleast_1d(1.8), 0.9)
    p = project({"compute": 1e21}, loss=fit)
    n, d = p.values["n_params"].value, p.values["tokens"].value
    assert 6 * n * d == pytest.approx(1e21)
    assert p.target["n_params"] == pytest.approx(n)
    assert p.values["loss"].value == pytest.approx(1.69 + 406.4 / n**0.34 + 410.7 / d**0.28)
