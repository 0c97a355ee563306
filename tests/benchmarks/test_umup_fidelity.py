"""The u-μP peer benchmark: its proxy, built from ``unit_scaling`` layers, is
unit-scaled at init at every width, its optimizer applies u-μP's LR table to our wiring,
and its loop learns and reports divergence as the trainer does. Skipped without the
optional ``unit_scaling`` package, except ``--help``, which must never need it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_help_answers_and_writes_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "benchmarks.umup_fidelity", "--help"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "usage:" in p.stdout and "--widths" in p.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("width", [32, 256])
def test_umup_proxy_is_unit_scaled_at_init_whatever_the_width(width: int) -> None:
    pytest.importorskip("unit_scaling")
    import torch

    from benchmarks._umup import UmupGPT

    torch.manual_seed(0)
    model = UmupGPT(width)
    acts: dict[str, torch.Tensor] = {}
    blocks = [(f"block{i}", b) for i, b in enumerate(model.blocks)]
    for name, mod in [("embedding", model.embedding), *blocks]:
        mod.register_forward_hook(lambda m, i, o, name=name: acts.__setitem__(name, o.detach()))
    x, y = torch.randint(0, 256, (8, 64)), torch.randint(0, 256, (8, 64))
    logits = model(x)
    assert logits.shape == (8, 64, 256)
    for name, a in acts.items():  # RMS ~ 1 at every width: unit scaling's promise
        assert 0.8 < float(a.pow(2).mean().sqrt()) < 1.6, (name, width)
    # The readout's 1/fan_in output scale leaves logits near zero: loss ~ ln V at init.
    loss = model.loss(x, y)
    assert abs(float(loss) - math.log(256)) < 0.1
    loss.backward()
    for name, p in model.named_parameters():  # and unit-scaled weight gradients
        assert 0.3 < float(p.grad.std()) < 3.0, (name, width)


def test_umup_optimizer_scales_each_role_as_the_paper_says() -> None:
    pytest.importorskip("unit_scaling")
    import unit_scaling as uu

    from benchmarks._umup import UmupGPT

    width, depth = 64, 2
    model = UmupGPT(width, depth=depth)
    names = {id(p): n for n, p in model.named_parameters()}
    opt = uu.optim.AdamW(model.parameters(), lr=1.0)
    lr = {names[id(g["params"][0])]: g["lr"] for g in opt.param_groups}
    # u-μP's Adam rule as unit_scaling implements it: hidden weights η/sqrt(fan_in)/sqrt(depth), the
    # embedding η/sqrt(width) (no depth factor), the readout η.
    assert lr["embedding.weight"] == pytest.approx(width**-0.5)
    assert lr["blocks.0.attn_qkv.weight"] == pytest.approx(width**-0.5 * depth**-0.5)
    assert lr["blocks.1.mlp_down.weight"] == pytest.approx((4 * width) ** -0.5 * depth**-0.5)
    assert lr["readout.weight"] == pytest.approx(1.0)
    assert len(lr) == len(names)  # norms carry no gains: every parameter is a matrix

    # The ablation moves the embedding, and only it, to μP's width-independent Adam LR.
    from benchmarks._umup import umup_optimizer

    ablated = umup_optimizer(model, lr=1.0, embedding_lr_constant=True)
    lr2 = {names[id(g["params"][0])]: g["base_lr"] for g in ablated.param_groups}
    assert lr2["embedding.weight"] == pytest.approx(1.0)
    assert {k: v for k, v in lr2.items() if k != "embedding.weight"} == pytest.approx(
        {k: v for k, v in lr.items() if k != "embedding.weight"})


def test_train_umup_learns_at_the_default_lr_and_reports_divergence_like_the_trainer() -> None:
    pytest.importorskip("unit_scaling")
    from benchmarks._umup import train_umup
    from benchmarks.tuned_multipliers import DEMO

    demo = {**DEMO, "steps": 10, "eval_every": 10, "warmup_steps": 1}
    ok = train_umup(demo, 32, 2.0**1.5, seed=0)
    assert not ok["diverged"] and ok["loss"] < ok["initial_loss"] - 1.0
    bad = train_umup(demo, 32, 2.0**14, seed=0)
    # A runaway stops early and, as in mutransfer.training.train, reports max(ln V, initial loss).
    assert bad["diverged"] and bad["loss"] == max(math.log(256), bad["initial_loss"])
