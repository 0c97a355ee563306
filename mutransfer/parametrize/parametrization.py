"""Parametrizations: per-parameter init, learning-rate multipliers and forward multipliers.

Given a *builder of width* (``builder(width) -> nn.Module``, optionally
``builder(width, depth)``), a :class:`Parametrization` builds a base and a delta model on
the meta device, compares shapes to find which dimensions scale with width (as ``mup``
does), gives every parameter exactly one *role* (``input``: embeddings and first
layers; ``hidden``: width × width; ``output``: the readout; ``vector``: biases and norm
gains; ``scalar``: 0-d) and reads its numbers from the rule table in
:mod:`mutransfer.parametrize.rules` (``rules_table()`` prints it): powers of m_in (m_out), fan_in
(fan_out) over its base value, for the init std, the Adam and SGD LR multipliers and the
forward multiplier. That table is Tensor Programs V (Yang et al. 2022) Table 3 in the
form of ``mup``'s ``MuReadout`` and ``MuAdam``/``MuSGD``. The attention softmax scale
becomes 1/d_head instead of 1/sqrt(d_head) (TP-V §4).

``completep`` adds depth transfer (Dey et al. 2025, "Don't be lazy: CompleteP", Table 1):
residual branches × m_L^-alpha, Adam LR of parameters inside the branches × m_L^(alpha-1),
Adam epsilon × 1/m_in × m_L^-alpha for hidden matrices (m_L^-alpha for other branch
parameters), with m_L = depth / base_depth and alpha in {0.5, 1}.

``muon`` puts hidden 2-D matrices on ``torch.optim.Muon`` with its spectral scaling
sqrt(max(1, fan_out/fan_in)) (Jordan et al. 2024; ``adjust_lr_fn="original"``) and no
width LR multiplier; every other parameter follows the μP Adam rules.

Nothing is stored on tensors: per-parameter metadata lives in this object, forward
multipliers are module hooks and the attention scale is a float attribute of attention
modules, so deepcopy, ``state_dict`` round trips, ``torch.compile`` and DDP keep working.
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from mutransfer.parametrize.base_shapes import find_shapes
from mutransfer.parametrize.forward import ForwardMultipliers
from mutransfer.parametrize.groups import optimizer_settings as settings_of
from mutransfer.parametrize.init_law import corrected_for_init_law, measure_init_exponents
from mutransfer.parametrize.internals import InternalMultiplier, probe_internals, real_models
from mutransfer.parametrize.layers import (
    accepts_depth,
    attention_scale_attr,
    call_builder,
    head_dim,
    is_mup_readout,
    layer_kind,
    owning_modules,
    swap_mup_readouts,
)
from mutransfer.parametrize.rules import (
    ATTENTION_EXPONENT,
    COMPLETEP,
    DEFAULT_READOUT_INIT,
    MODEL_INIT_LAW,
    MUON,
    READOUT_INIT,
    Power,
    role_rule,
    rule_set,
)
from mutransfer.parametrize.specs import KINDS, OPTIMIZERS, Builder, Multipliers, ParamSpec, Rule

#: The norm a post-norm block applies to each branch's output before the residual add
#: (Hugging Face's names in Gemma 2/3 and OLMo 2): the residual multiplier goes there.
POST_NORMS: dict[str, str] = {"self_attn": "post_attention_layernorm", "attn": "post_attention_layernorm",
                              "mlp": "post_feedforward_layernorm"}


#: The layers that produce a branch's output inside the attention or MLP of a post-norm
#: block (Hugging Face's names).
BRANCH_OUTPUT_LAYERS: tuple[str, ...] = ("o_proj", "down_proj")


#: :meth:`Parametrization._measure_real`'s results, per builder (held weakly: an entry
#: lives as long as the builder that made it).
_MEASURED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[dict[str, float],
                                                                    tuple[InternalMultiplier, ...]]]] = (
    weakref.WeakKeyDictionary())


def post_normed(model: nn.Module) -> tuple[str, ...]:
    """The modules whose output scale a post-norm block divides out: in a block with a
    ``post_feedforward_layernorm`` (:data:`POST_NORMS`), its attention and MLP and the
    layer inside each that produces the branch's output (:data:`BRANCH_OUTPUT_LAYERS`).
    Their output reaches the residual stream only through the norm, so the model computes
    the same function at any scale of it (to the norm's eps)."""
    names = {n for n, _ in model.named_modules() if n}
    out = []
    for n in sorted(names):
        block, _, leaf = n.rpartition(".")
        if (leaf in POST_NORMS and f"{block}.post_feedforward_layernorm" in names
                and f"{block}.{POST_NORMS[leaf]}" in names):
            out.append(n)
            out += [f"{n}.{c}" for c in BRANCH_OUTPUT_LAYERS if f"{n}.{c}" in names]
    return tuple(out)


class Parametrization(ForwardMultipliers):
    """Width (and depth) transfer rules for any ``nn.Module`` built by ``builder``.

    Args:
        builder: ``builder(width)`` (or ``builder(width, depth)``) returning a fresh model.
        width: the width to build (the target or proxy width).
        base_width: the width at which the parametrization equals SP (hyperparameters
            tuned there are the ones that transfer). Must be <= width.
        kind: ``sp``, ``mup``, ``completep`` or ``muon``.
        optimizer: ``adam`` (Adam/AdamW rules) or ``sgd`` (SGD rules). ``muon`` kind
            uses Adam rules for the non-Muon parameters.
        depth, base_depth: for ``completep`` (and any builder that takes a depth).
        depth_alpha: CompleteP's alpha, 0.5 or 1.
        multipliers: tunable forward multipliers.
        rules: ordered ``(regex, role)`` overrides; the first match wins, before the
            roles inferred from shapes and module types.
        infer_roles: if False, every parameter must be matched by a user rule.
        readout_init: ``fan_in`` (default: SP's fan-in law for the effective readout, std ∝
            m_in^-1/2 after the 1/m_in multiplier), ``constant`` (mup's MuReadout: constant
            variance, effective std ∝ m_in^-1) or ``zero`` (:data:`mutransfer.parametrize.rules.READOUT_INIT`,
            :data:`~mutransfer.parametrize.rules.DEFAULT_READOUT_INIT`).
        init: ``model`` keeps the model's own init (assumed fan-in scaled, as torch's
            defaults are), ``normal`` re-initializes with ``init_std`` at base width.
        init_std: the base-width std for ``init="normal"``.
        residual_branches: regexes (re.fullmatch on module names) of the residual branch
            modules; default: modules named ``...attn``/``...mlp`` inside a ModuleList, or
            in a post-norm block the norms after them (:data:`POST_NORMS`).
        base_shapes: a mup .bsh path or mapping to use instead of building the base model.
    """

    def __init__(
        self,
        builder: Builder,
        *,
        width: int,
        base_width: int,
        kind: str = "mup",
        optimizer: str = "adam",
        depth: int | None = None,
        base_depth: int | None = None,
        depth_alpha: float = 1.0,
        multipliers: Multipliers | None = None,
        rules: Iterable[tuple[str, str] | Rule] = (),
        infer_roles: bool = True,
        readout_init: str = DEFAULT_READOUT_INIT,
        init: str = "model",
        init_std: float = 0.02,
        residual_branches: Sequence[str] | None = None,
        base_shapes: str | Path | Mapping[str, Sequence[int | None]] | None = None,
        delta_width: int | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown parametrization {kind!r}; choose from {', '.join(KINDS)}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer rule set {optimizer!r}; choose from {OPTIMIZERS}")
        if kind == "muon" and optimizer != "adam":
            raise ValueError(f"kind 'muon' pairs Muon with Adam rules, not optimizer {optimizer!r}")
        for label, w in (("width", width), ("base_width", base_width)):
            if not isinstance(w, int) or w < 1:
                raise ValueError(f"{label} must be a positive integer, got {w!r}")
        if base_width > width:
            raise ValueError(f"base width {base_width} is larger than the width {width}")
        if readout_init not in READOUT_INIT:
            raise ValueError(f"readout_init must be one of {', '.join(READOUT_INIT)}, got {readout_init!r}")
        if init not in ("model", "normal"):
            raise ValueError(f"init must be 'model' or 'normal', got {init!r}")
        if kind == "completep" and depth_alpha not in (0.5, 1.0):
            raise ValueError(f"depth_alpha must be 0.5 or 1, got {depth_alpha!r}")
        takes_depth = accepts_depth(builder)
        if depth is not None and not takes_depth:
            raise ValueError("depth was given but the builder takes only a width")
        if kind == "completep" and depth is None:
            raise ValueError("completep needs depth and base_depth (and a builder(width, depth))")
        if depth is not None:
            base_depth = depth if base_depth is None else base_depth
            if depth < 1 or base_depth < 1:
                raise ValueError(f"depth and base_depth must be >= 1, got {depth}, {base_depth}")

        self.builder = builder
        self.kind, self.optimizer = kind, optimizer
        self.width, self.base_width = width, base_width
        self.depth, self.base_depth = depth, base_depth
        self.depth_alpha = float(depth_alpha)
        self.multipliers = multipliers or Multipliers()
        self.readout_init, self.init, self.init_std = readout_init, init, float(init_std)
        self.user_rules = tuple(r if isinstance(r, Rule) else Rule(r[0], r[1]) for r in rules)
        self.infer_roles = infer_roles
        self.residual_branch_patterns = tuple(residual_branches) if residual_branches else None

        found = find_shapes(builder, width=width, base_width=base_width, depth=depth,
                            base_shapes=base_shapes, delta_width=delta_width)
        target, base_model, delta_w = found.target, found.base_model, found.delta_width
        shapes, base, width_dims = found.shapes, found.base, found.width_dims
        self._shapes, self._base_shapes, self._width_dims = shapes, base, width_dims
        self._modules = dict(target.named_modules())
        self._module_of = owning_modules(target)
        self._params_of_module: dict[str, list[str]] = {}
        for pname, owners in self._module_of.items():
            for mname, _ in owners:
                self._params_of_module.setdefault(mname, []).append(pname)
        # mup interop: a MuReadout's own output_mult and zero-init flag carry over.
        self._readout_mults = {n: float(getattr(m, "output_mult", 1.0))
                               for n, m in self._modules.items() if is_mup_readout(m)}
        self._zero_readouts = {n for n, m in self._modules.items()
                               if is_mup_readout(m) and getattr(m, "readout_zero_init", False)}
        self.branch_modules = self._find_residual_branches(target)
        self.attention_modules = tuple(
            n for n, m in target.named_modules() if attention_scale_attr(m) is not None)
        base_modules = dict(base_model.named_modules()) if base_model is not None else self._modules
        self._base_head_dims = {a: head_dim(base_modules.get(a)) or int(head_dim(self._modules[a]) or 0)
                                for a in self.attention_modules}
        self._warn_unscalable_attention(target, base_modules)
        self.specs: dict[str, ParamSpec] = {n: self._spec(n) for n in shapes}
        # The model's own init law, measured (kinds other than SP keep-init only).
        self.init_exponents: dict[str, float] = {}
        # Width-dependent scalars inside the forward (mutransfer.parametrize.internals), probed on real
        # base and delta models; embedding ones are compensated (see _absorb_internals).
        self.internal_multipliers: tuple[InternalMultiplier, ...] = ()
        self._internal_comp: dict[str, float] = {}
        if kind != "sp" and base_model is not None:
            assert delta_w is not None
            self.init_exponents, self.internal_multipliers = self._measure_real(builder, base_width, delta_w)
            if init == "model":
                self.specs = corrected_for_init_law(self.specs, self.init_exponents, self.readout_init)
            self._absorb_internals()

    def _measure_real(self, builder: Builder, base_width: int,
                      delta_width: int) -> tuple[dict[str, float], tuple[InternalMultiplier, ...]]:
        """(init exponents, internal multipliers) read off the model built for real at the
        base and delta widths (CPU, seed 0: :func:`real_models`), remembered per builder and
        what the reading depends on. A builder that compares equal to another (the trainer's
        :class:`~mutransfer.training.trainer.GPTBuilder` of one model config) shares the
        entry: a fused group of K μP trials builds the two models once, not K times (1.7
        CPU-s each for a 40M proxy at its own base width)."""
        read = tuple((n, s.role, self._fan_dims(n, s.role)[0], self._width_dims[n])
                     for n, s in self.specs.items())
        key = (base_width, delta_width, self.depth, self.init, read)
        try:
            cache = _MEASURED.setdefault(builder, {})
        except TypeError:  # a builder that takes no weak reference (or no hash): measured every time
            cache = {}
        if key not in cache:
            models = real_models(builder, base_width, delta_width, self.depth)
            exponents = measure_init_exponents(
                self.specs, self._width_dims, lambda n, role: self._fan_dims(n, role)[0],
                *models.values()) if self.init == "model" else {}
            cache[key] = (exponents, probe_internals(builder, models, self.depth))
        exponents, internals = cache[key]
        return dict(exponents), internals

    # ---- shapes and roles ------------------------------------------------------------

    def _find_residual_branches(self, model: nn.Module) -> tuple[str, ...]:
        names = [n for n, _ in model.named_modules() if n]
        if self.residual_branch_patterns is not None:
            pats = [re.compile(p) for p in self.residual_branch_patterns]
            return tuple(n for n in names if any(p.fullmatch(n) for p in pats))
        # Default: children called attn/mlp of the items of a ModuleList (blocks.3.attn).
        pat = re.compile(r"(.*\.)?\d+\.(attn|attention|self_attn|mlp|ffn|feed_forward)")
        found = [n for n in names if pat.fullmatch(n)]
        # A post-norm block (Hugging Face Gemma 2/3, OLMo 2: x + norm(attn(x)), a
        # post_feedforward_layernorm beside the MLP) normalizes the branch before the residual
        # add, which would divide a multiplier on the attention or MLP out again: the branch's
        # output is its norm's. (Llama's post_attention_layernorm is the MLP's pre-norm: no
        # post_feedforward_layernorm there, so it is left alone.)
        present = set(names)
        out = []
        for n in found:
            block, _, leaf = n.rpartition(".")
            post = f"{block}.{POST_NORMS.get(leaf, '')}"
            out.append(post if f"{block}.post_feedforward_layernorm" in present and post in present else n)
        return tuple(out)

    def _fan_dims(self, name: str, role: str | None = None) -> tuple[int | None, int | None]:
        """(fan_in dim, fan_out dim). Embedding weights are (num, dim): fan_in is the
        one-hot side (dim 0). Linear/conv weights are (out, in, ...); GPT-2's Conv1D
        (in, out). A raw parameter with one width dimension (a positional table, a ViT
        ``cls`` token) is mup's vector-like: its width dim is the fan_out of an input
        (and the fan_in of an output), whatever its position, so SGD's x m lands on it as
        in ``MuSGD``. Other raw parameters are batched ``F.linear`` weights (..., out, in),
        as Hugging Face's MoE expert banks (experts, out, in)."""
        ndim = len(self._shapes[name])
        if ndim < 2:
            return None, None
        kinds = {layer_kind(m) for _, m in self._module_of[name]}
        if "embedding" in kinds or "linear_t" in kinds:
            return 0, 1
        if "linear" in kinds:
            return 1, 0
        wd = self._width_dims[name]
        if len(wd) == 1:
            other = next(i for i in range(ndim) if i != wd[0])
            return (wd[0], other) if role == "output" else (other, wd[0])
        return ndim - 1, ndim - 2

    def _infer_role(self, name: str) -> tuple[str, str]:
        shape, wd = self._shapes[name], self._width_dims[name]
        if len(shape) == 0:
            return "scalar", "inferred:0-d"
        if len(shape) == 1 or not wd:
            return "vector", "inferred:1-d" if len(shape) == 1 else "inferred:no width dim"
        fan_in, fan_out = self._fan_dims(name)
        owners = [m for _, m in self._module_of[name]]
        if any(is_mup_readout(m) for m in owners):
            return "output", "inferred:MuReadout"
        if len(wd) == 1 and all(layer_kind(m) is None for m in owners):
            # mup counts a tensor with one width dimension as vector-like; a raw one is no
            # layer's weight, so nothing says it is a readout (and no hook may go on the
            # module that merely holds it).
            return "vector", "inferred:raw parameter, one width dim"
        in_w, out_w = fan_in in wd, fan_out in wd
        if len(wd) > 2:
            raise ValueError(f"parameter {name} has {len(wd)} width dimensions {wd}; add a rule for it")
        if in_w and out_w:
            return "hidden", "inferred:fan_in and fan_out scale"
        if out_w:
            if any(isinstance(m, nn.Embedding) for m in owners):
                return "input", "inferred:embedding"
            return "input", "inferred:fan_out scales"
        if in_w:
            return "output", "inferred:fan_in scales"
        raise ValueError(f"parameter {name} scales along a kernel dimension {wd}; add a rule for it")

    def _role(self, name: str) -> tuple[str, str]:
        for rule in self.user_rules:
            if re.search(rule.pattern, name):
                return rule.role, rule.pattern
        if not self.infer_roles:
            raise ValueError(f"parameter {name} is matched by no rule")
        return self._infer_role(name)

    def _mult(self, name: str, dim: int | None) -> float:
        if dim is None or dim not in self._width_dims[name]:
            return 1.0
        return self._shapes[name][dim] / self._base_shapes[name][dim]

    def _in_branch(self, name: str) -> bool:
        """Inside a residual block: under the parent of a branch module (``blocks.3.``),
        so the block's norm gains count too (CompleteP Table 1 scales their LR)."""
        blocks = {b.rpartition(".")[0] for b in self.branch_modules}
        return any(name.startswith(b + ".") for b in blocks if b)

    # ---- the rules ---------------------------------------------------------------------

    def _spec(self, name: str) -> ParamSpec:
        role, rule = self._role(name)
        shape = self._shapes[name]
        fi, fo = self._fan_dims(name, role)
        m_in, m_out = self._mult(name, fi), self._mult(name, fo)
        wdims = self._width_dims[name]
        m_vec = self._mult(name, wdims[-1]) if wdims else 1.0
        mu = self.kind != "sp"
        sgd = self.optimizer == "sgd"
        in_branch = self._in_branch(name)
        # Every width number below is a row of the table in mutransfer.parametrize.rules.
        rr = role_rule(self.kind, role)
        target_std = rr.init_std
        lr = rr.get("lr", self.optimizer)(m_in, m_vec if role == "vector" else m_out)

        init, std, opt, eps = "keep", None, ("sgd" if sgd else "adamw"), 1.0
        if role == "hidden":
            if self.init == "normal":
                std = self.init_std * (target_std(m_in, m_out) if target_std else 1.0)
                init = f"normal:{std:.4g}"
            if self.kind == "muon" and len(shape) == 2 and role in MUON.roles:
                lr, opt = MUON.lr(m_in, m_out), "muon"
        elif role == "input":
            if self.init == "normal":
                std, init = self.init_std, f"normal:{self.init_std:.4g}"
        elif role == "output":
            zero = self.readout_init == "zero" or any(
                o in self._zero_readouts for o, _ in self._module_of[name])
            law = READOUT_INIT[self.readout_init] if mu else None
            if mu and law is not None and target_std is not None:
                target_std = Power(target_std.fan_in + law.fan_in, target_std.fan_out + law.fan_out)
            if mu and zero:
                std, init = 0.0, "zeros"
            elif self.init == "normal":
                std = self.init_std * (target_std(m_in, m_out) if mu and target_std else 1.0)
                init = f"normal:{std:.4g}"
            elif target_std is not None and m_in != 1.0:
                # torch's fan-in law shrinks the readout as 1/sqrt(fan_in); rescale it to
                # the readout_init's law (constant: mup's MuReadout; fan_in: torch's own).
                scale = target_std(m_in, m_out) / MODEL_INIT_LAW(m_in, m_out)
                init = f"scale:{scale:.6g}"
        elif role == "vector":
            owner, _, leaf = name.rpartition(".")
            sibling = f"{owner}.weight" if owner else "weight"
            if (mu and leaf == "bias" and sibling in self._shapes and self.init == "model"
                    and self._role(sibling)[0] in ("hidden", "output")):
                # torch inits a linear's bias with its weight's 1/sqrt(fan_in) law, which
                # shrinks with width; μP biases are Θ(1), so undo it as mup's
                # set_base_shapes does (rescale_linear_bias, MuReadout._rescale_parameters).
                m_w = self._mult(sibling, self._fan_dims(sibling)[0])
                zero = self._role(sibling)[0] == "output" and (
                    self.readout_init == "zero" or owner in self._zero_readouts)
                if zero:
                    std, init = 0.0, "zeros"
                elif m_w != 1.0 and target_std is not None:
                    scale = target_std(1.0, m_vec) / MODEL_INIT_LAW(m_w, 1.0)
                    init = f"scale:{scale:.6g}"
        if self.kind == "completep" and in_branch:
            m_l = self.depth / self.base_depth  # type: ignore[operator]
            lr *= m_l ** COMPLETEP.lr.exponent(self.depth_alpha)
            eps = m_l ** COMPLETEP.eps.exponent(self.depth_alpha)
            if role in COMPLETEP.eps_width:
                eps *= COMPLETEP.eps_width[role](m_in, m_out)
        return ParamSpec(
            name=name, shape=shape, role=role, rule=rule, width_dims=wdims,
            fan_in_mult=m_in, fan_out_mult=m_out, init=init, init_std=std,
            lr_mult=lr, wd=role in ("input", "hidden", "output"), eps_mult=eps,
            optimizer=opt, in_residual_branch=in_branch,
        )

    @property
    def width_mult(self) -> float:
        return self.width / self.base_width

    @property
    def depth_mult(self) -> float:
        return 1.0 if self.depth is None else self.depth / self.base_depth  # type: ignore[operator]

    @property
    def residual_scale(self) -> float:
        scale = self.multipliers.residual
        if self.kind == "completep":
            scale *= self.depth_mult ** COMPLETEP.residual_multiplier.exponent(self.depth_alpha)
        return scale

    def attention_scale(self, head_dim: int, base_head_dim: int | None = None) -> float:
        """Softmax scale. SP: attention/sqrt(d_head). μP kinds: attention·sqrt(d_base)/d_head,
        i.e. SP's value at the base head dim, falling as 1/d_head as the head dim grows.

        (TP-V §4 and Table 3: once training correlates q and k their dot product grows
        like d, so the logits need 1/d; anchoring at the base keeps μP equal to SP at the
        base shape, the premise of tuning there. With the head dim fixed and heads growing
        with width, as in our presets, the scale is SP's at every width.)
        """
        base = head_dim if base_head_dim is None else base_head_dim
        e = ATTENTION_EXPONENT[rule_set(self.kind)]
        # d^e anchored at the base: base^-1/2 · (d/base)^e (SP's e = -1/2 needs no anchor).
        return self.multipliers.attention * base ** (-0.5 - e) * head_dim**e

    # ---- applying it -------------------------------------------------------------------

    def build(self, *, device: torch.device | str | None = None, seed: int | None = None) -> nn.Module:
        """Build the model at ``width`` (and ``depth``), then :meth:`apply` to it."""
        if seed is not None:
            torch.manual_seed(seed)
        model = call_builder(self.builder, self.width, self.depth)
        if device is not None:
            model = model.to(device)
        return self.apply(model)

    def apply(self, model: nn.Module) -> nn.Module:
        """Initialize ``model`` (built at this width) in place, register the forward
        multipliers and set attention scales. Returns the model.

        mup's ``MuReadout`` layers are swapped for plain ``nn.Linear`` sharing their
        parameters (their own multiplier would need mup's tensor attributes); their
        ``output_mult`` is folded into the output multiplier.
        """
        names = {n: tuple(p.shape) for n, p in model.named_parameters()}
        if names != self._shapes:
            diff = sorted(set(names.items()) ^ set(self._shapes.items()))[:2]
            raise ValueError(f"model does not match the parametrization's width {self.width}: {diff}")
        swap_mup_readouts(model)
        if getattr(model, "_mutransfer_hooks", None):
            raise ValueError("this model is already parametrized; build a fresh one")
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, spec in self.specs.items():
                p = params[name]
                if spec.init == "zeros":
                    p.zero_()
                elif spec.init.startswith("scale:"):
                    p.mul_(float(spec.init.split(":", 1)[1]))
                elif spec.init.startswith("normal:"):
                    p.normal_(0.0, spec.init_std or 0.0)
        fm = self.forward_multipliers()
        self.install_forward_multipliers(model, fm["hooks"], fm["attention"])
        return model

    def optimizer_settings(
        self,
        lr: float,
        *,
        weight_decay: float = 0.0,
        wd_mode: str = "coupled",
        eps: float = 1e-8,
        role_lr_mults: Mapping[str, float] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Per parameter (by name): ``role``, ``optimizer``, ``lr`` (absolute), ``base_lr``,
        ``lr_mult``, ``weight_decay`` and ``eps`` of :attr:`specs`; the rules and their
        sources are in :func:`mutransfer.parametrize.groups.optimizer_settings`. The trainer's param
        groups (:meth:`param_groups`) and the transfer card read this method, and nothing
        else computes these numbers."""
        return settings_of(self.specs, lr, weight_decay=weight_decay, wd_mode=wd_mode, eps=eps,
                           role_lr_mults=role_lr_mults)

    def param_groups(
        self,
        model: nn.Module,
        lr: float,
        *,
        weight_decay: float = 0.0,
        wd_mode: str = "coupled",
        eps: float = 1e-8,
        role_lr_mults: Mapping[str, float] | None = None,
    ) -> list[dict[str, Any]]:
        """Optimizer param groups of ``model``'s trainable parameters, with the numbers of
        :meth:`optimizer_settings` (its docstring gives the LR and weight-decay rules and
        their sources). Each group holds ``lr = lr × lr_mult`` (what torch optimizers and
        LR schedulers read) plus ``base_lr`` and ``lr_mult`` beside it, so any scheduler
        composes: effective LR = base × schedule × multiplier.
        """
        settings = self.optimizer_settings(lr, weight_decay=weight_decay, wd_mode=wd_mode, eps=eps,
                                           role_lr_mults=role_lr_mults)
        groups: dict[tuple[Any, ...], dict[str, Any]] = {}
        for name, p in model.named_parameters():
            if name not in settings:
                raise ValueError(f"parameter {name} is not covered by this parametrization")
            if not p.requires_grad:
                continue
            v = settings[name]
            key = (v["optimizer"], v["lr_mult"], v["weight_decay"], v["eps"], v["role"])
            g = groups.setdefault(key, {"params": [], "names": [], **v})
            g["params"].append(p)
            g["names"].append(name)
        return list(groups.values())

    # ---- reporting ---------------------------------------------------------------------

    def rules_table(self) -> list[Rule]:
        """The ordered role table: user rules, then the built-in inference rules."""
        builtin = [
            Rule(r"<0-d>", "scalar", "builtin"),
            Rule(r"<1-d, or no width dim>", "vector", "builtin"),
            Rule(r"<mup MuReadout>", "output", "builtin"),
            Rule(r"<fan_in and fan_out scale>", "hidden", "builtin"),
            Rule(r"<embedding, or fan_out scales>", "input", "builtin"),
            Rule(r"<fan_in scales>", "output", "builtin"),
        ] if self.infer_roles else []
        return [*self.user_rules, *builtin]

    def describe(self, model: nn.Module | None = None) -> list[dict[str, Any]]:
        """One row per parameter: name, shape, role, rule, width dims, init, init std,
        LR multiplier, WD, eps multiplier, optimizer. With ``model``, ``init_std`` is
        the measured std of each tensor (the truth for ``keep`` inits)."""
        params = dict(model.named_parameters()) if model is not None else {}
        rows = []
        for s in self.specs.values():
            row = dataclasses.asdict(s)
            if s.name in params and params[s.name].numel() > 1:
                row["init_std"] = float(params[s.name].detach().float().std())
            rows.append(row)
        return rows

    def table(self, model: nn.Module | None = None) -> str:
        """The describe() rows as a fixed-width text table."""
        rows = self.describe(model)
        head = ["name", "shape", "role", "width_dims", "init", "init_std", "lr_mult", "wd",
                "eps_mult", "optim"]
        body = [[r["name"], "x".join(map(str, r["shape"])) or "()", r["role"],
                 ",".join(map(str, r["width_dims"])) or "-", r["init"],
                 "-" if r["init_std"] is None else f"{r['init_std']:.4g}", f"{r['lr_mult']:.4g}",
                 "yes" if r["wd"] else "no", f"{r['eps_mult']:.4g}", r["optimizer"]] for r in rows]
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        lines = [
            f"# {self.kind} ({self.optimizer} rules): width {self.width} over base {self.base_width}"
            + (f", depth {self.depth} over base {self.base_depth}" if self.depth else "")
            + f"; multipliers {dataclasses.asdict(self.multipliers)}",
            fmt.format(*head), fmt.format(*("-" * w for w in widths)),
        ]
        lines += [fmt.format(*b) for b in body]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Parametrization(kind={self.kind!r}, optimizer={self.optimizer!r}, width={self.width},"
                f" base_width={self.base_width}, depth={self.depth}, base_depth={self.base_depth})")


def parametrize_model(builder: Builder, **kwargs: Any) -> tuple[nn.Module, Parametrization]:
    """Shortcut: ``Parametrization(builder, **kwargs)``, built. Returns (model, pz)."""
    seed = kwargs.pop("seed", None)
    device = kwargs.pop("device", None)
    pz = Parametrization(builder, **kwargs)
    return pz.build(device=device, seed=seed), pz


__all__ = ["Parametrization", "parametrize_model"]
