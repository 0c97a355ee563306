"""Audit someone else's μP: what their code does, layer by layer, against the rule table.

The user gives ``builder(width) -> (model, optimizer)`` (or a model builder and an
``optimizer_builder``). The audit builds it at two or more widths and *reads what the
code does*, never what it claims:

- from the optimizer's param groups, each parameter's effective LR (``initial_lr`` when
  an LR scheduler set one, so a schedule's step-0 value cancels; torch Muon's
  ``adjust_lr_fn`` factor included), weight decay and eps (AdamW, Adam, SGD,
  ``torch.optim.Muon``, mup's MuAdam/MuAdamW/MuSGD, our ``OptimizerList``);
- the init size of every parameter (its RMS, so unit norm gains and zero biases count);
- the forward multiplier of every Linear/Embedding by probing: its output over
  ``W x (+ b)`` of its raw input, and for the readout the model's logits over the
  readout's output (a multiplier applied outside the module is seen too);
- the attention softmax scale of every ``F.scaled_dot_product_attention`` call against
  its head dim (falling back to a ``softmax_scale``/``head_dim`` attribute pair).

Each is fitted as a power of width, log(value) = a + exponent · log(width), and compared
with :mod:`mutransfer.parametrize.rules` for the parameter's role, which the
:class:`~mutransfer.parametrize.parametrization.Parametrization` infers on the meta device. Rows are
per (parameter, module that uses it), so a tied embedding is checked once as input and
once as readout. μP has a symmetry (the abc-symmetry, TP-IV §3): a forward multiplier can move into the
init and LR, so the verdict is on the invariants multiplier + init and multiplier + LR
(2·multiplier + LR under SGD); a row whose raw exponents differ from the table but whose
invariants agree is ``ok (equivalent)``. The readout's init may follow any law from mup's
constant variance to SP's fan-in law (``readout_init`` ``constant`` to ``fan_in``, the
default: :data:`mutransfer.parametrize.rules.READOUT_INIT_RANGE`), so its row is judged against that
range; a larger init (logits growing with width) fails. Weight decay is judged by its timescale: LR ×
decay coefficient must stay constant in width for every decayed matrix (mup's MuAdamW and
MuSGD; Wang & Aitchison 2024), so a coefficient held constant while the hidden LR falls as
1/m fails (the hidden matrices would decay m× slower than at the base width). Eps is reported, not judged
(μP with Adam leaves it constant; only CompleteP prescribes it).

A coordinate check on the user's own model and optimizer closes the audit
(:mod:`mutransfer.checks.coord_check`: log2 slope of activation size against width).
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from mutransfer.checks.audit_result import AuditResult, AuditRow, _fmt
from mutransfer.checks.coord_check import CoordCheckResult, default_modules, fit_slopes, record_activations
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.probe import default_input, first_tensor, output_ratio, probe_forward
from mutransfer.parametrize.rules import (
    ATTENTION_EXPONENT,
    COMPLETEP,
    DEFAULT_READOUT_INIT,
    MUON,
    READOUT_INIT,
    READOUT_INIT_RANGE,
    Power,
    invariant_exponents,
    role_rule,
)

Builder = Callable[[int], Any]


# ---- reading the user's objects ----------------------------------------------------------


def _optimizers(opt: Any) -> list[torch.optim.Optimizer]:
    if hasattr(opt, "optimizers"):  # mutransfer.training.optim.OptimizerList (an Optimizer, for schedulers)
        return list(opt.optimizers)
    if isinstance(opt, torch.optim.Optimizer):
        return [opt]
    if isinstance(opt, (list, tuple)) and opt and all(isinstance(o, torch.optim.Optimizer) for o in opt):
        return list(opt)
    return []


def _rule_of(opt: torch.optim.Optimizer) -> str:
    """adam | sgd | muon: which rule column an optimizer follows (mup's MuAdam and
    MuSGD return plain torch Adam/AdamW/SGD with per-group LRs)."""
    names = {c.__name__ for c in type(opt).__mro__}
    if "Muon" in names:
        return "muon"
    if "SGD" in names:
        return "sgd"
    return "adam"


def _read_groups(opt: Any) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for o in _optimizers(opt):
        rule = _rule_of(o)
        for g in o.param_groups:
            lr = float(g.get("initial_lr", g["lr"]))
            for p in g["params"]:
                eff = lr
                if rule == "muon" and p.ndim >= 2:
                    a, b = p.shape[:2]
                    fn = g.get("adjust_lr_fn")
                    eff *= (math.sqrt(max(1.0, a / b)) if fn in (None, "original")
                            else 0.2 * math.sqrt(max(a, b)) if fn == "match_rms_adamw" else 1.0)
                out[id(p)] = {"rule": rule, "optimizer": type(o).__name__, "lr": eff,
                              "wd": float(g.get("weight_decay", 0.0)), "eps": g.get("eps")}
    return out


def _call(builder: Builder, optimizer_builder: Callable[..., Any] | None, width: int,
          name: str) -> tuple[nn.Module, Any]:
    out = builder(width)
    if optimizer_builder is None:
        if not (isinstance(out, tuple) and len(out) in (2, 3)):
            raise ValueError(f"{name}({width}) returned {type(out).__name__}, expected (model, optimizer)")
        model, opt = out[0], out[1]
    else:
        model = out
        n_args = len([p for p in inspect.signature(optimizer_builder).parameters.values()
                      if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
        opt = optimizer_builder(model, width) if n_args >= 2 else optimizer_builder(model)
    if not isinstance(model, nn.Module):
        raise ValueError(f"{name}({width}) returned a {type(model).__name__} as the model, "
                         "expected an nn.Module")
    if not _optimizers(opt):
        raise ValueError(f"{name}({width}) returned a {type(opt).__name__} as the optimizer, "
                         "expected a torch.optim.Optimizer (or a list of them)")
    return model, opt


# ---- the audit -----------------------------------------------------------------------------

def _slope(widths: Sequence[int], values: Sequence[float]) -> float | None:
    v = np.asarray(values, dtype=float)
    if len(v) < 2 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        return None
    return float(np.polyfit(np.log(np.asarray(widths, dtype=float)), np.log(v), 1)[0])


def _words(e: float | None, var: str = "width") -> str:
    return "-" if e is None else f"∝ {var}^{_fmt(e)}"


def audit(
    builder: Builder,
    optimizer_builder: Callable[..., Any] | None = None,
    *,
    widths: Sequence[int] = (32, 64, 128),
    base_width: int | None = None,
    example_input: Callable[[nn.Module], Any] | None = None,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    coord_check: bool = True,
    steps: int = 3,
    seeds: int = 2,
    tol: float = 0.2,
    coord_tol: float = 0.25,
    depths: Sequence[int] | None = None,
    depth_alpha: float | None = None,
    name: str = "builder",
) -> AuditResult:
    """Audit a μP implementation.

    Args:
        builder: ``builder(width) -> (model, optimizer)``, or ``-> model`` when
            ``optimizer_builder`` is given (called as ``(model)`` or ``(model, width)``).
        widths: >= 2 widths to build (small ones suffice: exponents, not values, count).
        base_width: the width where the user's μP equals SP (default: the smallest).
        example_input: ``example_input(model)`` -> the input of one forward; default:
            random token ids for an embedding model, else random features.
        loss_fn: ``loss_fn(model, input)`` for the coordinate check; default: cross
            entropy of the output (its first tensor) against random labels.
        coord_check, steps, seeds, coord_tol: the coordinate check on the user's model.
        tol: the largest allowed gap between a found and an expected exponent.
        depths: >= 2 depths to also audit depth transfer (CompleteP); the builder is then
            ``builder(width, depth)`` and the width audit runs at the smallest depth.
        depth_alpha: the CompleteP alpha the user claims (0.5 or 1); None: the alpha
            measured from the residual multipliers, which must be 0.5 or 1.
        name: how to name the builder in errors (the CLI passes the entry point).
    """
    widths = sorted({int(w) for w in widths})
    if len(widths) < 2:
        raise ValueError(f"an audit needs at least 2 widths, got {widths}")
    base_width = int(base_width or widths[0])
    if base_width < 1:
        raise ValueError(f"base width must be >= 1, got {base_width}")
    depth_list = sorted({int(d) for d in depths}) if depths else []
    if depths is not None and len(depth_list) < 2:
        raise ValueError(f"a depth audit needs at least 2 depths, got {list(depths)}")
    if depth_alpha is not None and depth_alpha not in COMPLETEP.alphas:
        raise ValueError(f"depth_alpha must be one of {COMPLETEP.alphas}, got {depth_alpha!r}")
    depth_builder = builder
    if depth_list:
        def at_base_depth(w: int) -> Any:  # the width audit runs at the smallest depth
            return depth_builder(w, depth_list[0])
        builder = at_base_depth

    def model_of(w: int) -> nn.Module:
        return _call(builder, optimizer_builder, w, name)[0]

    _call(builder, optimizer_builder, widths[0], name)  # wrong types: one clear error first
    role_base = base_width if base_width < widths[-1] else widths[0]
    try:
        with warnings.catch_warnings():  # width-dependent internals become rows below, not warnings
            warnings.filterwarnings("ignore", message=".*a width-dependent multiplier the")
            pz = Parametrization(model_of, width=widths[-1], base_width=role_base, kind="mup")
    except ValueError as exc:
        raise ValueError(f"{name}: cannot infer roles: {exc}") from None
    get_input = example_input or default_input

    # Build at every width and read what the code does.
    per_width: list[dict[str, Any]] = []
    for w in widths:
        torch.manual_seed(0)
        model, opt = _call(builder, optimizer_builder, w, name)
        params = dict(model.named_parameters())
        if set(params) != set(pz.specs):
            raise ValueError(f"{name}({w}) has parameters {sorted(set(params) ^ set(pz.specs))[:3]} "
                             "that differ from its other widths")
        groups = _read_groups(opt)
        owners: dict[str, list[str]] = {}
        by_id = {id(p): n for n, p in params.items()}
        for mname, m in model.named_modules():
            for _, p in m.named_parameters(recurse=False):
                owners.setdefault(by_id[id(p)], []).append(mname)
        readouts = {m for n, ms in owners.items() for m in ms
                    if _use_role(pz, n, model.get_submodule(m)) == "output"}
        try:
            mults, attn = probe_forward(model, get_input(model), readouts)
        except Exception as exc:  # noqa: BLE001 - the user's forward failed on our probe
            raise ValueError(f"{name}({w}): the forward on the probe input failed "
                             f"({type(exc).__name__}: {exc}); pass example_input") from None
        per_width.append({"model": model, "params": params, "groups": groups, "owners": owners,
                          "mults": mults, "attn": attn})

    rows: list[AuditRow] = []
    first = per_width[0]
    attn_rows = _attention_rows(widths, per_width, tol)
    placed: set[str] = set()
    for pname in pz.specs:
        for arow in attn_rows:
            if arow.module not in placed and pname.startswith(arow.module + "."):
                rows.append(arow)
                placed.add(arow.module)
        for mname in first["owners"][pname]:
            rows.append(_param_row(pz, pname, mname, widths, per_width, tol))
    rows += [a for a in attn_rows if a.module not in placed]
    # Scalars the forward applies between modules (mutransfer.parametrize.internals), reported: no rule
    # covers them and a μP may mean them (a readout multiplier written as x / m); one inside
    # a Linear/Embedding forward is already its module's "mult" row.
    rows += [AuditRow(f"{im.producer} -> {im.consumer}", im.producer, "internal", "-", {"mult": None},
                      {"mult": im.exponent}, "n/a", message=im.describe())
             for im in pz.internal_multipliers if im.consumer is not None]
    if depth_list:
        rows += _depth_rows(depth_builder, optimizer_builder, widths[0], depth_list, get_input,
                            depth_alpha, tol, name)

    cc = None
    if coord_check:
        cc = _coord_check(builder, optimizer_builder, widths, name, get_input, loss_fn, steps, seeds,
                          coord_tol, pz.readout_modules)
    return AuditResult(widths, base_width, rows, cc, tol)


def _depth_rows(builder: Callable[..., Any], optimizer_builder: Callable[..., Any] | None, width: int,
                depths: list[int], get_input: Callable[[nn.Module], Any], claim: float | None,
                tol: float, name: str) -> list[AuditRow]:
    """CompleteP: residual-branch multipliers, LRs and Adam eps of the first block's
    parameters against depth (Dey et al. 2025, Table 1; mutransfer.parametrize.rules.COMPLETEP)."""
    def model_of(w: int, d: int) -> nn.Module:
        return _call(lambda w_: builder(w_, d), optimizer_builder, w, f"{name}(depth={d})")[0]

    pz = Parametrization(model_of, width=width * 2, base_width=width, depth=depths[0])
    first_block = pz.branch_modules[0].rpartition(".")[0] if pz.branch_modules else ""
    branches = [b for b in pz.branch_modules if b.rpartition(".")[0] == first_block]
    if not branches:
        raise ValueError(f"{name}: no residual branches found (modules named <list>.<i>.attn/mlp); "
                         "a depth audit needs them")
    block = branches[0].rpartition(".")[0]
    inside = [n for n, s in pz.specs.items() if s.in_residual_branch and n.startswith(block + ".")]
    mults: dict[str, list[float]] = {b: [] for b in branches}
    reads: dict[str, list[dict[str, Any]]] = {n: [] for n in inside}
    for d in depths:
        torch.manual_seed(0)
        model, opt = _call(lambda w_, d=d: builder(w_, d), optimizer_builder, width, f"{name}(depth={d})")
        for b, m in _probe_branches(model, get_input(model), block, branches).items():
            mults[b].append(m)
        groups, params = _read_groups(opt), dict(model.named_parameters())
        for n in inside:
            reads[n].append(groups.get(id(params[n])) or {})
    rows = []
    found_alphas = []
    for vals in mults.values():
        e = _slope(depths, [abs(v) for v in vals])
        found_alphas.append(None if e is None else -e)
    measured = [a for a in found_alphas if a is not None]
    alpha = claim if claim is not None else (
        min(COMPLETEP.alphas, key=lambda a: abs(a - float(np.mean(measured)))) if measured else 1.0)
    for b, vals in mults.items():
        e_exp = COMPLETEP.residual_multiplier.exponent(alpha)
        f_exp = _slope(depths, [abs(v) for v in vals])
        row = AuditRow(b, b, "branch", "-", {"mult": e_exp}, {"mult": f_exp}, "ok", values={"mult": vals},
                       axis="depth", rules={"mult": f"m_L^({COMPLETEP.residual_multiplier})"})
        if f_exp is None or abs(f_exp - e_exp) > tol:
            row.verdict, row.broken = "FAIL", "mult"
            row.message = (f"residual branch multiplier should be ∝ depth^{_fmt(e_exp)} (CompleteP, "
                           f"alpha={alpha:g}, mutransfer.parametrize.rules), found ∝ depth^{_fmt(f_exp)}")
        rows.append(row)
    for n in inside:
        gs = reads[n]
        if not all(gs):
            continue
        rule = gs[0]["rule"]
        lr_e = COMPLETEP.lr.exponent(alpha)
        row = AuditRow(n, n.rpartition(".")[0], pz.specs[n].role, rule, {"lr": lr_e}, {}, "ok",
                       values={"lr": [g["lr"] for g in gs]}, axis="depth",
                       rules={"lr": f"m_L^({COMPLETEP.lr})"})
        row.found["lr"] = _slope(depths, [g["lr"] for g in gs])
        if rule == "adam" and all(g.get("eps") for g in gs):
            row.expected["eps"] = COMPLETEP.eps.exponent(alpha)
            row.found["eps"] = _slope(depths, [float(g["eps"]) for g in gs])
            row.values["eps"] = [float(g["eps"]) for g in gs]
        for q, what in (("lr", "LR"), ("eps", "Adam eps")):
            e, f = row.expected.get(q), row.found.get(q)
            if e is not None and (f is None or abs(f - e) > tol):
                row.verdict, row.broken = "FAIL", q
                row.message = (f"{what} inside residual blocks should be ∝ depth^{_fmt(e)} (CompleteP, "
                               f"alpha={alpha:g}, mutransfer.parametrize.rules), found ∝ depth^{_fmt(f)}")
                break
        rows.append(row)
    return rows


def _probe_branches(model: nn.Module, x: Any, block: str, branches: list[str]) -> dict[str, float]:
    """Each branch's multiplier: hooks on the branch (its output over its raw output)
    times the block's own scaling, fitted from y - x = s · (sum of branch outputs)."""
    raw: dict[str, torch.Tensor] = {}
    final: dict[str, torch.Tensor] = {}
    io: dict[str, Any] = {}
    handles = []
    for b in branches:
        m = model.get_submodule(b)

        def first(_m: nn.Module, _a: Any, out: Any, b: str = b) -> None:
            raw.setdefault(b, first_tensor(out).detach())  # type: ignore[union-attr]

        def last(_m: nn.Module, _a: Any, out: Any, b: str = b) -> None:
            final.setdefault(b, first_tensor(out).detach())  # type: ignore[union-attr]
        handles += [m.register_forward_hook(first, prepend=True), m.register_forward_hook(last)]

    def block_io(_m: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        io.setdefault("x", args[0].detach())
        io.setdefault("y", first_tensor(out).detach())  # type: ignore[union-attr]
    handles.append(model.get_submodule(block).register_forward_hook(block_io))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    total = sum(final[b] for b in branches)
    s_block = output_ratio(io["y"] - io["x"], total)  # type: ignore[arg-type]
    return {b: output_ratio(final[b], raw[b]) * s_block for b in branches}


def _use_role(pz: Any, pname: str, module: nn.Module) -> str:
    """The role of a parameter as used by one module: a tied embedding matrix is the
    input for its Embedding and the readout for the Linear that shares it."""
    role = pz.specs[pname].role
    if role in ("input", "output") and pz.specs[pname].shape and len(pz.specs[pname].shape) == 2:
        wd = pz.specs[pname].width_dims
        if isinstance(module, nn.Embedding):
            return "input"
        if isinstance(module, nn.Linear):
            return "output" if (1 in wd and 0 not in wd) else "input"
    return role


def _fans(shape: Sequence[int], module: nn.Module | None) -> tuple[int, int]:
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return 1, int(shape[0])
    if isinstance(module, nn.Embedding):
        return int(shape[0]), int(np.prod(shape[1:]))
    return int(np.prod(shape[1:])), int(shape[0])


def _param_row(pz: Any, pname: str, mname: str, widths: list[int], per_width: list[dict[str, Any]],
               tol: float) -> AuditRow:
    modules = [dict(pw["model"].named_modules())[mname] for pw in per_width]
    role = _use_role(pz, pname, modules[0])
    ps = [pw["params"][pname] for pw in per_width]
    gs = [pw["groups"].get(id(p)) for pw, p in zip(per_width, ps)]
    fans = [_fans(tuple(p.shape), m) for p, m in zip(ps, modules)]
    s_in = _slope(widths, [f[0] for f in fans]) or 0.0
    s_out = _slope(widths, [f[1] for f in fans]) or 0.0
    rr = role_rule("mup", role)
    trained = all(g is not None for g in gs) and ps[0].requires_grad
    rule = gs[0]["rule"] if trained else "-"

    values: dict[str, list[float]] = {}
    rms = [float(p.detach().double().pow(2).mean().sqrt()) if p.numel() > 1 else float("nan") for p in ps]
    values["init_rms"] = rms
    local = [next((n for n, q in m.named_parameters(recurse=False) if q is p), "")
             for m, p in zip(modules, ps)]
    mult_vals = [pw["mults"].get((mname, loc), float("nan")) for pw, loc in zip(per_width, local)]
    values["mult"] = mult_vals
    found: dict[str, float | None] = {"init": None, "lr": None, "mult": None, "wd": None}
    expected: dict[str, float | None] = {"init": None, "lr": None, "mult": None, "wd": None}

    all_zero = all(r == 0.0 for r in rms)
    init_tol = tol
    if all(math.isfinite(r) for r in rms) and not all_zero:
        found["init"] = _slope(widths, rms)
        init_tol = max(tol, 3.0 * _init_slope_se(widths, ps))
    init_rule = rr.init_std
    allowed: dict[str, list[float]] = {}
    if role == "output" and init_rule is not None:
        # the default readout_init's law is the expected one; any law of the range passes
        law = READOUT_INIT[DEFAULT_READOUT_INIT] or Power()
        init_rule = Power(init_rule.fan_in + law.fan_in, init_rule.fan_out + law.fan_out)
        allowed["init"] = [Power(rr.init_std.fan_in + e, rr.init_std.fan_out).of_width(s_in, s_out)
                           for e in READOUT_INIT_RANGE]
    if init_rule is not None and not all_zero and ps[0].numel() > 1:
        expected["init"] = init_rule.of_width(s_in, s_out)
    if all(math.isfinite(v) for v in mult_vals):
        found["mult"] = _slope(widths, [abs(v) for v in mult_vals])
        expected["mult"] = rr.multiplier.of_width(s_in, s_out)
    if trained:
        lrs = [g["lr"] for g in gs]  # type: ignore[index]
        values["lr"] = lrs
        found["lr"] = _slope(widths, lrs)
        if rule == "muon" and ps[0].ndim == 2 and role in MUON.roles:
            expected["lr"] = MUON.lr.of_width(s_in, s_out)
        else:
            expected["lr"] = rr.get("lr", rule).of_width(s_in, s_out)
        wds = [g["wd"] for g in gs]  # type: ignore[index]
        values["wd"] = wds
        values["eps"] = [float(g["eps"]) if g["eps"] is not None else float("nan") for g in gs]  # type: ignore[index]
        if all(v > 0 for v in wds):
            found["wd"] = _slope(widths, wds)
            # lr × wd constant in width: the decay timescale of the base width
            expected["wd"] = -(expected["lr"] or 0.0)

    row = AuditRow(pname, mname, role, rule, expected, found, "ok", values=values)
    if expected["init"] is not None:
        row.allowed = allowed
    lr_rule = MUON.lr if rule == "muon" and ps[0].ndim == 2 and role in MUON.roles else rr.get("lr", rule)
    row.rules = {"init": str(init_rule), "lr": str(lr_rule), "mult": str(rr.multiplier)}
    if init_tol > 0.5:  # too few entries for a sampled RMS to tell -1/2 from 0
        row.unjudged.append("init")
    _judge(row, rule, tol, init_tol)
    return row


def _init_slope_se(widths: Sequence[int], ps: Sequence[torch.Tensor]) -> float:
    """Standard error of the fitted init exponent from sampling: var(log RMS) is about
    Var(p²) / (4 n E[p²]²) per width (1/(2n) for Gaussian entries, 0 for constant ones)."""
    var = []
    for p in ps:
        sq = p.detach().double().reshape(-1) ** 2
        m = float(sq.mean())
        var.append(float(sq.var()) / (4 * sq.numel() * m * m) if m > 0 and sq.numel() > 1 else 0.0)
    x = np.log(np.asarray(widths, dtype=float))
    sxx = float(((x - x.mean()) ** 2).sum())
    return math.sqrt(float(np.mean(var)) / sxx) if sxx > 0 else float("inf")


def _judge(row: AuditRow, rule: str, tol: float, init_tol: float) -> None:
    e = dict(row.expected)
    f = dict(row.found)
    if "init" in row.unjudged:
        e["init"] = f["init"] = None
    fm = f["mult"] if f["mult"] is not None else 0.0
    em = e["mult"] if e["mult"] is not None else 0.0
    k = "sgd" if rule == "sgd" else "adam"
    exp_inv = invariant_exponents(em, e["init"], e["lr"], k)
    found_inv = invariant_exponents(fm, f["init"], f["lr"], k)
    tols = {"init": init_tol, "lr": tol, "mult": tol}

    def off(q: str, expect: float, got: float, move: float) -> bool:
        """Outside the tolerance of the expected exponent, or of its allowed range (the
        readout's init; ``move``: the multiplier's exponent, for the invariant)."""
        lo, hi = (v + move for v in row.allowed[q]) if q in row.allowed else (expect, expect)
        return not lo - tols[q] <= got <= hi + tols[q]

    bad = [q for q in ("init", "lr") if exp_inv[q] is not None and found_inv[q] is not None
           and off(q, exp_inv[q], found_inv[q], em)]  # type: ignore[arg-type]
    raw_off = [q for q in ("mult", "init", "lr") if e[q] is not None and f[q] is not None
               and off(q, e[q], f[q], 0.0)]  # type: ignore[arg-type]
    if bad:
        # Blame the raw quantity that differs from the table: the multiplier first (it
        # moves both invariants), then the one whose invariant broke.
        q = next((r for r in raw_off if r == "mult"), None) or next((r for r in raw_off if r in bad), bad[0])
        row.verdict, row.broken = "FAIL", q
        what = {"init": "init std", "lr": f"{'Adam' if k == 'adam' and rule != 'muon' else rule} LR",
                "mult": "forward multiplier"}[q]
        should = (_words(e[q]) if q not in row.allowed else
                  f"{_words(row.allowed[q][0])} (readout_init constant) to {_words(row.allowed[q][1])} "
                  f"(fan_in, the default)")
        row.message = (f"{row.role} {what} should be {should} (μP rule {row.rules.get(q, '?')}, "
                       f"mutransfer.parametrize.rules), found {_words(f[q])}")
        return
    if e["wd"] is not None and f["wd"] is not None and abs(e["wd"] - f["wd"]) > tol:
        row.verdict, row.broken = "FAIL", "wd"
        lr_e = e["lr"] or 0.0
        row.message = (f"weight decay: decay coefficient should be {_words(e['wd'])} "
                       f"(lr·wd {_words(lr_e + e['wd'])}), found {_words(f['wd'])} "
                       f"(lr·wd {_words((f['lr'] or 0.0) + f['wd'])})")
        return
    if raw_off:
        row.verdict = "ok (equivalent)"
    elif all(v is None for v in f.values()):
        row.verdict = "n/a"


def _attention_rows(widths: list[int], per_width: list[dict[str, Any]], tol: float) -> list[AuditRow]:
    rows = []
    by_module: dict[str, list[tuple[int, float]]] = {}
    for pw in per_width:
        seen: set[str] = set()
        for mname, d, scale in pw["attn"]:
            if mname not in seen:
                by_module.setdefault(mname, []).append((d, scale))
                seen.add(mname)
    for mname, pts in by_module.items():
        if len(pts) != len(widths):
            continue
        ds, scales = [p[0] for p in pts], [p[1] for p in pts]
        expected_e = ATTENTION_EXPONENT["mup"]
        row = AuditRow(mname, mname, "attention", "-", {}, {}, "ok",
                       values={"head_dim": [float(d) for d in ds], "scale": scales})
        if len(set(ds)) < 2:
            # Fixed head dim (heads grow with width): the scale must not move with width.
            row.expected["attention"] = 0.0
            row.found["attention"] = _slope(widths, scales)
            var = "width (head dim fixed)"
        else:
            row.expected["attention"] = expected_e
            row.found["attention"] = _slope(ds, scales)
            var = row.axis = "d_head"
        fe, ee = row.found["attention"], row.expected["attention"]
        if fe is not None and abs(fe - ee) > tol:
            row.verdict, row.broken = "FAIL", "attention"
            row.message = (f"attention softmax scale should be {_words(ee, var)} (TP-V §4, "
                           f"mutransfer.parametrize.rules), found {_words(fe, var)}")
        rows.append(row)
    return rows


def _default_loss(model: nn.Module, x: Any) -> torch.Tensor:
    logits = first_tensor(model(x))
    if logits is None or logits.ndim < 2:
        raise ValueError("the model's output is not logits; pass loss_fn")
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, logits.shape[-1], logits.shape[:-1], generator=g)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


def _coord_check(builder: Builder, optimizer_builder: Callable[..., Any] | None, widths: list[int],
                 name: str, get_input: Callable[[nn.Module], Any],
                 loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None, steps: int, seeds: int,
                 tol: float, readout_modules: tuple[str, ...] = ()) -> Any:
    import pandas as pd

    records = []
    for w in widths:
        for seed in range(seeds):
            torch.manual_seed(seed)
            model, opt = _call(builder, optimizer_builder, w, name)
            x = get_input(model)
            for step, module, l1, loss in record_activations(model, opt, x, loss_fn or _default_loss,
                                                             default_modules(model), steps):
                records.append({"width": w, "depth": 0, "seed": seed, "module": module, "step": step,
                                "l1": l1, "loss": loss})
    data = pd.DataFrame(records)
    if not np.all(np.isfinite(data["l1"])):
        r = data[~np.isfinite(data["l1"])].iloc[0]
        raise ValueError(f"{name}: non-finite activation in {r['module']} at width {r['width']}, "
                         f"step {r['step']}: the coordinate check cannot run at this LR")
    # the readouts' μP shrink at init is allowed, not flagged as vanishing
    return CoordCheckResult("audit", data, fit_slopes(data), tol,
                            {"widths": widths, "steps": steps, "seeds": seeds}, tuple(readout_modules))


__all__ = ["audit"]

