"""Parametrization corner cases a new user hits: raw parameters with one width dimension
(a positional table, ViT cls/pos tokens), hooks that must never land on the root
module, SGD's fan convention for them (oracle: mup's MuSGD), attention modules whose
scale cannot be set, and the coordinate check's rules, vanishing activations and legend."""

from __future__ import annotations

import math
import warnings

import mup
import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mutransfer.checks.coord_check import CoordCheckResult, coord_check, fit_slopes
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import Multipliers

VOCAB, SEQ = 32, 8


class RawPos(nn.Module):
    """Token ids -> logits with a raw (seq, d) positional table and ViT-style (1, 1, d)
    cls and (1, seq, d) pos tokens held by the root module."""

    def __init__(self, width: int, mup_head: bool = False) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.randn(SEQ, width) * 0.1)
        self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.1)
        self.vit_pos = nn.Parameter(torch.randn(1, SEQ, width) * 0.1)
        self.fc = nn.Linear(width, width)
        self.head = mup.MuReadout(width, VOCAB) if mup_head else nn.Linear(width, VOCAB)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        t = idx.shape[1]
        h = self.wte(idx) + self.pos[:t] + self.cls + self.vit_pos[:, :t]
        logits = self.head(torch.relu(self.fc(h)))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def ids(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (4, SEQ), generator=g)
    return x, torch.roll(x, 1, dims=1)


def test_raw_params_with_one_width_dim_are_vector_like_and_token_ids_run() -> None:
    pz = Parametrization(RawPos, width=128, base_width=32, kind="mup")
    for name in ("pos", "cls", "vit_pos"):  # 2-D and 3-D
        s = pz.specs[name]
        assert s.role == "vector" and s.init == "keep" and s.lr_mult == 1.0, s
        assert s.rule == "inferred:raw parameter, one width dim"
    hooks = pz.forward_multipliers()["hooks"]
    assert {h["module"] for h in hooks} == {"head"}  # the readout only; never "" (the root)
    model = pz.build(seed=0)
    logits, loss = model(*ids())  # Long ids reach the embedding untouched
    assert logits.shape == (4, SEQ, VOCAB) and torch.isfinite(loss)


@pytest.mark.parametrize("rule", [None, "input"])
def test_sgd_lr_of_raw_params_matches_mup_musgd(rule: str | None) -> None:
    width, base, lr = 128, 32, 0.1
    torch.manual_seed(0)
    ref = RawPos(width, mup_head=True)
    mup.set_base_shapes(ref, RawPos(base, mup_head=True), delta=RawPos(base * 2, mup_head=True))
    opt = mup.MuSGD(ref.parameters(), lr=lr)
    names = {id(p): n for n, p in ref.named_parameters()}
    ref_lr = {names[id(p)]: g["lr"] for g in opt.param_groups for p in g["params"]}

    rules = [] if rule is None else [(r"^(pos|cls|vit_pos)$", rule)]
    pz = Parametrization(lambda w: RawPos(w, mup_head=True), width=width, base_width=base,
                         kind="mup", optimizer="sgd", rules=rules)
    model = pz.build(seed=0)
    ours = {n: g["lr"] for g in pz.param_groups(model, lr) for n in g["names"]}
    for name in ("pos", "cls", "vit_pos", "wte.weight", "fc.weight", "head.weight"):
        assert ours[name] == pytest.approx(ref_lr[name], rel=1e-12), name
    assert ours["pos"] == pytest.approx(lr * width / base)  # x m, as the issue measured


def test_hooks_never_land_on_the_root_module() -> None:
    # An input multiplier goes on the embedding's output, not on the model's output.
    pz = Parametrization(RawPos, width=64, base_width=32, multipliers=Multipliers(input=2.0))
    mods = {h["module"] for h in pz.forward_multipliers()["hooks"]}
    assert mods == {"wte", "head"}
    # A raw parameter told to be the input or the readout has no layer to carry the
    # multiplier: one clear error naming it, not a hook on the root's input or logits.
    with pytest.raises(ValueError, match=r"parameter pos has role 'input' but is a raw parameter "
                                         r"of the root module"):
        Parametrization(RawPos, width=64, base_width=32, rules=[("^pos$", "input")],
                        multipliers=Multipliers(input=2.0)).forward_multipliers()
    with pytest.raises(ValueError, match=r"parameter cls has role 'output'"):
        Parametrization(RawPos, width=64, base_width=32, rules=[("^cls$", "output")]).forward_multipliers()
    # With no multiplier to place, an input rule is fine and the model still runs on ids.
    pz = Parametrization(RawPos, width=64, base_width=32, rules=[("^pos$", "input")])
    assert pz.specs["pos"].role == "input"
    assert torch.isfinite(pz.build(seed=0)(*ids())[1])


class MHA(nn.Module):
    def __init__(self, width: int, heads: int | None) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, width)
        self.attn = nn.MultiheadAttention(width, heads or width // 16, batch_first=True)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.wte(x)
        return self.head(self.attn(h, h, h)[0])


def test_attention_that_cannot_be_rescaled_warns() -> None:
    # Fixed head count: head_dim grows with width, so μP's 1/d_head matters and is lost.
    with pytest.warns(UserWarning, match=r"attention module 'attn' \(MultiheadAttention\).*NOT applied"):
        Parametrization(lambda w: MHA(w, heads=2), width=128, base_width=32, kind="mup")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # SP, or a fixed head dim (μP's scale is then SP's): nothing lost, no warning.
        Parametrization(lambda w: MHA(w, heads=2), width=128, base_width=32, kind="sp")
        Parametrization(lambda w: MHA(w, heads=None), width=128, base_width=32, kind="mup")
    with pytest.warns(UserWarning, match="attention multiplier"):
        Parametrization(lambda w: MHA(w, heads=None), width=128, base_width=32, kind="mup",
                        multipliers=Multipliers(attention=2.0))


def _result(rows: list[dict], kind: str, readouts: tuple[str, ...] = ()) -> CoordCheckResult:
    data = pd.DataFrame(rows)
    return CoordCheckResult(kind, data, fit_slopes(data), 0.25, {}, readouts)


def test_vanishing_activations_fail_except_the_mup_readout_at_init() -> None:
    # The numbers: 0.49 -> 0.25 over widths 64 -> 512 is a slope of -0.32.
    widths = (64, 128, 256, 512)
    l1 = dict(zip(widths, np.geomspace(0.49, 0.25, 4)))
    rows = [{"width": w, "depth": 0, "seed": 0, "module": m, "step": st, "l1": v}
            for w in widths for st in (0, 1)
            for m, v in (("ok", 1.0), ("fading", l1[w]), ("head", 1.0 if st else w ** -0.5))]
    r = _result(rows, "mup", ("head",))
    assert not r.passed
    bad = r.violations()
    assert set(bad["module"]) == {"fading"}
    assert bad["slope"].max() == pytest.approx(math.log2(0.25 / 0.49) / 3, abs=1e-9)
    assert r.worst()["module"] == "fading"
    # Without the fading layer μP passes: its readout shrinking at init is by design...
    r = _result([x for x in rows if x["module"] != "fading"], "mup", ("head",))
    assert r.passed
    # ...but the same readout shrinking under SP fails, and so does a μP readout that
    # shrinks faster than its init law width^-1/2, or grows.
    assert not _result([x for x in rows if x["module"] != "fading"], "sp", ("head",)).passed
    for law in (-0.8, 0.3):
        fast = [dict(x, l1=x["width"] ** law) if x["module"] == "head" else x
                for x in rows if x["module"] != "fading"]
        r = _result(fast, "mup", ("head",))
        assert set(r.violations()["module"]) == {"head"} and r.worst()["module"] == "head"


def test_coord_check_takes_rules_and_figure_names_every_line() -> None:
    kw = dict(widths=(32, 64, 128), steps=2, seeds=1, lr=1e-2, loss_fn=lambda m, b: m(*b)[1])
    mu = coord_check(RawPos, ids, kind="mup", rules=[("^pos$", "vector")], **kw)
    assert mu.settings["rules"] == [["^pos$", "vector"]]
    # the default fan_in readout keeps its logits' scale: no readout gets the shrink allowance
    assert mu.readout_modules == () and mu.passed, mu.violations()
    const = coord_check(RawPos, ids, kind="mup", rules=[("^pos$", "vector")], readout_init="constant", **kw)
    assert const.readout_modules == ("head",) and const.passed, const.violations()
    # The rules reach the parametrization: a readout rule for a raw tensor is refused.
    with pytest.raises(ValueError, match="parameter pos has role 'output'"):
        coord_check(RawPos, ids, kind="mup", rules=[("^pos$", "output")], **kw)
    fig = mu.figure()
    try:
        labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        assert sorted(labels) == sorted(mu.data["module"].unique())
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    # Many modules (more than the old 24-line cut-off) still get a legend.
    rows = [{"width": w, "depth": 0, "seed": 0, "module": f"m{i}", "step": 0, "l1": 1.0}
            for w in (32, 64) for i in range(60)]
    fig = _result(rows, "mup").figure()
    try:
        assert sum(len(leg.get_texts()) for leg in fig.legends) == 60
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_cli_coord_check_takes_rules(tmp_path, capsys) -> None:
    import json

    from mutransfer_cli import main

    common = ["coord-check", "--model", "mlp", "--widths", "32,64", "--steps", "1", "--n-seeds", "1",
              "--quiet", "--no-plot"]
    assert main([*common, "--rule", r"fc_out\.bias=scalar", "--out", str(tmp_path / "ok")]) == 0
    verdict = json.loads((tmp_path / "ok" / "coord_check.json").read_text())
    assert verdict["settings"]["rules"] == [[r"fc_out\.bias", "scalar"]]
    for bad, message in (("fc_out=nope", "unknown role 'nope'"), ("fc_out", "is not REGEX=ROLE"),
                         ("(=vector", "not a valid regex")):
        assert main([*common, "--rule", bad, "--out", str(tmp_path / "bad")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
