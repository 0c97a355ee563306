"""Llama-shaped GPT <-> transformers.LlamaForCausalLM (the real class, random init): the
same logits for the same weights both ways, exact state-dict round trips, refusals that
name the field."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mutransfer.models.convert import (
    from_hf,
    from_hf_config,
    from_hf_state_dict,
    to_hf,
    to_hf_config,
    to_hf_state_dict,
)
from mutransfer.models.gpt import GPT
from mutransfer.models.presets import llama_tiny
from mutransfer.parametrize.fold import fold
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import Multipliers

# Non-default eps and theta, so a field that is not carried over shows in the logits.
CFG = llama_tiny().replace(seq_len=32, norm_eps=1e-5, rope_theta=5e5)


def idx() -> torch.Tensor:
    return torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))


def randomized(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every weight random (norm gains too, not ones), so a swapped or unpermuted tensor
    changes the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() == 1 else p.shape[-1] ** -0.5) +
                    (1.0 if p.dim() == 1 else 0.0))
    return model.eval()


def assert_same_logits(a: torch.Tensor, b: torch.Tensor) -> None:
    # fp32; atol 1e-5 relative to the logits' scale (tied N(0,1) embeddings make them O(10)).
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * max(1.0, a.abs().max().item()))


@pytest.mark.parametrize(("q_per_kv", "tie"), [(2, False), (2, True), (4, True), (1, False)])
def test_ours_to_hf_same_logits_and_exact_round_trip(q_per_kv: int, tie: bool) -> None:
    cfg = CFG.replace(q_per_kv=q_per_kv, tie_embeddings=tie)
    ours = randomized(GPT(cfg))
    hf = to_hf(ours)
    assert isinstance(hf, LlamaForCausalLM)
    assert hf.config.num_key_value_heads == cfg.heads // q_per_kv == ours.blocks[0].attn.n_kv_head
    assert (hf.lm_head.weight is hf.model.embed_tokens.weight) == tie
    with torch.no_grad():
        assert_same_logits(hf(idx()).logits, ours(idx())[0])
    # q/k are permuted, not renamed: the HF tensor differs, and the way back is exact.
    assert not torch.equal(hf.model.layers[0].self_attn.q_proj.weight, ours.blocks[0].attn.c_q.weight)
    back = from_hf(hf)
    assert back.cfg == cfg
    for k, v in ours.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


@pytest.mark.parametrize("tie", [False, True])
def test_hf_to_ours_same_logits_and_exact_round_trip(tie: bool) -> None:
    hcfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=32,
                       rms_norm_eps=1e-5, tie_word_embeddings=tie,
                       rope_parameters={"rope_type": "default", "rope_theta": 1234.0})
    torch.manual_seed(0)
    hf = randomized(LlamaForCausalLM(hcfg).float(), seed=3)
    ours = from_hf(hf)
    assert (ours.cfg.heads, ours.cfg.kv_heads, ours.cfg.d_head, ours.cfg.d_mlp) == (8, 2, 8, 176)
    assert ours.cfg.rope_theta == 1234.0 and ours.cfg.tie_embeddings == tie
    x = torch.randint(0, 96, (2, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert_same_logits(ours(x)[0], hf(x).logits)
    sd = to_hf_state_dict(ours)
    for k, v in hf.state_dict().items():
        assert torch.equal(sd[k], v), k
    assert to_hf_config(ours.cfg).to_dict() | {"dtype": None} == \
        to_hf_config(from_hf_config(hcfg)).to_dict() | {"dtype": None}


def test_frozen_gains_export_as_ones() -> None:
    cfg = CFG.replace(freeze_norm_gains=True)
    ours = GPT(cfg).eval()
    hf = to_hf(ours)
    assert torch.equal(hf.model.norm.weight, torch.ones(cfg.width))
    with torch.no_grad():
        assert_same_logits(hf(idx()).logits, ours(idx())[0])
    GPT(cfg).load_state_dict(from_hf_state_dict(hf.state_dict(), cfg))  # strict: no gain keys


def test_mup_model_must_be_folded_then_converts_with_the_same_logits() -> None:
    pz = Parametrization(lambda w: GPT(CFG.replace(width=w)), width=64, base_width=32, kind="mup",
                         multipliers=Multipliers(input=2.0, output=0.5, attention=1.5))
    model = pz.build(seed=0).eval()
    with pytest.raises(ValueError, match="forward hooks"):
        to_hf(model)
    with torch.no_grad():
        want = model(idx())[0]
    fold(model, lambda m: m(idx()))
    with torch.no_grad():
        assert_same_logits(to_hf(model)(idx()).logits, want)


@pytest.mark.parametrize(("change", "field"), [
    ({"mlp": "gelu"}, "mlp"), ({"pos_emb": "learned"}, "pos_emb"), ({"bias": True}, "bias"),
    ({"qk_norm": True}, "qk_norm"), ({"logit_softcap": 30.0}, "logit_softcap")])
def test_refuses_configs_llama_lacks(change: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"GPTConfig.{field}="):
        to_hf_config(CFG.replace(**change))
    with pytest.raises(ValueError, match=f"GPTConfig.{field}="):
        to_hf(GPT(CFG.replace(**change)))


@pytest.mark.parametrize(("change", "field"), [
    ({"hidden_act": "gelu"}, "hidden_act"), ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"), ({"head_dim": 32}, "head_dim"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}, "rope_type")])
def test_refuses_hf_configs_we_lack(change: dict, field: str) -> None:
    hcfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=2, **change)
    with pytest.raises(ValueError, match=field):
        from_hf_config(hcfg)


def test_gqa_ratio_is_validated_and_kept_across_widths() -> None:
    with pytest.raises(ValueError, match="q_per_kv 3"):
        llama_tiny().replace(q_per_kv=3)
    with pytest.raises(ValueError, match="q_per_kv 2 .* heads 1"):
        llama_tiny().replace(width=16)
    for w in (32, 64, 128, 256):
        cfg = llama_tiny().replace(width=w)
        assert cfg.heads == w // 16 and cfg.kv_heads * cfg.q_per_kv == cfg.heads
