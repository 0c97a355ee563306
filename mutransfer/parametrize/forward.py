"""Where a parametrization's forward multipliers go: which module uses a parameter as
the input layer or the readout (a tied embedding is both), the hooks that scale the
embedding's output and the readout's input, the residual-branch scale, the attention
softmax scales, a width-dependent internal scalar divided out of an input embedding, and
the errors and warnings for a multiplier that has no layer to go on. A mixin of
:class:`mutransfer.parametrize.parametrization.Parametrization`, which sets the attributes below."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from typing import Any

import torch.nn as nn

from mutransfer.parametrize.internals import InternalMultiplier
from mutransfer.parametrize.layers import (
    ATTENTION_SCALE_ATTRS,
    Hook,
    attention_scale_attr,
    head_dim,
    install_forward_multipliers,
    layer_kind,
    looks_like_attention,
)
from mutransfer.parametrize.rules import role_rule
from mutransfer.parametrize.specs import Multipliers, ParamSpec


class ForwardMultipliers:
    """The forward side of a :class:`~mutransfer.parametrize.parametrization.Parametrization`: hooks,
    attention scales and their checks, from the attributes the parametrization sets."""

    kind: str
    width: int
    base_width: int
    multipliers: Multipliers
    specs: dict[str, ParamSpec]
    attention_modules: tuple[str, ...]
    branch_modules: tuple[str, ...]
    internal_multipliers: tuple[InternalMultiplier, ...]
    _modules: dict[str, nn.Module]
    _params_of_module: dict[str, list[str]]
    _width_dims: dict[str, tuple[int, ...]]
    _readout_mults: dict[str, float]
    _internal_comp: dict[str, float]
    _base_head_dims: dict[str, int]

    # Defined by the parametrization: the width factor of a dim, the residual-branch
    # scale and the softmax scale at a head dim.
    def _mult(self, name: str, dim: int | None) -> float:
        raise NotImplementedError

    @property
    def residual_scale(self) -> float:
        raise NotImplementedError

    def attention_scale(self, head_dim: int, base_head_dim: int | None = None) -> float:
        raise NotImplementedError

    def _usage(self, mname: str) -> tuple[str | None, float]:
        """How a module uses its parameters: ("input" | "output" | None, readout m_in).

        Decided per module, not per parameter, because a tied embedding matrix is one
        parameter (role ``input``) used by two modules: the embedding reads it as an
        input layer, the head Linear as the readout.
        """
        names = self._params_of_module.get(mname, [])
        if not names:
            return None, 1.0
        roles = {self.specs[n].role for n in names}
        module = self._modules[mname]
        weight = f"{mname}.weight" if mname else "weight"
        kind = layer_kind(module)
        if kind is None:
            # Not a layer: its input or output is not the parameter's product (the root
            # model holding a positional table, a block holding a cls token), so no hook.
            return ("raw" if roles & {"input", "output"} else None), 1.0
        if kind == "embedding":
            return ("input" if "input" in roles else None), 1.0
        if roles & {"input", "output"}:
            wname = weight if weight in self.specs else names[0]
            wd = self._width_dims[wname]
            fan_in, fan_out = (0, 1) if kind == "linear_t" else (1, 0)
            if fan_in in wd and fan_out not in wd:
                return "output", self._mult(wname, fan_in)
            return "input", 1.0
        return None, 1.0

    def _hooks(self) -> list[Hook]:
        hooks: list[Hook] = []
        m = self.multipliers
        for mname in self._params_of_module:
            usage, m_in = self._usage(mname)
            if usage == "raw":
                self._check_raw_multipliers(mname)
            elif usage == "output":
                scale = m.output * self._readout_mults.get(mname, 1.0)
                scale *= role_rule(self.kind, "output").multiplier(m_in, 1.0)
                if scale != 1.0:
                    hooks.append(Hook(mname, "pre", scale))
            elif usage == "input" and m.input * self._internal_comp.get(mname, 1.0) != 1.0:
                hooks.append(Hook(mname, "post", m.input * self._internal_comp.get(mname, 1.0)))
        if self.residual_scale != 1.0:
            hooks.extend(Hook(b, "post", self.residual_scale) for b in self.branch_modules)
        return hooks

    @property
    def readout_modules(self) -> tuple[str, ...]:
        """Modules that use a parameter as the readout (the μP output multiplier's home)."""
        return tuple(m for m in self._params_of_module if self._usage(m)[0] == "output")

    def _check_raw_multipliers(self, mname: str) -> None:
        """A raw input/output parameter has no layer whose input or output is its own
        product, so a forward multiplier it needs cannot be placed: one clear error."""
        module = self._modules[mname]
        where = f"module {mname!r}" if mname else "the root module"
        for pname in self._params_of_module[mname]:
            role = self.specs[pname].role
            needs = (role == "output" and (self.kind != "sp" or self.multipliers.output != 1.0)) or (
                role == "input" and self.multipliers.input != 1.0)
            if needs:
                raise ValueError(
                    f"parameter {pname} has role {role!r} but is a raw parameter of {where} "
                    f"({type(module).__name__}), not the weight of a Linear/Embedding/conv: its "
                    f"{role} multiplier has no layer to go on (a hook there would scale everything "
                    f"passing through {where}); give it the role 'vector', or make it a layer's weight")

    def _warn_unscalable_attention(self, target: nn.Module, base_modules: Mapping[str, nn.Module]) -> None:
        """Attention modules with no settable softmax scale keep 1/sqrt(d_head): harmless
        when the head dim is fixed in width and the attention multiplier is 1 (μP's scale
        is then SP's), wrong otherwise, so say so."""
        if self.kind == "sp":
            return
        for name, module in target.named_modules():
            if name in self.attention_modules or not looks_like_attention(name, module):
                continue
            hd, base = head_dim(module), head_dim(base_modules.get(name))
            if hd is not None and hd == base and self.multipliers.attention == 1.0:
                continue
            warnings.warn(
                f"attention module {name!r} ({type(module).__name__}) exposes no softmax scale "
                f"(an attribute {' or '.join(ATTENTION_SCALE_ATTRS)} beside head_dim), so its "
                f"1/sqrt(d_head) stays: the {self.kind} attention scale 1/d_head and the attention "
                f"multiplier are NOT applied" + (f" (head dim {base} -> {hd})" if hd != base else ""),
                UserWarning, stacklevel=3)

    def _absorb_internals(self) -> None:
        """A width-dependent scalar on an input embedding's output (Gemma's
        sqrt(hidden_size)) is compensated exactly: the embedding's output is multiplied by
        m^-e (m = width / base_width, e the measured exponent rounded to 1/2), so at the
        base width the model is untouched and the product no longer grows. Any other is
        reported: a warning that names the module and the exponent."""
        m = self.width / self.base_width
        for im in self.internal_multipliers:
            module = self._modules.get(im.producer)
            e = round(2 * im.exponent) / 2
            roles = {self.specs[p].role for p in self._params_of_module.get(im.producer, [])}
            if (module is not None and layer_kind(module) == "embedding" and "input" in roles
                    and abs(im.exponent - e) < 0.02):
                self._internal_comp[im.producer] = self._internal_comp.get(im.producer, 1.0) * m ** -e
                continue
            warnings.warn(
                f"{im.describe()}: a width-dependent multiplier the {self.kind} rules cannot see, "
                f"left as it is; activations downstream scale like width^{im.exponent:.2g} "
                f"(the coordinate check will show it). Move it into a module the rules cover "
                f"or divide it out", UserWarning, stacklevel=3)

    def forward_multipliers(self) -> dict[str, Any]:
        """The forward side as plain data: hooks ``{module, kind: pre|post, scale}`` and
        attention softmax scales ``{module: scale}`` (what a transfer card stores)."""
        return {
            "hooks": [dataclasses.asdict(h) for h in self._hooks()],
            "attention": {a: self.attention_scale(int(head_dim(self._modules[a]) or 0),
                                                  self._base_head_dims[a])
                          * self._attention_extra(a) for a in self.attention_modules},
        }

    def _attention_extra(self, aname: str) -> float:
        """A factor a module applies on top of 1/sqrt(d_head) (GPT-2's
        ``scale_attn_by_inverse_layer_idx``), kept when the scale is replaced."""
        module = self._modules[aname]
        if attention_scale_attr(module) != "scaling":
            return 1.0
        extra = float(module.scaling) * math.sqrt(int(head_dim(module) or 0))
        return 1.0 if abs(extra - 1.0) < 1e-9 else extra

    #: Register scaling hooks and set attention scales on a model
    #: (:func:`mutransfer.parametrize.layers.install_forward_multipliers`).
    install_forward_multipliers = staticmethod(install_forward_multipliers)


__all__ = ["ForwardMultipliers"]
