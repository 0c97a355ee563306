"""fp32 grouped-query attention on CUDA repeats k/v so SDPA's memory-efficient kernel can run
(with ``enable_gqa`` only flash, bf16/fp16, or the math kernel take it); bf16 keeps
``enable_gqa``. The choice is :func:`gqa_mode`; here CUDA is mocked by handing it "cuda"
as the device type, and the expanded path is checked against ``enable_gqa`` on CPU."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import mutransfer.models.gpt_layers as gpt_layers
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.gpt_layers import gqa_mode


@pytest.mark.parametrize(("device", "dtype", "kv_heads", "heads", "mode"), [
    ("cuda", torch.float32, 2, 4, "expand"),
    ("cuda", torch.bfloat16, 2, 4, "gqa"),
    ("cuda", torch.float16, 1, 4, "gqa"),
    ("cpu", torch.float32, 2, 4, "gqa"),
    ("cpu", torch.bfloat16, 2, 4, "gqa"),
    ("cuda", torch.float32, 4, 4, "mha"),
    ("cpu", torch.bfloat16, 4, 4, "mha"),
])
def test_gqa_mode_picks_the_kernel_friendly_call(device: str, dtype: torch.dtype, kv_heads: int, heads: int,
                                                 mode: str) -> None:
    assert gqa_mode(device, dtype, kv_heads, heads) == mode


def _spy_sdpa(monkeypatch: pytest.MonkeyPatch, as_cuda: bool) -> list[dict[str, Any]]:
    """Record what each SDPA call is given; with ``as_cuda`` the attention decides as on CUDA."""
    calls: list[dict[str, Any]] = []
    real_sdpa, real_mode = F.scaled_dot_product_attention, gqa_mode

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
        calls.append({"q_heads": q.shape[1], "kv_heads": k.shape[1], "enable_gqa": kw.get("enable_gqa")})
        return real_sdpa(q, k, v, **kw)

    monkeypatch.setattr(gpt_layers.F, "scaled_dot_product_attention", sdpa)
    if as_cuda:
        monkeypatch.setattr(gpt_layers, "gqa_mode",
                            lambda device, dtype, g, h: real_mode("cuda", dtype, g, h))
    return calls


def _forward_backward(model: GPT, idx: torch.Tensor,
                      bf16: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits, loss = model(idx, idx)
    assert loss is not None
    loss.backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_fp32_gqa_as_on_cuda_expands_kv_and_gives_the_enable_gqa_numbers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = GPTConfig(width=64, depth=2, head_dim=16, seq_len=16, q_per_kv=2, mlp="swiglu")
    torch.manual_seed(0)
    model = GPT(cfg)
    idx = torch.randint(0, 256, (3, 16))
    ref_logits, ref_grads = _forward_backward(model, idx)
    calls = _spy_sdpa(monkeypatch, as_cuda=True)
    logits, grads = _forward_backward(model, idx)
    # 4 query heads, 2 kv heads: SDPA sees k/v repeated to 4 heads and no enable_gqa
    assert calls == [{"q_heads": 4, "kv_heads": 4, "enable_gqa": False}] * cfg.depth
    torch.testing.assert_close(logits, ref_logits, rtol=1e-6, atol=1e-6)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-7)


def test_bf16_gqa_as_on_cuda_keeps_enable_gqa(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = GPTConfig(width=64, depth=1, head_dim=16, seq_len=16, q_per_kv=4)
    torch.manual_seed(0)
    model = GPT(cfg)
    calls = _spy_sdpa(monkeypatch, as_cuda=True)
    _forward_backward(model, torch.randint(0, 256, (2, 16)), bf16=True)
    assert calls == [{"q_heads": 4, "kv_heads": 1, "enable_gqa": True}]
