"""Width-dependent multipliers hidden in a model's forward, found by probing it.

μP's rules act on parameters and on the modules that own them. A scalar that the forward
multiplies in *between* modules is invisible to them: Gemma and Gemma2 scale the token
embeddings by sqrt(hidden_size) (older ``transformers``: in ``GemmaModel.forward``, between
modules; newer: in the forward of a ``...ScaledWordEmbedding``, an ``nn.Embedding``
subclass), so the first block's input grows like width^(1/2) under any rule table, and
without a probe only a coordinate check shows it (log2 slope 0.5).

Two probes, one forward each per width. Inside a module: the audit's probe
(:func:`mutransfer.parametrize.probe.probe_forward`) measures every Linear/Embedding's output over the plain
``W x (+ b)`` / lookup of its own input, its forward multiplier. Between modules: one
forward of a tiny input records every module's input (its first tensor argument) and
output in call order. A consumer's input that is an exact multiple of an
earlier module's output, x = c · y (least squares c = <x, y> / <y, y>, relative residual
below ``RESIDUAL_TOL``), was produced from it by a scalar multiplication; doing this at
two widths w0 < w1 gives c ∝ width^e with e = log(c1 / c0) / log(w1 / w0). e = 0 is a
constant (harmless: it does not change with width); e ≠ 0 is a width-dependent internal.
Only the first module that receives a tensor is its consumer (a block and its first
norm share one input), and the model's own output counts as a consumer (``<output>``),
so a scale applied after the last module is seen too.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from mutransfer.models.gpt import GPT
from mutransfer.models.mlp import MLP
from mutransfer.parametrize.layers import call_builder
from mutransfer.parametrize.probe import default_input, first_tensor, probe_forward
from mutransfer.parametrize.specs import Builder

RESIDUAL_TOL = 1e-4
"""Largest ||x - c y|| / ||x|| for x to count as c times y (float32 rounding is ~1e-7)."""
EXPONENT_TOL = 0.05
"""Smallest |exponent| reported: a constant factor measures 0 to rounding."""
OUTPUT = "<output>"
"""The consumer name of the model's own output."""


@dataclass(frozen=True)
class InternalMultiplier:
    """A scalar the forward applies between two modules, growing or shrinking with width."""

    producer: str
    """The module whose output is scaled."""
    consumer: str | None
    """The first module whose input is the scaled tensor (``<output>``: the model's output);
    None when the producer's own forward applies it (its output over ``W x`` or the lookup)."""
    factor: float
    """The scalar at the smaller probed width."""
    exponent: float
    """Measured: factor ∝ width^exponent (Gemma's sqrt(hidden_size): 0.5)."""

    def describe(self) -> str:
        where = ("inside its forward" if self.consumer is None else f"before {self.consumer!r}")
        return (f"the output of {self.producer!r} is multiplied by {self.factor:.4g} ∝ width^"
                f"{self.exponent:.3g} {where}")


def _float_input(args: Any, kwargs: Any = None) -> torch.Tensor | None:
    t = first_tensor(args)
    if t is None and kwargs:
        t = next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
    return t if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1 else None


def trace_factors(model: nn.Module, x: Any) -> dict[tuple[str, str | None], float]:
    """One forward of ``model(x)``: {(producer, consumer): c} for every consumer input that
    is an exact multiple c of an earlier module's output (c = 1 included)."""
    events: list[tuple[str, str, torch.Tensor]] = []  # (kind "in" | "out", module, tensor)
    handles = []
    for name, module in model.named_modules():
        def pre(_m: nn.Module, args: Any, kwargs: Any, name: str = name) -> None:
            t = _float_input(args, kwargs)
            if t is not None and name:
                events.append(("in", name, t.detach()))

        def post(_m: nn.Module, _a: Any, out: Any, name: str = name) -> None:
            t = _float_input(out)
            if t is not None:
                events.append(("out", name or OUTPUT, t.detach()))
        handles += [module.register_forward_pre_hook(pre, with_kwargs=True),
                    module.register_forward_hook(post)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    out: dict[tuple[str, str | None], float] = {}
    seen: list[torch.Tensor] = []  # tensors already given to a consumer
    for i, (kind, consumer, x_in) in enumerate(events):
        if kind == "out" and consumer != OUTPUT:
            continue
        if any(s is x_in or (s.shape == x_in.shape and torch.equal(s, x_in)) for s in seen):
            continue
        seen.append(x_in)
        xd = x_in.double().reshape(-1)
        for kind2, producer, y in reversed(events[:i]):
            if kind2 != "out" or y.shape != x_in.shape or producer == OUTPUT:
                continue
            yd = y.double().reshape(-1)
            den = float(yd @ yd)
            if den == 0.0:
                continue
            c = float(xd @ yd) / den
            if float((xd - c * yd).norm()) <= RESIDUAL_TOL * float(xd.norm()) and c != 0.0:
                out[(producer, consumer)] = c
                break
    return out


def find_internal_multipliers(models: dict[int, nn.Module], x: Any,
                              tol: float = EXPONENT_TOL) -> list[InternalMultiplier]:
    """Width-dependent internals of a model built at two widths ({width: model}), probed
    on the same input ``x``: every (producer, consumer) factor whose exponent of width
    exceeds ``tol`` in size."""
    if len(models) != 2:
        raise ValueError(f"need the model at exactly 2 widths, got {sorted(models)}")
    (w0, m0), (w1, m1) = sorted(models.items())
    f0, f1 = trace_factors(m0, x), trace_factors(m1, x)
    # inside Linear/Embedding forwards: the audit's forward multipliers, keyed (module, None)
    for f, m in ((f0, m0), (f1, m1)):
        f.update({(mname, None): c for (mname, what), c in probe_forward(m, x, set())[0].items()
                  if what == "weight" and math.isfinite(c)})
    found = []
    for key in f0.keys() & f1.keys():
        c0, c1 = f0[key], f1[key]
        if c0 * c1 <= 0:
            continue
        e = math.log(c1 / c0) / math.log(w1 / w0)
        if abs(e) > tol:
            found.append(InternalMultiplier(key[0], key[1], c0, e))
    return sorted(found, key=lambda m: (m.producer, m.consumer or ""))


# builder -> {(base width, delta width, depth): its width-dependent internals}
_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[Any, ...]]] = (
    weakref.WeakKeyDictionary())


def real_models(builder: Builder, base_width: int, delta_width: int,
                 depth: int | None) -> dict[int, nn.Module]:
    """The model built for real at the base and delta widths, on CPU, from seed 0,
    the caller's RNG untouched (real tensors even when the caller builds on the meta
    device: a builder that itself makes a Parametrization, as `audit` entry points do)."""
    with torch.random.fork_rng(devices=[]), torch.device("cpu"):
        torch.manual_seed(0)
        return {w: call_builder(builder, w, depth) for w in (base_width, delta_width)}


def probe_internals(builder: Builder, models: dict[int, nn.Module],
                    depth: int | None) -> tuple[InternalMultiplier, ...]:
    """:func:`find_internal_multipliers` on the two real models and
    the audit's default probe input (token ids, or features for a Linear-first model),
    cached per builder and widths. A model whose forward does not take that input is
    not probed (its internals stay unknown, as before the probe existed)."""
    if isinstance(models[min(models)], (GPT, MLP)):
        # Our own proxies apply no scalar outside their parameters (every multiplier is
        # a Parametrization hook), so there is nothing to find; probing them only risks
        # reading float noise as a width law.
        return ()
    key = (*sorted(models), depth)
    try:
        cache = _CACHE.setdefault(builder, {})
    except TypeError:  # a builder that takes no weak reference: no cache
        cache = {}
    if key not in cache:
        try:
            with torch.random.fork_rng(devices=[]):
                for model in models.values():
                    model.eval()  # no dropout: a dropped entry is no scalar multiple
                first = models[min(models)]
                cache[key] = tuple(find_internal_multipliers(models, default_input(first)))
        except Exception:  # noqa: BLE001 - the probe is best effort: the user's forward may need more
            cache[key] = ()
    return cache[key]


__all__ = ["EXPONENT_TOL", "OUTPUT", "RESIDUAL_TOL", "InternalMultiplier", "find_internal_multipliers",
           "probe_internals", "real_models", "trace_factors"]
