"""``mutransfer sweep`` through mutransfer_cli.main (the verb registered by monkeypatch)."""

from __future__ import annotations

import json

import pytest

import mutransfer_cli

SYN = ["--runner", "sweeps.runners:synthetic_runner"]


@pytest.fixture(autouse=True)
def _verb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))


def main(*argv: str) -> int:
    return mutransfer_cli.main(["sweep", *argv])


def test_lr_sweep_status_export_and_resume(tmp_path, capsys) -> None:
    out = tmp_path / "d"
    args = ["lr", "--widths", "32,64", "-p", "sp,mup", "--lrs", "0.001,0.01", "--out", str(out),
            "--workers", "1", "--quiet", "--json", *SYN]
    assert main(*args) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["counts"]["complete"] == 8 and st["total"] == 8 and len(st["best"]) == 4
    assert main(*args) == 0  # same command: resumes, repeats nothing
    assert json.loads(capsys.readouterr().out)["counts"]["complete"] == 8
    assert main("status", "--storage", str(out)) == 0
    text = capsys.readouterr().out
    assert "8/8 done" in text and "parametrization=mup width=64" in text
    assert main("results", "--storage", str(out), "--out", str(tmp_path / "r.csv"), "--json") == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 8
    import pandas as pd

    assert len(pd.read_csv(tmp_path / "r.csv")) == 8


def test_yaml_spec_with_flag_overrides(tmp_path, capsys) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("kind: batch\nwidths: [32]\nbatch_sizes: [4, 8]\ntokens: [4096]\nlrs: [0.01]\n")
    assert main("batch", str(spec), "--batch-sizes", "4,8,16", "--out", str(tmp_path / "b"),
                "--workers", "1", "--quiet", "--json", *SYN) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["counts"]["complete"] == 3 and st["group_keys"] == ["width", "tokens", "batch_size"]


def test_worker_verb_joins_a_prepared_study(tmp_path, capsys) -> None:
    assert main("lr", "--widths", "32", "-p", "mup", "--lrs", "0.001,0.01", "--out", str(tmp_path),
                "--prepare-only", *SYN) == 0
    assert "2 enqueued" in capsys.readouterr().err
    assert main("worker", "--storage", str(tmp_path / "optuna.journal"), "--study", "lr") == 0
    assert "complete 2" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "needle"), [
    (["lr", "--widths", "40"], "width 40"),
    (["lr", "--widths", "32", "--set", "bogus=1"], "bogus"),
    (["lr", "--widths", "32", "-p", "ntk"], "ntk"),
    (["lr", "--widths", "32", "--storage", "sqlite:///x.db", "--workers", "2"], "one worker"),
    (["lr", "--widths", "32", "--storage", "postgresql://u:pw@127.0.0.1:1/x"], "cannot"),
    (["lr", "--widths", "32", "--storage", "redis://localhost"], "redis"),
    (["lr", "--widths", "32", "--log2-lr=-3:-14"], "empty"),
    (["lr", "--widths", "x"], "'x'"),
    (["run"], "SPEC"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, argv,
                                                           needle) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(*argv, "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "x.db").exists()


def test_unknown_spec_field_exits_2(tmp_path, capsys) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("kind: lr\nwidths: [32]\nwidht: [64]\n")
    assert main("lr", str(spec), "--out", str(tmp_path / "o")) == 2
    assert "widht" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_status_of_missing_storage_exits_2(tmp_path, capsys) -> None:
    assert main("status", "--storage", str(tmp_path / "nope")) == 2
    assert "does not exist" in capsys.readouterr().err
