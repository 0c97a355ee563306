"""A GPT decoder proxy, written to be parametrized and to be fused.

Pre-norm RMSNorm blocks, RoPE or learned positions, optional QK-norm, tied or untied
head, logit soft-capping and z-loss; a GELU or SwiGLU MLP and grouped-query attention, so
``mlp="swiglu"`` with ``q_per_kv`` is Hugging Face's ``LlamaForCausalLM`` layer for layer
(:mod:`mutransfer.models.convert`). The model itself is plain: init is fan-in scaled
(torch's default law, as μP assumes), the attention softmax scale is a float attribute
(``softmax_scale``) that a parametrization sets, and there are no width multipliers
inside; ``mutransfer.parametrize.parametrization`` adds them as forward hooks. That keeps one model
file for SP, μP, CompleteP and Muon.

The forward carries a member dimension K. A plain GPT has ordinary parameters
(``[out, in]``) and runs as K=1: ``model(idx_BT)`` is ``model(idx_BT[None])[0]``. A
fused group (:mod:`mutransfer.training.fused`, HFTA) swaps in stacked parameters ``[K, out, in]``
and calls ``model(idx_KBT)``: every linear becomes one batched matmul, and per-member
scales (the forward multipliers, ``softmax_scale``) may be ``[K]`` tensors instead of
floats. The softmax scale is folded into q, so one SDPA call serves all K members.

Shapes: K members, B batch, T time, C width (d_model), H heads, G key/value heads, D head
dim, F MLP hidden, V vocab. The layers (stacked-parameter linear, embedding, RMSNorm and
the attention) are :mod:`mutransfer.models.gpt_layers`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from mutransfer.models.gpt_layers import CausalSelfAttention, Embedding, Linear, RMSNorm
from mutransfer.models.rope import rope_cache, rope_tables


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
    mlp: Literal["gelu", "swiglu"] = "gelu"
    """``gelu``: down(gelu(up(x))). ``swiglu``: down(silu(gate(x)) * up(x)) (Shazeer 2020,
    "GLU Variants Improve Transformer"; Llama's MLP), one more width × d_mlp matrix."""
    q_per_kv: int = 1
    """Query heads per key/value head (GQA, Ainslie et al. 2023; 1 is multi-head): a ratio,
    not a count, so key/value heads (heads // q_per_kv) grow with width as heads do."""
    norm_eps: float = 1e-6
    """Epsilon of every RMSNorm (HF Llama's ``rms_norm_eps``)."""
    rope_theta: float = 10000.0
    """RoPE base: frequency i is theta^(-2i/D) (Su et al. 2021; Llama 3 uses 500000)."""
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
            raise ValueError(f"width {self.width} is not divisible by the number of heads {heads}"
                             f" (n_head={self.n_head}, head_dim={self.head_dim})")
        if self.n_head is None and self.width % self.head_dim != 0:
            raise ValueError(f"width {self.width} is not divisible by head_dim {self.head_dim}")
        if self.pos_emb == "rope" and (self.width // heads) % 2 != 0:
            raise ValueError(f"RoPE needs an even head dim, got {self.width // heads}")
        if self.pos_emb not in ("rope", "learned"):
            raise ValueError(f"pos_emb must be 'rope' or 'learned', got {self.pos_emb!r}")
        if self.mlp not in ("gelu", "swiglu"):
            raise ValueError(f"mlp must be 'gelu' or 'swiglu', got {self.mlp!r}")
        q = self.q_per_kv
        if isinstance(q, bool) or not isinstance(q, int) or q < 1 or heads % q != 0:
            raise ValueError(f"q_per_kv {q!r} must be a positive integer dividing the number of heads {heads}"
                             f" (width {self.width})")
        for field in ("norm_eps", "rope_theta"):
            if not (getattr(self, field) > 0 and math.isfinite(getattr(self, field))):
                raise ValueError(f"GPTConfig.{field} must be a positive number, got {getattr(self, field)}")

    @property
    def heads(self) -> int:
        return self.n_head if self.n_head is not None else max(1, self.width // self.head_dim)

    @property
    def kv_heads(self) -> int:
        return self.heads // self.q_per_kv

    @property
    def d_head(self) -> int:
        return self.width // self.heads

    @property
    def d_mlp(self) -> int:
        return int(round(self.mlp_ratio * self.width))

    def replace(self, **changes: object) -> GPTConfig:
        return dataclasses.replace(self, **changes)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = Linear(cfg.width, cfg.d_mlp, bias=cfg.bias)  # SwiGLU's "up"
        # Built after c_fc, so a GELU model draws the same init as it always did.
        self.c_gate = Linear(cfg.width, cfg.d_mlp, bias=cfg.bias) if cfg.mlp == "swiglu" else None
        self.c_proj = Linear(cfg.d_mlp, cfg.width, bias=cfg.bias)

    def forward(self, x_KBTC: torch.Tensor) -> torch.Tensor:
        h_KBTF = self.c_fc(x_KBTC)
        h_KBTF = F.gelu(h_KBTF) if self.c_gate is None else F.silu(self.c_gate(x_KBTC)) * h_KBTF
        return self.c_proj(h_KBTF)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = RMSNorm(cfg.width, trainable=not cfg.freeze_norm_gains, eps=cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = RMSNorm(cfg.width, trainable=not cfg.freeze_norm_gains, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x_KBTC: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        # attn and mlp are the residual branches; CompleteP's L^-alpha hooks onto them.
        x_KBTC = x_KBTC + self.attn(self.ln_1(x_KBTC), rope)
        return x_KBTC + self.mlp(self.ln_2(x_KBTC))


def member_losses(logits_KBTV: torch.Tensor, targets_KBT: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
    """Per-member mean cross-entropy in nats/token, plus ``z_loss``·mean(logsumexp²): ``[K]``.

    On CPU (and for K=1) one ``F.cross_entropy`` per member: its mean reduction sums in an
    order that ``reduction="none"`` + ``mean`` does not repeat, and that last bit is
    enough to flip bf16 roundings inside Muon's Newton–Schulz, so a fused member would
    drift from its unfused run. On accelerators with K > 1, one batched call.
    """
    K, V = logits_KBTV.shape[0], logits_KBTV.shape[-1]
    if K == 1 or logits_KBTV.device.type == "cpu":
        loss = torch.stack([F.cross_entropy(logits_KBTV[i].reshape(-1, V), targets_KBT[i].reshape(-1))
                            for i in range(K)])
        if z_loss > 0:
            loss = loss + z_loss * torch.stack([torch.logsumexp(logits_KBTV[i], dim=-1).pow(2).mean()
                                                for i in range(K)])
        return loss
    ce = F.cross_entropy(logits_KBTV.reshape(-1, V), targets_KBT.reshape(-1), reduction="none")
    loss = ce.view(K, -1).mean(1)
    if z_loss > 0:
        loss = loss + z_loss * torch.logsumexp(logits_KBTV, dim=-1).pow(2).view(K, -1).mean(1)
    return loss


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = Embedding(cfg.vocab_size, cfg.width)
        self.wpe = Embedding(cfg.seq_len, cfg.width) if cfg.pos_emb == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.ln_f = RMSNorm(cfg.width, trainable=not cfg.freeze_norm_gains, eps=cfg.norm_eps)
        self.lm_head = Linear(cfg.width, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        # A buffer so it follows .to(device); not persistent: it is derived, not state.
        rope = rope_cache(cfg.seq_len, cfg.d_head, cfg.rope_theta) if self.wpe is None else torch.empty(0)
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
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``idx`` [B, T] -> (logits [B, T, V], loss or None); with stacked parameters
        ``idx`` [K, B, T] -> (logits [K, B, T, V], per-member losses [K] or None). The loss
        is mean cross-entropy in nats/token plus the z-loss term when configured."""
        plain = idx.dim() == 2
        idx_KBT = idx.unsqueeze(0) if plain else idx
        K, B, T = idx_KBT.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len {self.cfg.seq_len}")
        x = self.wte(idx_KBT)
        if self.wpe is not None:
            pos_KT = torch.arange(T, device=idx.device).expand(K, T)
            x = x + self.wpe(pos_KT).unsqueeze(1)
        rope = None
        if self.rope.numel():
            dev = idx.device.type
            # q and k come out of the projections in autocast's dtype: rotate them in it
            dtype = (torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev)
                     else self.blocks[0].attn.c_q.weight.dtype) if self.blocks else x.dtype
            rope = rope_tables(self.rope, T, dtype)
        for block in self.blocks:
            x = block(x, rope)
        logits = self.lm_head(self.ln_f(x)).float()  # fp32 logits: softmax stability in bf16
        if self.cfg.logit_softcap is not None:
            cap = self.cfg.logit_softcap
            logits = cap * torch.tanh(logits / cap)
        loss = None
        if targets is not None:
            loss = member_losses(logits, targets.unsqueeze(0) if plain else targets, self.cfg.z_loss)
        if plain:
            return logits[0], (None if loss is None else loss[0])
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
