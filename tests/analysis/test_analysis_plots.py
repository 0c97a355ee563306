from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.critical_batch import CriticalBatchFit, fit_critical_batch
from analysis.loss_law import SaturatingPowerLawFit
from analysis.optimum import OptimumFit
from analysis.plots import (
    plot_critical_batch,
    plot_loss_law,
    plot_lr_curves,
    plot_optimum_vs_width,
    plot_power_law,
)
from analysis.powerlaw import PowerLawFit

PNG = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 5000
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_lr_curves_and_optimum_vs_width(tmp_path: Path,
                                        lr_sweep: Callable[..., pd.DataFrame]) -> None:
    df = pd.concat([lr_sweep("mup", seed=1), lr_sweep("sp", seed=2)])
    fit = OptimumFit(group_by=("parametrization", "width"), n_boot=50).fit(df)
    out = plot_lr_curves(fit, tmp_path / "lr.png", where={"parametrization": "sp"})
    assert out == tmp_path / "lr.png"
    assert_png(out)
    assert_png(plot_optimum_vs_width(fit, tmp_path / "sub" / "opt.png", by="parametrization"))
    with pytest.raises(ValueError, match="no group matches"):
        plot_lr_curves(fit, tmp_path / "x.png", where={"parametrization": "ntk"})
    assert not (tmp_path / "x.png").exists()


def test_critical_batch_and_power_law(tmp_path: Path, data_dir: Path) -> None:
    z = pd.read_csv(data_dir / "zhang2024_cbs_steps_to_target.csv")
    res = fit_critical_batch(z, group_by="model", batch="batch_size_seqs", n_boot=20)
    assert_png(plot_critical_batch(res, tmp_path / "cbs.png"))
    b = np.array([64.0, 128, 256, 512, 1024])
    one = CriticalBatchFit(n_boot=0).fit(b, 1000 + 2e6 / b)
    assert_png(plot_critical_batch(one, tmp_path / "one.png"))
    law = PowerLawFit(n_boot=20).fit([1.0, 2, 4, 8, 16], [1.0, 1.4, 2.1, 2.8, 4.1])
    assert_png(plot_power_law(law, tmp_path / "law.png"))


def test_loss_law_plot(tmp_path: Path) -> None:
    n = np.geomspace(1e6, 1e9, 10)
    fit = SaturatingPowerLawFit(n_boot=30).fit(n, 1.8 + 400 / n**0.3)
    assert_png(plot_loss_law(fit, tmp_path / "loss.png"))


def test_existing_file_untouched_when_plot_fails(tmp_path: Path) -> None:
    target = tmp_path / "keep.png"
    target.write_bytes(b"old")
    law = PowerLawFit(("n", "d"), "y", n_boot=0).fit(
        np.array([[1.0, 2], [2, 1], [4, 4], [8, 3], [3, 9]]), [1.0, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="one-variable"):
        plot_power_law(law, target)
    assert target.read_bytes() == b"old"
