"""The demo end to end at its 'tiny' size: every artefact, and a resumed re-run."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from mutransfer_cli import main


def test_the_demo_is_tune_with_sp_beside_mup_and_a_budget(tmp_path, capsys) -> None:
    """``demo --size tiny`` is ``tune`` on the embedded corpus with the size's budget and SP
    beside μP: tune's plan (every choice with its reason) places every run, SP and μP get
    the same seeds, steps and grid shape, the card is written only when tune stands behind
    it (else card.rejected.yaml, the objections and exit 1), and a re-run resumes."""
    from mutransfer_cli._demo_sizes import SIZES

    out = tmp_path / "demo"
    assert main(["demo", "--size", "tiny", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    s = json.loads((out / "summary.json").read_text())
    code = 0 if s["card"]["written"] else 1  # tune's verdict; the demo exits 0 with its report
    plan = json.loads((out / "plan.json").read_text())
    tuned = json.loads((out / "tune.json").read_text())
    # tune made every choice, for the demo's budget, with SP's ladder in its cost
    assert plan["inputs"]["budget_s"] == SIZES["tiny"].budget_s == s["budget_s"]
    assert plan["inputs"]["compare_sp"] is True and "SP beside muP" in plan["plan"]["reasons"]["widths"]
    assert s["widths"] == plan["plan"]["widths"] and s["steps"] == plan["plan"]["steps"]
    # SP and μP compare fairly: the same seeds and steps, the same grid shape around each
    # arm's centre (μP's at the coarse search's optimum, SP's moved as base/width), widened
    # past an edge by the same rule; at the base width one set of runs serves both (ratio 1)
    table = pd.read_csv(out / "results.csv")
    centre, base = tuned["search"]["centre_log2_lr"], plan["plan"]["widths"][0]
    offsets = plan["plan"]["ladder_offsets"]
    for (p, w), rows in table.groupby(["parametrization", "width"]):
        assert sorted(rows["seed"].unique()) == plan["plan"]["seeds"] and set(rows["steps"]) == {s["steps"]}
        move = -math.log2(w / base) if p == "sp" else 0.0
        grid = {round(centre + move + o, 9) for o in offsets}
        got = {round(math.log2(x), 9) for x in rows["lr"]}
        assert grid <= got and len(got - grid) <= 2, (p, w)
    assert table.loc[table["width"] == base, "shared_base"].all()
    assert not table.loc[table["width"] > base, "shared_base"].any()
    first = s["per_width"][0]
    assert first["width"] == base and first["mup_over_sp"] == 1.0 and first["mup_over_sp_ci"] == [1.0, 1.0]
    for r in s["per_width"]:  # the measured best is never below a measured seed mean
        for p in ("sp", "mup"):
            means = table[(table["parametrization"] == p) & (table["width"] == r["width"])].groupby("lr")["loss"]
            assert r[p]["best_loss"] == pytest.approx(means.mean().min())
        assert r["mup_over_sp_ci"][0] <= r["mup_over_sp"] <= r["mup_over_sp_ci"][1]
    assert s["headline"].startswith(f"at width {s['widths'][-1]}, muP's best loss is ")
    assert s["coord_check"]["sp"]["passed"] is False and s["coord_check"]["mup"]["passed"] is True
    # the scaling stage and the audit ran on tune's plan
    sc = s["scaling"]
    assert "error" not in sc, sc.get("error")
    assert sorted(set(sc["batch_sizes"]) & set(plan["plan"]["scaling_batch_sizes"])) == \
        sorted(plan["plan"]["scaling_batch_sizes"])
    assert set(s["holdout"]["by_axis"]) == {"tokens", "batch_tokens"}
    # the card: written only when tune stands behind it, and set against the published LRs
    c = s["card"]
    assert c["written"] is (code == 0) and (out / "card.yaml").exists() is (code == 0)
    assert (out / "card.rejected.yaml").exists() is (code == 1)
    assert c["objections"] == ([] if code == 0 else tuned["refused"]) and (code == 0 or c["objections"])
    pub = c["published_lr"]
    assert pub["within_3x"] is (pub["factor"] <= 3.0) and pub["published"][0] <= pub["published"][1]
    t = s["target"]
    assert (t["depth"], t["width"]) == (24, 512) and abs(c["steps"] * c["batch_tokens"] - t["tokens"]) <= \
        c["batch_tokens"]
    md = (out / "report.md").read_text()
    assert "## The card: written or refused" in md
    assert f"## How tune spent the {s['budget_s']:.0f} s budget" in md
    assert ("No `card.yaml`" in md) is (code == 1) and all(f"- objection: {o}" in md for o in c["objections"])
    assert "| SP |" in md and "| muP |" in md and "- base LR " in md and "narrows most: " in md
    for rel in s["images"].values():
        assert (out / rel).read_bytes()[:4] == b"\x89PNG"
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    # Re-running resumes: the same plan, no new trials, the same numbers and verdict.
    before = (out / "results.csv").read_text(), (out / "scaling_results.csv").read_text()
    assert main(["demo", "--size", "tiny", "--out", str(out), "--workers", "1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert ((out / "results.csv").read_text(), (out / "scaling_results.csv").read_text()) == before
    assert json.loads((out / "plan.json").read_text()) == plan
    assert again["drift_octaves"] == s["drift_octaves"] and again["card"]["steps"] == c["steps"]


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
    written = next(p for p in (out / "card.yaml", out / "card.rejected.yaml") if p.exists())
    card = yaml.safe_load(written.read_text())
    model = card["target"]["model"]
    assert (model["kind"], model["model_type"]) == ("hf", "llama")
    assert (card["target"]["width"], card["target"]["depth"]) == (512, 24)  # the tiny size's target
    assert model["config"]["num_attention_heads"] == 2 * model["config"]["num_key_value_heads"]  # GQA kept
    assert {g["name"] for g in card["param_groups"]} >= {"model.embed_tokens.weight", "lm_head.weight"}
    assert json.loads((out / "summary.json").read_text())["preset"].startswith("hf:")
    assert main(["demo", "--size", "tiny", "--model", "pkg_xyz:build", "--out", str(tmp_path / "b")]) == 2
