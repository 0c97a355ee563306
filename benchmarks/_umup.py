"""The demo's GPT built from Graphcore's ``unit_scaling`` layers (u-μP), and its training loop.

u-μP (Blake et al. 2024, "u-μP: The Unit-Scaled Maximal Update Parametrization", §4) makes
every activation, weight and gradient unit-scaled at init and moves μP's width rules into
fixed op scales (``uu.*`` modules, ``U.*`` functions) and the optimizer's per-parameter LR
(``uu.optim.AdamW``: η·fan_in^-1/2 for hidden weights and the embedding, η for the readout,
both times depth^-1/2 inside a ``uu.DepthModuleList``). Nothing here re-derives those rules:
the layers, the residual τ rule (``uu.transformer_residual_scaling_rule``, paper App. G) and
the optimizer are the package's. Only the architecture is ours, so that the comparison with
the toolkit's μP and SP isolates the parametrization: the shape of ``gpt-small`` (pre-norm
RMSNorm blocks, RoPE, a 4x GELU MLP, untied readout, no biases; depth 2, head dim 32,
context 64, byte vocab), with u-μP's own choices where the package makes one (norms without
gains, fused QKV as in ``uu.MHSA``).

The loop mirrors ``mutransfer.training.trainer.Trainer`` for the demo's setup: the same training and
held-out batches (``TokenDataset.get_batch``), the same schedule (``TrainConfig
.schedule_config``), Adam's betas and eps, the same held-out loss (mean cross-entropy over
``eval_sequences`` sequences of the fixed held-out set) and the same divergence rule (``divergence_bound``).
It does not clip gradients: unit-scaled gradients have a global norm of order
sqrt(#params), so the trainer's clip at 1.0 would rescale every step (the package's demo
trains without clipping).

Needs ``unit_scaling`` (the ``[umup]`` extra, installed with ``--no-deps``); a benchmark
only, not a dependency of the toolkit.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn as nn
import unit_scaling as uu
import unit_scaling.functional as U

from mutransfer.models.rope import apply_rope, rope_cache


class UmupBlock(nn.Module):
    """Pre-norm block: x <- x ⊕τ attn(norm x), then x <- x ⊕τ mlp(norm x), where ⊕τ is
    ``U.residual_split``/``U.residual_add`` with the block's τ from the package's rule."""

    def __init__(self, width: int, head_dim: int, index: int, depth: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.heads = width // head_dim
        rule = uu.transformer_residual_scaling_rule()
        self.attn_tau = rule(2 * index, 2 * depth)
        self.mlp_tau = rule(2 * index + 1, 2 * depth)
        self.attn_norm = uu.RMSNorm(width)
        self.attn_qkv = uu.Linear(width, 3 * width)
        self.attn_out = uu.Linear(width, width)
        self.mlp_norm = uu.RMSNorm(width)
        self.mlp_up = uu.Linear(width, mlp_ratio * width)
        self.mlp_act = uu.GELU()
        self.mlp_down = uu.Linear(mlp_ratio * width, width)

    def forward(self, x_BTC: torch.Tensor, rope_TD2: torch.Tensor) -> torch.Tensor:
        B, T, C = x_BTC.shape
        r, skip = U.residual_split(x_BTC, tau=self.attn_tau)
        qkv = self.attn_qkv(self.attn_norm(r)).view(B, T, 3, self.heads, C // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each B H T D
        # RoPE rotates pairs of coordinates: it keeps each vector's norm, so unit scale holds.
        q, k = apply_rope(q, rope_TD2), apply_rope(k, rope_TD2)
        y = U.scaled_dot_product_attention(q, k, v, is_causal=True)
        x_BTC = U.residual_add(self.attn_out(y.transpose(1, 2).reshape(B, T, C)), skip, tau=self.attn_tau)
        r, skip = U.residual_split(x_BTC, tau=self.mlp_tau)
        r = self.mlp_down(self.mlp_act(self.mlp_up(self.mlp_norm(r))))
        return U.residual_add(r, skip, tau=self.mlp_tau)


class UmupGPT(nn.Module):
    """``gpt-small``'s shape under u-μP. ``forward(idx [B, T])`` returns logits [B, T, V]."""

    def __init__(self, width: int, depth: int = 2, head_dim: int = 32, seq_len: int = 64,
                 vocab_size: int = 256) -> None:
        super().__init__()
        if width % head_dim:
            raise ValueError(f"width {width} is not divisible by head_dim {head_dim}")
        self.embedding = uu.Embedding(vocab_size, width)
        # DepthModuleList tags each block parameter with the depth, for the optimizer's
        # depth^-1/2 LR factor.
        self.blocks = uu.DepthModuleList([UmupBlock(width, head_dim, i, depth) for i in range(depth)])
        self.final_norm = uu.RMSNorm(width)
        self.readout = uu.LinearReadout(width, vocab_size)
        self.register_buffer("rope", rope_cache(seq_len, head_dim), persistent=False)

    def forward(self, idx_BT: torch.Tensor) -> torch.Tensor:
        x = self.embedding(idx_BT)
        for block in self.blocks:
            x = block(x, self.rope)
        return self.readout(self.final_norm(x))

    def loss(self, idx_BT: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy in nats/token; ``U.cross_entropy`` keeps its gradient unit-scaled."""
        logits = self(idx_BT).float()
        return U.cross_entropy(logits.flatten(0, 1), targets_BT.flatten())


def umup_optimizer(model: UmupGPT, lr: float, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                   embedding_lr_constant: bool = False) -> torch.optim.AdamW:
    """``uu.optim.AdamW`` over ``model`` (one group per parameter, LR scaled by u-μP's rule),
    with ``base_lr`` recorded for ``mutransfer.training.optim.set_lr``.

    ``embedding_lr_constant`` is an ablation, not u-μP: it undoes the package's
    η·width^-1/2 for the embedding table only, giving it μP's width-independent Adam LR η
    (μP with Adam gives input weights a width-independent LR; Yang et al. 2022, Tensor
    Programs V), to measure what that one rule costs.
    """
    opt = uu.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=0.0)
    for g in opt.param_groups:
        if embedding_lr_constant and g["params"][0] is model.embedding.weight:
            g["lr"] /= uu.optim.lr_scale_func_adam(model.embedding.weight)
        g["base_lr"] = g["lr"]  # set_lr scales each group's own (u-μP-scaled) peak LR
    return opt


_DATA: dict[str, Any] = {}


def _dataset() -> Any:
    from mutransfer.training.data import DataConfig, load_dataset

    if "stdlib" not in _DATA:  # one open per process, shared by its runs
        _DATA["stdlib"] = load_dataset(DataConfig())
    return _DATA["stdlib"]


def train_umup(demo: dict[str, Any], width: int, lr: float, seed: int,
               embedding_lr_constant: bool = False) -> dict[str, Any]:
    """One u-μP run of the demo's setup (``demo`` holds TrainConfig fields: steps,
    batch_size, seq_len, eval_sequences, warmup_steps, schedule, lr_floor, threads,
    diverge_factor optional; ``embedding_lr_constant``: see :func:`umup_optimizer`).
    Returns ``loss`` (final held-out loss; a diverged run gets max(ln V, initial loss), as
    the trainer reports it), ``diverged``, ``initial_loss`` and ``wall_s``."""
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.device import denormals_flushed
    from mutransfer.training.optim import set_lr
    from mutransfer.training.schedules import make_schedule
    from mutransfer.training.stabilizers import divergence_bound, is_diverged
    from mutransfer.training.trainer import eval_rows, sequence_losses

    t0 = time.perf_counter()
    cfg = TrainConfig.from_flat({**{k: v for k, v in demo.items() if k != "base_width"},
                                 "width": width, "lr": lr, "seed": seed})
    run, model_cfg, optim = cfg.run, cfg.model_config(), cfg.optim
    if run.threads is not None:
        torch.set_num_threads(run.threads)
    data = _dataset()
    steps, bs = run.steps, run.batch_size
    seq = model_cfg.seq_len
    torch.manual_seed(seed)
    model = UmupGPT(width, depth=model_cfg.depth, head_dim=model_cfg.d_head, seq_len=seq,
                    vocab_size=data.vocab_size)
    opt = umup_optimizer(model, lr, (optim.beta1, optim.beta2), optim.eps, embedding_lr_constant)
    schedule = make_schedule(cfg.schedule_config())
    initial: float | None = None
    diverged = False
    flush_before = denormals_flushed()
    torch.set_flush_denormal(True)  # as the trainer: denormals slow high-LR tails on CPU
    try:
        for step in range(steps):
            set_lr(opt, schedule(step))
            x, y = data.get_batch("train", step, bs, seq, seed)
            loss = model.loss(x, y)
            v = float(loss.detach())
            if initial is None and math.isfinite(v):
                initial = v
            if is_diverged(v, divergence_bound(cfg.stabilizers.diverge_factor, data.vocab_size, initial)):
                diverged = True
                break
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        val = float("nan")
        if not diverged:
            model.eval()
            with torch.no_grad():
                per_seq = [sequence_losses(model(x), y)
                           for x, y in data.eval_batches(run.eval_sequences, seq, eval_rows(cfg, seq))]
            val = float(torch.cat(per_seq).double().sum()) / run.eval_sequences
            diverged = not math.isfinite(val)
    finally:
        torch.set_flush_denormal(flush_before)
    worst = max(math.log(data.vocab_size), initial if initial is not None else 0.0)
    return {"loss": worst if diverged else val, "diverged": diverged, "initial_loss": initial,
            "wall_s": time.perf_counter() - t0}
