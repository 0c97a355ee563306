"""The layers of :mod:`mutransfer.models.gpt`: linear, embedding and RMSNorm that also take
stacked ``[K, ...]`` parameters (a fused group's members), and the causal self-attention
with the SDPA call it makes (:func:`gqa_mode`). Shapes as in :mod:`mutransfer.models.gpt`."""

from __future__ import annotations

import math
from typing import Literal, Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from mutransfer.models.rope import rope_rotate


class AttentionConfig(Protocol):
    """The fields of a model config that attention reads (:class:`~mutransfer.models.gpt.GPTConfig`
    has them); a protocol, so this module never imports the model that imports it."""

    @property
    def heads(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def d_head(self) -> int: ...
    @property
    def width(self) -> int: ...
    @property
    def bias(self) -> bool: ...
    @property
    def norm_eps(self) -> float: ...
    @property
    def qk_norm(self) -> bool: ...
    @property
    def pos_emb(self) -> str: ...


GQAMode = Literal["mha", "gqa", "expand"]


def gqa_mode(device_type: str, dtype: torch.dtype, kv_heads: int, heads: int) -> GQAMode:
    """How attention with ``kv_heads`` key/value heads for ``heads`` query heads calls SDPA:
    ``"mha"`` (as many key/value heads as query heads), ``"gqa"`` (SDPA's ``enable_gqa``:
    no copy of k and v) or ``"expand"`` (k and v repeated to ``heads`` heads first).

    On CUDA, ``enable_gqa`` runs on the flash kernel, which takes fp16/bf16 only; in fp32
    SDPA then falls to its math kernel (the T×T scores materialized, several times the
    memory-efficient kernel's time and memory), because the memory-efficient kernel does
    not take ``enable_gqa``. Repeating k and v (``G·(H/G)`` heads: a copy the size of k
    and v, small next to T×T scores) lets the memory-efficient kernel run. So: expand for
    fp32 GQA on CUDA, ``enable_gqa`` otherwise (bf16 stays on flash; CPU's kernels take
    GQA in any dtype)."""
    if kv_heads >= heads:
        return "mha"
    if device_type == "cuda" and dtype == torch.float32:
        return "expand"
    return "gqa"


def member_scale(scale: float | torch.Tensor, like_K: torch.Tensor) -> float | torch.Tensor:
    """A per-member scale shaped to broadcast against a ``[K, ...]`` tensor. A float stays
    a float, so a plain model runs exactly the kernel it always ran."""
    if isinstance(scale, torch.Tensor):
        return scale.view(-1, *([1] * (like_K.dim() - 1)))
    return scale


class Linear(nn.Linear):
    """``nn.Linear`` that also takes a stacked weight ``[K, out, in]`` (x ``[K, ..., in]``):
    one batched matmul for all members. With a 2-D weight it is ``nn.Linear``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """:class:`Linear`'s product: ``F.linear`` for a 2-D weight, one batched matmul for a
    stacked ``[K, out, in]`` one."""
    if w.dim() == 2:
        return F.linear(x, w, b)
    K = w.shape[0]
    x_KNI, w_KIO = x.reshape(K, -1, x.shape[-1]), w.transpose(1, 2)
    b_K1O = None if b is None else b.unsqueeze(1)
    y = torch.bmm(x_KNI, w_KIO) if b_K1O is None else torch.baddbmm(b_K1O, x_KNI, w_KIO)
    return y.view(*x.shape[:-1], w.shape[1])


def _hooked(*modules: nn.Module) -> bool:
    return any(m._forward_hooks or m._forward_pre_hooks for m in modules)


class Embedding(nn.Embedding):
    """``nn.Embedding`` that also takes a stacked table ``[K, V, C]`` (idx ``[K, ...]``)."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if w.dim() == 2:
            return F.embedding(idx, w)
        # One lookup in the K tables laid end to end: member k's rows start at k·V.
        K, V = w.shape[:2]
        offsets = (torch.arange(K, device=idx.device) * V).view(K, *([1] * (idx.dim() - 1)))
        return F.embedding(idx + offsets, w.reshape(K * V, -1))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, trainable: bool = True, eps: float = 1e-6) -> None:
        super().__init__()
        # A frozen gain is a buffer, not a parameter, so no optimizer ever sees it.
        if trainable:
            self.weight = nn.Parameter(torch.ones(dim))
        else:
            self.register_buffer("weight", torch.ones(dim), persistent=False)
        self.eps = eps

    def forward(self, x_K_D: torch.Tensor) -> torch.Tensor:
        w, d = self.weight, x_K_D.shape[-1]
        if w.dim() == 1:
            return F.rms_norm(x_K_D, (d,), w, self.eps)
        # Stacked gains [K, D]: rms_norm's own gain is shared by every row, so apply it after.
        return F.rms_norm(x_K_D, (d,), None, self.eps) * w.view(w.shape[0], *([1] * (x_K_D.dim() - 2)), d)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: AttentionConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.heads, cfg.kv_heads, cfg.d_head
        self.c_q = Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.c_k = Linear(cfg.width, self.n_kv_head * self.head_dim, bias=cfg.bias)
        self.c_v = Linear(cfg.width, self.n_kv_head * self.head_dim, bias=cfg.bias)
        self.c_proj = Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.q_norm = RMSNorm(self.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None
        # SP's 1/sqrt(d_head). μP wants 1/d_head: the parametrization overwrites this
        # float (module metadata, not a tensor, so state_dict is unaffected). A fused
        # group sets a [K] tensor here when its members' scales differ.
        self.softmax_scale: float | torch.Tensor = 1.0 / math.sqrt(self.head_dim)
        self.rope = cfg.pos_emb == "rope"
        # Largest pre-softmax logit of the last forward ([H], or [K, H] when stacked), for
        # QK-clip and logging; only computed when asked for (it costs an extra matmul).
        self.track_max_logit = False
        self.max_logit: torch.Tensor | None = None

    def forward(self, x_KBTC: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """``rope``: :func:`rope_tables` (cos, signed sin), or None for no rotation."""
        K, B, T, C = x_KBTC.shape
        H, G, D = self.n_head, self.n_kv_head, self.head_dim

        def heads(y_KBTX: torch.Tensor, n: int) -> torch.Tensor:
            return y_KBTX.view(K, B, T, n, D).transpose(2, 3)  # K B n T D

        lin = (self.c_q, self.c_k, self.c_v)
        if _hooked(*lin):  # a multiplier on one of them: each its own module call
            q, k, v = (y(x_KBTC) for y in lin)
        else:  # one matmul (one cast of x under autocast, one gradient for it) for all three
            w = torch.cat([m.weight for m in lin], dim=-2)
            b = None if self.c_q.bias is None else torch.cat([m.bias for m in lin], dim=-1)
            q, k, v = linear(x_KBTC, w, b).split([H * D, G * D, G * D], dim=-1)
        q, k, v = heads(q, H), heads(k, G), heads(v, G)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        # The softmax scale goes into q, so members with different scales share one SDPA
        # (a [K] scale would promote bf16 q to fp32: cast back, as q * float does). With
        # RoPE it rides on q's rotation tables: no pass of its own (exact for the usual
        # power-of-two scales 1/d_head and 1/sqrt(d_head)).
        scale = member_scale(self.softmax_scale, q)
        if self.rope and rope is not None:
            cos, sin = rope
            q, k = rope_rotate(q, cos * scale, sin * scale).to(k.dtype), rope_rotate(k, cos, sin)
        else:
            q = (q * scale).to(k.dtype)
        if self.track_max_logit:
            with torch.no_grad():  # per member and head, max over batch and positions
                # GQA: key head g serves query heads g·H/G .. (g+1)·H/G - 1, as SDPA's enable_gqa
                k_rep = k[:, :, :, None].expand(K, B, G, H // G, T, D).reshape(K, B, H, T, D)
                logits = q @ k_rep.transpose(-2, -1)
                causal = torch.ones(T, T, dtype=torch.bool, device=x_KBTC.device).tril()
                s_KH = logits.masked_fill(~causal, float("-inf")).amax(dim=(1, 3, 4))
                self.max_logit = s_KH if self.c_q.weight.dim() == 3 else s_KH[0]
        mode = gqa_mode(q.device.type, q.dtype, G, H)
        if mode == "expand":  # each key/value head repeated for its H/G query heads, as enable_gqa reads them
            k, v = k.repeat_interleave(H // G, dim=2), v.repeat_interleave(H // G, dim=2)
        y = F.scaled_dot_product_attention(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1),
                                           is_causal=True, scale=1.0, enable_gqa=mode == "gqa")  # KB H T D
        return self.c_proj(y.view(K, B, H, T, D).transpose(2, 3).reshape(K, B, T, C))


__all__ = ["CausalSelfAttention", "Embedding", "GQAMode", "Linear", "RMSNorm", "gqa_mode", "linear",
           "member_scale"]
