"""The scaling rules as data: width exponents per (rule set, role).

Every number a :class:`~mutransfer.parametrize.parametrization.Parametrization` derives from width
is read from :data:`WIDTH_RULES`; ``mutransfer audit`` compares what a user's code does
against the same table, and :func:`rules_table` prints it. Nothing else holds a rule.

Each entry is a power of the width multipliers of one parameter, m_in = fan_in /
base fan_in and m_out = fan_out / base fan_out (for a vector, fan_out is its length),
for four quantities: the absolute init std, the Adam LR, the SGD LR and the forward
multiplier. ``print(rules_table())`` shows the table (``mutransfer explain --rules``);
it is not repeated here so that no description can drift from the data.

This is Tensor Programs V (Yang et al. 2022) Table 3 written in the form of ``mup``'s
``MuReadout`` (one of TP-V's equivalent tables in its appendix): the readout carries
a 1/m_in forward multiplier and a constant-variance init instead of Table 3's
1/fan_in^2 variance and 1/fan_in Adam LR. The two are the same μP by the abc-symmetry
of Yang & Hu 2021 (TP-IV §3), which TP-V's equivalent tables rely on: for a layer with
forward multiplier A, init std B and LR C, (A θ, B / θ, C / θ) under Adam (C / θ² under
SGD) trains the same function, so only A·B and A·C (Adam) or A²·C (SGD) are fixed by
μP; :func:`invariant_exponents` gives them.

SP (``sp``) scales nothing: LRs and multipliers are constant and the init is whatever
the model does (``None`` in the table). The attention logits' scale is a power of the
head dimension: d_head^-1/2 in SP, d_head^-1 in μP (TP-V §4, Table 3 footnote).

Modifiers, applied on top of the μP row of a parameter:

- :data:`MUON`: hidden 2-D matrices go to ``torch.optim.Muon``, whose update is
  orthogonalized and scaled by sqrt(max(1, fan_out/fan_in)) (Jordan et al. 2024,
  ``adjust_lr_fn="original"``); that spectral scaling replaces μP's LR exponent, so the
  LR's width exponent is 0. Every other parameter keeps the μP Adam row.
- :data:`COMPLETEP`: depth exponents of m_L = depth / base_depth (Dey et al. 2025,
  "Don't be lazy: CompleteP enables compute-efficient deep transformers", Table 1):
  residual-branch forward multiplier m_L^-alpha, Adam LR of parameters inside the
  branches m_L^(alpha-1), Adam eps m_L^-alpha (and × m_in^-1 for hidden matrices),
  alpha in {0.5, 1}.
- :data:`READOUT_INIT`: the readout's init law under the mup kinds (``readout_init``).
  ``constant`` is the table's row (constant std, so with the 1/m_in forward multiplier the
  effective std falls as m_in^-1: TP-V Table 3's 1/fan_in^2 variance, initial logits
  shrinking as m_in^-1/2; ``mup``'s MuReadout); ``zero`` starts it at 0 (TP-V suggests
  it); ``fan_in`` stores std ∝ m_in^1/2, so the effective std is m_in^-1/2, SP's (torch's)
  fan-in law: the initial logits keep one width-independent O(1) scale, as in SP. The
  readout's effective LR stays μP's. At base width all three but ``zero`` are the same init.
  :data:`DEFAULT_READOUT_INIT` is ``fan_in`` (Everett et al. 2024's SP init with μP's
  per-layer LR exponents for Adam): on the demo's proxy it matched SP's best loss at width
  512 (0.9995×) where ``constant`` was 1.05× (benchmarks/results/readout_ladder.json).
  Every effective readout std from m_in^-1 (``constant``) to m_in^-1/2 (``fan_in``) keeps
  the logits O(1) at init and lets the Θ(1) updates move them, so both are μP's
  (:data:`READOUT_INIT_RANGE`, which ``mutransfer audit`` accepts); more, and the
  initial logits grow with width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

QUANTITIES: tuple[str, ...] = ("init_std", "lr_adam", "lr_sgd", "multiplier")
RULE_SETS: tuple[str, ...] = ("sp", "mup")


@dataclass(frozen=True)
class Power:
    """m_in^fan_in · m_out^fan_out: a width rule as two exponents."""

    fan_in: float = 0.0
    """Exponent of the fan-in width multiplier m_in."""
    fan_out: float = 0.0
    """Exponent of the fan-out width multiplier m_out."""

    def __call__(self, m_in: float, m_out: float) -> float:
        """The multiplier at these width multipliers."""
        return float(m_in**self.fan_in * m_out**self.fan_out)

    def of_width(self, s_in: float, s_out: float) -> float:
        """The exponent of width when fan_in ∝ width^s_in and fan_out ∝ width^s_out."""
        return self.fan_in * s_in + self.fan_out * s_out

    def __str__(self) -> str:
        parts = [n if e == 1 else f"{n}^{_num(e)}"
                 for n, e in (("m_in", self.fan_in), ("m_out", self.fan_out)) if e]
        return " ".join(parts) or "1"


def _num(e: float) -> str:
    return {0.5: "1/2", -0.5: "-1/2"}.get(e, f"{e:g}")


ONE = Power()


@dataclass(frozen=True)
class RoleRule:
    """One row of the table: the width exponents of one role under one rule set."""

    init_std: Power | None
    """Absolute init std (None: the model's own init, no width rule)."""
    lr_adam: Power
    """LR multiplier under Adam-like optimizers (Adam, AdamW, Adagrad...)."""
    lr_sgd: Power
    """LR multiplier under SGD (with or without momentum)."""
    multiplier: Power = ONE
    """Forward multiplier on the layer's output (the readout: on its input)."""

    def get(self, quantity: str, optimizer: str = "adam") -> Power | None:
        if quantity == "lr":
            return self.lr_sgd if optimizer == "sgd" else self.lr_adam
        return getattr(self, quantity)  # type: ignore[no-any-return]


WIDTH_RULES: dict[str, dict[str, RoleRule]] = {
    "mup": {
        "input": RoleRule(init_std=ONE, lr_adam=ONE, lr_sgd=Power(fan_out=1.0)),
        "hidden": RoleRule(init_std=Power(fan_in=-0.5), lr_adam=Power(fan_in=-1.0),
                           lr_sgd=Power(fan_in=-1.0, fan_out=1.0)),
        "output": RoleRule(init_std=ONE, lr_adam=ONE, lr_sgd=Power(fan_in=1.0),
                           multiplier=Power(fan_in=-1.0)),
        "vector": RoleRule(init_std=ONE, lr_adam=ONE, lr_sgd=Power(fan_out=1.0)),
        "scalar": RoleRule(init_std=ONE, lr_adam=ONE, lr_sgd=ONE),
    },
    "sp": {role: RoleRule(init_std=None, lr_adam=ONE, lr_sgd=ONE)
           for role in ("input", "hidden", "output", "vector", "scalar")},
}
"""(rule set, role) -> width exponents. ``mup`` also serves ``completep`` and ``muon``
(with their modifiers)."""

ATTENTION_EXPONENT: dict[str, float] = {"sp": -0.5, "mup": -1.0}
"""Softmax scale ∝ d_head^exponent (μP anchors it at the base head dim, where it equals SP)."""

MODEL_INIT_LAW = Power(fan_in=-0.5)
"""The init law a builder's own init is assumed to follow (torch's fan-in default, also
for a linear's bias): with ``init="model"`` a parameter is rescaled by target / this."""


@dataclass(frozen=True)
class DepthPower:
    """An exponent of m_L that depends on CompleteP's alpha: alpha_coef · alpha + const."""

    alpha_coef: float
    const: float = 0.0

    def exponent(self, alpha: float) -> float:
        return self.alpha_coef * alpha + self.const

    def __str__(self) -> str:
        a = {1.0: "alpha", -1.0: "-alpha"}.get(self.alpha_coef, f"{self.alpha_coef:g}·alpha")
        return a + (f"{self.const:+g}" if self.const else "")


@dataclass(frozen=True)
class CompletePModifier:
    """CompleteP's depth rules (Dey et al. 2025, Table 1), on top of μP's width rules."""

    residual_multiplier: DepthPower = DepthPower(-1.0)
    """Every residual branch's output × m_L^-alpha."""
    lr: DepthPower = DepthPower(1.0, -1.0)
    """LR of parameters inside residual blocks × m_L^(alpha-1) (an Adam rule; the SGD
    rule set gets it too)."""
    eps: DepthPower = DepthPower(-1.0)
    """Adam eps of parameters inside residual blocks × m_L^-alpha ..."""
    eps_width: dict[str, Power] = field(default_factory=lambda: {"hidden": Power(fan_in=-1.0)})
    """... and × these width powers per role (hidden matrices: m_in^-1)."""
    alphas: tuple[float, ...] = (0.5, 1.0)
    """The allowed alphas."""


@dataclass(frozen=True)
class MuonModifier:
    """Muon for hidden matrices (Jordan et al. 2024): the spectral scaling inside
    ``torch.optim.Muon`` replaces μP's width LR rule, so the LR multiplier is 1."""

    roles: tuple[str, ...] = ("hidden",)
    """Roles whose 2-D parameters go to Muon."""
    lr: Power = ONE
    """Width exponent of the LR given to Muon."""
    adjust_lr_fn: str = "original"
    """torch.optim.Muon's per-shape scaling: sqrt(max(1, fan_out/fan_in))."""


READOUT_INIT: dict[str, Power | None] = {"constant": ONE, "fan_in": Power(fan_in=0.5), "zero": None}
"""``readout_init`` -> the stored readout weight's init std law under the mup kinds (× the
output row's m_in^-1 forward multiplier for the effective law); None: zeros."""

DEFAULT_READOUT_INIT = "fan_in"
"""The ``readout_init`` every path uses unless told otherwise (Parametrization, TrainConfig,
the coordinate check, ``transfer`` and so the card). ``constant`` (mup's) stays available
by name."""

READOUT_INIT_RANGE: tuple[float, float] = (0.0, 0.5)
"""The stored readout init std's m_in exponents μP allows, from ``constant`` (0) to
``fan_in`` (1/2): with the output row's m_in^-1 multiplier, an effective std from m_in^-1
to m_in^-1/2 (a zero readout has no exponent and is allowed too)."""

COMPLETEP = CompletePModifier()
MUON = MuonModifier()


def rule_set(kind: str) -> str:
    """The width rule set of a parametrization kind (completep and muon are μP + a modifier)."""
    return "sp" if kind == "sp" else "mup"


def role_rule(kind: str, role: str) -> RoleRule:
    """The table row for ``role`` under parametrization ``kind``."""
    try:
        return WIDTH_RULES[rule_set(kind)][role]
    except KeyError:
        raise ValueError(f"no scaling rule for role {role!r} under {kind!r}") from None


def invariant_exponents(multiplier: float, init_std: float | None, lr: float | None,
                        optimizer: str = "adam") -> dict[str, float | None]:
    """Exponents that the abc-symmetry leaves fixed (Yang & Hu 2021, TP-IV §3): the effective init
    ``multiplier + init_std`` and the effective LR ``multiplier + lr`` (Adam, Muon) or
    ``2·multiplier + lr`` (SGD). Two implementations of μP agree on these."""
    k = 2.0 if optimizer == "sgd" else 1.0
    return {"init": None if init_std is None else multiplier + init_std,
            "lr": None if lr is None else k * multiplier + lr}


def rules_table(kinds: tuple[str, ...] = ("sp", "mup")) -> str:
    """The table the code uses, as text: one row per (rule set, role), then the
    attention rule and the CompleteP and Muon modifiers."""
    head = ("rules", "role", "init std", "Adam LR", "SGD LR", "forward mult")
    body = []
    for kind in kinds:
        for role, r in WIDTH_RULES[rule_set(kind)].items():
            body.append((kind, role, "model's own" if r.init_std is None else str(r.init_std),
                         str(r.lr_adam), str(r.lr_sgd), str(r.multiplier)))
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = ["# width rules (m_in, m_out: fan-in, fan-out over their base values)",
             fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*b).rstrip() for b in body]
    lines.append("# attention softmax scale: "
                 + ", ".join(f"{k}: d_head^{_num(e)}" for k, e in ATTENTION_EXPONENT.items()))
    c = COMPLETEP
    lines.append(f"# completep (m_L = depth/base depth, alpha in {c.alphas}): residual branch "
                 f"x m_L^({c.residual_multiplier}); LR in blocks x m_L^({c.lr}); eps in "
                 f"blocks x m_L^({c.eps})" + "".join(f", {r} also x {p}" for r, p in c.eps_width.items()))
    lines.append(f"# muon: {'/'.join(MUON.roles)} 2-D matrices on torch.optim.Muon "
                 f"(adjust_lr_fn={MUON.adjust_lr_fn!r}), LR x {MUON.lr}; the rest: mup Adam rules")
    lo, hi = (Power(fan_in=e) for e in READOUT_INIT_RANGE)
    lines.append(f"# readout_init (mup kinds; default {DEFAULT_READOUT_INIT}, the output row above is "
                 "constant's): " + ", ".join(
                     f"{k}: init std 0" if v is None else f"{k}: init std {v} (effective {Power(v.fan_in - 1)})"
                     for k, v in READOUT_INIT.items())
                 + f"; the audit accepts an output init std from {lo} to {hi}")
    return "\n".join(lines)


__all__ = [
    "ATTENTION_EXPONENT",
    "COMPLETEP",
    "DEFAULT_READOUT_INIT",
    "MODEL_INIT_LAW",
    "MUON",
    "QUANTITIES",
    "READOUT_INIT",
    "READOUT_INIT_RANGE",
    "RULE_SETS",
    "WIDTH_RULES",
    "CompletePModifier",
    "DepthPower",
    "MuonModifier",
    "Power",
    "RoleRule",
    "invariant_exponents",
    "role_rule",
    "rule_set",
    "rules_table",
]
