"""RoPE in the compute dtype: bit for bit the pairwise fp32 formula in fp32, within bf16's
rounding in bf16, and half the kernels."""

from __future__ import annotations

import torch

from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.rope import apply_rope, rope_cache, rope_rotate, rope_tables


def old_apply_rope(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """The formula as it was: fp32 pairs (even, odd), rotated, stacked, cast back."""
    T = x.shape[-2]
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = cache[:T, :, 0], cache[:T, :, 1]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2).type_as(x)


def test_fp32_rotation_is_the_old_formula_bit_for_bit() -> None:
    g = torch.Generator().manual_seed(0)
    cache = rope_cache(48, 16, theta=500000.0)
    x = torch.randn(2, 3, 4, 40, 16, generator=g) * 5
    assert torch.equal(apply_rope(x, cache), old_apply_rope(x, cache))
    # the prepared tables, sliced to a shorter sequence, as the model's forward uses them
    assert torch.equal(rope_rotate(x, *rope_tables(cache, 40, torch.float32)), old_apply_rope(x, cache))


def test_bf16_rotation_is_within_bf16_rounding_and_stays_bf16() -> None:
    g = torch.Generator().manual_seed(1)
    cache = rope_cache(64, 32)
    x = torch.randn(8, 64, 32, generator=g).bfloat16()
    new = apply_rope(x, cache)
    assert new.dtype == torch.bfloat16
    ref = old_apply_rope(x.float(), cache)
    # three bf16 roundings (two products, one sum) against one: a few units of 2^-8
    assert (new.float() - ref).abs().max() <= 4 * 2**-8 * ref.abs().max()


def old_attention_forward(self, x_KBTC, rope):
    """The attention forward as it was (three projections, fp32 RoPE, q times the scale)."""
    import torch.nn.functional as F

    from mutransfer.models.gpt_layers import member_scale

    K, B, T, C = x_KBTC.shape
    H, G, D = self.n_head, self.n_kv_head, self.head_dim

    def heads(y, n):
        return y.view(K, B, T, n, D).transpose(2, 3)

    q, k, v = heads(self.c_q(x_KBTC), H), heads(self.c_k(x_KBTC), G), heads(self.c_v(x_KBTC), G)
    if self.rope and rope is not None:
        q, k = old_apply_rope(q, rope), old_apply_rope(k, rope)
    q = (q * member_scale(self.softmax_scale, q)).to(k.dtype)
    y = F.scaled_dot_product_attention(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1),
                                       is_causal=True, scale=1.0, enable_gqa=G < H)
    return self.c_proj(y.view(K, B, H, T, D).transpose(2, 3).reshape(K, B, T, C))


def test_model_fp32_forward_and_grads_match_the_old_attention(monkeypatch) -> None:
    import mutransfer.models.gpt as gpt

    cfg = GPTConfig(width=32, depth=2, head_dim=8, seq_len=16, q_per_kv=2, mlp="swiglu")
    torch.manual_seed(0)
    model = GPT(cfg)
    for blk in model.blocks:
        blk.attn.softmax_scale = 1 / 8  # muP's 1/d_head: a power of two, so exact on the tables
    idx = torch.randint(0, 256, (2, 16))
    logits, loss = model(idx, idx)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    monkeypatch.setattr(gpt, "rope_tables", lambda cache, T, dtype: cache)
    monkeypatch.setattr(gpt.CausalSelfAttention, "forward", old_attention_forward)
    logits_old, loss_old = model(idx, idx)
    loss_old.backward()
    # one q/k/v matmul sums its input gradient in another order than three: float rounding
    torch.testing.assert_close(logits, logits_old, rtol=1e-5, atol=1e-6)
    for a, p in zip(grads, model.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-6)
