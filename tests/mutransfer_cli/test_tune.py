"""mutransfer tune: a budget in, the proxy runs placed by the plan, and a card only when
nothing objects to it (else the report says why and what to run, and the exit status is 1)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mutransfer_cli import main
from mutransfer_cli.tune import budget_seconds

ARGS = ["tune", "--preset", "llama-small", "--width", "32", "--depth", "2", "--target-width", "128",
        "--target-depth", "4", "--tokens", "262144", "--workers", "2"]


def test_budget_units() -> None:
    assert budget_seconds("60m") == 3600 and budget_seconds("1.5h") == 5400 and budget_seconds("900") == 900
    for bad in ("soon", "-5m", "0", "31d"):
        with pytest.raises(Exception, match="--budget"):
            budget_seconds(bad)


def test_bad_budgets_exit_2_naming_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--budget", "soon", "--out", str(tmp_path / "a")]) == 2
    assert "--budget" in capsys.readouterr().err
    # a budget that buys no ladder worth running: refused before any sweep, with what it would take
    assert main([*ARGS, "--budget", "2s", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "give at least" in err and not (tmp_path / "b" / "results.csv").exists()
    # --track is checked before any run: a bad tracker is one line naming it
    assert main([*ARGS, "--budget", "60m", "--track", "nonsense", "--out", str(tmp_path / "c")]) == 2
    assert "--track 'nonsense'" in capsys.readouterr().err and not (tmp_path / "c" / "plan.json").exists()


@pytest.mark.slow
def test_tune_places_its_runs_and_writes_a_card_only_when_nothing_objects(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tune"
    budget = "90s"
    code = main([*ARGS, "--budget", budget, "--out", str(out), "--quiet"])
    for _ in range(2):  # a loaded machine's probe: the budget buys too little, and the refusal
        if code != 2:   # names the least budget that plans (re-probed, the load may have grown)
            break
        err = capsys.readouterr().err
        need = float(re.search(r"give at least (\d+) s", err).group(1))
        budget = f"{math.ceil(need * 1.5)}s"
        code = main([*ARGS, "--budget", budget, "--out", str(out), "--quiet"])
    assert code in (0, 1)
    plan = json.loads((out / "plan.json").read_text())
    # every choice was made by the plan from the measured cost, with its reason
    assert plan["cost"]["seconds_per_token0"] > 0 and plan["cost"]["overhead_s"] >= 0
    assert set(plan["plan"]["reasons"]) >= {"widths", "steps", "scaling_tokens", "scaling_batches"}
    ladder = pd.read_csv(out / "results.csv")
    assert sorted(ladder["width"].unique()) == plan["plan"]["widths"]
    assert set(ladder["seed"]) == set(plan["plan"]["seeds"]) and set(ladder["steps"]) == {plan["plan"]["steps"]}
    report = json.loads((out / "tune.json").read_text())
    # the ladder's LRs are centred on the coarse search's optimum, not on a number given by hand
    centre = report["search"]["centre_log2_lr"]
    assert min(abs(math.log2(x) - centre) for x in ladder["lr"]) < 1e-9
    # the second pass: it says why it stopped; each round it ran was predicted to narrow
    refine = report["refine"]
    assert refine["stopped"] and refine["target_factor"] == 2.0
    assert all(r["predicted"] < r["factor_before"] for r in refine["rounds"])
    if report.get("card") and not refine["rounds"]:
        assert ("within 2x" in refine["stopped"] or "s of the budget are left" in refine["stopped"]
                or "open" in refine["stopped"]), refine["stopped"]
    if code == 0:
        card = yaml.safe_load((out / "card.yaml").read_text())
        assert card["audit"]["passed"] is True and not report["card"]["objections"]
        assert not (out / "card.rejected.yaml").exists()
    else:
        assert not (out / "card.yaml").exists() and (out / "card.rejected.yaml").exists()
        assert report["refused"] and report["to_run"]
        assert "Why no card" in (out / "report.md").read_text()
        err = capsys.readouterr().err
        assert "objection:" in err and "no card.yaml written" in err
    # a re-run resumes: the same plan, no new trials, the same verdict
    n = len(ladder)
    assert main([*ARGS, "--budget", budget, "--out", str(out), "--quiet"]) == code
    assert len(pd.read_csv(out / "results.csv")) == n
    assert json.loads((out / "plan.json").read_text()) == plan


def test_an_hf_models_plan_keeps_its_head_rule_and_the_pretraining_context(tmp_path: Path) -> None:
    """The plan's runs narrow heads by the user's --head-rule (the probe trains with it), and
    the target's context is the config's pretraining context, as the card's rule reads it."""
    import argparse

    from mutransfer_cli._tune_run import _plan

    d = tmp_path / "llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256,
        "max_position_embeddings": 4096, "tie_word_embeddings": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32}}))
    args = argparse.Namespace(model=f"hf:{d}", preset=None, head_rule="keep_heads", width=32, depth=2,
                              overrides=[("seq_len", "16")], budget=3600.0, tokens=1e6, target_width=None,
                              target_depth=None)
    plan, doc = _plan(args, tmp_path / "out", "cpu", 1, quiet=True)
    assert doc["inputs"]["extra"]["head_rule"] == "keep_heads"
    assert doc["target_context"] == 32  # rope_scaling.original_max_position_embeddings, not 4096
    assert doc["cost"]["width1"] == 64  # probed at the first doubling, not the widest ladder width
    assert plan.widths[0] == 32


def test_a_failed_coordinate_check_is_not_sent_to_a_larger_budget() -> None:
    from mutransfer_cli._tune_run import _to_run

    (advice,) = _to_run(None, ["the coordinate check of muP failed at widths [32, 64] (see x)"])
    assert "mutransfer audit" in advice and "does not change this verdict" in advice
    assert "larger --budget" in _to_run(None, ["something else"])[0]


def test_the_probe_reads_the_fastest_repeat_so_one_slow_run_does_not_move_the_plan() -> None:
    from mutransfer_cli._tune_run import PROBE_STEPS, cost_from_times
    from sweeps.budget import CostModel

    truth = CostModel(width0=32, seconds_per_token0=2e-6, width1=64, seconds_per_token1=6e-6, overhead_s=1.5,
                      seconds_per_step=0.01)
    seq, batch = 16, 8

    def t(w: int, b: int, n: int) -> float:  # the cost model's own time of a run
        return truth.overhead_s + n * (truth.seconds_per_step + b * seq * truth.seconds_per_token(w))

    keys = [(32, batch, PROBE_STEPS[0]), (32, batch, PROBE_STEPS[1]), (32, 1, PROBE_STEPS[1]),
            (64, batch, PROBE_STEPS[1])]
    clean = {k: [t(*k)] for k in keys}
    got = cost_from_times(clean, width0=32, width1=64, batch=batch, seq_len=seq)
    for f in ("seconds_per_token0", "seconds_per_token1", "overhead_s", "seconds_per_step"):
        assert getattr(got, f) == pytest.approx(getattr(truth, f), rel=1e-6), f
    # another process stalls one repeat of each run 3x: the fastest repeat is the run's cost
    for slow in keys:
        noisy = {k: [t(*k), 3 * t(*k)] if k == slow else [t(*k), t(*k) * 1.0001] for k in keys}
        got = cost_from_times(noisy, width0=32, width1=64, batch=batch, seq_len=seq)
        fields = ("seconds_per_token0", "seconds_per_token1", "overhead_s", "seconds_per_step")
        err = max(abs(getattr(got, f) / getattr(truth, f) - 1) for f in fields)
        assert err < 1e-3, slow
        # one sample of the stalled run (the old probe) puts some part of the model far off
        one = cost_from_times({k: v[-1:] for k, v in noisy.items()}, width0=32, width1=64, batch=batch,
                              seq_len=seq)
        assert max(abs(getattr(one, f) / getattr(truth, f) - 1) for f in fields) > 0.5, slow


@pytest.mark.parametrize("item, says", [("seq_len=abc", "--set seq_len='abc'"), ("seq_len=0", "--set seq_len=0"),
                                        ("nosuchfield=3", "'nosuchfield'"), ("lr=abc", "'lr' expects float")])
def test_a_bad_set_is_named_before_the_probe_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str], item: str,
                                                    says: str) -> None:
    assert main([*ARGS, "--budget", "60m", "--set", item, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "plan.json").exists()
