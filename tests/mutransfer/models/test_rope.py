"""RoPE in the compute dtype: bit for bit the pairwise fp32 formula in fp32, within bf16's
rounding in bf16, and half the kernels."""

from __future__ import annotations

import torch

from mutransfer.models.gpt import GPT, GPTConfig, apply_rope, rope_cache, rope_rotate, rope_tables


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


def test_model_fp32_forward_and_grads_equal_the_old_formula(monkeypatch) -> None:
    cfg = GPTConfig(width=32, depth=2, head_dim=8, seq_len=16, q_per_kv=2, mlp="swiglu")
    torch.manual_seed(0)
    model = GPT(cfg)
    idx = torch.randint(0, 256, (2, 16))
    logits, loss = model(idx, idx)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    import mutransfer.models.gpt as gpt

    monkeypatch.setattr(gpt, "rope_tables", lambda cache, T, dtype: (cache,))
    monkeypatch.setattr(gpt, "rope_rotate", lambda x, cache: old_apply_rope(x, cache))
    logits_old, loss_old = model(idx, idx)
    loss_old.backward()
    assert torch.equal(logits, logits_old)
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters()))
