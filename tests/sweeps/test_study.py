"""In-process sweeps on real storages (journal file, SQLite) with cheap runners."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sweeps.progress import study_counts
from sweeps.recovery import sweep_stale
from sweeps.results import results_table, status, write_table
from sweeps.spec_kinds import LRSweep
from sweeps.storage import Storage
from sweeps.study import prepare, run_sweep
from sweeps.worker import open_study

SYN = "sweeps.runners:synthetic_runner"


def _spec(**kw: Any) -> LRSweep:
    kw.setdefault("widths", (32, 64))
    kw.setdefault("parametrizations", ("sp", "mup"))
    kw.setdefault("lrs", (2.0**-10, 2.0**-7, 2.0**-4))
    return LRSweep(**kw)


def test_grid_runs_every_point_once_and_resume_repeats_none(tmp_path) -> None:
    spec = _spec()
    res = run_sweep(spec, out=tmp_path, runner=SYN)
    assert res.complete and res.plan.enqueued == 12 and res.counts.complete == 12
    study, _ = open_study(res.plan.storage, "lr")
    keys = [t.user_attrs["point_key"] for t in study.trials]
    assert len(keys) == len(set(keys)) == 12
    # same command again: nothing enqueued, nothing re-run
    res2 = run_sweep(spec, out=tmp_path, runner=SYN)
    assert res2.plan.enqueued == 0 and res2.plan.finished == 12 and len(study.get_trials()) == 12
    # a wider grid runs only the new points
    res3 = run_sweep(_spec(widths=(32, 64, 128)), out=tmp_path, runner=SYN)
    assert res3.plan.enqueued == 6 and res3.counts.complete == 18
    # a different training setup is refused, naming the field
    with pytest.raises(ValueError, match="steps"):
        run_sweep(_spec(base={"steps": 7}), out=tmp_path, runner=SYN)


def test_trial_records_reproducibility_attrs(tmp_path) -> None:
    res = run_sweep(_spec(widths=(32,), parametrizations=("mup",), lrs=(1e-3,), seeds=(5,), sampler_seed=3),
                    out=tmp_path, runner=SYN)
    t = open_study(res.plan.storage, None)[0].trials[0]
    ua = t.user_attrs
    assert ua["sampler_seed"] == 3 and ua["trial_seed"] == 5
    assert {"python", "optuna"} <= set(ua["versions"])
    assert "git_revision" in ua and ua["config"]["width"] == 32 and ua["config"]["preset"] == "gpt-tiny"
    assert t.params == {"parametrization": "mup", "width": 32, "seed": 5, "lr": 1e-3}
    assert (tmp_path / "sweep.yaml").is_file()


def test_divergence_is_told_a_finite_worst_case_and_kept_in_the_table(tmp_path) -> None:
    # synthetic: lr above 2^-3 diverges for mup
    res = run_sweep(_spec(widths=(64,), parametrizations=("mup",), lrs=(2.0**-7, 2.0**-1)),
                    out=tmp_path, runner=SYN)
    study, _ = open_study(res.plan.storage, None)
    div = [t for t in study.trials if t.user_attrs["diverged"]]
    assert len(div) == 1 and div[0].state.name == "COMPLETE"
    assert math.isfinite(div[0].value) and div[0].value == pytest.approx(math.log(256))
    assert study_counts(study).diverged == 1
    df = results_table(study)
    assert df["diverged"].tolist() == [False, True]
    assert status(study)["best"][0]["lr"] == 2.0**-7


def _nan_runner(config: dict[str, Any], report: Any) -> dict[str, Any]:
    return {"loss": float("nan"), "width": config["width"], "lr": config["lr"]}


def test_a_nan_loss_counts_as_diverged_even_without_the_flag(tmp_path) -> None:
    res = run_sweep(_spec(widths=(32,), parametrizations=("mup",), lrs=(1e-3,)), out=tmp_path,
                    runner=_nan_runner)
    t = open_study(res.plan.storage, None)[0].trials[0]
    assert t.user_attrs["diverged"] is True and math.isfinite(t.value)


def _numpy_row_runner(config: dict[str, Any], report: Any) -> dict[str, Any]:
    return {"loss": np.float64(2.5), "steps": np.int64(3), "curve": (np.float32(1.5), 2.0)}


def _path_row_runner(config: dict[str, Any], report: Any) -> dict[str, Any]:
    return {"loss": 2.5, "where": Path("/tmp/run"), "tags": {"a"}}


def test_a_rows_numpy_scalars_are_stored_as_python_numbers(tmp_path) -> None:
    res = run_sweep(_spec(widths=(32,), parametrizations=("mup",), lrs=(1e-3,)), out=tmp_path,
                    runner=_numpy_row_runner)
    row = open_study(res.plan.storage, None)[0].trials[0].user_attrs["row"]
    assert row["loss"] == 2.5 and type(row["loss"]) is float and type(row["steps"]) is int
    assert row["curve"] == [1.5, 2.0]


def test_a_row_value_json_cannot_hold_fails_the_trial_naming_it(tmp_path) -> None:
    # stored as its str() before; now the trial fails and says which fields
    res = run_sweep(_spec(widths=(32,), parametrizations=("mup",), lrs=(1e-3,)), out=tmp_path,
                    runner=_path_row_runner)
    t = open_study(res.plan.storage, None)[0].trials[0]
    assert t.state.name == "FAIL" and res.counts.complete == 0
    assert "where (PosixPath)" in t.user_attrs["error"] and "tags (set)" in t.user_attrs["error"]
    assert "row" not in t.user_attrs


def _curve_runner(config: dict[str, Any], report: Any) -> dict[str, Any]:
    # higher lr -> worse at every eval: the median pruner stops the bad ones early
    bad = math.log2(config["lr"]) + 10
    for step in range(1, 6):
        if report(step, 3.0 + bad - 0.1 * step):
            return {"loss": 3.0 + bad, "pruned": True}
    return {"loss": 3.0 + bad - 0.5}


def test_median_pruner_prunes_via_intermediate_reports(tmp_path) -> None:
    spec = _spec(widths=(32,), parametrizations=("mup",), lrs=tuple(2.0**k for k in range(-10, -2)),
                 pruner="median")
    res = run_sweep(spec, out=tmp_path, runner=_curve_runner)
    c = res.counts
    assert c.pruned >= 1 and c.complete + c.pruned == 8 and res.complete
    study, _ = open_study(res.plan.storage, None)
    assert all(t.intermediate_values for t in study.trials)


def test_default_pruner_never_prunes(tmp_path) -> None:
    spec = _spec(widths=(32,), parametrizations=("mup",), lrs=tuple(2.0**k for k in range(-10, -2)))
    assert run_sweep(spec, out=tmp_path, runner=_curve_runner).counts.pruned == 0


@pytest.mark.parametrize("sampler", ["tpe", "gp"])
def test_adaptive_sampler_fills_each_group(tmp_path, sampler: str) -> None:
    spec = _spec(widths=(32, 64), parametrizations=("mup",), sampler=sampler, trials=5,
                 log2_lr_min=-12, log2_lr_max=-2)
    res = run_sweep(spec, out=tmp_path, runner=SYN)
    assert res.complete and res.counts.complete == 10
    study, _ = open_study(res.plan.storage, None)
    for w in (32, 64):
        lrs = [t.params["lr"] for t in study.trials if t.params["width"] == w]
        assert len(lrs) == 5 and all(2.0**-12 <= x <= 2.0**-2 for x in lrs)
    assert run_sweep(spec, out=tmp_path, runner=SYN).plan.enqueued == 0


def test_sqlite_single_worker_and_refused_for_many(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    res = run_sweep(_spec(widths=(32,)), storage=url, runner=SYN, workers=1)
    assert res.complete and res.counts.complete == 6
    with pytest.raises(ValueError, match="one worker"):
        run_sweep(_spec(widths=(32,)), storage=url, runner=SYN, workers=2)


def test_unreachable_storage_is_one_clear_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="cannot"):
        run_sweep(_spec(), storage="postgresql://u:secret@127.0.0.1:1/x", runner=SYN)


def documented_columns() -> list[str]:
    """The column list of docs/architecture.md's "Results table" section, in its order."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### Results table", 1)[1]
    listed = re.search(r"`(study, trial,[^`]*)`", section)
    assert listed, "docs/architecture.md: the Results table section lists its columns in backticks"
    return [c.strip() for c in " ".join(listed.group(1).split()).split(",")]


def test_the_documented_columns_are_the_produced_ones() -> None:
    """RESULT_COLUMNS is derived from the trainer's row keys, and the docs state that order
    (arch is column 5, not the 21st it once came out)."""
    from mutransfer.training.train_result import ROW_KEYS
    from sweeps.results import RESULT_COLUMNS

    assert list(RESULT_COLUMNS) == documented_columns()
    assert RESULT_COLUMNS.index("arch") == 4
    assert set(ROW_KEYS) <= set(RESULT_COLUMNS)


def test_export_csv_is_atomic_and_tidy(tmp_path) -> None:
    res = run_sweep(_spec(widths=(32,)), out=tmp_path, runner=SYN)
    study, _ = open_study(res.plan.storage, None)
    df = results_table(study)
    out = write_table(df, tmp_path / "r.csv")
    import pandas as pd

    back = pd.read_csv(out)
    assert list(back.columns[:21]) == ["study", "trial", "state", "diverged", "arch", "parametrization",
                                       "width", "depth", "n_params", "n_params_nonembed", "tokens", "steps",
                                       "batch_size", "seq_len", "batch_tokens", "lr", "seed", "loss",
                                       "train_loss", "gns", "wall_s"]
    assert list(back.columns[:21]) == documented_columns()  # the order docs/architecture.md states
    assert len(back) == 6 and back["trial"].is_unique
    with pytest.raises(ValueError, match="must end in"):
        write_table(df, tmp_path / "r.txt")
    assert sorted(os.listdir(tmp_path)) == ["optuna.journal", "r.csv", "sweep.yaml"]


def test_stale_sweeper_fails_and_requeues_a_dead_workers_trial(tmp_path) -> None:
    import subprocess
    import sys

    url = Storage.resolve(None, tmp_path).url
    plan = prepare(_spec(widths=(32,), parametrizations=("mup",), lrs=(1e-3,)), url, runner=SYN)
    study, _ = open_study(url, plan.study_name)
    (trial,) = study.claim()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    from sweeps.provenance import hostname

    trial.set_user_attr("host", hostname())
    trial.set_user_attr("pid", dead.pid)
    assert sweep_stale(study, grace_period=60) == [trial.number]
    assert sweep_stale(study, grace_period=60) == []  # only once
    states = [t.state.name for t in study.get_trials()]
    assert states == ["FAIL", "WAITING"]
    retry = study.get_trials()[1]
    assert retry.user_attrs["retry_of"] == trial.number and retry.user_attrs["retries"] == 1
    # a live but silent worker on another host is failed after the grace period
    (t2,) = study.claim()
    t2.set_user_attr("host", "elsewhere")
    t2.set_user_attr("pid", 1)
    t2.set_user_attr("heartbeat", 0.0)
    assert sweep_stale(study, grace_period=60) == [t2.number]


def test_study_bar_shows_counts_on_a_tty(monkeypatch, capsys) -> None:
    import sys

    from sweeps.progress import Counts, StudyBar

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    bar = StudyBar(10, "sweep lr")
    bar.update(Counts(complete=3, diverged=1, running=2, failed=1, best=2.5))
    bar.close()
    err = capsys.readouterr().err
    assert "3/10" in err and "run 2" in err and "div 1" in err and "best 2.5000" in err
    quiet = StudyBar(10, "x", quiet=True)
    quiet.update(Counts(complete=1))
    quiet.close()
    assert capsys.readouterr().err == ""
