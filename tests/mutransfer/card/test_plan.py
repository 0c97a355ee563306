"""The card's run plan and the analysis projection are one source.

A scaling fit is made on a sweep with known laws, written as FIT.json and read back by
its own reader; the card's plan (library and ``mutransfer transfer``) and
``ScalingLawFit.project`` must then give the same LR, steps, weight decay, tau, warmup and
decay fraction, and the plan's B*(D) must be the fit's ``batch_at``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.scaling_fit import ScalingLawFit
from mutransfer.card.build import load_card
from mutransfer.card.plan import read_scaling_fit
from mutransfer_cli import main

SEQ = 64
C_ETA, A, B_EXP, C_B, G = 2.0**-12, 0.5, -0.25, 2.0**4, 0.5
B_P, D_P, D_T = 2.0**14, 2.0**21, 2.0**24


def _sweep() -> pd.DataFrame:
    """loss = 3 + 50·D^-0.3 + 0.02·(log2 eta − log2 eta*)² + 0.01·(log2 B − log2 B*)² + noise,
    with eta* = 2^-12·B^0.5·D^-0.25 and B* = 16·D^0.5 (2 seeds, weight decay 0.1)."""
    r = np.random.default_rng(0)
    rows = []
    for d in (2.0**20, 2.0**21, 2.0**22, 2.0**23):
        for b in (2.0**k for k in range(12, 18)):
            eta = C_ETA * b**A * d**B_EXP
            for t in np.arange(-14.0, -5.5):
                for s in range(2):
                    loss = (3 + 50 * d**-0.3 + 0.02 * (t - math.log2(eta)) ** 2
                            + 0.01 * (math.log2(b) - 0.5 * math.log2(d) - 4) ** 2 + r.normal(0, 0.002))
                    rows.append(dict(lr=2.0**t, batch_tokens=b, tokens=d, loss=loss, seed=s,
                                     diverged=False, weight_decay=0.1, seq_len=SEQ))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[ScalingLawFit, Path]:
    fit = ScalingLawFit(n_boot=200, loso=False).fit(_sweep())
    path = tmp_path_factory.mktemp("fit") / "FIT.json"
    path.write_text(json.dumps(fit.to_dict()))
    return fit, path


def test_plan_equals_the_projection(plan_kw, fitted: tuple[ScalingLawFit, Path]) -> None:
    fit, path = fitted
    laws = read_scaling_fit(path)
    assert isinstance(laws, ScalingLawFit)
    proxy_lr = float(fit.predict_lr(B_P, D_P)[0])  # the proxy sits on the law: the plan must land on it
    plan = plan_kw(proxy_lr=proxy_lr, proxy_lr_interval=None, tokens=D_T, seq_len=SEQ, laws=laws,
                    proxy_batch_tokens=B_P, proxy_tokens=D_P, batch_rule="fit", n_params=1e7)
    b_star, lo, hi = fit.batch_at(D_T)
    est = plan.projected["batch_tokens"]
    assert (est["value"], est["lo"], est["hi"]) == pytest.approx((b_star, lo, hi), rel=1e-12)
    assert plan.batch_sequences == max(8, round(b_star / SEQ / 8) * 8)  # whole steps of dp 1 × 8
    proj = fit.project(D_T, n_params=1e7, seq_len=SEQ, batch_sequences=plan.batch_sequences)
    assert proj.batch_tokens.value == plan.batch_tokens
    assert plan.lr == pytest.approx(proj.lr.value, rel=1e-12)
    assert plan.steps == proj.steps
    assert plan.tau == pytest.approx(proj.tau.value, rel=1e-12)
    assert plan.weight_decay == pytest.approx(proj.weight_decay.value, rel=1e-12)
    assert plan.warmup_tokens == pytest.approx(proj.warmup_tokens.value, rel=1e-12)
    assert plan.decay_fraction == proj.decay_fraction.value
    # the LR ratio's band is the law's band at x = (0, ln B_t/B_p, ln D_t/D_p)
    r, r_lo, r_hi = laws.lr_ratio((B_P, plan.batch_tokens), (D_P, D_T))
    p_t, lo_t, hi_t = (float(v[0]) for v in fit.lr_interval(plan.batch_tokens, D_T))
    assert r == pytest.approx(p_t / proxy_lr, rel=1e-12) and r_lo < r < r_hi


def test_card_equals_the_projection(fitted: tuple[ScalingLawFit, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    fit, path = fitted
    proxy_lr = float(fit.predict_lr(B_P, D_P)[0])
    out = tmp_path / "card.yaml"
    code = main(["transfer", "--preset", "gpt-tiny", "--lr", repr(proxy_lr),
                 "--proxy-batch-tokens", repr(B_P),
                 "--proxy-tokens", repr(D_P), "--tokens", repr(D_T), "--scaling-fit", str(path),
                 "--batch-rule", "fit", "--set", "width=256", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    card = load_card(out)
    seqs = card["batch"]["sequences"]
    proj = fit.project(D_T, n_params=card["target"]["n_params_nonembed"], seq_len=SEQ, batch_sequences=seqs)
    assert card["projected"]["lr"]["data"]["value"] == pytest.approx(proj.lr.value, rel=1e-9)
    assert card["schedule"]["total_steps"] == proj.steps
    assert card["optimizer"]["tau"] == pytest.approx(proj.tau.value, rel=1e-9)
    # lambda = B / (eta·tau·D) at the card's LR (the data's weighed with the published prior)
    shift = proj.lr.value / card["optimizer"]["lr"]
    assert card["optimizer"]["weight_decay"] == pytest.approx(proj.weight_decay.value * shift, rel=1e-9)
    assert card["schedule"]["warmup_tokens"] == pytest.approx(proj.warmup_tokens.value, rel=1e-9)
    assert card["schedule"]["decay_fraction"] == proj.decay_fraction.value
    assert card["projected"]["batch_tokens"]["value"] == pytest.approx(fit.batch_at(D_T)[0], rel=1e-9)


@pytest.mark.parametrize(("kw", "exc", "needle"), [
    ({"seq_len": 0}, ValueError, "seq_len must be an integer >= 1, got 0"),  # was a ZeroDivisionError
    ({"seq_len": "64"}, TypeError, "seq_len must be an integer >= 1, got str '64'"),
    ({"seq_len": None}, TypeError, "seq_len must be an integer >= 1, got NoneType None"),
    ({"seq_len": 64.5}, TypeError, "seq_len must be an integer >= 1, got float 64.5"),
    ({"tokens": None}, TypeError, "tokens must be a positive finite number, got NoneType None"),
    ({"tokens": "1e8"}, TypeError, "tokens must be a positive finite number, got str '1e8'"),
    ({"tokens": 0.0}, ValueError, "tokens must be a positive finite number, got 0.0"),
    ({"n_params": -1}, ValueError, "n_params must be a positive finite number, got -1"),
    ({"run": None}, TypeError, "run must be a RunChoices, got NoneType"),
])
def test_plan_run_names_a_bad_argument_before_any_arithmetic(kw, exc, needle) -> None:
    from mutransfer.card.plan import plan_run
    from mutransfer.card.request import ProxyPoint, RunChoices

    args: dict[str, Any] = {"run": RunChoices(batch_sequences=8), "tokens": 1e8, "seq_len": 64, **kw}
    with pytest.raises(exc) as e:
        plan_run(ProxyPoint(lr=0.01), args.pop("run"), **args)
    assert needle in str(e.value) and type(e.value) is exc


@pytest.mark.parametrize(("kw", "exc", "needle"), [
    ({"betas": (0.9,)}, ValueError, "proxy betas must be a pair (beta1, beta2), got (0.9,)"),
    ({"lr_interval": 5}, ValueError, "proxy lr_interval must be a pair [lo, hi]"),
    ({"lr": None}, ValueError, "proxy lr must be a positive finite number, got None"),
    ({"role_lr_mults": 5}, TypeError, "proxy role_lr_mults must be a mapping of role -> LR multiplier, got 5"),
    ({"role_lr_mults": {"output": -1}}, ValueError, "proxy role_lr_mults['output'] must be a finite number > 0"),
    ({"batch_tokens": -1}, ValueError, "proxy batch_tokens must be a finite number > 0, got -1"),
])
def test_a_bad_proxy_point_names_its_field(kw, exc, needle) -> None:
    from mutransfer.card.request import ProxyPoint

    with pytest.raises(exc) as e:
        ProxyPoint(**{"lr": 0.01, **kw})
    assert needle in str(e.value)


def test_a_surge_law_is_evaluated_at_the_targets_batch_with_no_hold(
        plan_kw, fitted: tuple[ScalingLawFit, Path], tmp_path: Path) -> None:
    """A FIT.json whose LR law chose the surge form (eta_max = 2^-3·D^-0.25, B_peak = 2^-5·D):
    the plan moves the proxy's LR by the surge's own ratio to a batch 16x past the largest
    measured one (the LR falls past the peak), never by the held power law."""
    fit, _ = fitted
    doc = fit.to_dict()
    zeros = np.zeros((4, 4)).tolist()
    theta = [math.log(2.0**-3), -0.25, math.log(2.0**-5), 1.0]
    doc["lr"] = {**doc["lr"], "form": "surge",
                 "surge": {"coef_log": theta, "cov_log": zeros, "misfit": {"sd_log": 0.1, "dof": 20, "cov_log": zeros}}}
    path = tmp_path / "FIT.json"
    path.write_text(json.dumps(doc))
    laws = read_scaling_fit(path)
    assert laws.lr_form == "surge"
    b_t = 16 * fit.measured_batch_tokens[1]
    plan = plan_kw(proxy_lr=0.01, proxy_lr_interval=None, tokens=D_T, seq_len=SEQ, laws=laws,
                   proxy_batch_tokens=B_P, proxy_tokens=D_P, batch_sequences=int(b_t / SEQ), n_params=1e7)

    def surge(b: float, d: float) -> float:
        bp, em = 2.0**-5 * d, 2.0**-3 * d**-0.25
        return 2 * em / (math.sqrt(bp / b) + math.sqrt(b / bp))

    assert plan.batch_tokens == b_t
    assert plan.lr == pytest.approx(0.01 * surge(b_t, D_T) / surge(B_P, D_P), rel=1e-9)
    assert surge(b_t, D_T) < surge(2.0**-5 * D_T, D_T)  # past the peak: below the LR at the peak
    src = plan.projected["lr"]["source"]
    assert "surge form" in src and "saturation batch" not in src
    assert not any("LR law is held" in w for w in plan.warnings), plan.warnings
    lo, hi = plan.projected["lr"]["lo"], plan.projected["lr"]["hi"]
    assert lo < plan.lr < hi and math.isfinite(hi / lo)
