"""Whether a card can be stood behind: its values inside their own trust intervals (the batch
rounded inside, or a warning naming the flag that forces it out), a weight decay never
silently 0, a "narrows most" that narrows, :func:`mutransfer.card.trust.objections`, and
``transfer --strict`` leaving no card behind."""

from __future__ import annotations

import copy
import math
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.scaling_fit import ScalingLawFit
from analysis.tau import PUBLISHED_ETA_LAMBDA, PUBLISHED_ETA_LAMBDA_SOURCE
from mutransfer.card.build import load_card
from mutransfer.card.target import resolve_target, transfer_builder
from mutransfer.card.trust import STAND_BEHIND_LR_FACTOR, card_warnings, objections, trust_block, with_prior
from mutransfer.models.presets import get_preset
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer_cli import main

FIT: dict[str, Any] = {
    "kind": "scaling",
    "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.3, "tokens": -0.1},
           "ci": {"batch_tokens": [0.25, 0.35], "tokens": [-0.15, -0.05]}},
    "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}, "ci": {"tokens": [0.35, 0.45]}},
    "tau": {"value": 0.2, "ci": [0.15, 0.3], "source": "measured"},
    "measured": {"tokens": [1e6, 8e6], "batch_tokens": [512, 8192], "seq_len": 64},
}
#: A measured critical batch below B*: the batch is capped there, at its interval's top.
NOISE = {"coef": 0.1, "exponent": 0.5, "law": "B_simple(D) = 0.1 · D^0.5 tokens", "source": "synthetic",
         "measured_tokens": [1e6, 8e6], "by_tokens": []}
PROXY = ["--preset", "gpt-tiny", "--lr", "0.01", "--proxy-batch-tokens", "1024", "--proxy-tokens", "2e6"]
HELD = ("lr", "batch_tokens", "steps", "weight_decay")


@pytest.fixture(scope="module")
def target() -> tuple[Parametrization, Any]:
    proxy = get_preset("gpt-tiny")
    tgt = resolve_target(proxy, overrides={"width": 128}, proxy_preset="gpt-tiny")
    return Parametrization(transfer_builder(tgt, proxy), width=128, base_width=proxy.width, kind="mup"), tgt


# ---- values inside their own intervals ---------------------------------------------------


@pytest.mark.parametrize(("fit", "rule"), [(FIT, "fit"), (FIT, "published"), ({**FIT, "noise_scale": NOISE}, "fit")],
                         ids=["fit", "published", "capped"])
def test_every_value_lies_in_its_own_interval_or_a_warning_names_the_forcing_flag(
        assemble_kw, target, fit: dict[str, Any], rule: str) -> None:
    pz, tgt = target
    laws = ScalingLawFit.from_dict(fit)
    checked = forced = 0
    for tokens in (4e6, 3e7, 2e8, 2.6e9):
        for dp, micro in ((1, None), (3, None), (7, 3), (7, 6), (11, 8), (16, None), (64, 4)):
            kw: dict[str, Any] = {"micro_batch": micro} if micro else {}
            try:
                made = assemble_kw(pz, tgt, proxy_lr=0.01, proxy_lr_interval=(0.008, 0.0125),
                                   proxy_batch_tokens=1024, proxy_tokens=2e6, seq_len=64, tokens=tokens,
                                   laws=laws, dp_size=dp, batch_rule=rule, **kw)
            except ValueError as exc:  # a split larger than the whole budget: refused, named
                assert "below one batch" in str(exc)
                continue
            card = made.card
            iv = card["trust"]["intervals"]
            held = {"lr": card["optimizer"]["lr"], "batch_tokens": card["batch"]["tokens"],
                    "steps": card["schedule"]["total_steps"], "weight_decay": card["optimizer"]["weight_decay"]}
            for key in HELD:
                assert iv[key]["value"] == pytest.approx(held[key], rel=1e-12)
                lo, hi = iv[key]["lo"], iv[key]["hi"]
                if lo is None or hi is None:
                    continue
                checked += 1
                if lo * (1 - 1e-9) <= held[key] <= hi * (1 + 1e-9):
                    continue
                forced += 1
                assert key in ("batch_tokens", "steps"), (key, held[key], lo, hi)
                flags = f"--dp-size {dp}" + (f" × --micro-batch {micro}" if micro else "")
                assert any("outside its own interval" in w and (flags in w or "narrower than one sequence" in w)
                           for w in made.warnings), (tokens, dp, micro, key, made.warnings)
                assert any(key in o and "outside its own interval" in o for o in objections(card))
    assert checked > 60


def test_rounding_takes_a_multiple_inside_the_interval_not_the_nearest_outside(plan_kw) -> None:
    """The published batch law's value is its interval's top (the demo's case: rounded up to
    1,269,760 tokens over an interval ending at 1,266,413): the nearest multiple of dp ×
    micro-batch above it lies outside, the one below inside, and is taken."""
    from analysis.baselines import published_batch

    d = 2.6e7
    low, top = published_batch(d)["lo"] / 64, published_batch(d)["hi"] / 64  # sequences
    dp, micro = next((dp, m) for dp in range(2, 17) for m in range(1, 9)
                     if round(top / (dp * m)) * dp * m > top  # the nearest is above,
                     and (top // (dp * m)) * dp * m >= low)  # one below is inside
    plan = plan_kw(proxy_lr=0.01, proxy_batch_tokens=1024.0, proxy_tokens=2e6, seq_len=64, tokens=d,
                   laws=ScalingLawFit.from_dict(FIT), batch_rule="published", dp_size=dp, micro_batch=micro)
    b = plan.projected["batch_tokens"]
    assert b["value"] == pytest.approx(b["hi"])
    assert plan.batch_sequences == (top // (dp * micro)) * dp * micro
    assert b["lo"] <= plan.batch_tokens <= b["hi"]
    assert not any("outside its own interval" in w for w in plan.warnings)


# ---- weight decay never silently 0 -------------------------------------------------------


def test_weight_decay_without_a_tau_takes_the_published_rule_and_says_so(plan_kw) -> None:
    kw = {"proxy_lr": 0.016, "seq_len": 64, "tokens": 1e8, "batch_sequences": 256}
    plan = plan_kw(**kw)
    assert plan.weight_decay == pytest.approx(PUBLISHED_ETA_LAMBDA / 0.016) and plan.weight_decay > 0
    assert PUBLISHED_ETA_LAMBDA_SOURCE in plan.projected["weight_decay"]["source"]
    assert any(w.startswith("weight decay not optimised: none was given") for w in plan.warnings)
    given = plan_kw(weight_decay=0.0, **kw)  # a given 0 stays 0, said as given
    assert given.weight_decay == 0 and given.projected["weight_decay"]["source"] == "given (--weight-decay)"
    assert not any("weight decay" in w for w in given.warnings)
    tuned = plan_kw(proxy_weight_decay=0.0, **kw)  # tuned without decay: kept, said in its source
    assert tuned.weight_decay == 0 and "tuned proxy's weight decay 0" in tuned.projected["weight_decay"]["source"]


def test_transfer_without_weight_decay_flag_writes_the_published_rule(tmp_path: Path, capsys) -> None:
    out = tmp_path / "card.yaml"
    assert main(["transfer", *PROXY, "--set", "width=256", "--tokens", "1e6", "--batch-size", "16",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    card = load_card(out)
    assert card["optimizer"]["weight_decay"] == pytest.approx(PUBLISHED_ETA_LAMBDA / card["optimizer"]["lr"])
    assert PUBLISHED_ETA_LAMBDA_SOURCE in card["projected"]["weight_decay"]["source"]
    assert "warning: weight decay not optimised" in err


# ---- narrows most ------------------------------------------------------------------------


def test_narrows_most_never_widens_the_lr_interval(plan_kw) -> None:
    seen = 0
    for a_ci in ((0.25, 0.35), (0.0, 0.6), (0.29, 0.31)):
        for b_ci in ((-0.15, -0.05), (-0.4, 0.2), (-0.11, -0.09)):
            laws = ScalingLawFit.from_dict({**FIT, "lr": {**FIT["lr"], "ci": {"batch_tokens": list(a_ci),
                                                                             "tokens": list(b_ci)}}})
            for tokens in (3e7, 1e9, 2.6e10):
                for proxy_iv in ((0.008, 0.0125), (0.00999, 0.01001)):
                    plan = plan_kw(proxy_lr=0.01, proxy_lr_interval=proxy_iv, proxy_batch_tokens=1024.0,
                                   proxy_tokens=2e6, seq_len=64, tokens=tokens, laws=laws, batch_rule="fit",
                                   extrapolation_limit=1e6)
                    t = trust_block(projected=plan.projected, laws=laws, proxy_lr_interval=proxy_iv, seq_len=64,
                                    proxy_lr=0.01, proxy_batch_tokens=1024.0, proxy_tokens=2e6,
                                    batch_tokens=plan.batch_tokens, tokens=tokens, steps=plan.steps,
                                    n_warnings=0)
                    best, factor = t["narrows_most"], t["intervals"]["lr"]["factor"]
                    if best is not None:
                        seen += 1
                        assert best["lr_factor"] < factor, (a_ci, b_ci, tokens, best, factor)
                    elif t["options"]:
                        assert any("no extra budget or batch narrows" in s and "more seeds" in s
                                   for s in t["summary"])
    assert seen > 0


# ---- objections --------------------------------------------------------------------------


def _audit(tmp_path: Path) -> Path:
    row = {"method": "ours", "axis": "tokens", "pred_lr": 0.011, "meas_lr": 0.01, "lr_ratio": 1.1,
           "pred_batch_tokens": 1024, "meas_batch_tokens": 1024, "batch_ratio": 1.0, "loss_gap": 0.001}
    path = tmp_path / "audit.json"
    path.write_text(json.dumps([row]))
    return path


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A card the tool stands behind: scaling fit, audit passed, values inside their intervals."""
    tmp = tmp_path_factory.mktemp("clean")
    fit = tmp / "fit.json"
    fit.write_text(json.dumps(FIT))
    out = tmp / "card.yaml"
    assert main(["transfer", *PROXY, "--set", "width=256", "--tokens", "4e6", "--scaling-fit", str(fit),
                 "--audit", str(_audit(tmp)), "--out", str(out)]) == 0
    return load_card(out)


def test_objections_empty_for_a_clean_card_and_one_sentence_per_reason(clean: dict[str, Any]) -> None:
    assert objections(clean) == []
    iv = clean["trust"]["intervals"]
    for section, name, key in (("optimizer", "lr", "lr"), ("batch", "tokens", "batch_tokens"),
                               ("schedule", "total_steps", "steps"), ("optimizer", "weight_decay", "weight_decay")):
        card = copy.deepcopy(clean)
        card[section][name] = iv[key]["hi"] * 2
        (o,) = objections(card)
        assert o.startswith(f"{section}.{name} ") and f"trust.intervals.{key}" in o
    card = copy.deepcopy(clean)  # a wide LR interval (1000x) is a warning's business, not an objection
    card["trust"]["intervals"]["lr"].update(lo=clean["optimizer"]["lr"] / 100, hi=clean["optimizer"]["lr"] * 10)
    assert objections(card) == []


def test_objection_for_an_lr_far_from_the_published_ones(clean: dict[str, Any]) -> None:
    hidden = max(g["lr"] for g in clean["param_groups"] if g["role"] == "hidden")
    for f, objected in ((STAND_BEHIND_LR_FACTOR * 2, True), (STAND_BEHIND_LR_FACTOR / 2, False)):
        card = copy.deepcopy(clean)
        for k in ("deepseek", "step_law"):
            card["projected"]["baselines"][k]["lr"] = hidden / f
        said = objections(card)
        assert bool(said) is objected
        if objected:
            assert said[0].startswith(f"the hidden matrices' Adam LR {hidden:.3g} is {f:.3g}x above")


def test_a_far_lr_the_data_demand_is_said_with_numbers_not_objected(clean: dict[str, Any]) -> None:
    """30x from the published laws: an objection when the card's data interval reaches the
    published prior (the prior should have pulled it closer); a warning naming both
    intervals when the data's own interval excludes the prior's (the data demand it)."""
    hidden = max(g["lr"] for g in clean["param_groups"] if g["role"] == "hidden")
    lr = clean["optimizer"]["lr"]
    for gap_data, demanded in ((0.5, True), (3.0, False)):
        card = copy.deepcopy(clean)
        for k in ("deepseek", "step_law"):
            card["projected"]["baselines"][k]["lr"] = hidden * 30
        # the prior's 90% interval (base units) sits 30x above; the data's reaches up to gap_data x it
        p = card["projected"]["lr"]
        p["prior"] = {"value": lr * 30, "lo": lr * 30 / 4, "hi": lr * 120, "sd_log": 0.8}
        p["data"] = {"value": lr, "lo": lr / 2, "hi": lr * 30 / 4 * gap_data}
        p["weight_prior"] = 0.04
        said = objections(card)
        warned = [w for w in card_warnings(card) if "published LRs" in w]
        assert len(warned) == 1
        if demanded:
            assert said == []
            assert "the data demand it" in warned[0] and "2x below the published laws' prior" in warned[0]
            assert "4.0%" in warned[0]
        else:
            assert len(said) == 1 and "the data do not demand it" in said[0]


@given(st.floats(1.0, 1e4), st.floats(0.01, 5.0))
def test_weighing_with_the_prior_never_widens_an_interval(factor: float, prior_sd: float) -> None:
    narrowed = with_prior(factor, prior_sd, 0.9)
    assert narrowed <= factor * (1 + 1e-12)
    assert with_prior(factor, None, 0.9) == factor
    # monotone: a narrower data interval stays narrower after the same prior
    assert with_prior(factor / 2 if factor > 2 else factor, prior_sd, 0.9) <= narrowed * (1 + 1e-12)


def test_objection_for_an_audit_failed_missing_or_incomplete(clean: dict[str, Any]) -> None:
    for audit, words in (({"passed": False}, "the held-out audit failed"),
                         ({"holdout": [], "passed": None}, "the held-out audit is missing"),
                         ({"passed": None}, "the held-out audit is incomplete")):
        card = copy.deepcopy(clean)
        card["audit"].update(audit)
        (o,) = objections(card)
        assert o.startswith(words), o
    card = copy.deepcopy(clean)
    del card["audit"]
    assert objections(card)[0].startswith("the held-out audit is missing")
    v1 = load_card(Path(__file__).parents[2] / "data" / "cards" / "card_v1.yaml")  # no trust, no audit
    assert [o.split(":")[0] for o in objections(v1)] == ["the held-out audit is missing (no --audit)"]


# ---- --strict ----------------------------------------------------------------------------


def test_strict_writes_no_card_it_does_not_stand_behind(tmp_path: Path, capsys) -> None:
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(FIT))
    out = tmp_path / "card.yaml"
    # an LR whose hidden matrices land within 2x of the published LRs: no warning at 4e6 tokens;
    # a batch of 4,096 tokens keeps the run (977 steps) inside the longest horizon measured
    # (MEASURED_HORIZON, 1,000 steps), past which the card warns
    base = ["transfer", *PROXY[:3], "0.025", *PROXY[4:], "--set", "width=256", "--scaling-fit", str(fit),
            "--audit", str(_audit(tmp_path)), "--out", str(out)]
    assert main([*base, "--tokens", "4e6", "--batch-tokens", "4096", "--strict"]) == 0  # stood behind
    assert out.exists()  # written
    capsys.readouterr()
    out.unlink()
    assert main([*base, "--tokens", "2e9", "--strict"]) == 1  # 250x past the measured budgets
    err = capsys.readouterr().err
    assert not out.exists()
    lines = err.strip().splitlines()
    assert any(ln.startswith("mutransfer transfer: warning: the target's tokens lies") for ln in lines)
    assert lines[-1].startswith("mutransfer transfer: --strict: ") and "no card was written to" in lines[-1]
    assert "trust:" not in err  # nothing reads as if a card were there
    out.write_text("an older card\n")  # an existing file is neither replaced nor removed, and said so
    assert main([*base, "--tokens", "2e9", "--strict"]) == 1
    assert out.read_text() == "an older card\n" and "older card, left as it was" in capsys.readouterr().err


def test_another_seed_narrows_by_the_variance_of_a_mean_and_never_widens() -> None:
    """The option tune's second pass buys: n seeds -> n + 1 shrinks the bootstrap covariance
    and the anchor's log-width as n/(n+1) (its square root for the width); the misfit stays."""
    doc = {**FIT, "lr": {**FIT["lr"], "cov_log": [[0.01, 0, 0], [0, 0.05**2, 0], [0, 0, 0.02**2]],
                         "misfit": {"sd_log": 0.1, "dof": 20, "cov_log": [[0.001, 0, 0], [0, 1e-4, 0], [0, 0, 1e-4]]}},
           "batch": {**FIT["batch"], "cov_log": [[0.04, 0.0], [0.0, 1e-4]]}}
    laws = ScalingLawFit.from_dict(doc)
    laws.n_seeds_ = 2
    proj = {"lr": {"value": 0.01, "lo": 0.005, "hi": 0.02, "level": 0.9},
            "batch_tokens": {"value": 2e4, "lo": 1e4, "hi": 4e4}}
    tb = trust_block(projected=proj, laws=laws, proxy_lr_interval=[0.005, 0.02], proxy_lr=0.01,
                     proxy_batch_tokens=1024, proxy_tokens=2e6, batch_tokens=2e4, tokens=1e9, steps=50_000,
                     n_warnings=0)
    (seed,) = [o for o in tb["options"] if o["kind"] == "seed"]
    assert seed["seeds"] == 3 and seed["measurement"].startswith("another seed of the scaling sweep")
    b_law = laws.lr_batch(2e4, 1e9)
    _, lo, hi = laws.lr_ratio((1024, b_law), (2e6, 1e9), boot_scale=2 / 3)
    assert seed["lr_factor"] == pytest.approx(4 ** math.sqrt(2 / 3) * hi / lo, rel=1e-12)
    _, lo1, hi1 = laws.lr_ratio((1024, b_law), (2e6, 1e9))
    assert seed["lr_factor"] < 4 * hi1 / lo1
    # the misfit does not shrink with seeds: even infinitely many leave the misfit's band
    _, lo0, hi0 = laws.lr_ratio((1024, b_law), (2e6, 1e9), boot_scale=0.0)
    assert hi0 / lo0 > 1.2


def test_the_card_shows_data_prior_and_result_and_the_prior_can_be_left_out(tmp_path: Path) -> None:
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(FIT))
    cards = {}
    for flag in ([], ["--no-published-prior"]):
        out = tmp_path / f"card{len(flag)}.yaml"
        assert main(["transfer", *PROXY, "--set", "width=256", "--tokens", "4e6", "--scaling-fit", str(fit),
                     *flag, "--out", str(out)]) == 0
        cards[bool(flag)] = load_card(out)
    weighed, alone = cards[False], cards[True]
    lr = weighed["projected"]["lr"]
    assert set(lr) >= {"data", "prior", "weight_prior"} and "prior" not in alone["projected"]["lr"]
    # without the prior the card's LR is the data's; with it, between the data's and the prior's
    assert alone["optimizer"]["lr"] == pytest.approx(lr["data"]["value"], rel=1e-12)
    lo, hi = sorted((lr["data"]["value"], lr["prior"]["value"]))
    assert lo <= weighed["optimizer"]["lr"] <= hi
    line = [s for s in weighed["trust"]["summary"] if s.strip().startswith("base LR from the data")]
    assert len(line) == 1 and "published laws' prior" in line[0] and "toward the prior" in line[0]


# ---- the horizon -------------------------------------------------------------------------


def test_card_warns_past_the_longest_measured_horizon(tmp_path: Path) -> None:
    """Known answer: the proxy ran 2e6 / 1024 = 1,953 steps; a target of 4e7 tokens at 4,096
    per step runs 9,766 steps, 9.77x past the 1,000 steps at which width transfer was
    measured (MEASURED_HORIZON): warned, with both numbers, and flagged in trust.horizon.
    The same target on 4e6 tokens (977 steps) is within it: no warning, beyond false."""
    from mutransfer.card.trust import MEASURED_HORIZON, horizon

    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(FIT))
    cards = {}
    for tokens in ("4e6", "4e7"):
        out = tmp_path / f"card_{tokens}.yaml"
        assert main(["transfer", *PROXY[:3], "0.025", *PROXY[4:], "--set", "width=256", "--scaling-fit",
                     str(fit), "--batch-tokens", "4096", "--tokens", tokens, "--out", str(out)]) == 0
        cards[tokens] = load_card(out)
    assert MEASURED_HORIZON["steps"] == 1000
    within, past = cards["4e6"], cards["4e7"]
    h = past["trust"]["horizon"]
    assert (h["target_steps"], h["proxy_steps"], h["measured_steps"], h["beyond"]) == (9766, 1953, 1000, True)
    assert h["past_measured"] == pytest.approx(9.766) and h["past_proxy"] == pytest.approx(9766 / 1953.125)
    said = [w for w in past["projected"]["warnings"] if w.startswith("the target runs")]
    assert said == [w for w in card_warnings(past) if w.startswith("the target runs")]
    (w,) = said
    assert w.startswith("the target runs 9,766 steps, 9.77x past the longest horizon at which width transfer "
                        "was measured (1,000 steps: drift 0.07 octave [0, 0.5], "
                        "benchmarks/results/readout_ladder_1000_steps.json); the proxy ran 1,953 steps "
                        "(5x shorter)"), w
    assert any(ln.startswith("horizon: 9,766 steps, 9.77x past") for ln in past["trust"]["summary"])
    h = within["trust"]["horizon"]
    assert (h["target_steps"], h["beyond"]) == (977, False) and h["past_measured"] == pytest.approx(0.977)
    assert not any("the target runs" in w for w in within["projected"]["warnings"] + card_warnings(within))
    assert not any(ln.startswith("horizon:") for ln in within["trust"]["summary"])
    # the boundary: a run of exactly the measured horizon is within it, one step more is past
    assert not horizon(1000)["beyond"] and horizon(1001)["beyond"] and horizon(1001)["proxy_steps"] is None
    with pytest.raises(ValueError, match="the target's steps must be a positive number, got 0"):
        horizon(0)
