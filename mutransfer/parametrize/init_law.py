"""The model's own init law and the μP init built on it: std ∝ fan_in^e measured from two
real builds (torch's defaults: e = -1/2; Hugging Face's one ``initializer_range``: e = 0),
and the per-parameter init rescaled so the result is the same μP init whatever e is."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import torch.nn as nn

from mutransfer.parametrize.rules import READOUT_INIT
from mutransfer.parametrize.specs import ParamSpec


def measure_init_exponents(specs: Mapping[str, ParamSpec], width_dims: Mapping[str, tuple[int, ...]],
                           fan_in_dim: Callable[[str, str], int | None], base_model: nn.Module,
                           delta_model: nn.Module) -> dict[str, float]:
    """The model's own init law, per weight: std ∝ fan_in^e, e measured from two real
    builds (base and delta width, a fixed seed, the caller's RNG untouched).

    torch's defaults give e = -1/2 (the law μP's "model" init assumes); Hugging Face
    initializes every matrix with one std (``initializer_range``), e = 0. Rounded to
    the nearest 1/2: the std of a >= 256-element tensor is known to ~5%, far inside.
    A smaller tensor (a tiny MoE router, 4 experts × 32) takes the law every measured
    tensor of its role shares, if they agree: left at torch's, a Hugging Face router
    under the fan_in readout got logits growing as width^1/2.
    """
    out: dict[str, float] = {}
    small: list[str] = []
    base, delta = dict(base_model.named_parameters()), dict(delta_model.named_parameters())
    for name, spec in specs.items():
        fi = fan_in_dim(name, spec.role)
        if spec.role not in ("hidden", "output") or fi is None or fi not in width_dims[name]:
            continue
        b, d = base[name].detach().float(), delta[name].detach().float()
        if min(b.numel(), d.numel()) < 256:
            small.append(name)
            continue
        sb, sd = float(b.std()), float(d.std())
        if not (sb > 0 and sd > 0):
            continue  # zero init: no law to read, and scaling zeros changes nothing
        ratio = d.shape[fi] / b.shape[fi]
        out[name] = round(2 * math.log(sd / sb) / math.log(ratio)) / 2
    for name in small:
        laws = {e for n, e in out.items() if specs[n].role == specs[name].role and n not in small}
        if len(laws) == 1 and float(base[name].detach().float().std()) > 0:
            out[name] = laws.pop()
    return out


def corrected_for_init_law(specs: Mapping[str, ParamSpec], init_exponents: Mapping[str, float],
                           readout_init: str) -> dict[str, ParamSpec]:
    """μP's "model" init assumes torch's fan-in law (e = -1/2): hidden weights keep
    it, the readout is multiplied by sqrt(m_in) to make it constant. For a model with
    another law (Hugging Face: e = 0) multiply by m_in^(-1/2 - e) (hidden) or
    m_in^(r - e) (readout; r = 0, or 1/2 under ``readout_init="fan_in"``) instead, so the
    result is the same μP init. Returns a new dict; ``specs`` is not touched."""
    specs = dict(specs)
    for name, e in init_exponents.items():
        s = specs[name]
        if e == -0.5 or s.init not in ("keep",) and not s.init.startswith("scale:"):
            continue
        law = READOUT_INIT[readout_init]
        target = -0.5 if s.role == "hidden" else (law.fan_in if law is not None else 0.0)
        factor = s.fan_in_mult ** (target - e)
        init = "keep" if factor == 1.0 else f"scale:{factor:.6g}"
        specs[name] = dataclasses.replace(
            s, init=init, rule=f"{s.rule}; model init std ∝ fan_in^{e:g}")
        # The bias rescale undid torch's fan-in law for the bias too; with another law
        # the bias keeps the model's own init.
        owner, _, leaf = name.rpartition(".")
        bias = f"{owner}.bias" if owner else "bias"
        if leaf == "weight" and bias in specs and specs[bias].init.startswith("scale:"):
            specs[bias] = dataclasses.replace(specs[bias], init="keep")
    return specs


__all__ = ["corrected_for_init_law", "measure_init_exponents"]
