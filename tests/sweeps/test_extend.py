"""Grid extension until the optimum is bracketed (``sweep scaling``, ``sweep lr``): on the
synthetic runners' known optima placed outside the initial grid, the sweep adds one grid
point per round past each edge optimum, in the same study, until the optimum is inside
its grid or a bound stops it; a re-run does no work; real workers on a journal extend too."""

from __future__ import annotations

import json
import math

import pytest

import mutransfer_cli
from sweeps import attrs
from sweeps.runners import SYNTHETIC_LAWS

SEQ = 64
BUDGETS = (32768, 65536, 131072, 262144)
# eta*(B, D) of the synthetic surface at B = 8 sequences and the middle budgets: the LR grid is
# centred 2^-1.2 below it and spans +-1 octave, so every cell starts at its high LR edge
ETA_8 = SYNTHETIC_LAWS["lr_coef"] * (8 * SEQ) ** 0.5 * 98304 ** SYNTHETIC_LAWS["lr_exp_tokens"]


@pytest.fixture()
def sweep(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))

    def run(*argv: str) -> tuple[int, dict]:
        rc = mutransfer_cli.main(["sweep", *argv, "--quiet", "--json"])
        out = capsys.readouterr().out
        return rc, (json.loads(out) if out.strip() else {})

    return run


def _scaling(out, batches: str, *extra: str, centre: float = ETA_8 * 2**-1.2) -> list[str]:
    return ["scaling", "--preset", "gpt-tiny", "--width", "32", "--batch-sizes", batches,
            "--tokens", ",".join(map(str, BUDGETS)), "--lr-center", f"{centre:.6g}",
            "--lr-center-batch", "8", "--log2-lr-offsets=-1,0,1", "--set", f"seq_len={SEQ}",
            "--runner", "sweeps.runners:synthetic_scaling_runner", "--out", str(out), *extra]


def _bstar_seqs(d: float) -> float:
    return SYNTHETIC_LAWS["batch_coef"] * d ** SYNTHETIC_LAWS["batch_exp_tokens"] / SEQ


def test_scaling_extends_both_axes_until_bracketed_and_recovers_the_laws(sweep, tmp_path) -> None:
    # B* = 15..34.5 sequences lies above the grid 2,4,8 at every budget; the LR optimum above
    # every cell's LR grid: both axes must grow
    assert all(_bstar_seqs(d) > 8 * 1.5 for d in BUDGETS)
    out = tmp_path / "s"
    rc, st = sweep(*_scaling(out, "2,4,8", "--workers", "1"))
    assert rc == 0
    br = st["bracketing"]
    assert br["bracketed"] == {"batch": True, "lr": True} and br["error"] is None
    # 16, 32, 64 added (one per round, at the grid's factor 2); each new batch brings its 3 LRs,
    # and every batch's LR grid got one more LR past its high edge
    assert br["rounds"] == {"batch": 3, "lr": 1}
    assert br["extended_trials"] == br["added"] == 3 * 3 + 6 and st["counts"]["complete"] == 9 + 15
    for row, d in zip(br["budgets"], BUDGETS, strict=True):
        assert row["tokens"] == d and row["batch"]["bracketed"] and row["lr"]["bracketed"]
        assert row["batch"]["opt"] / SEQ == pytest.approx(_bstar_seqs(d), rel=1e-6)

    # the study is the record: the added trials carry their axis and round
    from sweeps.worker import open_study

    study, _ = open_study(f"journal:{out / 'optuna.journal'}", "scaling")
    added = [t.user_attrs for t in study.trials if attrs.EXTENDED_AXIS in t.user_attrs]
    rounds = {(a[attrs.POINT]["batch_size"], a[attrs.EXTENDED_ROUND]) for a in added
              if a[attrs.EXTENDED_AXIS] == "batch"}
    assert rounds == {(16, 1), (32, 2), (64, 3)}

    # a re-run resumes: nothing left to do, nothing added
    rc, again = sweep(*_scaling(out, "2,4,8", "--workers", "1"))
    assert rc == 0 and again["bracketing"]["added"] == 0 and again["counts"]["complete"] == 24
    assert len(study.trials) == 24

    # fit scaling on the extended table: the known laws, and every budget bracketed in FIT.json
    csv, fit = tmp_path / "r.csv", tmp_path / "fit.json"
    assert mutransfer_cli.main(["sweep", "results", "--storage", str(out), "--out", str(csv)]) == 0
    assert mutransfer_cli.main(["fit", "scaling", str(csv), "--out", str(fit), "--n-boot", "20",
                                "--quiet"]) == 0
    doc = json.loads(fit.read_text())
    assert doc["batch"]["exponents"]["tokens"] == pytest.approx(SYNTHETIC_LAWS["batch_exp_tokens"], abs=1e-6)
    assert doc["lr"]["exponents"]["batch_tokens"] == pytest.approx(SYNTHETIC_LAWS["lr_exp_batch"], abs=1e-6)
    assert doc["bracketed"] == {"batch": True, "lr": True}
    assert [r["batch"]["bracketed"] for r in doc["bracketing"]] == [True] * 4


def test_a_tight_bound_stops_and_reports_not_bracketed(sweep, tmp_path) -> None:
    out = tmp_path / "s"
    rc, st = sweep(*_scaling(out, "2,4,8", "--workers", "1", "--batch-range", "1,16",
                             "--log2-lr-range=-20:-7"))
    assert rc == 0
    br = st["bracketing"]
    # batch 16 was allowed, 32 is not: B* (>= 15 sequences) sits at the high edge at every budget
    assert br["bracketed"]["batch"] is False and br["rounds"]["batch"] == 1
    assert [r["batch"]["edge"] for r in br["budgets"]] == ["high"] * 4
    assert any("next batch 32 is outside the batch range 1,16" in s for s in br["stopped"])
    # the LR bound keeps the LRs above 2^-7 out: batch 8's optimum (above its grid's 2^-7.3) stays open
    assert any("batch 8" in s and "outside the log2 LR range -20:-7" in s for s in br["stopped"])
    assert br["bracketed"]["lr"] is False

    # --max-extend 0: nothing is added, and the report says where the optima stand
    rc, st = sweep(*_scaling(tmp_path / "z", "2,4,8", "--workers", "1", "--max-extend", "0"))
    assert rc == 0 and st["bracketing"]["added"] == 0 and st["counts"]["complete"] == 9
    assert st["bracketing"]["bracketed"] == {"batch": False, "lr": False}


def test_the_batch_extends_down_to_one_sequence(sweep, tmp_path) -> None:
    # at a context of 1024, B* = 0.94, 1.25, 1.63, 2.16 sequences lies below the grid 2,4,8 (the
    # demo's case: B* at its smallest batch). Batch 1 cannot accumulate the sweep's 2
    # micro-batches; it is run with 1 (not refused), which brackets B* where it is above one
    # sequence; below one sequence there is no smaller batch, and the report says so.
    seq = 1024
    bstar = [_bstar_seqs(d) * SEQ / seq for d in BUDGETS]
    assert bstar[0] < 1 < bstar[1] and all(b < 2.2 for b in bstar)
    centre = SYNTHETIC_LAWS["lr_coef"] * (8 * seq) ** 0.5 * 98304 ** SYNTHETIC_LAWS["lr_exp_tokens"]
    argv = [a if a != f"seq_len={SEQ}" else f"seq_len={seq}"
            for a in _scaling(tmp_path / "s", "2,4,8", "--workers", "1", centre=centre)]
    rc, st = sweep(*argv)
    assert rc == 0
    br = st["bracketing"]
    assert br["rounds"]["batch"] == 1 and br["added"] == 3
    from sweeps.worker import open_study

    study, _ = open_study(f"journal:{tmp_path / 's' / 'optuna.journal'}", "scaling")
    ones = [t for t in study.trials if t.user_attrs[attrs.POINT]["batch_size"] == 1]
    assert len(ones) == 3 and all(t.user_attrs[attrs.POINT]["grad_accum"] == 1 for t in ones)
    assert all(t.state.name == "COMPLETE" for t in ones)
    # the first two budgets' best batch is 1, the new edge (a bound); the last two are bracketed,
    # at the surface's own B*
    opts = [r["batch"]["opt"] / seq for r in br["budgets"]]
    assert opts[:2] == [1, 1] and opts[2:] == pytest.approx(bstar[2:], rel=1e-6)
    assert [r["batch"]["bracketed"] for r in br["budgets"]] == [False, False, True, True]
    assert any("no batch below one sequence" in s for s in br["stopped"])


def test_real_workers_on_a_journal_extend(sweep, tmp_path) -> None:
    # B* = 15, 20, 26, 34.5 sequences on the grid 8,16,32: the last two budgets end at 32,
    # so one round adds 64; the LR grid is centred on the optimum
    out = tmp_path / "s"
    rc, st = sweep(*_scaling(out, "8,16,32", "--workers", "2", centre=ETA_8))
    assert rc == 0 and st["workers"] == 2
    br = st["bracketing"]
    assert br["bracketed"] == {"batch": True, "lr": True} and br["rounds"] == {"batch": 1, "lr": 0}
    assert br["added"] == 3 and st["counts"]["complete"] == 12
    opts = [r["batch"]["opt"] / SEQ for r in br["budgets"]]
    assert opts == pytest.approx([_bstar_seqs(d) for d in BUDGETS], rel=1e-6)


def test_lr_sweep_extends_each_group_within_max_extend(sweep, tmp_path) -> None:
    # the synthetic optimum is 2^-7 under mup at every width; the grid 2^-12..2^-9 misses it
    base = ["lr", "--preset", "gpt-tiny", "--widths", "32,64", "-p", "mup", "--log2-lr=-12:-9",
            "--runner", "sweeps.runners:synthetic_runner", "--workers", "1"]
    rc, st = sweep(*base, "--out", str(tmp_path / "a"))
    assert rc == 0
    groups = st["bracketing"]["groups"]
    assert [g["group"]["width"] for g in groups] == [32, 64]
    # -8, -7, -6 added per width: the optimum 2^-7 is inside 2^-12..2^-6
    assert all(g["lr"]["bracketed"] and math.log2(g["lr"]["opt"]) == pytest.approx(-7, abs=1e-6)
               for g in groups)
    assert st["bracketing"]["rounds"] == {"lr": 3} and st["counts"]["complete"] == 2 * (4 + 3)

    rc, st = sweep(*base, "--max-extend", "2", "--out", str(tmp_path / "b"))
    assert rc == 0 and st["bracketing"]["bracketed"] == {"lr": False}
    assert all(g["lr"]["edge"] == "high" for g in st["bracketing"]["groups"])
    assert any("--max-extend 2 rounds reached" in s for s in st["bracketing"]["stopped"])


@pytest.mark.parametrize(("argv", "needle"), [
    (["--batch-range", "0,4"], "--batch-range '0,4'"),
    (["--batch-range", "4"], "--batch-range '4'"),
    (["--max-extend", "-1"], "argument --max-extend: '-1' must be >= 0"),
    (["--log2-lr-range=-3:-9"], "log2 LR range -3.0:-9.0"),
])
def test_bad_bounds_exit_2_before_any_study(tmp_path, monkeypatch, capsys, argv, needle) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))
    out = tmp_path / "o"
    assert mutransfer_cli.main(["sweep", *_scaling(out, "2,4,8"), *argv, "--quiet"]) == 2
    assert needle in capsys.readouterr().err
    assert not (out / "optuna.journal").exists()
