"""Proxy models: presets, parameter counts, stability flags, and bad configs."""

from __future__ import annotations

import math

import pytest
import torch

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP
from mutransfer.models.presets import get_preset, gpt_40m, width_ladder


def test_gpt_40m_preset_is_about_40m_parameters() -> None:
    with torch.device("meta"):
        model = GPT(gpt_40m())
    n = model.num_params()
    assert 38e6 < n < 44e6
    assert model.num_params(non_embedding=True) == n - 256 * 512
    cfg = gpt_40m()
    assert model.flops_per_token() == 6 * (n - 256 * 512) + 6 * cfg.depth * cfg.seq_len * cfg.width


def test_width_ladder_keeps_head_dim_and_grows_heads() -> None:
    ladder = width_ladder(get_preset("gpt-tiny"), [64, 128, 256])
    assert [c.heads for c in ladder] == [4, 8, 16] and {c.d_head for c in ladder} == {16}


def test_tied_embeddings_share_one_tensor_and_count_once() -> None:
    cfg = GPTConfig(width=32, depth=1, head_dim=16, seq_len=8, vocab_size=50)
    untied, tied = GPT(cfg), GPT(cfg.replace(tie_embeddings=True))
    assert tied.lm_head.weight is tied.wte.weight
    assert untied.num_params() - tied.num_params() == 50 * 32


def test_softcap_bounds_logits_and_z_loss_adds_its_term() -> None:
    torch.manual_seed(0)
    cfg = GPTConfig(width=32, depth=1, head_dim=16, seq_len=8, vocab_size=64)
    x = torch.randint(0, 64, (2, 8))
    plain = GPT(cfg)
    with torch.no_grad():
        plain.lm_head.weight.mul_(100.0)
    capped = GPT(cfg.replace(logit_softcap=5.0))
    capped.load_state_dict(plain.state_dict())
    assert plain(x)[0].abs().max() > 5.0
    assert capped(x)[0].abs().max() <= 5.0
    z = GPT(cfg.replace(z_loss=1e-4))
    z.load_state_dict(plain.state_dict())
    logits, loss_plain = plain(x, x)
    expected = loss_plain + 1e-4 * torch.logsumexp(logits, -1).pow(2).mean()
    torch.testing.assert_close(z(x, x)[1], expected)


def test_qk_norm_learned_positions_and_frozen_gains() -> None:
    cfg = GPTConfig(width=32, depth=1, head_dim=16, seq_len=8, qk_norm=True, pos_emb="learned",
                    freeze_norm_gains=True)
    model = GPT(cfg)
    names = {n for n, _ in model.named_parameters()}
    assert "wpe.weight" in names and "blocks.0.attn.q_norm.weight" in names
    assert not any("ln_" in n for n in names)  # frozen gains are buffers, not parameters
    loss = model(torch.randint(0, 256, (2, 8)), torch.randint(0, 256, (2, 8)))[1]
    assert math.isfinite(float(loss))


def test_causality_future_tokens_do_not_change_past_logits() -> None:
    model = GPT(GPTConfig(width=32, depth=2, head_dim=16, seq_len=8))
    x = torch.randint(0, 256, (1, 8))
    y = x.clone()
    y[0, 5:] = (y[0, 5:] + 1) % 256
    torch.testing.assert_close(model(x)[0][0, :5], model(y)[0][0, :5])


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"width": 40}, "not divisible"), ({"depth": 0}, "depth must be >= 1"),
     ({"pos_emb": "alibi"}, "pos_emb")],
)
def test_bad_config_is_one_clear_error(changes, message) -> None:
    with pytest.raises(ValueError, match=message):
        GPTConfig(width=32, head_dim=16).replace(**changes)
    with pytest.raises(ValueError, match="unknown preset 'gpt-9b'"):
        get_preset("gpt-9b")


def test_mlp_forward_shape() -> None:
    model = MLP(get_preset("mlp-tiny"))
    assert model(torch.randn(3, 32)).shape == (3, 10)
