"""Optimizers over a parametrization's param groups: AdamW, SGD, and Muon + AdamW.

Every group carries ``lr`` (= base × multiplier, what torch reads), ``base_lr`` and
``lr_mult``; :func:`set_lr` applies a schedule value so that the effective per-parameter
LR is always base × schedule × multiplier.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

OPTIMIZER_NAMES = ("adamw", "sgd", "muon")
_FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class OptimizerList(torch.optim.Optimizer):
    """Several torch optimizers stepped as one (Muon for hidden matrices, AdamW for the
    rest). Exposes the union of their ``param_groups`` and a joint state dict.

    It is a :class:`torch.optim.Optimizer` as far as ``torch.optim.lr_scheduler`` looks
    (``param_groups``, ``defaults``, a ``step`` method), so any torch scheduler drives it:
    the scheduler rescales each group's ``lr``, which already holds base × multiplier, so the
    effective LR stays base × schedule × multiplier (give OneCycleLR ``max_lr`` per group,
    ``[g["lr"] for g in opt.param_groups]``, and, over Muon + AdamW, ``cycle_momentum=False``:
    the two name their momentum differently). The base class's ``__init__`` is not run:
    parameters, state and hooks stay those of the wrapped optimizers."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        if not optimizers:
            raise ValueError("OptimizerList needs at least one optimizer")
        self.optimizers = optimizers

    @property  # type: ignore[override]
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    @property  # type: ignore[override]
    def defaults(self) -> dict[str, Any]:
        """The wrapped optimizers' defaults, the last (AdamW) winning: OneCycleLR reads
        ``betas`` or ``momentum`` here to decide what it cycles."""
        return {k: v for opt in self.optimizers for k, v in opt.defaults.items()}

    @property  # type: ignore[override]
    def state(self) -> dict[Any, Any]:
        return {p: s for opt in self.optimizers for p, s in opt.state.items()}

    def __getstate__(self) -> dict[str, Any]:  # plain pickling, not Optimizer's
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"OptimizerList({', '.join(type(o).__name__ for o in self.optimizers)})"

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise ValueError("OptimizerList.step takes no closure")
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        states = state["optimizers"]
        if len(states) != len(self.optimizers):
            raise ValueError(f"state dict holds {len(states)} optimizers, expected {len(self.optimizers)}")
        for opt, s in zip(self.optimizers, states):
            opt.load_state_dict(s)

    def __iter__(self) -> Iterator[torch.optim.Optimizer]:
        return iter(self.optimizers)


def build_optimizer(
    groups: list[dict[str, Any]],
    name: str = "adamw",
    *,
    betas: tuple[float, float] = (0.9, 0.95),
    momentum: float = 0.0,
    muon_momentum: float = 0.95,
    fused: bool | None = None,
) -> OptimizerList:
    """Build the optimizer(s) for ``groups`` from ``Parametrization.param_groups``.

    ``name`` is ``adamw``, ``sgd`` or ``muon``. With ``muon``, groups tagged
    ``optimizer="muon"`` (hidden matrices) go to ``torch.optim.Muon`` with its spectral
    scaling sqrt(max(1, fan_out/fan_in)) (``adjust_lr_fn="original"``, Jordan et al.
    2024) and the rest to AdamW. Groups keep their own lr, eps and weight decay.
    """
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZER_NAMES)}")
    if not groups:
        raise ValueError("no parameters to optimize")
    tags = {g.get("optimizer", "adamw") for g in groups}
    if "muon" in tags and name != "muon":
        raise ValueError(
            f"the parametrization puts hidden matrices on Muon; use optimizer 'muon', not {name!r}")
    if name == "sgd" and tags - {"sgd"}:
        raise ValueError(
            f"optimizer 'sgd' needs a parametrization built with optimizer='sgd' (got {sorted(tags)})")
    if name != "sgd" and "sgd" in tags:
        raise ValueError(f"the parametrization uses SGD rules; optimizer {name!r} needs Adam rules")
    opts: list[torch.optim.Optimizer] = []
    if name == "sgd":
        opts.append(torch.optim.SGD(groups, lr=groups[0]["lr"], momentum=momentum))
        return OptimizerList(opts)
    muon = [g for g in groups if g.get("optimizer") == "muon"]
    rest = [g for g in groups if g.get("optimizer") != "muon"]
    if muon:
        opts.append(torch.optim.Muon(muon, lr=muon[0]["lr"], momentum=muon_momentum,
                                     adjust_lr_fn="original"))
    if rest:
        if fused is None:
            # torch defaults to the per-tensor loop off CUDA; its fused kernel also runs on CPU,
            # ~4x faster on a small model's many small tensors, equal to ~1e-6 after 1000 steps.
            fused = all(p.device.type in ("cuda", "cpu") and p.dtype in _FUSED_DTYPES
                        for g in rest for p in g["params"])
        opts.append(torch.optim.AdamW(rest, lr=rest[0]["lr"], betas=betas, fused=fused or None))
    return OptimizerList(opts)


def set_lr(optimizer: OptimizerList | torch.optim.Optimizer, schedule_value: float) -> None:
    """Set every group's lr to base_lr × schedule_value × lr_mult."""
    for g in optimizer.param_groups:
        g["lr"] = g.get("base_lr", g["lr"]) * schedule_value * g.get("lr_mult", 1.0)


__all__ = [
    "OPTIMIZER_NAMES",
    "OptimizerList",
    "attention_modules",
    "build_optimizer",
    "muon_step_batched",
    "newton_schulz_batched",
    "qk_clip",
    "set_lr",
    "track_max_logits",
]


# ---- QK-clip (MuonClip) ------------------------------------------------------------------


def attention_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """Attention modules QK-clip can act on: those exposing ``max_logit``,
    ``track_max_logit``, ``n_head``, ``head_dim`` and linear ``c_q`` / ``c_k``."""
    out = []
    for name, m in model.named_modules():
        if all(hasattr(m, a) for a in ("track_max_logit", "max_logit", "n_head", "head_dim", "c_q", "c_k")):
            out.append((name, m))
    return out


def track_max_logits(model: torch.nn.Module, on: bool = True) -> None:
    """Turn the per-head max-logit measurement of every attention module on or off."""
    for _, m in attention_modules(model):
        m.track_max_logit = on
        if not on:
            m.max_logit = None


@torch.no_grad()
def qk_clip(
    model: torch.nn.Module,
    tau: float = 100.0,
    max_logits: dict[str, torch.Tensor] | None = None,
) -> int:
    """QK-clip, the post-step half of MuonClip (Kimi K2 technical report, Kimi Team 2025,
    §2.1): for each head h with max pre-softmax logit S_h (over the batch just trained on),
    gamma_h = min(1, tau / S_h), and the head's rows of W_q and of W_k are each scaled by
    sqrt(gamma_h), so that head's logits (a bilinear form in W_q, W_k) shrink by gamma_h
    and its max becomes tau (with grouped-query attention, W_q's rows by gamma_h and W_k
    untouched: a key head serves several query heads). Heads with S_h <= tau are untouched.

    ``max_logits`` maps module name -> per-head maxima ``[H]``; by default each module's
    ``max_logit`` from its last tracked forward. Under ``torch.distributed`` the maxima
    are all-reduced (MAX) first so every rank applies the same scaling and the replicas
    stay identical. With QK-norm the logits do not depend on the scale of W_q, W_k, so
    the clip cannot bound them (use ``logit_softcap`` there). Returns the number of heads
    clipped.
    """
    if not (tau > 0 and math.isfinite(tau)):
        raise ValueError(f"qk-clip tau must be a positive finite number, got {tau!r}")
    clipped = 0
    for name, m in attention_modules(model):
        s = max_logits.get(name) if max_logits is not None else m.max_logit
        if s is None:
            continue
        s = s.detach().float().clone()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(s, op=torch.distributed.ReduceOp.MAX)
        over = s > tau
        if not bool(over.any()):
            continue
        gamma = torch.where(over, tau / s, torch.ones_like(s))
        # Rows h*D:(h+1)*D of the (out, in) weight produce head h's queries (keys). Under
        # GQA a key head is shared by several query heads, so the whole gamma goes on the
        # queries and the keys are left alone (as Kimi K2 does for MLA's shared rotary key).
        shared_keys = int(getattr(m, "n_kv_head", m.n_head)) != int(m.n_head)
        row_scale = (gamma if shared_keys else gamma.sqrt()).repeat_interleave(int(m.head_dim))
        for lin in (m.c_q,) if shared_keys else (m.c_q, m.c_k):
            lin.weight.mul_(row_scale.to(lin.weight)[:, None])
            if lin.bias is not None:
                lin.bias.mul_(row_scale.to(lin.bias))
        clipped += int(over.sum())
    return clipped


# ---- Muon over a stack of members (fused training) ---------------------------------------


def newton_schulz_batched(g_KAB: torch.Tensor, coefficients: tuple[float, float, float], steps: int,
                          eps: float | torch.Tensor) -> torch.Tensor:
    """``torch.optim._muon._zeropower_via_newtonschulz`` over a stack of matrices
    ``[K, A, B]``: the same bf16 quintic iteration (Jordan et al. 2024), each matrix
    normalized by its own Frobenius norm, with ``addmm`` become ``baddbmm``. ``eps`` may
    be a ``[K]`` tensor (one per member)."""
    a, b, c = coefficients
    x = g_KAB.bfloat16()
    tall = g_KAB.size(-2) > g_KAB.size(-1)
    if tall:
        x = x.mT
    norm = torch.linalg.vector_norm(x, dim=(-2, -1))
    norm = torch.maximum(norm, eps.to(norm)) if isinstance(eps, torch.Tensor) else norm.clamp(min=eps)
    x = x / norm.view(-1, 1, 1)
    for _ in range(steps):
        gram = x @ x.mT
        update = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, update, x, beta=a)
    return x.mT if tall else x


_SHARED_MUON_KEYS = ("nesterov", "ns_coefficients", "ns_steps")


@torch.no_grad()
def muon_step_batched(optimizers: list[torch.optim.Muon],
                      params: list[list[torch.Tensor]] | None = None) -> None:
    """One ``step()`` of several ``torch.optim.Muon`` optimizers (the members of a fused
    group), with one batched Newton–Schulz per parameter position instead of one per
    member. Everything else is torch's ``_single_tensor_muon`` per member: EMA momentum
    ``lerp``, Nesterov, decoupled weight decay, ``adjust_lr_fn``; the state
    (``momentum_buffer``) lives in each optimizer as torch keeps it.

    ``params[i]`` lists optimizer i's parameters so that position j has the same shape in
    every optimizer (default: each optimizer's parameters in group order). Members may
    group their parameters differently; they must agree on nesterov, ns_coefficients and
    ns_steps (ValueError otherwise).
    """
    from torch.optim._muon import _adjust_lr

    if not optimizers:
        return
    if params is None:
        params = [[p for g in o.param_groups for p in g["params"]] for o in optimizers]
    group_of = [{id(p): g for g in o.param_groups for p in g["params"]} for o in optimizers]
    for row in zip(*params, strict=True):
        if any(p.grad is None for p in row):
            continue
        groups = [gmap[id(p)] for gmap, p in zip(group_of, row)]
        for key in _SHARED_MUON_KEYS:
            if len({repr(g[key]) for g in groups}) > 1:
                raise ValueError(f"Muon optimizers differ in {key}: they cannot step together")
        updates = []
        for opt, g, p in zip(optimizers, groups, row):
            state = opt.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
            buf, mu = state["momentum_buffer"], g["momentum"]
            buf.lerp_(p.grad, 1 - mu)
            updates.append(p.grad.lerp(buf, mu) if g["nesterov"] else buf)
        eps = [float(g["eps"]) for g in groups]
        eps_t = eps[0] if len(set(eps)) == 1 else torch.tensor(eps, device=row[0].device)
        g0 = groups[0]
        ortho = newton_schulz_batched(torch.stack(updates), g0["ns_coefficients"], g0["ns_steps"], eps_t)
        for j, (g, p) in enumerate(zip(groups, row)):
            lr = float(g["lr"])
            p.mul_(1 - lr * g["weight_decay"])
            p.add_(ortho[j], alpha=-_adjust_lr(lr, g["adjust_lr_fn"], p.shape))
