"""The demo end to end at its 'tiny' size: every artefact, and a resumed re-run."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from mutransfer_cli import main


def test_demo_tiny_writes_report_summary_card_and_reuses_trials(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--size", "tiny", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert set(s["drift_octaves"]) == {"sp", "mup"}
    # SP and μP compare fairly: one seed set, the same grid shape around each arm's expected
    # optimum, extended by the same rule (an optimum at an edge gets up to lr_max_extend
    # LRs past it at the grid's step), and at the base width (one model) the ratio is
    # exactly 1 with no spread
    table = pd.read_csv(out / "results.csv")
    from mutransfer_cli._demo_sizes import SIZES

    tiny = SIZES["tiny"]
    step = tiny.log2_lr_offsets[1] - tiny.log2_lr_offsets[0]
    n_extra = 0
    for (p, w), rows in table.groupby(["parametrization", "width"]):
        assert sorted(rows["seed"].unique()) == list(tiny.seeds)
        grid = [round(x, 9) for x in tiny.log2_lrs(p, w)]
        got = sorted({round(math.log2(x), 9) for x in rows["lr"]})
        assert set(grid) <= set(got), (p, w)
        extra = sorted(set(got) - set(grid))
        assert len(extra) <= tiny.lr_max_extend
        if extra:  # past the edge the original grid's best sat at, one step at a time
            loss = rows.assign(l2=[round(math.log2(x), 9) for x in rows["lr"]]).groupby("l2")["loss"].mean()
            best = float(loss.loc[grid].idxmin())
            low = extra[-1] < grid[0]
            assert best == (grid[0] if low else grid[-1]), (p, w)
            want = [round(grid[0] - step * (i + 1), 9) for i in range(len(extra))] if low else \
                [round(grid[-1] + step * (i + 1), 9) for i in range(len(extra))]
            assert sorted(want) == extra, (p, w)
        n_extra += len(extra) * len(tiny.seeds) * (1 if p == "sp" or w != 32 else 0)
    # the base width's 4 LRs once for both arms, then 4 LRs per arm at each wider width,
    # and the points past an edge
    assert s["n_trials"] == 4 + 3 * 4 * 2 + n_extra and s["ladder_ratio"] == 8
    base_rows = table[table["width"] == 32]
    assert base_rows["shared_base"].all() and (table[table["width"] > 32]["shared_base"] == False).all()  # noqa: E712
    first = s["per_width"][0]
    assert first["width"] == 32 and first["mup_over_sp"] == 1.0 and first["mup_over_sp_ci"] == [1.0, 1.0]
    for r in s["per_width"]:  # the measured best is never below a measured seed mean
        for p in ("sp", "mup"):
            means = table[(table["parametrization"] == p) & (table["width"] == r["width"])].groupby("lr")["loss"]
            assert r[p]["best_loss"] == pytest.approx(means.mean().min())
        assert r["mup_over_sp_ci"][0] <= r["mup_over_sp"] <= r["mup_over_sp_ci"][1]
    assert s["mup_over_sp_measured_best_at_widest"] == s["per_width"][-1]["mup_over_sp"]
    assert s["headline"].startswith("at width 256, muP's best loss is ")
    assert all(v is not None and v >= 0 for v in s["drift_octaves"].values())
    assert s["coord_check"]["sp"]["passed"] is False
    for kind in ("sp", "mup"):  # the coordinate check ran the two seeds it means (0 and 1), not seed 2
        assert set(pd.read_csv(out / "coord_check" / kind / "coord_check.csv")["seed"]) == {0, 1}
    # the scaling stage: 4 batches x 3 LRs at width 32 + 3 LRs at width 64, one row per budget,
    # plus at most one LR past the edge of each batch's LR grid and at most one batch past the
    # batch grid's edge (the tiny size's bound): only 1 sequence, run with 1 micro-batch (32
    # sequences exceed the smallest budget), with its 3 LRs
    sc = s["scaling"]
    assert "error" not in sc, sc.get("error")
    br = sc["bracketing"]
    assert br["max_extend"] == 1 and br["rounds"]["batch"] <= 1 and br["rounds"]["lr"] <= 1
    assert set(sc["batch_sizes"]) - {2, 4, 8, 16} <= {1}
    assert br["extended_trials"] <= 3 * br["rounds"]["batch"] + 5 and len(br["budgets"]) == 4
    assert sc["n_trials"] == 4 * 3 + 3 + br["extended_trials"] and sc["n_rows"] == 4 * sc["n_trials"]
    assert set(sc["laws"]) >= {"lr", "batch", "tau"}
    # the held-out audit: ours trained at the held-out budget and batch, loss gap filled
    h = s["holdout"]
    assert set(h) >= {"lr_ratio", "batch_ratio", "loss_gap"}
    assert set(h["by_axis"]) == {"tokens", "batch_tokens"}
    assert all(isinstance(v, float) and math.isfinite(v) for a in h["by_axis"].values() for v in a.values())
    audit = json.loads((out / "AUDIT.json").read_text())
    ours = [r for r in audit["holdout"] if r["method"] == "ours"]
    assert len(ours) == 2 and all(r["loss_gap"] is not None for r in ours)
    assert {r["method"] for r in audit["holdout"]} >= {"sqrt_rule", "power_lines", "step_law"}
    # the card is for a 24-layer target at the projected batch, not the proxy's
    c, t = s["card"], s["target"]
    assert t["depth"] == 24 and t["width"] == 512
    assert set(c) >= {"batch_tokens", "steps", "lr", "weight_decay", "warmup_tokens"}
    assert c["lr"] > 0 and c["weight_decay"] >= 0 and 0 < c["warmup_tokens"] < t["tokens"]
    assert c["batch_tokens"] == c["batch_sequences"] * t["seq_len"]
    assert abs(c["steps"] * c["batch_tokens"] - t["tokens"]) <= c["batch_tokens"]
    assert set(s["stages"]) >= {"lr_sweep", "scaling_sweep", "holdout_audit", "card"}
    assert all(v["wall_s"] >= 0 and v["cpu_s"] >= 0 for v in s["stages"].values())
    for rel in s["images"].values():
        assert (out / rel).read_bytes()[:4] == b"\x89PNG"
    assert any("B*(D)" in k for k in s["images"]) and any("critical batch" in k for k in s["images"])
    md = (out / "report.md").read_text()
    assert "| SP |" in md and "| muP |" in md and "card.yaml" in md
    assert f"**{s['headline'][0].upper()}{s['headline'][1:]}.**" in md and "| 32 | 2^" in md
    assert "muP / SP [95%, paired]" in md
    # the report leads with how far to trust the card: each value's interval, what narrows it most
    assert md.index("## How far to trust the card") < md.index("## Does the optimal learning rate transfer?")
    assert "- base LR " in md and "narrows most: " in md
    assert "## Held-out audit" in md and "| tokens | ours |" in md and "## The card for the big run" in md
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    assert (out / "card.yaml").exists() and (out / "results.csv").exists()
    assert (out / "scaling_results.csv").exists() and (out / "scaling_fit.json").exists()
    # Re-running reuses the finished trials and the audit's runs: same tables, same numbers.
    before = (out / "results.csv").read_text(), (out / "scaling_results.csv").read_text()
    runs = (out / "audit_runs.json").read_text()
    assert main(["demo", "--size", "tiny", "--out", str(out), "--workers", "1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert ((out / "results.csv").read_text(), (out / "scaling_results.csv").read_text()) == before
    assert (out / "audit_runs.json").read_text() == runs
    assert again["drift_octaves"] == s["drift_octaves"]
    assert again["holdout"] == s["holdout"] and again["card"]["steps"] == c["steps"]


@pytest.mark.slow
def test_demo_on_the_users_hf_config_targets_that_architecture(tmp_path, capsys) -> None:
    """``demo --model hf:PATH``: the user's Llama-shaped config is the proxy of every stage,
    and the card targets the same architecture at the target's width and depth, with HF's
    own parameter names."""
    pytest.importorskip("transformers")
    import yaml

    cfg = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "tie_word_embeddings": False, "max_position_embeddings": 64}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "demo"
    assert main(["demo", "--size", "tiny", "--model", f"hf:{tmp_path}", "--out", str(out), "--quiet"]) == 0
    card = yaml.safe_load((out / "card.yaml").read_text())
    model = card["target"]["model"]
    assert (model["kind"], model["model_type"]) == ("hf", "llama")
    assert (card["target"]["width"], card["target"]["depth"]) == (512, 24)  # the tiny size's target
    assert model["config"]["num_attention_heads"] == 2 * model["config"]["num_key_value_heads"]  # GQA kept
    assert {g["name"] for g in card["param_groups"]} >= {"model.embed_tokens.weight", "lm_head.weight"}
    assert json.loads((out / "summary.json").read_text())["preset"].startswith("hf:")
    assert main(["demo", "--size", "tiny", "--model", "pkg_xyz:build", "--out", str(tmp_path / "b")]) == 2
