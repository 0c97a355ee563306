"""The transfer card's schema and its one validator, :func:`validate_card`: every field's
type and range, then the fields that must agree with each other (the module docstring of
:mod:`mutransfer.card.build` lists the sections). Every failure is one ValueError naming the
field path and the value."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import torch

from mutransfer._io import plain
from mutransfer.card.target import build_target_model, hf_config_of, model_fields
from mutransfer.models.source import hf_shape
from mutransfer.parametrize.rules import role_rule
from mutransfer.parametrize.specs import KINDS, ROLES, WD_MODES
from mutransfer.training.config_fields import INT_LIMITS
from mutransfer.training.optim import OPTIMIZER_NAMES
from mutransfer.training.schedules import DECAY_SHAPES, SCHEDULE_KINDS, Schedule, ScheduleConfig

SCHEMA_V1 = "mutransfer.card/v1"


SCHEMA_V2 = "mutransfer.card/v2"


SCHEMA = SCHEMA_V2


SCHEMAS = (SCHEMA_V1, SCHEMA_V2)


REQUIRED = ("schema", "source", "target", "parametrization", "optimizer", "schedule", "batch",
            "param_groups", "forward_multipliers", "projected", "provenance")


REQUIRED_V2 = (*REQUIRED, "audit")


#: Every top-level section a card may hold (``trust`` is written by ``mutransfer transfer``);
#: any other is refused before the document is walked.
SECTIONS = (*REQUIRED_V2, "trust")


#: What only a v2 card has: a card tagged v1 that holds one is refused (its tag lies).
V2_ONLY = {"audit": "section audit", "trust": "section trust", "target.model": "target.model",
           "optimizer.tau": "optimizer.tau"}


#: Per-parameter init: the model's own (``keep``; ``model`` is accepted as a synonym),
#: zeros, a multiplier of the model's own init, or a fresh normal with this std.
_INIT = re.compile(r"keep|model|zeros|scale:(?P<scale>.+)|normal:(?P<std>.+)")


#: What a card may leave out, and the value it then means: filled once, by
#: :func:`validate_card`, so every reader of a validated card (apply, the exporters,
#: :func:`schedule_config`) indexes the field instead of repeating the default. A
#: parameter group without ``eps`` takes the optimizer's.
DEFAULTS: dict[str, dict[str, Any]] = {
    "optimizer": {"name": "adamw", "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.0,
                  "wd_mode": "coupled"},
    "schedule": {"warmup_steps": 0, "lr_floor": 0.0},
    "param_groups": {"optimizer": "adamw"},
}


def _filled(section: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with :data:`DEFAULTS` ``[section]`` where a field is absent or null
    (in its place, or after the given fields: a card's field order is kept)."""
    default = DEFAULTS[section]
    out = {k: default[k] if v is None and k in default else v for k, v in values.items()}
    return {**out, **{k: v for k, v in default.items() if k not in out}}


def _with_defaults(card: Mapping[str, Any]) -> dict[str, Any]:
    """``card`` (its sections already mappings) with :data:`DEFAULTS` filled in (a new
    dict; ``card`` is not touched)."""
    out = {**card, "optimizer": _filled("optimizer", card["optimizer"]),
           "schedule": _filled("schedule", card["schedule"])}
    if isinstance(card["param_groups"], list):
        eps = out["optimizer"]["eps"]
        out["param_groups"] = [
            _filled("param_groups", {**g, "eps": eps if g.get("eps") is None else g["eps"]})
            if isinstance(g, Mapping) else g for g in card["param_groups"]]
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Check:
    """Field checks that raise ``ValueError("card field PATH: WHY, got VALUE")``."""

    @staticmethod
    def fail(path: str, why: str, value: Any) -> None:
        raise ValueError(f"card field {path}: {why}, got {value!r}")

    def mapping(self, path: str, v: Any) -> Mapping[str, Any]:
        if not isinstance(v, Mapping):
            self.fail(path, "must be a mapping", v)
        return v

    def number(self, path: str, v: Any, *, low: float | None = None, high: float | None = None,
               open_low: bool = False, none: bool = False) -> None:
        if v is None and none:
            return
        if isinstance(v, str) and _parses_as_float(v):
            self.fail(path, f"must be a number, not a string (YAML 1.1 reads 1e-3 as text: "
                      f"write {float(v)!r})", v)
        if not _is_number(v) or not math.isfinite(v):
            self.fail(path, "must be a finite number", v)
        if low is not None and (v <= low if open_low else v < low):
            self.fail(path, f"must be {'>' if open_low else '>='} {low:g}", v)
        if high is not None and v > high:
            self.fail(path, f"must be <= {high:g}", v)

    def positive(self, path: str, v: Any, *, none: bool = False) -> None:
        self.number(path, v, low=0.0, open_low=True, none=none)

    def integer(self, path: str, v: Any, *, low: int = 1, none: bool = False,
                high: int | None = None) -> None:
        if v is None and none:
            return
        if not _is_int(v):
            self.fail(path, "must be an integer", v)
        if v < low:
            self.fail(path, f"must be >= {low}", v)
        if high is not None and v > high:
            self.fail(path, f"must be <= {high:,} (no real run is larger)", v)

    def choice(self, path: str, v: Any, choices: tuple[Any, ...], *, none: bool = False) -> None:
        if v is None and none:
            return
        if not isinstance(v, str) or v not in choices:
            self.fail(path, f"must be one of {', '.join(map(str, choices))}", v)

    def string(self, path: str, v: Any, *, none: bool = False) -> None:
        if not (isinstance(v, str) or (v is None and none)):
            self.fail(path, "must be a string", v)


_C = _Check()


def _finite_everywhere(obj: Any, path: str) -> None:
    """No NaN or infinity anywhere (intervals write an open side as null)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        _C.fail(path, "must be finite (write an open interval side as null)", obj)
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            if not isinstance(k, str):
                _C.fail(f"{path}.{k}" if path else str(k), "keys must be strings", k)
            _finite_everywhere(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _finite_everywhere(v, f"{path}[{i}]")


def check_init(path: str, init: Any) -> None:
    """``keep`` | ``model`` | ``zeros`` | ``scale:<finite>`` | ``normal:<finite >= 0>``."""
    m = _INIT.fullmatch(init) if isinstance(init, str) else None
    if m is None:
        _C.fail(path, "must be keep, zeros, scale:<number> or normal:<std>", init)
    for key, low in (("scale", None), ("std", 0.0)):
        text = m.group(key)
        if text is None:
            continue
        try:
            value = float(text)
        except ValueError:
            _C.fail(path, f"{key} is not a number", init)
        if not math.isfinite(value) or (low is not None and value < low):
            _C.fail(path, f"{key} must be a finite number{' >= 0' if low is not None else ''}", init)


#: Upper bounds of a card's sizes: far above any real run, below what would allocate or loop
#: without end (``total_steps: 1e30``). The trainer's own limits
#: (``mutransfer.training.config_fields.INT_LIMITS``) where it has the field; vocab at 2**24
#: (the largest tokenizers have ~2**18).
CARD_LIMITS: dict[str, int] = {
    "width": INT_LIMITS["width"], "depth": INT_LIMITS["depth"], "seq_len": INT_LIMITS["seq_len"],
    "steps": INT_LIMITS["steps"], "sequences": INT_LIMITS["batch_size"], "vocab_size": 1 << 24,
    "head_dim": INT_LIMITS["head_dim"], "dp_size": 1 << 24,
}


def _check_target(t: Mapping[str, Any]) -> None:
    _unknown("target", t, SECTION_FIELDS["target"])
    for key in ("width", "depth", "n_params", "seq_len", "dp_size"):
        _C.integer(f"target.{key}", t.get(key), none=True, high=CARD_LIMITS.get(key))
    _C.integer("target.n_params_nonembed", t.get("n_params_nonembed"), low=0, none=True)
    _C.positive("target.tokens", t.get("tokens"), none=True)
    _C.positive("target.tokens_per_param", t.get("tokens_per_param"), none=True)
    _C.choice("target.dtype", t.get("dtype"), ("float32", "bfloat16", "float16"), none=True)
    if "model" in t:
        model = _C.mapping("target.model", t["model"])
        _C.choice("target.model.kind", model.get("kind"), ("gpt", "mlp", "hf"), none=True)
        if model.get("kind") == "hf":
            _unknown("target.model", model, SECTION_FIELDS["target.model (hf)"])
            _C.string("target.model.source", model.get("source"))
            _C.mapping("target.model.config", model.get("config"))
        _C.string("target.model.preset", model.get("preset"), none=True)
        for key in ("width", "depth", "vocab_size", "seq_len", "head_dim", "n_head",
                    "in_features", "out_features"):
            high = CARD_LIMITS.get({"n_head": "width", "in_features": "width",
                                    "out_features": "width"}.get(key, key))
            _C.integer(f"target.model.{key}", model.get(key), low=0 if key == "depth" else 1,
                       none=True, high=high)
        _C.positive("target.model.mlp_ratio", model.get("mlp_ratio"), none=True)


#: Ranges of the card's real-valued fields beyond "positive and finite": a hand edit past
#: them (``1e300``) would overflow a forward pass or the optimizer's update, not train.
#: Forward multipliers and hook scales span widths 2^-20..2^20 of a base with room to spare.
CARD_RANGES: dict[str, tuple[float, float]] = {
    "multiplier": (1e-12, 1e12), "lr": (0.0, 1e4), "eps": (0.0, 1.0), "weight_decay": (0.0, 100.0),
}
#: The fields of ``optimizer`` (:data:`DEFAULTS` fills the optional ones); any other is refused.
OPTIMIZER_FIELDS = ("name", "lr", "betas", "eps", "weight_decay", "wd_mode", "tau")
#: The forward multipliers a card may tune (:class:`mutransfer.parametrize.specs.Multipliers`).
MULTIPLIER_FIELDS = ("input", "output", "attention", "residual")
#: The fields of a forward hook.
HOOK_FIELDS = ("module", "kind", "scale")
#: The fields of every other section whose keys are known (what :mod:`mutransfer.card.build`
#: and :mod:`mutransfer.card.trust` write, and a v1 card held): any other key is refused, as a
#: misspelt field would be ignored. ``source`` and ``projected`` are records of the proxy and
#: the projection, free in form, and are not listed.
SECTION_FIELDS: dict[str, tuple[str, ...]] = {
    "target": ("model", "width", "depth", "n_params", "n_params_nonembed", "tokens", "tokens_per_param",
               "seq_len", "seq_len_from", "dp_size", "dtype", "precision", "vocab_change", "arch_change",
               "tokenizer"),
    "target.model (hf)": ("kind", "source", "model_id", "head_rule", "model_type", "config", "redacted",
                          "preset"),
    "parametrization": ("kind", "rules", "width", "base_width", "depth", "base_depth", "depth_alpha",
                        "readout_init", "init", "multipliers", "lr_mults"),
    "schedule": ("kind", "warmup_steps", "warmup_tokens", "decay_fraction", "decay_shape", "total_steps",
                 "lr_floor"),
    "batch": ("sequences", "tokens", "seq_len", "dp_size", "micro_batch", "grad_accum", "rounding"),
    "param_groups": ("name", "shape", "role", "optimizer", "lr", "lr_mult", "init", "init_std",
                     "weight_decay", "eps"),
    "forward_multipliers": ("hooks", "attention"),
    "audit": ("holdout", "passed"),
    "trust": ("level", "intervals", "options", "narrows_most", "warnings", "summary", "horizon"),
    "trust.intervals": ("value", "lo", "hi", "factor", "how"),
    "provenance": ("package", "version", "git_revision", "date", "study", "storage"),
}


def _unknown(path: str, section: Mapping[str, Any], known: tuple[str, ...]) -> None:
    extra = [str(k) for k in section if k not in known]
    if extra:
        _C.fail(f"{path}.{extra[0]}", f"is not a field of {path} (it has {', '.join(known)}; a misspelt "
                "name would be ignored)", section[extra[0]])


def _ranged(path: str, v: Any, what: str, *, zero: bool = False) -> None:
    """``v`` a finite number inside :data:`CARD_RANGES` ``[what]`` (0 itself only when
    ``zero``; the low end is open for positive fields)."""
    lo, hi = CARD_RANGES[what]
    _C.number(path, v, low=lo, open_low=not zero, high=hi)


def _check_parametrization(p: Mapping[str, Any]) -> None:
    _unknown("parametrization", p, SECTION_FIELDS["parametrization"])
    _C.choice("parametrization.kind", p.get("kind"), KINDS)
    _C.integer("parametrization.width", p.get("width"), high=CARD_LIMITS["width"])
    _C.integer("parametrization.base_width", p.get("base_width"), high=CARD_LIMITS["width"])
    if p["base_width"] > p["width"]:
        _C.fail("parametrization.base_width", f"must be <= width {p['width']}", p["base_width"])
    _C.integer("parametrization.depth", p.get("depth"), none=True, high=CARD_LIMITS["depth"])
    _C.integer("parametrization.base_depth", p.get("base_depth"), none=True, high=CARD_LIMITS["depth"])
    if p.get("kind") == "completep" and p.get("depth_alpha") not in (0.5, 1.0):
        _C.fail("parametrization.depth_alpha", "must be 0.5 or 1", p.get("depth_alpha"))
    mults = _C.mapping("parametrization.multipliers", p.get("multipliers", {}))
    _unknown("parametrization.multipliers", mults, MULTIPLIER_FIELDS)
    for k, v in mults.items():
        _ranged(f"parametrization.multipliers.{k}", v, "multiplier")
    lr_mults = _C.mapping("parametrization.lr_mults", p.get("lr_mults", {}))
    for k, v in lr_mults.items():
        _C.choice("parametrization.lr_mults (role)", k, ROLES)
        _C.positive(f"parametrization.lr_mults.{k}", v)


def _check_optimizer(o: Mapping[str, Any]) -> None:
    _unknown("optimizer", o, OPTIMIZER_FIELDS)
    _C.choice("optimizer.name", o.get("name"), OPTIMIZER_NAMES)
    _ranged("optimizer.lr", o.get("lr"), "lr")
    betas = o.get("betas")
    if not isinstance(betas, list) or len(betas) != 2:
        _C.fail("optimizer.betas", "must be a list of two numbers", betas)
    for i, b in enumerate(betas):
        _C.number(f"optimizer.betas[{i}]", b, low=0.0)
        if b >= 1:
            _C.fail(f"optimizer.betas[{i}]", "must be < 1", b)
    _ranged("optimizer.eps", o.get("eps"), "eps")
    _ranged("optimizer.weight_decay", o.get("weight_decay"), "weight_decay", zero=True)
    _C.choice("optimizer.wd_mode", o.get("wd_mode"), WD_MODES)
    _C.positive("optimizer.tau", o.get("tau"), none=True)


def _check_schedule(s: Mapping[str, Any], v2: bool) -> None:
    _unknown("schedule", s, SECTION_FIELDS["schedule"])
    _C.choice("schedule.kind", s.get("kind"), SCHEDULE_KINDS)
    _C.integer("schedule.warmup_steps", s["warmup_steps"], low=0, high=CARD_LIMITS["steps"])
    decays = s["kind"] not in ("constant", "inverse_sqrt")
    if v2 and decays and s.get("total_steps") is None:
        _C.fail("schedule.total_steps", f"is required by the {s['kind']!r} schedule", None)
    _C.integer("schedule.total_steps", s.get("total_steps"), none=True, high=CARD_LIMITS["steps"])
    _C.number("schedule.decay_fraction", s.get("decay_fraction"), low=0.0, high=1.0, none=True)
    _C.choice("schedule.decay_shape", s.get("decay_shape"), DECAY_SHAPES, none=True)
    _C.number("schedule.lr_floor", s.get("lr_floor"), low=0.0, high=1.0, none=True)
    _C.number("schedule.warmup_tokens", s.get("warmup_tokens"), low=0.0, none=True)
    if s.get("total_steps") is not None or not decays:
        try:
            Schedule(schedule_config(s))
        except ValueError as exc:
            _C.fail("schedule", str(exc), dict(s))


def _check_batch(b: Mapping[str, Any]) -> None:
    _unknown("batch", b, SECTION_FIELDS["batch"])
    _C.integer("batch.sequences", b.get("sequences"), high=CARD_LIMITS["sequences"])
    for key in ("tokens", "seq_len", "dp_size", "micro_batch", "grad_accum"):
        high = {"tokens": CARD_LIMITS["sequences"] * CARD_LIMITS["seq_len"]}.get(key, CARD_LIMITS.get(
            key, CARD_LIMITS["sequences"]))
        _C.integer(f"batch.{key}", b.get(key), none=True, high=high)
    dp = b.get("dp_size")
    if dp is not None and b["sequences"] % dp:
        _C.fail("batch.sequences", f"must be a multiple of dp_size {dp}", b["sequences"])
    micro = b.get("micro_batch")
    if micro is not None and b["sequences"] % ((dp or 1) * micro):
        _C.fail("batch.sequences", f"must be a multiple of dp_size × micro_batch = {(dp or 1) * micro}",
                b["sequences"])
    if micro is not None and b.get("grad_accum") is not None and (
            b["grad_accum"] * (dp or 1) * micro != b["sequences"]):
        _C.fail("batch.grad_accum", f"must equal sequences / (dp_size × micro_batch) = "
                f"{b['sequences'] // ((dp or 1) * micro)}", b["grad_accum"])
    if b.get("seq_len") is not None and b.get("tokens") is not None and (
            b["tokens"] != b["sequences"] * b["seq_len"]):
        _C.fail("batch.tokens", f"must equal sequences × seq_len = {b['sequences'] * b['seq_len']}",
                b["tokens"])


def _check_param_groups(groups: Any) -> None:
    if not isinstance(groups, list) or not groups:
        _C.fail("param_groups", "must be a non-empty list", groups)
    seen: set[str] = set()
    for i, g in enumerate(groups):
        g = _C.mapping(f"param_groups[{i}]", g)
        name = g.get("name")
        _C.string(f"param_groups[{i}].name", name)
        where = f"param_groups[{i}] ({name})"
        _unknown(f"param_groups[{i}]", g, SECTION_FIELDS["param_groups"])
        if name in seen:
            _C.fail(f"{where}.name", "appears twice", name)
        seen.add(name)
        for key in ("shape", "lr", "init", "weight_decay"):
            if key not in g:
                _C.fail(where, f"lacks {key!r}", dict(g))
        shape = g["shape"]
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            _C.fail(f"{where}.shape", "must be a list of non-negative integers", shape)
        _C.choice(f"{where}.role", g.get("role"), ROLES, none=True)
        _C.choice(f"{where}.optimizer", g["optimizer"], OPTIMIZER_NAMES)
        _ranged(f"{where}.lr", g["lr"], "lr")
        _ranged(f"{where}.lr_mult", g.get("lr_mult", 1.0), "multiplier")
        check_init(f"{where}.init", g["init"])
        _C.number(f"{where}.init_std", g.get("init_std"), low=0.0, none=True)
        _ranged(f"{where}.weight_decay", g["weight_decay"], "weight_decay", zero=True)
        _ranged(f"{where}.eps", g["eps"], "eps")


def _check_forward(fm: Mapping[str, Any]) -> None:
    _unknown("forward_multipliers", fm, SECTION_FIELDS["forward_multipliers"])
    hooks = fm.get("hooks")
    if not isinstance(hooks, list):
        _C.fail("forward_multipliers.hooks", "must be a list", hooks)
    for i, h in enumerate(hooks):
        h = _C.mapping(f"forward_multipliers.hooks[{i}]", h)
        _unknown(f"forward_multipliers.hooks[{i}]", h, HOOK_FIELDS)
        _C.string(f"forward_multipliers.hooks[{i}].module", h.get("module"))
        _C.choice(f"forward_multipliers.hooks[{i}].kind", h.get("kind"), ("pre", "post"))
        _ranged(f"forward_multipliers.hooks[{i}].scale", h.get("scale"), "multiplier")
    att = _C.mapping("forward_multipliers.attention", fm.get("attention"))
    for k, v in att.items():
        _ranged(f"forward_multipliers.attention.{k}", v, "multiplier")


def _check_readout_hooks(card: Mapping[str, Any]) -> None:
    """Every readout hook (``kind: pre``, the output multiplier's home) agrees with the
    multiplier it carries: scale = ``multipliers.output`` × the output rule's width factor
    at ``width / base_width`` (μP: base_width/width; SP: 1). Checked for the models the
    card builds itself (``target.model`` kind gpt, mlp or hf), whose readouts carry no
    multiplier of their own."""
    pz, model = card["parametrization"], card["target"].get("model")
    if not isinstance(model, Mapping) or model.get("kind", "gpt") not in ("gpt", "mlp", "hf"):
        return
    output = pz.get("multipliers", {}).get("output", 1.0)
    want = output * role_rule(pz["kind"], "output").multiplier(pz["width"] / pz["base_width"], 1.0)
    for i, h in enumerate(card["forward_multipliers"]["hooks"]):
        if h["kind"] == "pre" and not math.isclose(h["scale"], want, rel_tol=1e-6):
            _C.fail(f"forward_multipliers.hooks[{i}] ({h['module']}).scale",
                    f"disagrees with parametrization.multipliers.output {output!r} × the {pz['kind']} output "
                    f"rule at width {pz['width']} / base {pz['base_width']} = {want!r}", h["scale"])


def _check_audit(a: Mapping[str, Any]) -> None:
    _unknown("audit", a, SECTION_FIELDS["audit"])
    rows = a.get("holdout", [])
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        _C.fail("audit.holdout", "must be a list of mappings", rows)
    if a.get("passed") is not None and not isinstance(a["passed"], bool):
        _C.fail("audit.passed", "must be true, false or null", a["passed"])


def _check_trust(t: Any) -> None:
    """The ``trust`` block (:func:`mutransfer.card.trust.trust_block`): a level in (0, 1), each
    interval's value and factor (hi / lo >= 1, or null when open), summary lines."""
    t = _C.mapping("trust", t)
    _unknown("trust", t, SECTION_FIELDS["trust"])
    _C.number("trust.level", t.get("level"), low=0.0, high=1.0, open_low=True)
    ivs = _C.mapping("trust.intervals", t.get("intervals"))
    for k, iv in ivs.items():
        iv = _C.mapping(f"trust.intervals.{k}", iv)
        _unknown(f"trust.intervals.{k}", iv, SECTION_FIELDS["trust.intervals"])
        _C.number(f"trust.intervals.{k}.value", iv.get("value"), low=0.0)
        for side in ("lo", "hi"):
            _C.number(f"trust.intervals.{k}.{side}", iv.get(side), low=0.0, none=True)
        _C.number(f"trust.intervals.{k}.factor", iv.get("factor"), low=1.0 - 1e-12, none=True)
    summary = t.get("summary")
    if not isinstance(summary, list) or not all(isinstance(x, str) for x in summary):
        _C.fail("trust.summary", "must be a list of strings", summary)
    _C.integer("trust.warnings", t.get("warnings"), low=0)
    if t.get("horizon") is not None:  # absent from cards written before it
        h = _C.mapping("trust.horizon", t["horizon"])
        for k in ("target_steps", "measured_steps"):
            _C.integer(f"trust.horizon.{k}", h.get(k), low=1)
        _C.integer("trust.horizon.proxy_steps", h.get("proxy_steps"), low=1, none=True)
        for k in ("past_measured", "past_proxy"):
            _C.number(f"trust.horizon.{k}", h.get(k), low=0.0, open_low=True, none=k == "past_proxy")
        if not isinstance(h.get("beyond"), bool):
            _C.fail("trust.horizon.beyond", "must be true or false", h.get("beyond"))


def _check_lr_sensitivity(projected: Mapping[str, Any]) -> None:
    """``projected.lr.loso_ratio`` (max/min of the base LR refitted without each seed) is
    >= 1 or null, ``loso_octaves`` its log2, ``loso.complete`` a boolean."""
    lr = projected.get("lr")
    if not isinstance(lr, Mapping):
        return
    _C.number("projected.lr.loso_ratio", lr.get("loso_ratio"), low=1.0, none=True)
    _C.number("projected.lr.loso_octaves", lr.get("loso_octaves"), low=0.0, none=True)
    if (lr.get("loso_ratio") is None) != (lr.get("loso_octaves") is None) or (
            lr.get("loso_ratio") is not None
            and abs(math.log2(lr["loso_ratio"]) - lr["loso_octaves"]) > 1e-9 * max(1.0, lr["loso_octaves"])):
        _C.fail("projected.lr.loso_octaves", f"must be log2(loso_ratio {lr.get('loso_ratio')!r})",
                lr.get("loso_octaves"))
    if "loso" in lr:
        loso = _C.mapping("projected.lr.loso", lr["loso"])
        if not isinstance(loso.get("complete"), bool):
            _C.fail("projected.lr.loso.complete", "must be true or false", loso.get("complete"))


def _check_provenance(p: Mapping[str, Any]) -> None:
    _unknown("provenance", p, SECTION_FIELDS["provenance"])
    for key in ("package", "version", "date"):
        _C.string(f"provenance.{key}", p.get(key), none=True)
    for key in ("git_revision", "study", "storage"):
        _C.string(f"provenance.{key}", p.get(key), none=True)


def _target_shape(model: Mapping[str, Any]) -> tuple[str, int | None, int | None, int | None]:
    """(where, width, depth, vocab) that ``target.model`` declares: its own fields, or for
    ``kind: hf`` the transformers config's hidden size and layer count."""
    if model.get("kind") != "hf":
        return "target.model", model.get("width"), model.get("depth"), model.get("vocab_size")
    cfg = hf_config_of(model)
    width, depth, _ = hf_shape(cfg)
    vocab = getattr(cfg, "vocab_size", None)
    return "target.model.config", width, depth, vocab if _is_int(vocab) else None


@functools.lru_cache(maxsize=8)
def _built_shapes(model_json: str) -> dict[str, list[int]]:
    """Name -> shape of the model a card's ``target.model`` builds, on the meta device (no
    memory, no init); cached on the model's JSON, since every load, apply and export validates."""
    with torch.device("meta"):
        model = build_target_model({"target": {"model": json.loads(model_json)}}, dtype="float32")
    return {n: list(p.shape) for n, p in model.named_parameters()}


def _check_consistency(card: Mapping[str, Any]) -> None:
    """Fields that must agree with each other, not only be well typed: ``target`` with its
    model config, ``parametrization.width`` with the target, the batch's context with the
    target's, every group's lr with ``optimizer.lr × lr_mult``, and every group's shape with
    the model built from ``target.model`` (on the meta device). One ValueError naming the
    field and both values."""
    t, pz, b = card["target"], card["parametrization"], card["batch"]
    model = t.get("model")
    if isinstance(model, Mapping):
        where, width, depth, vocab = _target_shape(model)
        if model.get("kind") == "hf":
            for key, v in (("width", width), ("depth", depth), ("vocab_size", vocab)):
                _C.integer(f"{where} ({key})", v, low=0 if key == "depth" else 1, none=key == "vocab_size",
                           high=CARD_LIMITS[key])
        for key, v in (("width", width), ("depth", depth)):
            if t.get(key) is not None and v is not None and t[key] != v:
                _C.fail(f"target.{key}", f"disagrees with {where} ({key} {v})", t[key])
        m_seq = model.get("seq_len") if model.get("kind") == "gpt" else None
        if t.get("seq_len") is not None and m_seq is not None and t["seq_len"] != m_seq:
            _C.fail("target.seq_len", f"disagrees with target.model.seq_len ({m_seq})", t["seq_len"])
    if t.get("width") is not None and pz["width"] != t["width"]:
        _C.fail("parametrization.width", f"disagrees with target.width ({t['width']})", pz["width"])
    if b.get("seq_len") is not None and t.get("seq_len") is not None and b["seq_len"] != t["seq_len"]:
        _C.fail("batch.seq_len", f"disagrees with target.seq_len ({t['seq_len']})", b["seq_len"])
    base_lr = card["optimizer"]["lr"]
    for i, g in enumerate(card["param_groups"]):
        if "lr_mult" not in g:  # a v1 card may give absolute LRs only
            continue
        want = base_lr * g["lr_mult"]
        if not math.isclose(g["lr"], want, rel_tol=1e-9):
            _C.fail(f"param_groups[{i}] ({g['name']}).lr", f"disagrees with optimizer.lr {base_lr!r} × "
                    f"lr_mult {g['lr_mult']!r} = {want!r}", g["lr"])
    if isinstance(model, Mapping):
        if model.get("kind", "gpt") != "hf":
            kind = model.get("kind", "gpt")
            known = model_fields(kind)
            for key in model:
                if key not in known:
                    cls = "GPTConfig" if kind == "gpt" else "MLPConfig"
                    _C.fail(f"target.model.{key}", f"is not a {cls} field "
                            f"(it has {', '.join(sorted(known))})", model[key])
        try:
            shapes = _built_shapes(json.dumps(plain(dict(model)), sort_keys=True))
        except ValueError as exc:
            _C.fail("target.model", f"does not build ({exc})", model.get("kind"))
        names = [g["name"] for g in card["param_groups"]]
        for i, g in enumerate(card["param_groups"]):
            if g["name"] not in shapes:
                _C.fail(f"param_groups[{i}].name", "is not a parameter of the model target.model builds "
                        f"(it has e.g. {sorted(shapes)[:3]})", g["name"])
            if list(g["shape"]) != shapes[g["name"]]:
                _C.fail(f"param_groups[{i}] ({g['name']}).shape", "disagrees with the model target.model "
                        f"builds (shape {shapes[g['name']]})", g["shape"])
        missing = sorted(set(shapes) - set(names))
        if missing:
            _C.fail("param_groups", f"lacks {len(missing)} parameter(s) of the model target.model builds, "
                    f"e.g. {missing[:3]}", len(names))


#: Schedule fields of older cards, read under today's name: ``min_lr_ratio`` is ``lr_floor``.
LEGACY_SCHEDULE_FIELDS: dict[str, str] = {"min_lr_ratio": "lr_floor"}


def _renamed_schedule(s: Mapping[str, Any]) -> dict[str, Any]:
    """``s`` with each legacy field under its new name (a new dict; ``s`` is not touched);
    both names with different values is an error naming them."""
    out = dict(s)
    for old, new in LEGACY_SCHEDULE_FIELDS.items():
        if old not in out:
            continue
        value = out.pop(old)
        if new in out and out[new] != value:
            _C.fail(f"schedule.{old}", f"is the old name of schedule.{new} ({out[new]!r}) and "
                    "disagrees with it", value)
        out.setdefault(new, value)
    return out


def validate_card(card: Any) -> dict[str, Any]:
    """Check a card's schema tag, sections, and every field's type and range.

    v1 and v2 share the checks; v2 also requires ``audit`` and, for schedules that
    decay, ``schedule.total_steps``. Every failure is one ValueError naming the field
    path and the value (``card field param_groups[3] (wte.weight).init: ...``), never a
    TypeError or AttributeError. Returns the card as a plain dict, with the schedule's
    legacy field names (:data:`LEGACY_SCHEDULE_FIELDS`) under today's and the fields a
    card may leave out filled in (:data:`DEFAULTS`).
    """
    if not isinstance(card, Mapping):
        raise ValueError(f"a transfer card must be a mapping, got {type(card).__name__}")
    schema = card.get("schema")
    if schema not in SCHEMAS:
        raise ValueError(f"unsupported card schema {schema!r}; expected {SCHEMA_V2!r} (or {SCHEMA_V1!r})")
    v2 = schema == SCHEMA_V2
    unknown = [str(k) for k in card if k not in SECTIONS]
    if unknown:  # before anything is walked: an extra key may hold anything
        raise ValueError(f"transfer card has unknown section(s): {', '.join(unknown[:5])}; a card holds "
                         f"only {', '.join(SECTIONS)}")
    missing = [k for k in (REQUIRED_V2 if v2 else REQUIRED) if k not in card]
    if missing:
        raise ValueError(f"transfer card is missing section(s): {', '.join(missing)}")
    if not v2:
        for path, what in V2_ONLY.items():
            head, _, key = path.partition(".")
            sec = card.get(head)
            if (sec is not None and not key) or (isinstance(sec, Mapping) and sec.get(key) is not None):
                raise ValueError(f"transfer card is tagged {SCHEMA_V1!r} but holds {what}, which only "
                                 f"{SCHEMA_V2!r} has; fix its schema tag")
    for key in ("source", "target", "parametrization", "optimizer", "schedule", "batch",
                "forward_multipliers", "projected", "provenance", *(("audit",) if v2 else ())):
        _C.mapping(key, card[key])
    card = _with_defaults({**card, "schedule": _renamed_schedule(card["schedule"])})
    _check_target(card["target"])
    _check_parametrization(card["parametrization"])
    _check_optimizer(card["optimizer"])
    _check_schedule(card["schedule"], v2)
    _check_batch(card["batch"])
    _check_param_groups(card["param_groups"])
    _check_forward(card["forward_multipliers"])
    if v2:
        _check_audit(card["audit"])
    _check_provenance(card["provenance"])
    if "trust" in card:
        _check_trust(card["trust"])
    _check_lr_sensitivity(card["projected"])
    _check_readout_hooks(card)
    _check_consistency(card)
    _finite_everywhere(dict(card), "")  # last, once every key is known: source, projected, audit
    return dict(card)


def schedule_config(schedule: Mapping[str, Any]) -> ScheduleConfig:
    """The :class:`ScheduleConfig` a card's ``schedule`` section describes
    (``lr_floor``: the LR at the end of the decay, a fraction of the peak; an older card's
    ``min_lr_ratio`` is read as it)."""
    schedule = _filled("schedule", _renamed_schedule(schedule))
    kw: dict[str, Any] = {"kind": schedule["kind"], "warmup_steps": schedule["warmup_steps"],
                          "total_steps": schedule.get("total_steps"), "lr_floor": schedule["lr_floor"]}
    if schedule.get("decay_fraction") is not None:
        kw["decay_fraction"] = schedule["decay_fraction"]
    if schedule.get("decay_shape") is not None:
        kw["decay_shape"] = schedule["decay_shape"]
    return ScheduleConfig(**kw)
