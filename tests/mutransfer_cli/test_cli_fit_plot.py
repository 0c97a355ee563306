"""`mutransfer fit`, `mutransfer plot` and `mutransfer transfer --fit`: the JSON contract
(docs/architecture.md, Fit JSON), known answers on published data, rendered figures and
their data, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from mutransfer_cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
ZHANG = DATA / "zhang2024_cbs_steps_to_target.csv"
PORIAN = DATA / "porian2024_isoflop_optima.csv"
ZHANG_B_CRIT = {"85M": 2190.6, "151M": 3239.8, "302M": 5432.6, "604M": 7906.6, "1.2B": 11131.1}
ZHANG_CBS = {"85M": 745.3, "151M": 955.2, "302M": 1393.7, "604M": 1888.5, "1.2B": 2533.4}
PORIAN_EXPONENTS = {
    "rw|base|long|kaplan|kaplan|train": 0.8338,
    "rw|base|long|kaplan|standard|val": 0.7009,
    "rw|base|short|kaplan|standard|val": 0.6035,
    "rw|base|short|chinchilla|standard|val": 0.5714,
    "rw|tuned|short|const|standard|val": 0.4970,
}
HOFFMANN = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF"}


def strict_json(text: str) -> Any:
    """json.loads that fails on NaN/Infinity (the contract says: never)."""
    def bad(token: str) -> None:
        raise AssertionError(f"non-finite number {token} in the JSON output")
    return json.loads(text, parse_constant=bad)


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    assert main(args) == 0
    return strict_json(capsys.readouterr().out)


def fails(args: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Exit 2 with one line on stderr that contains every needle."""
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


def lr_sweep(param: str, widths: tuple[int, ...] = (128, 256, 512, 1024), seeds: int = 3,
             log2_lrs: np.ndarray | None = None, seed: int = 0) -> pd.DataFrame:
    """loss = 3 + 0.02 (log2 lr − log2 lr*)² + noise; lr* fixed under muP, ∝ 1/width under SP;
    SP runs with lr > 2^-6 diverge (NaN loss, diverged=True)."""
    rng = np.random.default_rng(seed)
    grid = np.arange(-14.0, -3.0) if log2_lrs is None else log2_lrs
    rows = []
    for w in widths:
        opt = -9.3 if param == "mup" else -9.3 - np.log2(w / widths[0])
        for t in grid:
            for s in range(seeds):
                div = param == "sp" and t > -6
                loss = np.nan if div else 3.0 + 0.02 * (t - opt) ** 2 + rng.normal(0, 0.002)
                rows.append(dict(parametrization=param, width=w, lr=2.0**t, seed=s, loss=loss,
                                 diverged=div, batch_size=16))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def sweep_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "results.csv"
    pd.concat([lr_sweep("mup", seed=1), lr_sweep("sp", seed=2)]).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def hoffmann_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    n = 10 ** rng.uniform(7, 10, 40)
    d = n * 10 ** rng.uniform(0.5, 3.0, 40)
    loss = HOFFMANN["E"] + HOFFMANN["A"] / n ** HOFFMANN["alpha"] + HOFFMANN["B"] / d ** HOFFMANN["beta"]
    path = tmp_path_factory.mktemp("loss") / "runs.csv"
    pd.DataFrame({"n_params": n, "tokens": d, "loss": loss, "diverged": False}).to_csv(path, index=False)
    return path


# ------------------------------------------------------------------ fit: known answers
def test_fit_critical_batch_on_zhang2024(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cbs.json"
    assert main(["fit", "critical-batch", str(ZHANG), "--batch", "batch_size_seqs",
                 "--steps", "steps_to_target", "--group", "model", "--n-boot", "30",
                 "--out", str(out), "--quiet"]) == 0
    doc = strict_json(out.read_text())
    assert set(doc) >= {"fits"} and len(doc["fits"]) == 5
    by_model = {f["group"]["model"]: f for f in doc["fits"]}
    for model, b_crit in ZHANG_B_CRIT.items():
        f = by_model[model]
        assert set(f) >= {"group", "S_min", "E_min", "B_crit", "cbs_20"}
        assert all(type(f[k]) is float for k in ("S_min", "E_min", "B_crit", "cbs_20"))
        assert f["B_crit"] == pytest.approx(b_crit, rel=5e-3)
        assert f["cbs_20"] == pytest.approx(ZHANG_CBS[model], rel=5e-3)
        assert f["B_crit"] == pytest.approx(f["E_min"] / f["S_min"])
        lo, hi = f["ci"]["B_crit"]
        assert lo <= f["B_crit"] <= hi
    assert by_model["85M"]["B_crit"] == pytest.approx(2190.6, abs=0.5)
    assert doc["b0"] == 256.0 and not list(tmp_path.glob("*.tmp"))


def test_fit_power_law_on_porian2024(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pl.json"
    # One row of the table has no optimum: a clear error, unless --dropna drops it.
    fails(["fit", "power-law", str(PORIAN), "--x", "flops", "--y", "n_star", "--group", "config",
           "--out", str(out)], capsys, "'n_star'", "--dropna")
    assert not out.exists()
    doc = run_json(["fit", "power-law", str(PORIAN), "--x", "flops", "--y", "n_star",
                    "--group", "config", "--dropna", "--n-boot", "100", "--out", str(out),
                    "--json"], capsys)
    assert doc == strict_json(out.read_text())
    assert doc["n_dropped"] == 1 and len(doc["fits"]) == 5
    for f in doc["fits"]:
        assert set(f) >= {"group", "coefficient", "exponents", "ci", "n_points"}
        b = PORIAN_EXPONENTS[f["group"]["config"]]
        assert list(f["exponents"]) == ["flops"]
        assert f["exponents"]["flops"] == pytest.approx(b, abs=6e-5)
        assert round(f["exponents"]["flops"], 3) == round(b, 3)
        assert f["ci"]["flops"][0] < b < f["ci"]["flops"][1]
        assert f["ci"]["coefficient"][0] < f["coefficient"] < f["ci"]["coefficient"][1]
        assert f["n_points"] >= 10


def test_fit_power_law_two_variables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    n, d = 10 ** rng.uniform(6, 9, 30), 10 ** rng.uniform(9, 11, 30)
    path = tmp_path / "opt.csv"
    pd.DataFrame({"N": n, "D": d, "lr": 2.0 * n**-0.25 * d**0.1}).to_csv(path, index=False)
    doc = run_json(["fit", "power-law", str(path), "--x", "N", "--x2", "D", "--y", "lr",
                    "--n-boot", "20", "--json"], capsys)
    (f,) = doc["fits"]
    assert f["group"] is None and f["n_points"] == 30
    assert f["coefficient"] == pytest.approx(2.0, rel=1e-9)
    assert f["exponents"] == pytest.approx({"N": -0.25, "D": 0.1}, abs=1e-10)
    assert set(f["ci"]) == {"coefficient", "N", "D"}


def test_fit_loss_recovers_hoffmann(tmp_path: Path, hoffmann_csv: Path) -> None:
    out = tmp_path / "loss.json"
    assert main(["fit", "loss", str(hoffmann_csv), "--n", "n_params", "--d", "tokens",
                 "--loss", "loss", "--n-boot", "8", "--out", str(out), "--quiet"]) == 0
    doc = strict_json(out.read_text())
    assert set(doc) >= {"E", "A", "B", "alpha", "beta", "ci", "objective", "n_points"}
    for k, v in HOFFMANN.items():
        assert type(doc[k]) is float
        assert doc[k] == pytest.approx(v, rel=1e-6), k
        assert len(doc["ci"][k]) == 2
    assert doc["n_points"] == 40 and 0 <= doc["objective"] < 1e-12
    assert doc["n_starts"] == 4500
    g = (0.34 * 406.4 / (0.28 * 410.7)) ** (1 / 0.62)
    assert doc["compute_optimal"]["G"] == pytest.approx(g, rel=1e-5)


def test_fit_optimum_shape_edges_and_diverged(tmp_path: Path, sweep_csv: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(["fit", "optimum", str(sweep_csv), "--group", "parametrization,width",
                    "--n-boot", "100", "--json"], capsys)
    assert doc["n_diverged"] == 4 * 2 * 3  # SP: lr in {2^-5, 2^-4} x 4 widths x 3 seeds
    assert len(doc["fits"]) == 8
    for f in doc["fits"]:
        assert set(f) >= {"group", "x_opt", "ci", "y_opt", "at_edge"}
        assert f["at_edge"] is False and f["ci"][0] < f["x_opt"] < f["ci"][1]
        w = f["group"]["width"]
        truth = -9.3 if f["group"]["parametrization"] == "mup" else -9.3 - np.log2(w / 128)
        assert np.log2(f["x_opt"]) == pytest.approx(truth, abs=0.1)
    # A grid that stops before the optimum: flagged, and the open side is null, not inf/NaN.
    edge = tmp_path / "edge.csv"
    lr_sweep("mup", widths=(64, 128), log2_lrs=np.arange(-8.0, -3.0)).to_csv(edge, index=False)
    out = tmp_path / "edge.json"
    assert main(["fit", "optimum", str(edge), "--group", "width", "--n-boot", "50",
                 "--out", str(out), "--quiet"]) == 0
    text = out.read_text()
    for f in strict_json(text)["fits"]:
        assert f["at_edge"] is True and f["edge"] == "low" and f["x_opt"] == 2.0**-8
        assert f["ci"][0] is None and f["ci"][1] >= f["x_opt"]


def test_fit_leaves_out_pruned_trials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep export keeps pruned trials with state=PRUNED and a NaN loss: not an error."""
    df = lr_sweep("mup", widths=(64,)).assign(state="COMPLETE")
    pruned = df.iloc[:5].assign(state="PRUNED", loss=np.nan)
    path = tmp_path / "export.csv"
    pd.concat([df, pruned]).to_csv(path, index=False)
    doc = run_json(["fit", "optimum", str(path), "--n-boot", "10", "--json"], capsys)
    assert doc["n_not_complete"] == 5 and doc["fits"][0]["n_rows"] == len(df)
    fails(["fit", "optimum", str(path), "--state", "none", "--n-boot", "10", "--json"], capsys,
          "'loss'", "non-finite", "--dropna")


# ------------------------------------------------------------------ transfer --fit
def test_transfer_from_fit_json(tmp_path: Path, sweep_csv: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    fit = tmp_path / "opt.json"
    assert main(["fit", "optimum", str(sweep_csv), "--group", "parametrization,width",
                 "--n-boot", "50", "--out", str(fit), "--quiet"]) == 0
    fits = strict_json(fit.read_text())["fits"]
    widest = next(f for f in fits if f["group"] == {"parametrization": "mup", "width": 1024})
    card = tmp_path / "card.yaml"
    common = ["--preset", "gpt-tiny", "--target-width", "2048", "--tokens", "1e8", "--batch-size", "16"]
    assert main(["transfer", "--fit", str(fit), *common, "--out", str(card)]) == 0
    c = yaml.safe_load(card.read_text())
    assert c["optimizer"]["lr"] == widest["x_opt"]
    assert c["projected"]["lr"]["interval"] == widest["ci"]
    assert c["parametrization"]["base_width"] == 128  # the smallest proxy width
    assert c["source"]["proxy_widths"] == [128, 256, 512, 1024]
    assert c["projected"]["drift"]["drift_octaves"] < 0.1
    # --group picks another group; the SP groups are never chosen for a muP card by default.
    assert main(["transfer", "--fit", str(fit), *common, "--group", "parametrization=mup,width=256",
                 "--out", str(card)]) == 0
    chosen = next(f for f in fits if f["group"] == {"parametrization": "mup", "width": 256})
    assert yaml.safe_load(card.read_text())["optimizer"]["lr"] == chosen["x_opt"]
    fails(["transfer", "--fit", str(fit), *common, "--group", "width=3", "--out",
           str(tmp_path / "x.yaml")], capsys, "no group", "width=3")
    pl = tmp_path / "pl.json"
    pl.write_text(json.dumps({"fits": [{"group": None, "coefficient": 1.0}]}))
    fails(["transfer", "--fit", str(pl), *common, "--out", str(tmp_path / "y.yaml")], capsys,
          "not the output of `mutransfer fit optimum`")
    fails(["transfer", "--lr", "0.01", *common, "--group", "width=3", "--out",
           str(tmp_path / "z.yaml")], capsys, "--group only goes with --fit")
    assert not any((tmp_path / n).exists() for n in ("x.yaml", "y.yaml", "z.yaml"))


# ------------------------------------------------------------------ bad input (§9)
def _table(tmp_path: Path, name: str, **cols: Any) -> str:
    path = tmp_path / name
    pd.DataFrame(cols).to_csv(path, index=False)
    return str(path)


def test_bad_input_exits_2_with_one_line_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fit.json"
    o = ["--out", str(out), "--n-boot", "10"]
    two = _table(tmp_path, "two.csv", x=[1.0, 2.0], y=[1.0, 2.0], lr=[1e-3, 2e-3],
                 loss=[3.0, 2.9], batch_size=[64, 128], steps_to_target=[100.0, 60.0])
    # too few points, each saying how many are needed
    fails(["fit", "power-law", two, "--x", "x", "--y", "y", *o], capsys, "at least 3 points", "got 2")
    fails(["fit", "optimum", two, *o], capsys, "at least 3 points")
    fails(["fit", "critical-batch", two, *o], capsys, "at least 3 distinct batch sizes")
    small = _table(tmp_path, "small.csv", n_params=[1e6, 2e6, 4e6, 8e6], tokens=[1e8, 3e8, 1e9, 2e9],
                   loss=[4.0, 3.5, 3.2, 3.0])
    fails(["fit", "loss", small, *o], capsys, "needs more than 5 points", "got 4")
    # non-positive values in a log fit
    neg = _table(tmp_path, "neg.csv", x=[1.0, 2, 4, 8], y=[1.0, -2, 3, 4])
    fails(["fit", "power-law", neg, "--x", "x", "--y", "y", *o], capsys, "'y'", "> 0", "-2.0")
    zero = _table(tmp_path, "zero.csv", n_params=[0.0, 2e6, 4e6, 8e6, 1e7, 2e7, 4e7],
                  tokens=[1e8] * 3 + [1e9] * 4, loss=[4.0, 3.5, 3.2, 3.0, 2.9, 2.8, 2.7])
    fails(["fit", "loss", zero, *o], capsys, "'n_params'", "positive finite")
    # an all-diverged group
    div = pd.concat([lr_sweep("mup", widths=(64,)), lr_sweep("mup", widths=(128,))])
    div.loc[div["width"] == 128, "diverged"] = True
    div.to_csv(tmp_path / "div.csv", index=False)
    fails(["fit", "optimum", str(tmp_path / "div.csv"), "--group", "width", *o], capsys,
          "width=128", "all 33 rows diverged")
    # missing columns, named
    fails(["fit", "power-law", neg, "--x", "flops", "--y", "n_star", *o], capsys,
          "missing required column(s)", "'flops'", "'n_star'")
    fails(["fit", "optimum", neg, "--group", "width", *o], capsys, "'lr'", "'loss'", "'width'")
    # non-finite and non-numeric values
    inf = _table(tmp_path, "inf.csv", x=[1.0, 2, 4, np.inf], y=[1.0, 2, 3, 4])
    fails(["fit", "power-law", inf, "--x", "x", "--y", "y", *o], capsys, "'x'", "non-finite", "inf")
    text = _table(tmp_path, "text.csv", x=[1.0, 2, 4, 8], y=["1", "2", "oops", "4"])
    fails(["fit", "power-law", text, "--x", "x", "--y", "y", *o], capsys, "non-numeric", "'oops'")
    # filters and files
    fails(["fit", "power-law", neg, "--x", "x", "--y", "y", "--where", "x=3", *o], capsys,
          "no rows", "x=3")
    fails(["fit", "power-law", str(tmp_path / "nope.csv"), "--x", "x", "--y", "y", *o], capsys,
          "does not exist")
    fails(["fit", "optimum", two, "--ci", "1.5", *o], capsys, "--ci")
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


# ------------------------------------------------------------------ plots
def assert_figure(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 3000
    if path.suffix == ".svg":
        assert b"<svg" in data[:2000]
    else:
        assert data.startswith(MAGIC[path.suffix])
    assert not list(path.parent.glob(".*.tmp"))


def test_plot_lr_curves_side_by_side(tmp_path: Path, sweep_csv: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    fig = tmp_path / "lr.png"
    data = run_json(["plot", "lr-curves", str(sweep_csv), "--n-boot", "50", "--out", str(fig),
                     "--json"], capsys)
    assert_figure(fig)
    fit = run_json(["fit", "optimum", str(sweep_csv), "--group", "parametrization,width",
                    "--n-boot", "50", "--json"], capsys)
    optima = {(f["group"]["parametrization"], f["group"]["width"]): f for f in fit["fits"]}
    assert data["panel"] == "parametrization" and len(data["curves"]) == 8
    for c in data["curves"]:
        f = optima[(c["panel"], c["group"])]
        assert c["x_opt"] == f["x_opt"] and c["ci"] == f["ci"] and c["loss_opt"] == f["y_opt"]
        mean, lo, hi = map(np.array, (c["mean"], c["lo"], c["hi"]))
        assert np.all(lo < mean) and np.all(mean < hi) and set(c["n_seeds"]) == {3}
        assert len(c["x"]) == (11 if c["panel"] == "mup" else 9)  # SP's top LRs diverged


def test_plot_optimum_with_projected_target(tmp_path: Path, sweep_csv: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    fig = tmp_path / "opt.svg"
    data = run_json(["plot", "optimum", str(sweep_csv), "--target", "8192", "--n-boot", "50",
                     "--out", str(fig), "--json"], capsys)
    assert_figure(fig)
    series = {s["name"]: s for s in data["series"]}
    assert series["mup"]["slope"] == pytest.approx(0.0, abs=0.03)
    assert series["sp"]["slope"] == pytest.approx(-1.0, abs=0.03)
    assert series["sp"]["drift_octaves"] == pytest.approx(3.0, abs=0.1)
    for name, expect in (("mup", -9.3), ("sp", -9.3 - 6)):
        t = series[name]["target"]
        assert t["width"] == 8192 and t["extrapolation"] == pytest.approx(8.0)
        assert np.log2(t["x_opt"]) == pytest.approx(expect, abs=0.1)
        assert t["interval"][0] < t["x_opt"] < t["interval"][1]


def test_plot_critical_batch_tradeoff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fig = tmp_path / "cbs.pdf"
    data = run_json(["plot", "critical-batch", str(ZHANG), "--batch", "batch_size_seqs",
                     "--group", "model", "--n-boot", "10", "--out", str(fig), "--json"], capsys)
    assert_figure(fig)
    z = pd.read_csv(ZHANG)
    for f in data["fits"]:
        model = f["group"]["model"]
        rows = z[z["model"] == model]
        assert sorted(f["batch"]) == sorted(rows["batch_size_seqs"].astype(float))
        assert sorted(f["steps"]) == sorted(rows["steps_to_target"].astype(float))
        assert f["B_crit"] == pytest.approx(ZHANG_B_CRIT[model], rel=5e-3)
        assert f["knee"] == pytest.approx([2 * f["E_min"], 2 * f["S_min"]])


def test_plot_loss_law_isoflop(tmp_path: Path, hoffmann_csv: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    fig = tmp_path / "loss.png"
    data = run_json(["plot", "loss-law", str(hoffmann_csv), "--compute", "1e18,1e20,1e22",
                     "--n-boot", "5", "--out", str(fig), "--json"], capsys)
    assert_figure(fig)
    p = data["params"]
    assert p == pytest.approx(HOFFMANN, rel=1e-6)
    a, b = p["alpha"], p["beta"]
    g = (a * p["A"] / (b * p["B"])) ** (1 / (a + b))
    c = np.array(data["compute"])
    assert list(c) == [1e18, 1e20, 1e22]
    np.testing.assert_allclose(data["n_opt"], g * (c / 6) ** (b / (a + b)), rtol=1e-9)
    np.testing.assert_allclose(data["d_opt"], (c / 6) ** (a / (a + b)) / g, rtol=1e-9)
    # the drawn curves bottom out at the starred optimum (to within one grid step)
    ratio = np.array(data["curve_min_n"]) / np.array(data["n_opt"])
    assert np.all(np.abs(np.log(ratio)) < np.log(60) / 79)


def test_plot_rejects_unknown_format(tmp_path: Path, sweep_csv: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    fails(["plot", "lr-curves", str(sweep_csv), "--out", str(tmp_path / "lr.jpg")], capsys,
          ".png, .pdf or .svg")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv", [["fit", "optimum", "--help"], ["fit", "loss", "--help"],
                                  ["plot", "lr-curves", "--help"], ["plot", "loss-law", "--help"]])
def test_help_documents_the_flags(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    assert "--out" in capsys.readouterr().out


# ------------------------------------------------------------------ fit/plot scaling


def test_fit_scaling_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              scaling_sweep) -> None:
    df = scaling_sweep()
    df.loc[df["lr"] == 2.0**-6, ["loss", "diverged"]] = [np.nan, True]
    path = tmp_path / "scaling.csv"
    df.to_csv(path, index=False)
    out = tmp_path / "fit.json"
    doc = run_json(["fit", "scaling", str(path), "--out", str(out), "--n-boot", "200", "--json"],
                   capsys)
    assert strict_json(out.read_text()) == doc
    assert set(doc) >= {"kind", "lr", "batch", "tau", "warmup", "decay_fraction", "measured",
                        "n_rows", "n_in_band"}
    assert doc["kind"] == "scaling" and doc["n_rows"] == len(df)
    assert doc["n_diverged"] == int(df["diverged"].sum())
    ex = doc["lr"]["exponents"]
    assert ex["batch_tokens"] == pytest.approx(0.5, abs=0.03)
    assert ex["tokens"] == pytest.approx(-0.25, abs=0.03)
    assert doc["batch"]["exponents"]["tokens"] == pytest.approx(0.5, abs=0.05)
    lo, hi = doc["lr"]["ci"]["batch_tokens"]
    assert lo <= ex["batch_tokens"] <= hi
    assert doc["measured"] == {"tokens": [2.0**20, 2.0**23], "batch_tokens": [2.0**12, 2.0**16],
                               "seq_len": 128, "n_params": None}
    assert doc["tau"]["value"] > 0 and doc["tau"]["weight_decay"] == 0.1
    # the document is what `transfer --scaling-fit` reads back
    from analysis.scaling_fit import ScalingLawFit

    p = ScalingLawFit.from_dict(doc).project(tokens=2.0**26, dp_size=4)
    assert p.batch_sequences % 4 == 0 and p.steps * p.batch_tokens.value >= 2.0**26


def test_fit_scaling_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       scaling_sweep) -> None:
    out = tmp_path / "fit.json"
    o = ["--out", str(out), "--n-boot", "10"]
    few_d = tmp_path / "few_d.csv"
    scaling_sweep(budgets=(2**20, 2**21)).to_csv(few_d, index=False)
    fails(["fit", "scaling", str(few_d), *o], capsys, "2 token budget(s)", "at least 3")
    few_b = tmp_path / "few_b.csv"
    scaling_sweep(batches=(2.0**13, 2.0**14)).to_csv(few_b, index=False)
    fails(["fit", "scaling", str(few_b), *o], capsys, "2 batch size(s)", "at least 3")
    no_col = tmp_path / "no_col.csv"
    scaling_sweep().drop(columns=["tokens"]).to_csv(no_col, index=False)
    fails(["fit", "scaling", str(no_col), *o], capsys, "missing required column(s)", "'tokens'")
    fails(["fit", "scaling", str(few_d), "--level", "2", *o], capsys, "--level")
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def test_plot_scaling_draws_the_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    scaling_sweep) -> None:
    path = tmp_path / "scaling.csv"
    scaling_sweep().to_csv(path, index=False)
    fig = tmp_path / "scaling.png"
    data = run_json(["plot", "scaling", str(path), "--n-boot", "50", "--out", str(fig), "--json"],
                    capsys)
    assert_figure(fig)
    assert len(data["cells"]) == 20 and len(data["budgets"]) == 4
    for b in data["budgets"]:
        assert b["batch_opt"] == pytest.approx(16 * b["tokens"] ** 0.5, rel=0.15)
    assert data["lr_law"].startswith("eta* =") and len(data["batch_line"]["tokens"]) == 50
