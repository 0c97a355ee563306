"""Recognising a model's layers without being told: how a module uses its ``weight``
(Linear-like, transposed, embedding), which modules are attention and where their softmax
scale lives, mup's readouts; the forward-multiplier hooks; and calling a builder of width
(and depth)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn as nn

from mutransfer.parametrize.specs import Builder


@dataclass(frozen=True)
class Hook:
    module: str
    kind: Literal["pre", "post"]
    scale: float


def scale_first(output: Any, scale: float, module: nn.Module | None = None) -> Any:
    """``output`` with its main tensor × ``scale``: a tensor itself; the first item of a
    tuple or list (Hugging Face attention modules return ``(attn_output, attn_weights)``:
    the weights are left alone); the first field of a ``transformers`` ``ModelOutput`` or
    of a dataclass (``last_hidden_state``), the rest unchanged. Anything else is a
    TypeError naming the module, never a silent no-op."""
    if isinstance(output, torch.Tensor):
        return output * scale
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        rest = tuple(output[1:])
        if isinstance(output, list):
            return [output[0] * scale, *rest]
        if hasattr(output, "_fields"):  # a NamedTuple keeps its type
            return type(output)(output[0] * scale, *rest)
        return (output[0] * scale, *rest)
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        # transformers' ModelOutput is a dataclass too; its first field set is the main one
        first = next((f.name for f in dataclasses.fields(output)
                      if isinstance(getattr(output, f.name), torch.Tensor)), None)
        if first is not None:
            if isinstance(output, Mapping):  # ModelOutput: rebuild with the same keys set
                return type(output)(**{k: (v * scale if k == first else v) for k, v in output.items()})
            return dataclasses.replace(output, **{first: getattr(output, first) * scale})
    what = type(module).__name__ if module is not None else "a module"
    raise TypeError(f"cannot scale the output of {what}: it returned {type(output).__name__}, not a tensor, "
                    "a tuple led by a tensor, or a dataclass/ModelOutput holding one")


def scale_output(scale: float) -> Callable[..., Any]:
    """A forward hook multiplying a module's output (its main tensor: :func:`scale_first`)."""
    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        return scale_first(output, scale, module)

    return hook


def scale_input(scale: float) -> Callable[..., Any]:
    def hook(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (args[0] * scale, *args[1:])

    return hook


def is_mup_readout(module: nn.Module) -> bool:
    return any(c.__name__ in ("MuReadout", "MuSharedReadout") for c in type(module).__mro__)


def layer_kind(module: nn.Module) -> str | None:
    """How a module uses its ``weight``, when that is known; None for a container that
    holds raw parameters (a positional table, a ``cls`` token, an expert bank).

    ``linear``: ``F.linear(x, weight)``, weight (out, in, ...): torch Linear and convs,
    mup readouts, and Hugging Face MoE routers (``...TopKRouter``: ``F.linear(hidden,
    self.weight)`` with weight (experts, hidden)). ``linear_t``: weight (in, out), Hugging
    Face's GPT-2 ``Conv1D`` (``x @ weight + bias``). ``embedding``: a lookup table (num, dim).
    Only these get forward-multiplier hooks: scaling the input or output of any other
    module would scale whatever else flows through it.
    """
    names = {c.__name__ for c in type(module).__mro__}
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return "embedding"
    if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)) or is_mup_readout(module):
        return "linear"
    if "Conv1D" in names and hasattr(module, "nf"):
        return "linear_t"
    if type(module).__name__.endswith("TopKRouter") and getattr(module, "weight", None) is not None \
            and module.weight.dim() == 2:
        return "linear"
    return None


# Attention modules expose their softmax scale as a float attribute: ours (and mup's
# examples) as ``softmax_scale``, Hugging Face attention modules as ``scaling`` (passed to
# every attention kernel, eager, sdpa and flash alike).
ATTENTION_SCALE_ATTRS: tuple[str, ...] = ("softmax_scale", "scaling")


def head_dim(module: nn.Module | None) -> int | None:
    """The per-head dimension an attention module declares: ``head_dim``, or ``head_size``
    (Hugging Face's GPT-NeoX)."""
    hd = getattr(module, "head_dim", getattr(module, "head_size", None))
    return int(hd) if isinstance(hd, int) else None


def attention_scale_attr(module: nn.Module) -> str | None:
    if head_dim(module) is None:
        return None
    return next((a for a in ATTENTION_SCALE_ATTRS
                 if isinstance(getattr(module, a, None), (int, float))), None)


def looks_like_attention(name: str, module: nn.Module) -> bool:
    leaf = name.rpartition(".")[2]
    return (isinstance(module, nn.MultiheadAttention) or "Attention" in type(module).__name__
            or leaf in ("attn", "self_attn", "attention", "cross_attn"))


def call_builder(builder: Builder, width: int, depth: int | None) -> nn.Module:
    if depth is None:
        return builder(width)
    return builder(width, depth)


def accepts_depth(builder: Builder) -> bool:
    try:
        params = list(inspect.signature(builder).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def owning_modules(model: nn.Module) -> dict[str, list[tuple[str, nn.Module]]]:
    """Every module that holds each parameter (several when weights are tied)."""
    by_id: dict[int, list[tuple[str, nn.Module]]] = {}
    for mname, module in model.named_modules():
        for _, p in module.named_parameters(recurse=False):
            by_id.setdefault(id(p), []).append((mname, module))
    return {n: by_id[id(p)] for n, p in model.named_parameters()}


def install_forward_multipliers(model: nn.Module, hooks: Sequence[Mapping[str, Any]],
                                attention: Mapping[str, float]) -> None:
    """Register scaling hooks and set attention scales on ``model``."""
    modules = dict(model.named_modules())
    for h in list(hooks) + [{"module": a} for a in attention]:
        if h["module"] not in modules:
            raise ValueError(f"model has no module {h['module']!r} to put a multiplier on")
    for h in hooks:
        mod, scale = modules[h["module"]], float(h["scale"])
        if h["kind"] == "pre":
            mod.register_forward_pre_hook(scale_input(scale))
        else:
            mod.register_forward_hook(scale_output(scale))
    for aname, scale in attention.items():
        attr = attention_scale_attr(modules[aname]) or "softmax_scale"
        # The architecture's own scale, kept so mutransfer.parametrize.fold can restore it.
        modules[aname]._mutransfer_plain_scale = float(getattr(modules[aname], attr))
        setattr(modules[aname], attr, float(scale))
    # A marker (a plain tuple of strings) that also survives deepcopy, so a second
    # apply is refused instead of stacking hooks.
    model._mutransfer_hooks = tuple(f"{h['kind']}:{h['module']}:{float(h['scale']):g}" for h in hooks)


def swap_mup_readouts(model: nn.Module) -> None:
    """Replace mup's MuReadout modules by plain Linear layers holding the same
    parameters (their multiplier becomes one of our hooks)."""
    for mname, module in list(model.named_modules()):
        if not is_mup_readout(module):
            continue
        lin = nn.Linear(module.in_features, module.out_features,
                        bias=module.bias is not None, device="meta")
        lin.weight = module.weight
        if module.bias is not None:
            lin.bias = module.bias
        parent_name, _, child = mname.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, lin)
