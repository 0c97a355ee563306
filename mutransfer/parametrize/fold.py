"""Fold the forward multipliers into the weights: a plain model for tools that know
nothing of μP (fine-tuning, inference servers, converters).

A parametrized model computes with three kinds of forward multipliers (see
:mod:`mutransfer.parametrize.parametrization`): scaling hooks on a layer's input or output, scaling
hooks on a residual branch's output, and an attention softmax scale other than the
architecture's own. Each is linear, so each folds exactly into a weight:

- a pre-hook ``s`` on a layer ``y = W x + b``: ``W <- s W`` (the bias is untouched);
- a post-hook ``s`` on a layer: ``W <- s W`` and ``b <- s b``;
- a post-hook on a container (a residual branch): into the layer that produced its
  output, found by a traced forward in which the container returns that very tensor;
- an attention scale ``s`` where the plain module uses ``s0``: ``c = s / s0`` goes into
  the query (its norm's gain when the query is normalized, else the query projection's
  weight and bias; GPT-2's fused ``c_attn``: its first third), then the scale is reset.

A readout tied to the embedding cannot take a factor the embedding must not see, so it is
untied (both tensors are then written). The plain model's logits equal the parametrized
model's to float rounding (the test asserts 1e-5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from mutransfer.parametrize.layers import attention_scale_attr, layer_kind

PLAIN_FORMAT = "mutransfer.plain/v1"
"""Tag of ``mutransfer fold``'s file: ``{"format", "model": state_dict, "model_config":
GPTConfig fields, "folded": report}``, read with ``torch.load(weights_only=True)``."""


def _hooks_of(model: nn.Module) -> list[tuple[str, str, float]]:
    marker = getattr(model, "_mutransfer_hooks", None)
    if marker is None:
        raise ValueError("this model carries no mutransfer parametrization: nothing to fold")
    out = []
    for entry in marker:
        kind, _, rest = entry.partition(":")
        module, _, scale = rest.rpartition(":")
        out.append((kind, module, float(scale)))
    return out


def _scale_layer(module: nn.Module, scale: float, *, bias: bool, rows: slice | None = None) -> None:
    kind = layer_kind(module)
    with torch.no_grad():
        w = module.weight
        if rows is None:
            w.mul_(scale)
        elif kind == "linear_t":  # Conv1D: (in, out), output features are columns
            w[:, rows].mul_(scale)
        else:
            w[rows].mul_(scale)
        b = getattr(module, "bias", None)
        if bias and b is not None:
            (b if rows is None else b[rows]).mul_(scale)


def _untie(model: nn.Module, mname: str) -> str | None:
    """Give ``mname`` its own copy of a weight it shares; returns the shared name."""
    module = model.get_submodule(mname)
    shared = [n for n, m in model.named_modules() if n != mname
              and any(p is module.weight for p in m.parameters(recurse=False))]
    if not shared:
        return None
    module.weight = nn.Parameter(module.weight.detach().clone())
    return shared[0]


def _producers(model: nn.Module, containers: list[str], run: Callable[[nn.Module], Any]) -> dict[str, str]:
    """For each container, the layer inside it whose output the container returns
    (the very tensor, after that layer's own hooks), found by one traced forward."""
    modules = dict(model.named_modules())
    last_out: dict[int, str] = {}
    found: dict[str, str] = {}
    handles = []
    for name, m in modules.items():
        if layer_kind(m) is not None and any(name.startswith(c + ".") for c in containers):
            def leaf_hook(_m: nn.Module, _a: Any, out: Any, name: str = name) -> None:
                if isinstance(out, torch.Tensor):
                    last_out[id(out)] = name
            handles.append(m.register_forward_hook(leaf_hook))

    for c in containers:
        def container_hook(_m: nn.Module, _a: Any, out: Any, c: str = c) -> None:
            t = out[0] if isinstance(out, tuple) else out
            leaf = last_out.get(id(t))
            if leaf is not None and leaf.startswith(c + "."):
                found[c] = leaf
        handles.append(modules[c].register_forward_hook(container_hook, prepend=True))
    try:
        with torch.no_grad():
            run(model)
    finally:
        for h in handles:
            h.remove()
    return found


def _query_target(attn: nn.Module) -> tuple[nn.Module, slice | None, str]:
    norm = getattr(attn, "q_norm", None)
    if isinstance(norm, nn.Module) and isinstance(getattr(norm, "weight", None), torch.Tensor):
        return norm, None, "q_norm"
    for name in ("q_proj", "c_q", "query"):
        m = getattr(attn, name, None)
        if isinstance(m, nn.Module) and layer_kind(m) is not None:
            return m, None, name
    fused = getattr(attn, "c_attn", None)
    if isinstance(fused, nn.Module) and layer_kind(fused) is not None and hasattr(attn, "embed_dim"):
        return fused, slice(0, int(attn.embed_dim)), "c_attn"
    raise ValueError(f"cannot find the query projection of {type(attn).__name__} to fold its "
                     f"attention scale into (looked for q_norm, q_proj, c_q, query, c_attn)")


def fold(model: nn.Module, run: Callable[[nn.Module], Any]) -> dict[str, Any]:
    """Fold ``model``'s forward multipliers into its weights, in place, and remove them.

    ``run(model)`` does one forward pass on any example input; it is used to find which
    layer produces a residual branch's output. Returns a report: ``{"folded": [...],
    "untied": {readout: embedding}}``. Afterwards the model is a plain model: no hooks,
    its own attention scales, and weights that give the same outputs.
    """
    hooks = _hooks_of(model)
    modules = dict(model.named_modules())
    report: dict[str, Any] = {"folded": [], "untied": {}}
    containers = [m for _, m, _ in hooks if layer_kind(modules[m]) is None]
    producers = _producers(model, containers, run) if containers else {}
    # Attention first: the scale is read before any weight is touched.
    for aname, attn in modules.items():
        attr = attention_scale_attr(attn)
        plain = getattr(attn, "_mutransfer_plain_scale", None)
        if attr is None or plain is None:
            continue
        c = float(getattr(attn, attr)) / float(plain)
        if abs(c - 1.0) > 1e-12:
            target, rows, where = _query_target(attn)
            if where == "q_norm":  # the gain multiplies q after the norm
                with torch.no_grad():
                    target.weight.mul_(c)
            else:
                _scale_layer(target, c, bias=True, rows=rows)
            report["folded"].append({"module": aname, "attention": c, "into": f"{aname}.{where}"})
        setattr(attn, attr, float(plain))
        del attn._mutransfer_plain_scale
    plan = []
    for kind, mname, scale in hooks:
        module, into = modules[mname], mname
        if layer_kind(module) is None:
            if kind != "post" or mname not in producers:
                raise ValueError(f"cannot fold the {kind}-hook x{scale:g} on {mname!r} "
                                 f"({type(module).__name__}): no layer inside it produces its output")
            into = producers[mname]
        if layer_kind(modules[into]) == "embedding" and kind == "pre":
            raise ValueError(f"cannot fold a pre-hook on embedding {mname!r}: its input is indices")
        plan.append((kind, mname, scale, into))
    # Untie before scaling, so each copy takes only its own factor.
    for into in dict.fromkeys(p[3] for p in plan):
        shared = _untie(model, into)
        if shared is not None:
            report["untied"][into] = shared
    for kind, mname, scale, into in plan:
        _scale_layer(modules[into], scale, bias=(kind == "post"))
        report["folded"].append({"module": mname, "hook": kind, "scale": scale, "into": into})
    _remove_mutransfer_hooks(model)
    return report


def _remove_mutransfer_hooks(model: nn.Module) -> None:
    """Drop exactly the hooks the parametrization registered (by their function name)."""
    for m in model.modules():
        for store in (m._forward_hooks, m._forward_pre_hooks):
            for key in [k for k, fn in store.items() if getattr(fn, "__qualname__", "").startswith(
                    ("scale_output.", "scale_input."))]:
                del store[key]
    del model._mutransfer_hooks


__all__ = ["PLAIN_FORMAT", "fold"]
