"""Probing a model's forward: the multiplier every Linear/Embedding applies (its output over
``W x (+ b)`` of its raw input; for the readout, the logits over its output) and the
softmax scale of every attention call. Read by the μP audit and by the internal-multiplier
detection (:mod:`mutransfer.parametrize.internals`)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


class SDPASpy(TorchFunctionMode):
    """Records (module, head_dim, scale) of every scaled_dot_product_attention call."""

    def __init__(self, stack: list[str]) -> None:
        super().__init__()
        self.stack, self.calls = stack, []  # type: ignore[var-annotated]

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q = args[0]
            scale = kwargs.get("scale", args[6] if len(args) > 6 else None)
            d = int(q.shape[-1])
            self.calls.append((self.stack[-1] if self.stack else "", d,
                               float(scale) if scale is not None else d**-0.5))
        return func(*args, **kwargs)


def default_input(model: nn.Module) -> Any:
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            return torch.randint(0, m.num_embeddings, (4, 8), generator=torch.Generator().manual_seed(0))
        if isinstance(m, nn.Linear):
            return torch.randn(16, m.in_features, generator=torch.Generator().manual_seed(0))
    raise ValueError("cannot make a probe input (no Embedding or Linear found); pass example_input")


def first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return getattr(out, "logits", None)


def output_ratio(y: torch.Tensor, ref: torch.Tensor) -> float:
    den = float((ref.double() * ref.double()).sum())
    return float((y.double() * ref.double()).sum()) / den if den > 0 else float("nan")


def probe_forward(model: nn.Module, x: Any,
           readouts: set[str]) -> tuple[dict[tuple[str, str], float], list[tuple[str, int, float]]]:
    """Forward multipliers of Linear/Embedding modules and the attention calls."""
    raw: dict[str, Any] = {}
    final: dict[str, torch.Tensor] = {}
    stack: list[str] = []
    handles = []
    for name, m in model.named_modules():
        def push(_m: nn.Module, _a: Any, name: str = name) -> None:
            stack.append(name)

        def pop(_m: nn.Module, _a: Any, _o: Any) -> None:
            if stack:
                stack.pop()
        handles += [m.register_forward_pre_hook(push, prepend=True), m.register_forward_hook(pop)]
        if isinstance(m, (nn.Linear, nn.Embedding)):
            def grab_in(_m: nn.Module, args: tuple[Any, ...], name: str = name) -> None:
                raw.setdefault(name, args[0].detach() if isinstance(args[0], torch.Tensor) else args[0])

            def grab_out(_m: nn.Module, _a: Any, out: Any, name: str = name) -> None:
                if isinstance(out, torch.Tensor):
                    final.setdefault(name, out.detach())
            handles += [m.register_forward_pre_hook(grab_in, prepend=True), m.register_forward_hook(grab_out)]
    spy = SDPASpy(stack)
    try:
        with torch.no_grad(), spy:
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    logits = first_tensor(out)
    mults: dict[tuple[str, str], float] = {}
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, y in final.items():
            m = modules[name]
            post = 1.0
            if name in readouts and logits is not None and logits.shape == y.shape:
                post = output_ratio(logits.detach(), y)  # a multiplier applied after the readout
            if isinstance(m, nn.Embedding):
                mults[(name, "weight")] = output_ratio(y, F.embedding(raw[name], m.weight)) * post
                continue
            # y = a·(W x) + c·b: a multiplier on the input scales W x but not the bias.
            wx = F.linear(raw[name], m.weight).double().reshape(-1)
            if m.bias is None:
                mults[(name, "weight")] = output_ratio(y.reshape(-1), wx) * post
                continue
            bias = m.bias.double().expand(y.shape).reshape(-1)
            a = torch.stack([wx, bias], dim=1)
            coef = torch.linalg.lstsq(a, y.double().reshape(-1, 1)).solution.reshape(-1)
            mults[(name, "weight")] = float(coef[0]) * post
            mults[(name, "bias")] = float(coef[1]) * post
    # A module that declares its scale (``softmax_scale`` beside ``head_dim``) may fold it
    # into q and call SDPA with scale=1 (our GPT does, so one call serves K fused members):
    # there the declaration is the truth, the SDPA call's scale is not.
    declared = {n: (int(m.head_dim), float(m.softmax_scale)) for n, m in model.named_modules()
                if hasattr(m, "softmax_scale") and hasattr(m, "head_dim")
                and isinstance(m.softmax_scale, (int, float))}
    calls = [(n, *declared[n]) if n in declared else (n, d, sc) for n, d, sc in spy.calls]
    seen = {n for n, _, _ in calls}
    calls += [(n, d, sc) for n, (d, sc) in declared.items() if n not in seen]  # attention without SDPA
    return mults, calls
