"""End to end with the real trainer: gpt-tiny, a few steps, a 2 x 3 grid (analysis needs 3
LRs per curve), 2 worker processes; the exported table is what ``analysis`` reads."""

from __future__ import annotations

import json
import math

import pytest

import mutransfer.training.train  # noqa: E402,F401  (the real trainer: an import error fails, never skips)
import mutransfer_cli


@pytest.mark.slow
def test_lr_sweep_with_the_real_trainer_feeds_analysis(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))
    out = tmp_path / "d"
    argv = ["sweep", "lr", "--preset", "gpt-tiny", "--widths", "32,64", "-p", "mup",
            "--lrs", f"{2**-8},{2**-6},{2**-4}", "--steps", "6", "--batch-size", "4", "--set", "eval_every=3",
            "--set", "eval_sequences=8", "--device", "cpu", "--out", str(out), "--workers", "2",
            "--max-extend", "0", "--quiet", "--json"]  # the grid as given (extension: test_extend.py)
    assert mutransfer_cli.main(argv) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["counts"]["complete"] == 6 and st["workers"] == 2
    csv = tmp_path / "results.csv"
    assert mutransfer_cli.main(["sweep", "results", "--storage", str(out), "--out", str(csv)]) == 0

    from analysis.optimum import OptimumFit
    from analysis.results import read_results

    df = read_results(csv)
    assert len(df) == 6 and set(df["width"]) == {32, 64} and set(df["steps"]) == {6}
    assert df["loss"].map(math.isfinite).all() and not df["diverged"].any()
    assert (df["tokens"] == 6 * 4 * 64).all()
    fit = OptimumFit(group_by=("parametrization", "width"), n_boot=20).fit(df)
    assert len(fit.optima_) == 2

    from sweeps.worker import open_study

    study, _ = open_study(f"journal:{out / 'optuna.journal'}", "lr")
    t = study.trials[0]
    assert t.user_attrs["config"]["steps"] == 6 and t.user_attrs["config"]["device"] == "cpu"
    assert len(t.intermediate_values) == 2  # evals at steps 3 and 6 reported to the study
