"""The card-regret benchmark's proxy optimum and card, on a synthetic scaling fit (known
laws): the card is the one `mutransfer transfer` would write for a target 8x wider, 4x
deeper, on 8x the largest budget, with our B*(D) carrying the batch inside the limit."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from mutransfer.card.build import load_card

SEQ = 16
D_MAX = 2**14


def _fit() -> dict[str, Any]:
    cells = [{"batch_tokens": b, "tokens": d, "lr_opt": 0.01 * (b / 16) ** 0.5, "lr_lo": 0.008,
              "lr_hi": 0.012, "edge": "",
              "loss_opt": 2.5 - 0.1 * math.log2(d / 2048) + 0.01 * abs(math.log2(b / 32))}
             for b in (16, 32, 64, 128) for d in (2048, 4096, 8192, D_MAX)]
    return {"kind": "scaling",
            "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.5, "tokens": -0.25},
                   "ci": {"batch_tokens": [0.4, 0.6], "tokens": [-0.3, -0.2]}},
            "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}, "ci": {"tokens": [0.3, 0.5]}},
            "tau": {"value": 0.2, "ci": [0.15, 0.3]},
            "measured": {"tokens": [2048, D_MAX], "batch_tokens": [16, 128], "seq_len": SEQ},
            "cells": cells, "budgets": [{"tokens": d, "edge": ""} for d in (2048, 4096, 8192, D_MAX)]}


def test_the_card_targets_8x_width_4x_depth_8x_tokens_with_the_fitted_laws(tmp_path: Path) -> None:
    from benchmarks.card_regret import SIZES, proxy_optimum, write_card

    sz = SIZES["cpu"]
    doc = _fit()
    opt = proxy_optimum(doc)
    # the best cell of the largest budget: batch 32 tokens (the loss's minimum), its LR
    assert opt == {"tokens": D_MAX, "batch_tokens": 32, "lr": pytest.approx(0.01 * 2**0.5), "lr_lo": 0.008,
                   "lr_hi": 0.012, "loss": pytest.approx(2.2)}
    cw = write_card(sz, doc, opt, tmp_path)
    card = load_card(tmp_path / "card.yaml")
    assert (card["target"]["width"], card["target"]["depth"]) == (8 * sz.width, 4 * sz.depth)
    assert card["target"]["tokens"] == 8 * D_MAX and card["batch"]["seq_len"] == SEQ
    pz = card["parametrization"]
    assert pz["kind"] == "completep" and pz["base_depth"] == sz.depth
    # batch: our B*(8 D_max) = 2 · (2^17)^0.4 tokens = 221 tokens -> 13.9 sequences; a multiple
    # of 8 (16) is 0.2 octave away, past the rounding tolerance (1/8 octave): a multiple of 2
    b_fit = 2.0 * (8 * D_MAX) ** 0.4
    assert "B*(D)" in card["projected"]["batch_tokens"]["source"]
    assert card["batch"]["sequences"] == 2 * round(b_fit / SEQ / 2) == 14
    # LR: the proxy's optimum moved by (B_t / B_p)^0.5 (D_t / D_p)^-0.25, with B_t held at the
    # largest measured batch (128 tokens; the LR law is not extrapolated in batch)
    b_t = card["batch"]["tokens"]
    assert b_t > 128
    # (the data's LR, before the published laws' prior weighs in: a few % at this tiny target)
    data = card["projected"]["lr"]
    assert data["data"]["value"] == pytest.approx(opt["lr"] * (128 / 32) ** 0.5 * 8**-0.25, rel=1e-12)
    assert data["weight_prior"] < 0.1 and data["value"] == card["optimizer"]["lr"]
    assert cw["plan"].lr == card["optimizer"]["lr"] and cw["tokens"] == 8 * D_MAX
    # the card users get (mutransfer.card.make.make_card): trust first, and the card's own
    # warnings among the projection's, counted in the trust block
    from mutransfer.card.trust import card_warnings

    assert list(card)[:2] == ["schema", "trust"] and card["trust"]["intervals"]["lr"]["value"] == card[
        "optimizer"]["lr"]
    assert set(card_warnings(card)) <= set(card["projected"]["warnings"])
    warnings = card["projected"]["warnings"]
    assert card["trust"]["warnings"] == len(warnings) == len(cw["card"]["projected"]["warnings"])
    assert card["target"]["dtype"] == "float32" and card["schedule"]["decay_shape"] == "linear"


def test_paired_ratio_known_answers() -> None:
    """R = mean(card) ÷ the best other config's mean, seeds resampled together."""
    import numpy as np

    from benchmarks.card_regret import paired_ratio

    best = [2.0, 2.1, 1.9, 2.05]
    worse = [b * 1.01 for b in best]
    r = paired_ratio([b * 1.002 for b in best], [worse, best])
    # every seed scaled alike: the ratio is exact and its interval a point
    assert r["ratio"] == pytest.approx(1.002) and r["ci"] == pytest.approx([1.002, 1.002])
    assert r["per_seed"] == pytest.approx([1.002] * 4) and r["n_seeds"] == 4
    rng = np.random.default_rng(0)
    card = list(np.array(best) * (1 + rng.normal(0, 0.002, 4)))
    r = paired_ratio(card, [best, worse])
    assert r["ci"][0] <= r["ratio"] <= r["ci"][1] and r["ci"][1] - r["ci"][0] > 0
    with pytest.raises(ValueError, match="2 seeds"):
        paired_ratio([2.0], [[2.0]])


def test_runs_trained_in_worker_processes_equal_runs_trained_in_turn(tmp_path: Path) -> None:
    """prefetch trains in 2 spawned processes; the losses equal the in-process runs bit for
    bit and are cached (a second Runner on the same folder trains nothing)."""
    import dataclasses
    import time

    from benchmarks.card_regret import SIZES, Runner

    sz = dataclasses.replace(SIZES["cpu"], eval_sequences=8)
    common = {"tokens": 256.0, "width": 32, "depth": 1, "weight_decay": 0.1, "warmup_tokens": 16,
              "decay_fraction": 0.2}
    runs = [{"where": "target", "parametrization": "completep", "lr": 0.01, "batch": 4, "seed": s, **common}
            for s in (0, 1, 2)]
    par = Runner(sz, tmp_path / "par", time.time() + 600, workers=2)
    par.prefetch(runs)
    got = [par.loss(**kw, cached_only=True) for kw in runs]
    seq = Runner(sz, tmp_path / "seq", time.time() + 600, workers=1)
    assert got == [seq.loss(**kw) for kw in runs] and len(set(got)) == 3
    again = Runner(sz, tmp_path / "par", time.time() - 1, workers=2)  # past its deadline: cache only
    assert [again.loss(**kw) for kw in runs] == got and again.skipped == 0


def test_card_parts_split_the_regret_into_lr_and_batch_and_cost_octaves_on_the_fitted_curve() -> None:
    from benchmarks.card_regret import card_parts

    # loss(b, lr) = base_b + (log2 lr - log2 opt_b)^2 / 100, two seeds offset by 0.01
    opt = {8: 2.0**-7, 16: 2.0**-6.5}
    base = {8: 1.80, 16: 1.83}
    seeds = [0, 1]

    def loss(b: int, lr: float, s: int) -> float:
        return base[b] + (math.log2(lr) - math.log2(opt[b])) ** 2 / 100 + 0.01 * s

    scan = [{"batch_size": b, "lr": 2.0**t, "losses": [loss(b, 2.0**t, s) for s in seeds]}
            for b in (8, 16) for t in [math.log2(opt[b]) + o for o in (-1, -0.5, 0, 0.5, 1)]]
    card_lr = 2.0**-5.5  # one octave above the batch-16 optimum
    record = {"setup": {"seeds": seeds},
              "regret": {"card": {"batch_sequences": 16, "lr": card_lr,
                                  "losses": [loss(16, card_lr, s) for s in seeds]}},
              "scan": scan, "best_by_seed": {str(s): {"loss": loss(8, opt[8], s)} for s in seeds},
              "lr_error_split": {"width_depth": {"octaves": 0.25}, "batch_budget": {"octaves": 0.75}}}
    parts = card_parts(record)
    assert parts is not None
    lr_part = sum(loss(16, card_lr, s) / loss(16, opt[16], s) for s in seeds) / 2
    batch_part = sum(loss(16, opt[16], s) / loss(8, opt[8], s) for s in seeds) / 2
    assert parts["lr_part"] == pytest.approx(lr_part, rel=1e-12)
    assert parts["batch_part"] == pytest.approx(batch_part, rel=1e-12)
    assert parts["lr_opt_at_card_batch"] == pytest.approx(opt[16], rel=1e-6)
    assert parts["lr_error_octaves_at_card_batch"] == pytest.approx(1.0, abs=1e-6)
    # the exact quadratic: one octave off costs 0.01 over the seed-mean optimum 1.835
    assert parts["lr_error_cost"] == pytest.approx(1 + 0.01 / 1.835, rel=1e-9)
    assert parts["width_depth_cost"] == pytest.approx(1 + 0.0625 / 100 / 1.835, rel=1e-9)
    assert parts["batch_budget_cost"] == pytest.approx(1 + 0.5625 / 100 / 1.835, rel=1e-9)
    record["regret"]["card"]["batch_sequences"] = 32  # a batch the scan never ran
    assert card_parts(record) is None


def test_a_card_for_another_target_is_not_judged_at_this_one(tmp_path: Path) -> None:
    """benchmarks.card_decision judges any card at the benchmark's target, and only there."""
    from benchmarks.card_decision import judge

    card = Path(__file__).resolve().parents[1] / "data" / "cards" / "card_v1.yaml"
    with pytest.raises(ValueError, match="is not the benchmark's"):
        judge(card, out=tmp_path)
