"""CPU-side behaviour of the fidelity and GPU benchmarks: the LR bracket scan finds an
interior optimum, the trial log resumes, and ``benchmarks gpu`` refuses without CUDA."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._proxy import TrialLog, bracket_scan, bracket_scans

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("true_opt, start", [(-9.3, [-5.0, -4.0, -3.0]), (-1.6, [-8.0, -7.0, -6.0]),
                                             (-5.2, [-6.0, -5.0, -4.0])])
def test_bracket_scan_widens_until_the_minimum_is_interior(true_opt: float, start: list[float]) -> None:
    calls: list[float] = []

    def run_at(t: float) -> list[float]:
        calls.append(t)
        return [(t - true_opt) ** 2 + 1.0, (t - true_opt) ** 2 + 1.2]

    losses = bracket_scan(run_at, start, lo=-14.0, hi=0.0)
    ts = sorted(losses)
    best = min(ts, key=losses.__getitem__)
    assert ts[0] < best < ts[-1]  # bracketed
    assert best == round(true_opt)
    assert len(calls) == len(set(calls))  # no LR is trained twice
    assert losses[best] == pytest.approx((best - true_opt) ** 2 + 1.1)  # seed mean
    # it stops one point past the minimum: nothing further than needed was run
    assert ts[0] >= min(start[0], best - 1) and ts[-1] <= max(start[-1], best + 1)


def test_bracket_scan_stops_at_the_search_bounds() -> None:
    losses = bracket_scan(lambda t: [t], [-3.0, -2.0, -1.0], lo=-5.0, hi=0.0)
    assert sorted(losses) == [-5.0, -4.0, -3.0, -2.0, -1.0]


def test_lock_step_scans_run_exactly_the_grids_of_one_scan_per_key_in_rounds() -> None:
    opts = {"a": -9.3, "b": -1.6, "c": -5.2}
    starts = {"a": [-5.0, -4.0, -3.0], "b": [-8.0, -7.0, -6.0], "c": [-6.0, -5.0, -4.0]}

    def loss(k: str, t: float) -> list[float]:
        return [(t - opts[k]) ** 2 + 1.0]

    alone = {k: bracket_scan(lambda t, k=k: loss(k, t), starts[k], lo=-14.0, hi=0.0) for k in starts}
    rounds: list[list[tuple[str, float]]] = []
    fetched: set[tuple[str, float]] = set()
    read: list[tuple[str, float]] = []

    def fetch(need: list[tuple[object, float]]) -> None:
        assert not fetched & set(need)  # nothing is asked for twice
        rounds.append(need)  # type: ignore[arg-type]
        fetched.update(need)  # type: ignore[arg-type]

    def run_at(k: object, t: float) -> list[float]:
        assert (k, t) in fetched  # every run was handed to fetch before it is read
        read.append((k, t))  # type: ignore[arg-type]
        return loss(k, t)  # type: ignore[arg-type]

    together = bracket_scans(run_at, starts, lo=dict.fromkeys(starts, -14.0), hi=dict.fromkeys(starts, 0.0),
                             fetch=fetch)
    assert together == alone
    assert fetched == {(k, t) for k, g in alone.items() for t in g}
    assert len(rounds[0]) == 9  # the starting grids of every key in one round
    assert len(rounds) == 1 + max(len(g) - 3 for g in alone.values())  # then one LR per key per round
    assert all(len({k for k, _ in r}) == len(r) for r in rounds[1:])


def test_trial_log_resumes_and_ignores_nothing(tmp_path: Path) -> None:
    log = TrialLog(tmp_path / "t.jsonl")
    log.add({"depth": 4, "log2_lr": -5.0}, {"loss": 2.5})
    again = TrialLog(tmp_path / "t.jsonl")
    assert again.get({"log2_lr": -5.0, "depth": 4})["loss"] == 2.5  # key order does not matter
    assert again.get({"depth": 8, "log2_lr": -5.0}) is None


@pytest.mark.parametrize("argv", [["-m", "benchmarks", "gpu"], ["-m", "benchmarks.gpu"]])
def test_gpu_benchmark_refuses_in_one_line_without_cuda(argv: list[str]) -> None:
    out = ROOT / "benchmarks" / "results" / "gpu.json"
    before = out.stat().st_mtime_ns if out.exists() else None
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0]
    assert (out.stat().st_mtime_ns if out.exists() else None) == before  # nothing written


def test_gpu_help_answers_and_writes_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    for mod in ("benchmarks.gpu", "benchmarks.depth_fidelity", "benchmarks.horizon_shift",
                "benchmarks.hf_architectures", "benchmarks.readout_ladder", "benchmarks.width_depth"):
        p = subprocess.run([sys.executable, "-m", mod, "--help"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and "usage:" in p.stdout, mod
    assert list(tmp_path.iterdir()) == []


def test_hf_architectures_refuses_an_unknown_architecture_by_name(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "benchmarks.hf_architectures", "--archs", "llama,bert"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "unknown architecture(s) bert" in p.stderr and p.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_best_loss_ratio_recovers_known_minima_and_its_interval_holds_them() -> None:
    import numpy as np
    import pandas as pd

    from benchmarks.tuned_multipliers import best_loss_ratio

    rows = []
    # Two arms, quadratic in log2 lr with minima 2.0 (at 2^-6) and 1.9 (at 2^-8); the seeds
    # shift each curve by +-0.01, so the seed mean is the noiseless curve.
    for arm, (t0, floor) in {"a": (-6.0, 2.0), "b": (-8.0, 1.9)}.items():
        for seed, shift in ((0, 0.01), (1, -0.01)):
            for t in np.arange(-11.0, -2.0):
                loss = floor + 0.05 * (t - t0) ** 2 + shift
                rows.append({"arm": arm, "seed": seed, "lr": 2.0**t, "loss": loss, "diverged": False})
    out = best_loss_ratio(pd.DataFrame(rows), "a", "b", n_boot=50)
    named = best_loss_ratio(pd.DataFrame(rows).rename(columns={"arm": "parametrization"}), "a", "b",
                            n_boot=50, by="parametrization")
    assert named == out
    assert out["ratio"] == pytest.approx(2.0 / 1.9, rel=1e-9)
    lo, hi = out["ci"]
    assert lo <= out["ratio"] <= hi
    assert (2.0 - 0.01) / (1.9 + 0.01) - 1e-9 <= lo and hi <= (2.0 + 0.01) / (1.9 - 0.01) + 1e-9


def test_multiplier_spec_searches_only_trainconfig_fields_and_its_corners_are_valid() -> None:
    import itertools

    from benchmarks.tuned_multipliers import SPEC
    from mutransfer.training.config import TrainConfig
    from sweeps.spec import load_spec

    spec = load_spec(SPEC)
    assert spec.kind == "run" and spec.sampler == "tpe" and spec.base["wd_mode"] == "independent"
    space = spec.search()
    assert {"lr", "lr_mult_input", "lr_mult_output", "lr_mult_vector", "input_mult", "output_mult",
            "attn_mult", "weight_decay", "beta2", "eps"} == set(space)
    base = dict(spec.base)
    for corner in itertools.product(*space.values()):  # every extreme combination builds
        TrainConfig.from_flat(dict(preset=spec.preset, **base, **dict(zip(space, corner))))



def test_summary_shows_a_superseded_records_note_in_place_of_its_verdict() -> None:
    """A record that measures a setup no longer the default shows its note before its
    headline and no verdict; every other record keeps its figures and verdict."""
    import json

    from benchmarks.__main__ import summary_row

    rec = {"date": "2026-12-01T18:02:47+00:00", "machine": {"device": "cpu", "cpu_count": 2},
           "figures": {"ratio_best_loss_mup_over_sp_widest": 1.0305}, "passed": True}
    plain = summary_row("x", rec)
    assert plain.endswith("| ratio_best_loss_mup_over_sp_widest = 1.03 | yes |") and "superseded" not in plain
    old = summary_row("x", {**rec, "superseded": "mup's constant readout"})
    cells = [c.strip() for c in old.strip("|").split("|")]
    assert cells[3] == "**superseded**: mup's constant readout. ratio_best_loss_mup_over_sp_widest = 1.03"
    assert cells[4] == "superseded"
    # the committed records of the old proxy's constant readout say so (the summary reads them)
    for name in ("mup_vs_sp", "mup_vs_sp_ablation", "tuned_multipliers", "transfer_fidelity"):
        note = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())["superseded"]
        assert "constant readout" in note and "150 steps" in note and "gpt-small" in note, name


def test_mup_vs_sp_imports_only_rows_of_its_own_setup(tmp_path: Path) -> None:
    """Earlier results are reused only when every hyperparameter column equals the
    benchmark's config at that (parametrization, width, lr, seed)."""
    import json

    import pandas as pd

    from benchmarks.mup_vs_sp import import_results

    base = {"state": "COMPLETE", "preset": "gpt-small", "depth": 2, "base_width": 32, "steps": 150,
            "batch_size": 16, "warmup_steps": 15, "lr_floor": 0.1, "schedule": "cosine", "eval_every": 150,
            "eval_sequences": 128, "lr_mult_input": 1.0, "readout_init": "constant", "diverged": False,
            "wall_s": 3.0, "loss": 2.0}
    rows = [{**base, "parametrization": "sp", "width": 256, "lr": 2.0**-9, "seed": 0, "loss": 1.9414},
            {**base, "parametrization": "mup", "width": 64, "lr": 2.0**-6, "seed": 1, "lr_mult_input": 2.0},
            {**base, "parametrization": "mup", "width": 64, "lr": 2.0**-6, "seed": 0, "steps": 125},
            {**base, "parametrization": "mup", "width": 64, "lr": 2.0**-6, "seed": 0, "depth": 4},
            {**base, "parametrization": "mup", "width": 128, "lr": 0.01, "seed": 0},
            {**base, "parametrization": "completep", "width": 64, "lr": 2.0**-6, "seed": 0}]
    csv = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    assert import_results(csv, tmp_path / "work") == 1
    log = TrialLog(tmp_path / "work" / "trials.jsonl")
    (row,) = log.rows.values()
    got = (row["arm"], row["width"], row["log2_lr"], row["seed"], row["loss"])
    assert got == ("sp", 256, -9.0, 0, 1.9414)
    assert json.loads(row["overrides"]) == {"parametrization": "sp"}
    assert import_results(csv, tmp_path / "work") == 0  # already there


def test_hf_vs_builtin_times_the_same_parametrized_network() -> None:
    """Both sides of the HF-vs-built-in throughput ratio carry the same μP hooks and the
    same weights, so they compute the same loss: the ratio compares equal work."""
    import torch

    from benchmarks.hf_vs_builtin import loss_of, models

    ours, hf, pz, pz_hf = models()
    assert pz.width_mult == pz_hf.width_mult == 4.0
    assert ours._mutransfer_hooks == hf._mutransfer_hooks == ("pre:lm_head:0.25",)  # readout × 1/m
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    y = torch.roll(x, -1, dims=1)
    with torch.no_grad():
        assert loss_of(hf, x, y).item() == pytest.approx(loss_of(ours, x, y).item(), rel=1e-5)


def _ladder_table(optima: dict[str, dict[int, tuple[float, float]]]) -> object:
    """Trials of quadratic loss curves in log2 lr: arm -> width -> (log2 optimum, best loss);
    seeds 0 and 1 shift each curve by +-0.01, so their mean is the noiseless curve."""
    import numpy as np
    import pandas as pd

    rows = []
    for arm, per_width in optima.items():
        for w, (t0, floor) in per_width.items():
            for seed, shift in ((0, 0.01), (1, -0.01)):
                for t in np.arange(round(t0) - 3.0, round(t0) + 4.0):
                    rows.append({"arm": arm, "width": w, "seed": seed, "lr": 2.0**t, "diverged": False,
                                 "loss": floor + 0.05 * (t - t0) ** 2 + shift, "wall_s": 1.0})
    return pd.DataFrame(rows)


def test_readout_ladder_reads_drift_wider_is_better_and_the_default_rule_off_known_curves() -> None:
    """Known answers: an arm whose optimum moves 1 octave drifts 1; one whose optimum sits
    still and beats SP at the widest width is the only eligible default; a best loss that
    rises with width is not wider-is-better; the ratio at every width is the floors' ratio."""
    from benchmarks.readout_ladder import summarize

    widths = (32, 64, 128)
    table = _ladder_table({
        "sp": {32: (-5.0, 2.2), 64: (-6.0, 2.1), 128: (-7.0, 2.0)},
        "mup_constant": {32: (-5.0, 2.2), 64: (-5.5, 2.15), 128: (-6.0, 2.1)},
        "mup_fan_in": {32: (-5.0, 2.2), 64: (-5.0, 2.05), 128: (-5.0, 1.98)},
        "mup_zero": {32: (-5.0, 2.3), 64: (-5.0, 2.4), 128: (-5.0, 2.35)},
    })
    s = summarize(table, widths, n_boot=20)
    arms = s["arms"]
    assert arms["sp"]["lr_opt_drift_octaves"] == pytest.approx(2.0, abs=1e-6)
    assert arms["mup_constant"]["lr_opt_drift_octaves"] == pytest.approx(1.0, abs=1e-6)
    assert arms["mup_fan_in"]["lr_opt_drift_octaves"] == pytest.approx(0.0, abs=1e-6)
    # the trend: the power-law slope of the optimum (-1, -0.5, 0 per doubling) x 2 doublings
    for a, want in (("sp", -2.0), ("mup_constant", -1.0), ("mup_fan_in", 0.0)):
        assert arms[a]["lr_opt_trend_octaves"] == pytest.approx(want, abs=1e-6)
        lo, hi = arms[a]["lr_opt_trend_ci"]
        assert lo - 1e-9 <= arms[a]["lr_opt_trend_octaves"] <= hi + 1e-9
    assert [arms[a]["wider_is_better"] for a in ("sp", "mup_constant", "mup_fan_in", "mup_zero")] == [
        True, True, True, False]
    for w, want in ((32, 1.0), (64, 2.05 / 2.1), (128, 1.98 / 2.0)):
        got = arms["mup_fan_in"]["per_width"][str(w)]
        assert got["best_loss_over_sp"] == pytest.approx(want, rel=1e-6)
        assert got["best_loss_over_sp_ci"][0] <= got["best_loss_over_sp"] <= got["best_loss_over_sp_ci"][1]
        assert got["log2_lr_opt"] == pytest.approx(-5.0, abs=1e-6) and not got["at_edge"]
        # the demo's estimator: lowest measured seed mean (the floor sits on the grid), paired
        assert got["measured_best_loss_over_sp"] == pytest.approx(want, rel=1e-6)
        lo, hi = got["measured_best_loss_over_sp_ci"]
        assert lo <= got["measured_best_loss_over_sp"] <= hi
    assert s["eligible"] == ["mup_fan_in"]  # constant: 1.05x SP; zero: worse still


def test_readout_ladder_measures_the_demos_own_lr_sweep() -> None:
    """The ladder's proxy is the demo's small size as the demo's LR sweep trains it, so the
    ladder's verdict is about the demo's setup (its runs are the demo's, bit for bit)."""
    from benchmarks.readout_ladder import DEMO
    from mutransfer_cli._demo_sizes import SIZES

    sz = SIZES["small"]
    assert {k: DEMO[k] for k in ("preset", "base_width", "steps", "batch_size", "seq_len", "eval_sequences",
                                 "eval_every", "warmup_steps")} == {
        "preset": sz.preset, "base_width": sz.widths[0], "steps": sz.steps, "batch_size": sz.batch_size,
        "seq_len": sz.seq_len, "eval_sequences": sz.eval_sequences, "eval_every": sz.steps,
        "warmup_steps": max(1, sz.steps // 10)}
    assert DEMO["schedule"] == "cosine" and DEMO["lr_floor"] == 0.1


def test_readout_ladder_work_list_equal_seeds_and_base_width_twins() -> None:
    """--equal-seeds drops every seed cut; at the base width each μP arm reuses the run of
    an arm scanned before it (SP: μP is SP there), never one scanned after."""
    from benchmarks.readout_ladder import ARMS, work_list

    cut = {(a, w): sd for a, _, w, sd, _ in work_list((32, 64), (0, 1))}
    assert cut[("sp", 32)] == (0,) and cut[("sp", 64)] == (0, 1) and cut[("mup_zero", 64)] == (0,)
    eq = work_list((32, 64), (0, 1), arms=("sp", "mup_fan_in"), equal_seeds=True)
    assert {a for a, *_ in eq} == {"sp", "mup_fan_in"} and all(sd == (0, 1) for *_, sd, _ in eq)
    twins = {(a, w): same for a, _, w, _, same in work_list((32, 64), (0, 1))}
    assert twins[("mup_fan_in", 32)] == ARMS["sp"](1.0) and twins[("mup_constant", 32)] == ARMS["sp"](1.0)
    assert twins[("mup_fan_in", 64)] is None and twins[("sp", 32)] is None


def test_readout_ladder_widest_seeds_cut_only_the_widest_width() -> None:
    """--widest-seeds gives every arm those seeds at the widest width (still paired with
    SP's there) and leaves every narrower width, and the base width's twins, as they were."""
    from benchmarks.readout_ladder import work_list

    arms = ("sp", "mup_fan_in")
    full = work_list((32, 128, 256), (0, 1, 2), arms=arms, equal_seeds=True)
    cut = work_list((32, 128, 256), (0, 1, 2), arms=arms, equal_seeds=True, widest_seeds=(0, 1))
    assert [(a, w) for a, _, w, *_ in cut] == [(a, w) for a, _, w, *_ in full]
    for (a, over, w, sd, same), (_, over_f, _, sd_f, same_f) in zip(cut, full, strict=True):
        assert sd == ((0, 1) if w == 256 else (0, 1, 2)) and sd_f == (0, 1, 2), (a, w)
        assert (over, same) == (over_f, same_f)
    # a one-seed cut named for an arm still wins at the widest width
    one = work_list((32, 256), (0, 1, 2), ("sp",), arms, True, widest_seeds=(0, 1))
    assert {(a, w): sd for a, _, w, sd, _ in one}[("sp", 256)] == (0,)
    with pytest.raises(ValueError, match=r"widest seeds \[3\] must be some of the seeds \[0, 1, 2\]"):
        from benchmarks.readout_ladder import run

        run((32, 256), (0, 1, 2), widest_seeds=(3,), train_missing=False)


def test_readout_ladder_scans_start_at_a_shorter_horizons_optima(tmp_path: Path) -> None:
    """--centre-from: each (arm, width) scan starts at the optimum a ladder record holds
    (the committed 1,000-step record's, known values), on the scan's grid; replayed from an
    empty log, the first LR a scan would train is one grid step below that centre."""
    from benchmarks.mup_vs_sp import MissingTrial, _scan_arm
    from benchmarks.readout_ladder import ARMS, DEMO, HERE, scan_centres

    c = scan_centres(HERE / "results" / "readout_ladder_1000_steps.json")
    assert set(c) == {(a, w) for a in ("sp", "mup_fan_in") for w in (32, 128, 256)}
    assert c[("sp", 256)] == pytest.approx(-9.4314, abs=1e-4) and c[("mup_fan_in", 256)] == pytest.approx(
        -6.1879, abs=1e-4)
    with pytest.raises(MissingTrial, match=r"^sp w256 lr 2\^-10 seed 0$"):  # centre -9.43 -> -9.5 on the grid
        _scan_arm("sp", ARMS["sp"](8.0), 256, (0,), str(tmp_path), DEMO, 0.5, train_missing=False,
                  centre=c[("sp", 256)])
    with pytest.raises(MissingTrial, match=r"^sp w256 lr 2\^-9 seed 0$"):  # the demo's guess: -8.5
        _scan_arm("sp", ARMS["sp"](8.0), 256, (0,), str(tmp_path), DEMO, 0.5, train_missing=False)
    bad = tmp_path / "other.json"
    bad.write_text('{"figures": {}}')
    with pytest.raises(ValueError, match="is not a readout-ladder record"):
        scan_centres(bad)


def test_readout_ladder_files_demo_rows_under_named_readouts(tmp_path: Path) -> None:
    """The demo's μP rows are imported as the constant readout only when their
    readout_init column says so, and SP rows as SP, under the ladder's own proxy."""
    import json

    import pandas as pd

    from benchmarks.mup_vs_sp import import_results
    from benchmarks.readout_ladder import ARMS, DEMO

    base = {"state": "COMPLETE", "preset": "llama-small", "depth": 2, "base_width": 32,
            **{k: DEMO[k] for k in ("steps", "batch_size", "seq_len", "warmup_steps", "eval_every",
                                    "eval_sequences")},
            "lr_floor": 0.1, "schedule": "cosine", "weight_decay": 0.0, "readout_init": "constant",
            "diverged": False, "wall_s": 3.0, "loss": 2.0}
    rows = [{**base, "parametrization": "mup", "width": 64, "lr": 2.0**-6, "seed": 1, "loss": 2.222},
            {**base, "parametrization": "mup", "width": 64, "lr": 2.0**-6, "seed": 0,
             "readout_init": "fan_in"},
            {**base, "parametrization": "sp", "width": 64, "lr": 2.0**-7, "seed": 0, "loss": 2.2},
            {**base, "parametrization": "sp", "width": 64, "lr": 2.0**-7, "seed": 1,
             "warmup_steps": DEMO["warmup_steps"] + 3}]
    csv = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    arms = {"sp": ("sp", ARMS["sp"](1.0)), "mup": ("mup_constant", ARMS["mup_constant"](1.0))}
    assert import_results(csv, tmp_path / "work", DEMO, arms) == 2
    log = TrialLog(tmp_path / "work" / "trials.jsonl")
    got = {(r["arm"], r["seed"], r["loss"], r["overrides"]) for r in log.rows.values()}
    constant = json.dumps({"parametrization": "mup", "readout_init": "constant"})
    sp = json.dumps({"parametrization": "sp"})
    assert got == {("mup_constant", 1, 2.222, constant), ("sp", 0, 2.2, sp)}


def test_scan_replays_finished_scans_from_the_log_and_names_the_unfinished(tmp_path: Path) -> None:
    """``train_missing=False`` trains nothing: a scan whose points are all in the log comes
    back with exactly its points; one that lacks a trial is left out and named."""
    import json

    from benchmarks.mup_vs_sp import scan

    log = TrialLog(tmp_path / "trials.jsonl")
    sp, mu = {"parametrization": "sp"}, {"parametrization": "mup", "readout_init": "fan_in"}
    for t in (-8.0, -7.0, -6.0, -5.0, -4.0):  # SP at width 64 starts at 2^-7..2^-5; minimum 2^-6
        log.add({"arm": "sp", "width": 64, "log2_lr": t, "seed": 0, "overrides": json.dumps(sp)},
                {"lr": 2.0**t, "loss": 2.0 + (t + 6.0) ** 2, "diverged": False, "wall_s": 1.0})
    for t in (-7.0, -6.0):  # μP's scan would need 2^-5 too
        log.add({"arm": "mu", "width": 64, "log2_lr": t, "seed": 0, "overrides": json.dumps(mu)},
                {"lr": 2.0**t, "loss": 2.0, "diverged": False, "wall_s": 1.0})
    before = (tmp_path / "trials.jsonl").read_text()
    demo = {"base_width": 32}
    table = scan([("sp", sp, 64, (0,), None), ("mu", mu, 64, (0,), None)], tmp_path, demo=demo,
                 train_missing=False)
    assert sorted(table["log2_lr"]) == [-7.0, -6.0, -5.0] and set(table["arm"]) == {"sp"}
    assert table.attrs["incomplete"] == ["mu w64 lr 2^-5 seed 0"]
    assert (tmp_path / "trials.jsonl").read_text() == before  # nothing written, nothing trained


def test_width_depth_reads_a_known_shift_and_the_loss_at_the_proxys_lr() -> None:
    """Seed-averaged parabolas in log2 LR with known vertices: the proxy's at 2^-5 (shared
    by both parametrizations), CompleteP's targets there too, μP's one octave lower at
    (256, 8) and two at (256, 16). The shift is target − proxy, and the loss at the proxy's
    LR ÷ the best is (c + a·shift²) / c."""
    import pandas as pd

    from benchmarks.width_depth import PROXY, TARGETS, proxy_shared, summarize

    a, c = 0.05, 2.0
    vertex = {("mup", *PROXY): -5.0, ("mup", *TARGETS[0]): -6.0, ("mup", *TARGETS[1]): -7.0,
              ("completep_a1", *TARGETS[0]): -5.0, ("completep_a1", *TARGETS[1]): -5.0}
    rows = [{"param": p, "width": w, "depth": d, "log2_lr": t, "lr": 2.0**t, "seed": s, "diverged": False,
             "loss": c + a * (t - v) ** 2 + (0.002 if s else -0.002), "wall_s": 1.0}
            for (p, w, d), v in vertex.items() for t in range(-10, -2) for s in (0, 1)]
    per = summarize(proxy_shared(pd.DataFrame(rows)), n_boot=100, n_boot_ratio=10)["per_param"]
    for (p, w, d), v in vertex.items():
        if (w, d) == PROXY:
            continue
        r = per[p][f"{w}x{d}"]
        assert r["log2_lr_opt"] == pytest.approx(v) and r["shift_octaves"] == pytest.approx(v + 5.0)
        assert r["shift_ci"][0] <= v + 5.0 <= r["shift_ci"][1]
        ratio, (lo, hi) = r["loss_at_proxy_lr_over_best"], r["loss_at_proxy_lr_over_best_ci"]
        assert ratio == pytest.approx((c + a * (v + 5.0) ** 2) / c) and lo <= ratio <= hi
    cp, mup = per["completep_a1"]["proxy"], per["mup"]["proxy"]  # one scan: the same optimum
    assert (cp["log2_lr_opt"], cp["best_loss"]) == (mup["log2_lr_opt"], mup["best_loss"])
    assert cp["log2_lr_opt"] == pytest.approx(-5.0) and cp["best_loss"] == pytest.approx(c)


def test_width_depth_imports_only_the_demos_proxy_rows(tmp_path: Path) -> None:
    """Only μP rows at the proxy (32, 2) whose every hyperparameter is the demo's are reused."""
    import pandas as pd

    from benchmarks.width_depth import import_proxy

    base = {"state": "COMPLETE", "preset": "llama-small", "parametrization": "mup", "width": 32, "depth": 2,
            "base_width": 32, "steps": 125, "batch_size": 16, "seq_len": 64, "warmup_steps": 12,
            "lr_floor": 0.1, "schedule": "cosine", "eval_every": 125, "eval_sequences": 128,
            "readout_init": "constant", "diverged": False, "wall_s": 3.0, "lr": 2.0**-5, "seed": 0,
            "loss": 2.2932}
    rows = [base, {**base, "seed": 1, "steps": 150}, {**base, "seed": 1, "width": 64},
            {**base, "seed": 1, "parametrization": "sp"}, {**base, "seed": 1, "preset": "gpt-small"},
            {**base, "seed": 1, "lr": 0.03}]
    csv = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    assert import_proxy(csv, tmp_path / "work") == 1
    (row,) = TrialLog(tmp_path / "work" / "trials.jsonl").rows.values()
    assert (row["param"], row["width"], row["depth"], row["log2_lr"], row["seed"], row["loss"]) == (
        "mup", 32, 2, -5.0, 0, 2.2932)
    assert import_proxy(csv, tmp_path / "work") == 0  # already there
