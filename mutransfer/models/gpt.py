"""A GPT decoder proxy, written to be parametrized.

Pre-norm RMSNorm blocks, RoPE or learned positions, optional QK-norm, tied or untied
head, logit soft-capping and z-loss. The model itself is plain: init is fan-in scaled
(torch's default law, as μP assumes), the attention softmax scale is a float attribute
(``softmax_scale``) that a parametrization sets, and there are no width multipliers
inside; ``mutransfer.parametrization`` adds them as forward hooks. That keeps one model
file for SP, μP, CompleteP and Muon.

Shapes: B batch, T time, C width (d_model), H heads, D head dim, V vocab.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 256
    """Vocabulary size. 256 for the byte-level embedded corpus."""
    seq_len: int = 128
    """Maximum sequence length (context)."""
    width: int = 128
    """Model width d_model; the dimension μP scales."""
    depth: int = 2
    """Number of transformer blocks; the dimension CompleteP scales."""
    head_dim: int = 32
    """Per-head dimension. Heads = width // head_dim, so heads grow with width (μP's
    usual choice: d_head fixed, more heads)."""
    n_head: int | None = None
    """Number of heads; when set it wins over head_dim (head_dim = width // n_head)."""
    mlp_ratio: float = 4.0
    """Hidden size of the MLP as a multiple of width."""
    pos_emb: Literal["rope", "learned"] = "rope"
    """RoPE (no parameters) or a learned absolute position embedding (an input role)."""
    tie_embeddings: bool = False
    """Share the token embedding with the readout."""
    qk_norm: bool = False
    """RMS-normalize queries and keys per head before the dot product (Dehghani et al.
    2023); bounds attention logits, a common stabilizer at scale."""
    logit_softcap: float | None = None
    """If set, logits become cap·tanh(logits/cap) (Gemma 2)."""
    z_loss: float = 0.0
    """Coefficient of the z-loss, coef·mean(logsumexp(logits)²) (PaLM, Chowdhery et al.
    2022 §5; 1e-4 when on). 0 disables it."""
    freeze_norm_gains: bool = False
    """Keep RMSNorm gains at 1 (not trained): Lingle 2024 found trainable gains break
    μ-transfer."""
    bias: bool = False
    """Biases in the linear layers."""

    def __post_init__(self) -> None:
        for field in ("vocab_size", "seq_len", "width", "depth", "head_dim"):
            if getattr(self, field) < 1:
                raise ValueError(f"GPTConfig.{field} must be >= 1, got {getattr(self, field)}")
        heads = self.heads
        if heads < 1 or self.width % heads != 0 or self.width // heads < 1:
            raise ValueError(
                f"width {self.width} is not divisible by the number of heads {heads}"
                f" (n_head={self.n_head}, head_dim={self.head_dim})"
            )
        if self.n_head is None and self.width % self.head_dim != 0:
            raise ValueError(
                f"width {self.width} is not divisible by head_dim {self.head_dim}"
            )
        if self.pos_emb == "rope" and (self.width // heads) % 2 != 0:
            raise ValueError(f"RoPE needs an even head dim, got {self.width // heads}")
        if self.pos_emb not in ("rope", "learned"):
            raise ValueError(f"pos_emb must be 'rope' or 'learned', got {self.pos_emb!r}")

    @property
    def heads(self) -> int:
        return self.n_head if self.n_head is not None else max(1, self.width // self.head_dim)

    @property
    def d_head(self) -> int:
        return self.width // self.heads

    @property
    def d_mlp(self) -> int:
        return int(round(self.mlp_ratio * self.width))

    def replace(self, **changes: object) -> GPTConfig:
        return dataclasses.replace(self, **changes)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, trainable: bool = True) -> None:
        super().__init__()
        # A frozen gain is a buffer, not a parameter, so no optimizer ever sees it.
        if trainable:
            self.weight = nn.Parameter(torch.ones(dim))
        else:
            self.register_buffer("weight", torch.ones(dim), persistent=False)
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_cache(seq_len: int, d_head: int, device: torch.device | None = None) -> torch.Tensor:
    """cos/sin table [T, D/2, 2] for rotary embeddings (Su et al. 2021), base 10000."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d_head, 2, device=device).float() / d_head))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv_freq)  # [T, D/2]
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x_BHTD: torch.Tensor, cache_TD2: torch.Tensor) -> torch.Tensor:
    T = x_BHTD.shape[-2]
    x1, x2 = x_BHTD.float().unflatten(-1, (-1, 2)).unbind(-1)  # pairs (even, odd)
    cos, sin = cache_TD2[:T, :, 0], cache_TD2[:T, :, 1]
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    return out.type_as(x_BHTD)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim = cfg.heads, cfg.d_head
        self.c_q = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.c_k = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.c_v = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.q_norm = RMSNorm(self.head_dim) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim) if cfg.qk_norm else None
        # SP's 1/sqrt(d_head). μP wants 1/d_head: the parametrization overwrites this
        # float (it is module metadata, not a tensor, so state_dict is unaffected).
        self.softmax_scale: float = 1.0 / math.sqrt(self.head_dim)
        self.rope = cfg.pos_emb == "rope"
        # Largest pre-softmax logit of the last forward, for QK-clip and logging; only
        # computed when someone asks (it costs an extra matmul).
        self.track_max_logit = False
        self.max_logit: torch.Tensor | None = None

    def forward(self, x_BTC: torch.Tensor, rope_TD2: torch.Tensor | None) -> torch.Tensor:
        B, T, C = x_BTC.shape
        q = self.c_q(x_BTC).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # B H T D
        k = self.c_k(x_BTC).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = self.c_v(x_BTC).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope and rope_TD2 is not None:
            q, k = apply_rope(q, rope_TD2), apply_rope(k, rope_TD2)
        if self.track_max_logit:
            with torch.no_grad():  # per head max over batch and positions: [H]
                logits = (q @ k.transpose(-2, -1)) * self.softmax_scale
                causal = torch.ones(T, T, dtype=torch.bool, device=x_BTC.device).tril()
                self.max_logit = logits.masked_fill(~causal, float("-inf")).amax(dim=(0, 2, 3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.width, cfg.d_mlp, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.d_mlp, cfg.width, bias=cfg.bias)

    def forward(self, x_BTC: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x_BTC)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = RMSNorm(cfg.width, trainable=not cfg.freeze_norm_gains)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = RMSNorm(cfg.width, trainable=not cfg.freeze_norm_gains)
        self.mlp = MLP(cfg)

    def forward(self, x_BTC: torch.Tensor, rope_TD2: torch.Tensor | None) -> torch.Tensor:
        # attn and mlp are the residual branches; CompleteP's L^-alpha hooks onto them.
        x_BTC = x_BTC + self.attn(self.ln_1(x_BTC), rope_TD2)
        return x_BTC + self.mlp(self.ln_2(x_BTC))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.width)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.width) if cfg.pos_emb == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.ln_f = RMSNorm(cfg.width, trainable=not cfg.freeze_norm_gains)
        self.lm_head = nn.Linear(cfg.width, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        # A buffer so it follows .to(device); not persistent: it is derived, not state.
        rope = rope_cache(cfg.seq_len, cfg.d_head) if cfg.pos_emb == "rope" else torch.empty(0)
        self.register_buffer("rope", rope, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Fan-in init: N(0, 1/fan_in) for every linear (torch's law, Gaussian); N(0, 1)
        embeddings. μP's hidden rule is then already met; the parametrization fixes the
        readout (constant variance) on top."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=module.in_features**-0.5)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.wte.weight, std=1.0)
        if self.wpe is not None:
            nn.init.normal_(self.wpe.weight, std=1.0)

    def forward(
        self, idx_BT: torch.Tensor, targets_BT: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (logits [B, T, V], loss or None). The loss is mean cross-entropy in
        nats/token plus the z-loss term when configured."""
        B, T = idx_BT.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len {self.cfg.seq_len}")
        x = self.wte(idx_BT)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx_BT.device))
        rope = self.rope if self.rope.numel() else None
        for block in self.blocks:
            x = block(x, rope)
        logits = self.lm_head(self.ln_f(x)).float()  # fp32 logits: softmax stability in bf16
        if self.cfg.logit_softcap is not None:
            cap = self.cfg.logit_softcap
            logits = cap * torch.tanh(logits / cap)
        if targets_BT is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets_BT.reshape(-1))
        if self.cfg.z_loss > 0:
            loss = loss + self.cfg.z_loss * torch.logsumexp(logits, dim=-1).pow(2).mean()
        return logits, loss

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameter count; tied weights count once. non_embedding drops token and
        position embeddings (Kaplan et al. 2020's N)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wte.weight.numel()
            if self.wpe is not None:
                n -= self.wpe.weight.numel()
            if self.cfg.tie_embeddings:  # the shared matrix is also the readout: keep it
                n += self.wte.weight.numel()
        return n

    def flops_per_token(self) -> int:
        """Training FLOPs per token: 6·N_nonembed + 6·L·T·C for attention (Kaplan et al.
        2020 Table 1, forward 2N + 2·L·T·C, backward twice the forward)."""
        n, cfg = self.num_params(non_embedding=True), self.cfg
        return 6 * n + 6 * cfg.depth * cfg.seq_len * cfg.width
