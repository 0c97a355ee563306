"""Folding: a μP/CompleteP model with every kind of forward multiplier becomes a plain
model (no hooks, its own attention scale) whose logits agree to 1e-5; the CLI does it to
a trainer checkpoint."""

from __future__ import annotations

import pytest
import torch

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.parametrize.fold import PLAIN_FORMAT, fold
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import Multipliers
from mutransfer.training.checkpoint import load_checkpoint
from mutransfer.training.optim import build_optimizer
from mutransfer_cli import main

CFG = GPTConfig(width=64, depth=2, head_dim=16, seq_len=16, vocab_size=64)
MULTS = Multipliers(input=2.0, output=0.5, attention=1.7, residual=0.8)


def trained(pz: Parametrization, idx: torch.Tensor) -> torch.nn.Module:
    """A few Adam steps, so no weight is at its init law."""
    model = pz.build(seed=0)
    opt = build_optimizer(pz.param_groups(model, 1e-2), "adamw")
    for _ in range(3):
        model(idx, idx)[1].backward()
        opt.step()
        opt.zero_grad()
    return model


@pytest.mark.parametrize(("kind", "tie", "qk_norm"), [("mup", False, False), ("mup", True, False),
                                                      ("completep", True, True)])
def test_folded_plain_model_gives_the_same_logits(kind: str, tie: bool, qk_norm: bool) -> None:
    cfg = CFG.replace(tie_embeddings=tie, qk_norm=qk_norm)
    pz = Parametrization(lambda w, d: GPT(cfg.replace(width=w, depth=d)), width=64, base_width=16,
                         depth=2, base_depth=1, kind=kind, multipliers=MULTS)
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    model = trained(pz, idx)
    with torch.no_grad():
        want = model(idx)[0]
    report = fold(model, lambda m: m(idx))
    kinds = {(f.get("hook"), f["into"].rsplit(".", 1)[-1]) for f in report["folded"]}
    assert ("pre", "lm_head") in kinds and ("post", "wte") in kinds and ("post", "c_proj") in kinds
    assert any("attention" in f for f in report["folded"])
    assert (report["untied"] != {}) == tie
    # Plain: a GPT built with no parametrization at all loads the folded weights.
    plain = GPT(cfg.replace(tie_embeddings=False) if tie else cfg)
    plain.load_state_dict(model.state_dict())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in plain.modules())
    with torch.no_grad():
        got = plain(idx)[0]
        again = model(idx)[0]  # the folded model itself, hooks gone
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(again, want, rtol=0, atol=1e-5)
    # The attention scale is the architecture's own again (1/sqrt(d_head)).
    assert model.blocks[0].attn.softmax_scale == GPT(cfg).blocks[0].attn.softmax_scale == 0.25
    with pytest.raises(ValueError, match="carries no mutransfer parametrization"):
        fold(plain, lambda m: m(idx))


def test_cli_folds_a_trainer_checkpoint(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert main(["train", "--preset", "gpt-tiny", "--set", "width=32", "--set", "depth=1",
                 "--set", "seq_len=16", "--set", "batch_size=4", "--set", "steps=2",
                 "--set", "output_mult=0.5", "--set", "data_max_bytes=100000",
                 "--set", "checkpoint_every=2", "--out", str(run), "--quiet"]) == 0
    assert main(["fold", str(run / "checkpoint.pt"), "--out", str(tmp_path / "plain.pt"), "--json"]) == 0
    doc = torch.load(tmp_path / "plain.pt", weights_only=True)
    assert doc["format"] == PLAIN_FORMAT
    plain = GPT(GPTConfig(**doc["model_config"]))
    plain.load_state_dict(doc["model"])
    ck = load_checkpoint(run / "checkpoint.pt")
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.trainer import build_parametrization

    cfg = TrainConfig.from_overrides(None, ck["config"])
    model = build_parametrization(cfg, GPTConfig(**doc["model_config"])).build(seed=0)
    model.load_state_dict(ck["model"])
    idx = torch.randint(0, plain.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(plain(idx)[0], model(idx)[0], rtol=0, atol=1e-5)
    assert main(["fold", str(tmp_path / "missing.pt"), "--out", str(tmp_path / "x.pt")]) == 2
    assert "does not exist" in capsys.readouterr().err
