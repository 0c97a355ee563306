"""The scaling sweep's weight-decay axis: lambda runs at one batch, ``fit scaling`` measures
the AdamW timescale tau* = B/(eta·lambda·D) at its optimum, and the card takes it."""

from __future__ import annotations

import json

import pytest

import mutransfer_cli
from mutransfer.card.build import load_card
from sweeps.resolve import check_trials
from sweeps.spec import spec_from_dict
from sweeps.spec_scaling import ScalingSweep


def _spec(**kw: object) -> ScalingSweep:
    args: dict[str, object] = {"preset": "gpt-small", "width": 32, "batch_sizes": (4, 8, 16, 32),
                               "tokens": (32768, 65536, 131072, 262144), "lr_center": 2.0**-6,
                               "lr_center_batch": 16, "base": {"seq_len": 64},
                               "weight_decays": (0.05, 0.1, 0.2, 0.4)}
    args.update(kw)
    return ScalingSweep(**args)  # type: ignore[arg-type]


def test_weight_decays_run_at_one_batch_with_its_lr_grid() -> None:
    s = _spec(seeds=(0, 1))
    pts = s.points()
    extra = [p for p in pts if "weight_decay" in p]
    # the base lambda (0.1) runs at every batch; the 3 others only at the middle batch (8),
    # every seed, that batch's 7 LRs, the base width, the largest budget (WSD branches)
    assert len(pts) == 4 * 2 * 7 + 3 * 2 * 7 and s.tau_batch() == 8
    assert {p["weight_decay"] for p in extra} == {0.05, 0.2, 0.4}
    assert {(p["batch_size"], p["width"], p["tokens"]) for p in extra} == {(8, 32, 262144)}
    assert sorted({p["lr"] for p in extra}) == sorted(s.lrs_for(8))
    assert len({json.dumps(p, sort_keys=True) for p in pts}) == len(pts)
    assert check_trials(s) == len(pts)
    assert spec_from_dict(s.to_dict()) == s
    assert len(_spec(tau_batch_size=16).points()) == 4 * 7 + 3 * 7


@pytest.mark.parametrize(("kw", "match"), [
    ({"weight_decays": (0.0, 0.2, 0.4)}, "weight_decays: 0.0 must be a positive"),
    ({"weight_decays": (-0.1, 0.2)}, "weight_decays: -0.1"),
    ({"weight_decays": (0.1, 0.2)}, "give 2 positive value"),
    ({"tau_batch_size": 5}, "tau_batch_size 5 must be one of batch_sizes"),
    ({"weight_decays": None, "tau_batch_size": 8}, "tau_batch_size needs weight_decays"),
    ({"base": {"seq_len": 64, "wd_mode": "independent"}}, "wd_mode coupled"),
])
def test_bad_weight_decay_axis_raises_one_clear_error(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _spec(**kw)


@pytest.fixture()
def _verb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))


SWEEP = ["sweep", "scaling", "--preset", "gpt-tiny", "--width", "32", "--batch-sizes", "8,16,32,64",
         "--tokens", "32768,65536,131072,262144", "--lr-center", "0.0072", "--lr-center-batch", "8",
         "--set", "seq_len=64", "--runner", "synthetic-tau", "--workers", "1", "--max-extend", "0",
         "--quiet", "--json"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--weight-decays", "0,0.2,0.4"], "weight_decays: 0.0"),
    (["--weight-decays", "0.2,abc"], "abc"),
    (["--weight-decays", "0.2,0.4", "--tau-batch-size", "5"], "tau_batch_size 5"),
    (["--weight-decays", "0.2"], "tau* needs at least 3"),
])
def test_cli_bad_weight_decays_exit_2_before_any_study(_verb, tmp_path, capsys, argv, needle) -> None:
    out = tmp_path / "o"
    assert mutransfer_cli.main([*SWEEP, *argv, "--out", str(out)]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_known_tau_through_sweep_fit_and_card(_verb, tmp_path, capsys) -> None:
    """The synthetic-tau runner's loss is lowest at tau* = 1 (and a quadratic in log2 lr
    and log2 lambda): sweep -> export -> fit scaling recover tau* within its interval,
    labelled measured, and the card made from that fit carries tau* and
    lambda = B/(eta·tau*·D) at the target."""
    from sweeps.runners import SYNTHETIC_TAU

    out, csv, fit = tmp_path / "syn", tmp_path / "r.csv", tmp_path / "fit.json"

    def sweep_and_fit(*extra: str) -> tuple[int, dict]:
        assert mutransfer_cli.main([*SWEEP, *extra, "--out", str(out)]) == 0
        done = json.loads(capsys.readouterr().out)["counts"]["complete"]
        assert mutransfer_cli.main(["sweep", "results", "--storage", str(out), "--out", str(csv)]) == 0
        assert mutransfer_cli.main(["fit", "scaling", str(csv), "--out", str(fit), "--n-boot", "200",
                                    "--quiet"]) == 0
        return done, json.loads(fit.read_text())["tau"]

    # the sweep's one lambda (0.1): tau at the fitted optimum, labelled as not optimised
    done, tau = sweep_and_fit()
    assert done == 4 * 7 and tau["source"] == "default λ"
    # the same study grows a lambda axis at batch 16: only its 4 x 7 new trials run
    done, tau = sweep_and_fit("--weight-decays", "0.1,0.2,0.4,0.8,1.6")  # the middle batch: 16
    assert done == 4 * 7 + 4 * 7
    assert tau["source"] == "measured"
    assert tau["value"] == pytest.approx(SYNTHETIC_TAU, rel=1e-6)
    assert tau["ci"][0] <= SYNTHETIC_TAU <= tau["ci"][1] and tau["ci"][1] / tau["ci"][0] < 2
    top = tau["by_tokens"][-1]
    assert top["tokens"] == 262144 and top["edge"] == "" and tau["at"]["batch_tokens"] == 16 * 64
    # lambda* = B/(eta*·tau*·D) at the proxy: between the grid's 0.2 and 0.8
    assert tau["weight_decay"] == pytest.approx(16 * 64 / (tau["at"]["lr"] * SYNTHETIC_TAU * 262144))
    assert 0.2 < tau["weight_decay"] < 0.8

    card_path = tmp_path / "card.yaml"
    code = mutransfer_cli.main(["transfer", "--preset", "gpt-tiny", "--seq-len", "64", "--lr", "0.01",
                                "--proxy-batch-tokens", "1024", "--proxy-tokens", "262144",
                                "--set", "width=128", "--tokens", str(2**21), "--scaling-fit", str(fit),
                                "--out", str(card_path)])
    assert code == 0, capsys.readouterr().err
    card = load_card(card_path)
    t = card["projected"]["tau"]
    assert t["value"] == pytest.approx(tau["value"]) and (t["lo"], t["hi"]) == pytest.approx(tuple(tau["ci"]))
    assert "measured" in t["source"]
    b, lr = card["batch"]["tokens"], card["optimizer"]["lr"]
    assert card["optimizer"]["weight_decay"] == pytest.approx(b / (lr * tau["value"] * 2**21))


@pytest.mark.slow
def test_the_trainer_runs_each_weight_decay(_verb, tmp_path, capsys) -> None:
    """With the real trainer: the lambda axis reaches the optimizer (at one LR the three
    weight decays give three losses) and the fit measures tau over it."""
    import pandas as pd

    import mutransfer.training.train  # noqa: F401  (an import error fails, never skips)

    out, csv, fit = tmp_path / "o", tmp_path / "r.csv", tmp_path / "fit.json"
    assert mutransfer_cli.main(["sweep", "scaling", "--preset", "gpt-tiny", "--width", "32", "--batch-sizes",
                                "2,4,8", "--tokens", "256,512,1024", "--lr-center", "0.01",
                                "--log2-lr-offsets=-1,0,1", "--set", "seq_len=16", "--eval-sequences", "8",
                                "--device", "cpu", "--max-extend", "0", "--weight-decays", "0.05,1.6",
                                "--workers", "1", "--quiet", "--out", str(out)]) == 0
    assert mutransfer_cli.main(["sweep", "results", "--storage", str(out), "--out", str(csv)]) == 0
    df = pd.read_csv(csv)
    assert df.groupby("batch_size")["weight_decay"].nunique().to_dict() == {2: 1, 4: 3, 8: 1}
    at = df[(df["batch_size"] == 4) & (df["tokens"] == df["tokens"].max())]
    assert at.groupby("lr")["loss"].nunique().min() == 3
    assert mutransfer_cli.main(["fit", "scaling", str(csv), "--n-boot", "20", "--out", str(fit),
                                "--quiet"]) == 0
    assert json.loads(fit.read_text())["tau"]["source"] == "measured"
