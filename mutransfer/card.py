"""The transfer card: the export that carries a tuned proxy to the big run.

A card is plain YAML (JSON accepted). ``schema: mutransfer.card/v2`` (written today)
holds:

- ``source``: the proxy (preset, width, depth, base width/depth, study, storage, fits);
- ``target``: the whole target architecture (``model``: its config dict and preset),
  its parameter counts, token budget, tokens per parameter and data-parallel size;
- ``parametrization``: kind, widths, depths and multipliers;
- ``optimizer``: name, absolute base LR, betas, eps, weight decay, its mode, and the
  AdamW timescale tau;
- ``schedule``: kind, warmup (steps and tokens), decay fraction and shape, total steps,
  min LR ratio;
- ``batch``: sequences, tokens, sequence length, data-parallel size, micro-batch per rank
  and gradient-accumulation steps (sequences = dp_size × micro_batch × grad_accum);
- ``param_groups``: per parameter the absolute LR, LR multiplier, init, weight decay, eps;
- ``forward_multipliers``, ``projected`` (values with intervals and extrapolation
  flags), ``audit`` (the held-out check) and ``provenance``.

``mutransfer.card/v1`` cards (no audit, no tau, target given as a width) still load and
apply. One validator, :func:`validate_card`, checks every field's type and range; it
runs on write (:func:`build_card`, :func:`save_card`) and on load (:func:`load_card`,
:func:`apply`), and every failure is one ValueError naming the field path and value.
Loading uses ``yaml.safe_load``, so nothing executes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import math
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn as nn

from mutransfer._io import atomic_write_text, plain, read_text, read_yaml_mapping
from mutransfer.config import INT_LIMITS
from mutransfer.optim import OPTIMIZER_NAMES, OptimizerList, build_optimizer
from mutransfer.parametrization import KINDS, ROLES, WD_MODES, Parametrization
from mutransfer.schedules import DECAY_SHAPES, SCHEDULE_KINDS, Schedule, ScheduleConfig

SCHEMA_V1 = "mutransfer.card/v1"
SCHEMA_V2 = "mutransfer.card/v2"
SCHEMA = SCHEMA_V2
SCHEMAS = (SCHEMA_V1, SCHEMA_V2)
REQUIRED = ("schema", "source", "target", "parametrization", "optimizer", "schedule", "batch",
            "param_groups", "forward_multipliers", "projected", "provenance")
REQUIRED_V2 = (*REQUIRED, "audit")
#: Per-parameter init: the model's own (``keep``; ``model`` is accepted as a synonym),
#: zeros, a multiplier of the model's own init, or a fresh normal with this std.
_INIT = re.compile(r"keep|model|zeros|scale:(?P<scale>.+)|normal:(?P<std>.+)")


def git_revision(cwd: str | Path | None = None) -> str | None:
    """The current git commit, or None outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd or Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def build_card(
    pz: Parametrization,
    *,
    lr: float,
    optimizer: Mapping[str, Any],
    schedule: Mapping[str, Any],
    batch: Mapping[str, Any],
    target: Mapping[str, Any],
    source: Mapping[str, Any] | None = None,
    projected: Mapping[str, Any] | None = None,
    audit: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    role_lr_mults: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Assemble a v2 card for the model ``pz`` describes (built at the *target* shape).

    ``lr`` is the absolute base LR; each parameter's absolute LR, LR multiplier, weight
    decay and eps come from :meth:`Parametrization.optimizer_settings` (μP / CompleteP /
    Muon rules, times ``role_lr_mults[role]``, the per-role LR multipliers tuned at the
    proxy: TrainConfig ``lr_mult_input/output/vector``), the builder the trainer's param
    groups come from, so the card reproduces the tuned proxy at its own shape. ``optimizer``
    holds name, betas, eps, weight_decay, wd_mode and optionally tau; ``provenance`` adds
    e.g. the study name and the (credential-free) storage to the package, version, git
    revision and date.
    The result has passed :func:`validate_card`.
    """
    from mutransfer import __version__

    if not (_is_number(lr) and 0 < lr < math.inf):
        raise ValueError(f"card field optimizer.lr: must be a positive finite number, got {lr!r}")
    wd = optimizer.get("weight_decay", 0.0)
    eps = optimizer.get("eps", 1e-8)
    for key, value, low in (("weight_decay", wd, 0.0), ("eps", eps, None)):
        if not (_is_number(value) and math.isfinite(value) and (value > 0 if low is None else value >= low)):
            raise ValueError(f"card field optimizer.{key}: must be a "
                             f"{'positive' if low is None else 'non-negative'} finite number, got {value!r}")
    wd, eps = float(wd), float(eps)
    wd_mode = optimizer.get("wd_mode", "coupled")
    _C.choice("optimizer.wd_mode", wd_mode, WD_MODES)
    role_mults = {str(k): v for k, v in (role_lr_mults or {}).items()}
    for k, v in role_mults.items():
        if k not in ROLES:
            raise ValueError(f"card field parametrization.lr_mults: unknown role {k!r}; use one of {ROLES}")
        if not (_is_number(v) and 0 < v < math.inf):
            raise ValueError(f"card field parametrization.lr_mults.{k}: must be a positive finite number, "
                             f"got {v!r}")
    # The trainer's param groups come from the same builder: nothing here re-derives a rule.
    settings = pz.optimizer_settings(lr, weight_decay=wd, wd_mode=wd_mode, eps=eps, role_lr_mults=role_mults)
    groups = []
    for s in pz.specs.values():
        v = settings[s.name]
        groups.append({
            "name": s.name, "shape": list(s.shape), "role": s.role, "optimizer": v["optimizer"],
            "lr": v["lr"], "lr_mult": v["lr_mult"], "init": s.init, "init_std": s.init_std,
            "weight_decay": v["weight_decay"], "eps": v["eps"],
        })
    prov = {"package": "mutransfer", "version": __version__, "git_revision": git_revision(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    prov.update(provenance or {})
    card = {
        "schema": SCHEMA_V2,
        "source": dict(source or {}),
        "target": dict(target),
        "parametrization": {
            "kind": pz.kind, "rules": pz.optimizer, "width": pz.width, "base_width": pz.base_width,
            "depth": pz.depth, "base_depth": pz.base_depth, "depth_alpha": pz.depth_alpha,
            "readout_init": pz.readout_init, "init": pz.init,
            "multipliers": dataclasses.asdict(pz.multipliers),
            "lr_mults": {k: float(v) for k, v in role_mults.items()},
        },
        "optimizer": {"name": optimizer.get("name", "adamw"), "lr": float(lr),
                      "betas": list(optimizer.get("betas", (0.9, 0.95))), "eps": eps,
                      "weight_decay": wd, "wd_mode": wd_mode, "tau": optimizer.get("tau")},
        "schedule": dict(schedule),
        "batch": dict(batch),
        "param_groups": groups,
        "forward_multipliers": pz.forward_multipliers(),
        "projected": dict(projected or {}),
        "audit": dict(audit) if audit else {"holdout": [], "passed": None},
        "provenance": prov,
    }
    return validate_card(plain(card))



# ---- the validator ----------------------------------------------------------------------


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
#: without end (``total_steps: 1e30``). The trainer's own limits (``mutransfer.config.INT_LIMITS``)
#: where it has the field; vocab at 2**24 (the largest tokenizers have ~2**18).
CARD_LIMITS: dict[str, int] = {
    "width": INT_LIMITS["width"], "depth": INT_LIMITS["depth"], "seq_len": INT_LIMITS["seq_len"],
    "steps": INT_LIMITS["steps"], "sequences": INT_LIMITS["batch_size"], "vocab_size": 1 << 24,
    "head_dim": INT_LIMITS["head_dim"], "dp_size": 1 << 24,
}


def _check_target(t: Mapping[str, Any]) -> None:
    for key in ("width", "depth", "n_params", "seq_len", "dp_size"):
        _C.integer(f"target.{key}", t.get(key), none=True, high=CARD_LIMITS.get(key))
    _C.integer("target.n_params_nonembed", t.get("n_params_nonembed"), low=0, none=True)
    _C.positive("target.tokens", t.get("tokens"), none=True)
    _C.positive("target.tokens_per_param", t.get("tokens_per_param"), none=True)
    if "model" in t:
        model = _C.mapping("target.model", t["model"])
        _C.choice("target.model.kind", model.get("kind"), ("gpt", "mlp", "hf"), none=True)
        if model.get("kind") == "hf":
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


def _check_parametrization(p: Mapping[str, Any]) -> None:
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
    for k, v in mults.items():
        _C.positive(f"parametrization.multipliers.{k}", v)
    lr_mults = _C.mapping("parametrization.lr_mults", p.get("lr_mults", {}))
    for k, v in lr_mults.items():
        _C.choice("parametrization.lr_mults (role)", k, ROLES)
        _C.positive(f"parametrization.lr_mults.{k}", v)


def _check_optimizer(o: Mapping[str, Any]) -> None:
    _C.choice("optimizer.name", o.get("name"), OPTIMIZER_NAMES)
    _C.positive("optimizer.lr", o.get("lr"))
    betas = o.get("betas")
    if not isinstance(betas, list) or len(betas) != 2:
        _C.fail("optimizer.betas", "must be a list of two numbers", betas)
    for i, b in enumerate(betas):
        _C.number(f"optimizer.betas[{i}]", b, low=0.0)
        if b >= 1:
            _C.fail(f"optimizer.betas[{i}]", "must be < 1", b)
    _C.positive("optimizer.eps", o.get("eps"))
    _C.number("optimizer.weight_decay", o.get("weight_decay"), low=0.0)
    _C.choice("optimizer.wd_mode", o.get("wd_mode"), WD_MODES)
    _C.positive("optimizer.tau", o.get("tau"), none=True)


def _check_schedule(s: Mapping[str, Any], v2: bool) -> None:
    _C.choice("schedule.kind", s.get("kind"), SCHEDULE_KINDS)
    _C.integer("schedule.warmup_steps", s.get("warmup_steps", 0), low=0, high=CARD_LIMITS["steps"])
    decays = s["kind"] not in ("constant", "inverse_sqrt")
    if v2 and decays and s.get("total_steps") is None:
        _C.fail("schedule.total_steps", f"is required by the {s['kind']!r} schedule", None)
    _C.integer("schedule.total_steps", s.get("total_steps"), none=True, high=CARD_LIMITS["steps"])
    _C.number("schedule.decay_fraction", s.get("decay_fraction"), low=0.0, high=1.0, none=True)
    _C.choice("schedule.decay_shape", s.get("decay_shape"), DECAY_SHAPES, none=True)
    _C.number("schedule.min_lr_ratio", s.get("min_lr_ratio"), low=0.0, high=1.0, none=True)
    _C.number("schedule.warmup_tokens", s.get("warmup_tokens"), low=0.0, none=True)
    if s.get("total_steps") is not None or not decays:
        try:
            Schedule(schedule_config(s))
        except ValueError as exc:
            _C.fail("schedule", str(exc), dict(s))


def _check_batch(b: Mapping[str, Any]) -> None:
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
        _C.choice(f"{where}.optimizer", g.get("optimizer", "adamw"), OPTIMIZER_NAMES)
        _C.positive(f"{where}.lr", g["lr"])
        _C.positive(f"{where}.lr_mult", g.get("lr_mult", 1.0))
        check_init(f"{where}.init", g["init"])
        _C.number(f"{where}.init_std", g.get("init_std"), low=0.0, none=True)
        _C.number(f"{where}.weight_decay", g["weight_decay"], low=0.0)
        _C.positive(f"{where}.eps", g.get("eps", 1e-8))


def _check_forward(fm: Mapping[str, Any]) -> None:
    hooks = fm.get("hooks")
    if not isinstance(hooks, list):
        _C.fail("forward_multipliers.hooks", "must be a list", hooks)
    for i, h in enumerate(hooks):
        h = _C.mapping(f"forward_multipliers.hooks[{i}]", h)
        _C.string(f"forward_multipliers.hooks[{i}].module", h.get("module"))
        _C.choice(f"forward_multipliers.hooks[{i}].kind", h.get("kind"), ("pre", "post"))
        _C.positive(f"forward_multipliers.hooks[{i}].scale", h.get("scale"))
    att = _C.mapping("forward_multipliers.attention", fm.get("attention"))
    for k, v in att.items():
        _C.positive(f"forward_multipliers.attention.{k}", v)


def _check_audit(a: Mapping[str, Any]) -> None:
    rows = a.get("holdout", [])
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        _C.fail("audit.holdout", "must be a list of mappings", rows)
    if a.get("passed") is not None and not isinstance(a["passed"], bool):
        _C.fail("audit.passed", "must be true, false or null", a["passed"])


def _check_trust(t: Any) -> None:
    """The ``trust`` block (:func:`mutransfer.trust.trust_block`): a level in (0, 1), each
    interval's value and factor (hi / lo >= 1, or null when open), summary lines."""
    t = _C.mapping("trust", t)
    _C.number("trust.level", t.get("level"), low=0.0, high=1.0, open_low=True)
    ivs = _C.mapping("trust.intervals", t.get("intervals"))
    for k, iv in ivs.items():
        iv = _C.mapping(f"trust.intervals.{k}", iv)
        _C.number(f"trust.intervals.{k}.value", iv.get("value"), low=0.0)
        for side in ("lo", "hi"):
            _C.number(f"trust.intervals.{k}.{side}", iv.get(side), low=0.0, none=True)
        _C.number(f"trust.intervals.{k}.factor", iv.get("factor"), low=1.0 - 1e-12, none=True)
    summary = t.get("summary")
    if not isinstance(summary, list) or not all(isinstance(x, str) for x in summary):
        _C.fail("trust.summary", "must be a list of strings", summary)
    _C.integer("trust.warnings", t.get("warnings"), low=0)


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
    for key in ("package", "version", "date"):
        _C.string(f"provenance.{key}", p.get(key), none=True)
    for key in ("git_revision", "study", "storage"):
        _C.string(f"provenance.{key}", p.get(key), none=True)


def _target_shape(model: Mapping[str, Any]) -> tuple[str, int | None, int | None, int | None]:
    """(where, width, depth, vocab) that ``target.model`` declares: its own fields, or for
    ``kind: hf`` the transformers config's hidden size and layer count."""
    if model.get("kind") != "hf":
        return "target.model", model.get("width"), model.get("depth"), model.get("vocab_size")
    from mutransfer.models.source import hf_shape
    from mutransfer.target import hf_config_of

    cfg = hf_config_of(model)
    width, depth, _ = hf_shape(cfg)
    vocab = getattr(cfg, "vocab_size", None)
    return "target.model.config", width, depth, vocab if _is_int(vocab) else None


@functools.lru_cache(maxsize=8)
def _built_shapes(model_json: str) -> dict[str, list[int]]:
    """Name -> shape of the model a card's ``target.model`` builds, on the meta device (no
    memory, no init); cached on the model's JSON, since every load, apply and export validates."""
    from mutransfer.target import build_target_model

    with torch.device("meta"):
        model = build_target_model({"target": {"model": json.loads(model_json)}})
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
            from mutransfer.target import model_fields

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


def validate_card(card: Any) -> dict[str, Any]:
    """Check a card's schema tag, sections, and every field's type and range.

    v1 and v2 share the checks; v2 also requires ``audit`` and, for schedules that
    decay, ``schedule.total_steps``. Every failure is one ValueError naming the field
    path and the value (``card field param_groups[3] (wte.weight).init: ...``), never a
    TypeError or AttributeError. Returns the card as a plain dict.
    """
    if not isinstance(card, Mapping):
        raise ValueError(f"a transfer card must be a mapping, got {type(card).__name__}")
    schema = card.get("schema")
    if schema not in SCHEMAS:
        raise ValueError(f"unsupported card schema {schema!r}; expected {SCHEMA_V2!r} (or {SCHEMA_V1!r})")
    v2 = schema == SCHEMA_V2
    missing = [k for k in (REQUIRED_V2 if v2 else REQUIRED) if k not in card]
    if missing:
        raise ValueError(f"transfer card is missing section(s): {', '.join(missing)}")
    for key in ("source", "target", "parametrization", "optimizer", "schedule", "batch",
                "forward_multipliers", "projected", "provenance", *(("audit",) if v2 else ())):
        _C.mapping(key, card[key])
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
    _finite_everywhere(dict(card), "")  # the free-form sections: source, projected, audit
    _check_consistency(card)
    return dict(card)


def schedule_config(schedule: Mapping[str, Any]) -> ScheduleConfig:
    """The :class:`ScheduleConfig` a card's ``schedule`` section describes
    (``min_lr_ratio`` is the floor)."""
    kw: dict[str, Any] = {"kind": schedule["kind"], "warmup_steps": schedule.get("warmup_steps", 0),
                          "total_steps": schedule.get("total_steps"),
                          "floor": schedule.get("min_lr_ratio") or 0.0}
    if schedule.get("decay_fraction") is not None:
        kw["decay_fraction"] = schedule["decay_fraction"]
    if schedule.get("decay_shape") is not None:
        kw["decay_shape"] = schedule["decay_shape"]
    return ScheduleConfig(**kw)


# ---- files ------------------------------------------------------------------------------


def save_card(card: Mapping[str, Any], path: str | Path) -> Path:
    """Validate, then write YAML (or JSON for a ``.json`` path) atomically."""
    import yaml

    card = validate_card(card)
    path = Path(path)
    text = json.dumps(card, indent=2) + "\n" if path.suffix == ".json" else yaml.safe_dump(
        card, sort_keys=False)
    return atomic_write_text(path, text)


def load_card(path: str | Path) -> dict[str, Any]:
    """Read a card (YAML with ``yaml.safe_load``, or JSON for a ``.json`` path; v1 or
    v2) and validate it. Nothing in it executes."""
    if Path(path).suffix == ".json":
        card = _read_json(path)
    else:
        card = read_yaml_mapping(path, "transfer card")
    try:
        return validate_card(card)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _read_json(path: str | Path) -> Any:
    # JSON, not YAML: YAML 1.1 would read JSON's 1e-08 as a string.
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"transfer card {str(p)!r} does not exist")
    try:
        return json.loads(read_text(p, "transfer card"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"transfer card {str(p)!r} is not valid JSON: {exc}") from None


# ---- applying it ------------------------------------------------------------------------


class LambdaLRList:
    """One ``LambdaLR`` per optimizer of an :class:`OptimizerList` (Muon + AdamW), stepped
    as one scheduler."""

    def __init__(self, schedulers: list[torch.optim.lr_scheduler.LambdaLR]) -> None:
        self.schedulers = schedulers

    def step(self) -> None:
        for s in self.schedulers:
            s.step()

    def get_last_lr(self) -> list[float]:
        return [lr for s in self.schedulers for lr in s.get_last_lr()]

    @property
    def last_epoch(self) -> int:
        return self.schedulers[0].last_epoch

    def state_dict(self) -> dict[str, Any]:
        return {"schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for s, st in zip(self.schedulers, state["schedulers"], strict=True):
            s.load_state_dict(st)


class Applied(NamedTuple):
    """What :func:`apply` returns: the initialized model, its optimizer, the LR scheduler
    (step it once per optimizer step) and the per-parameter param groups at the card's
    peak LR (the optimizer holds copies whose lr the scheduler moves)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer | OptimizerList
    scheduler: torch.optim.lr_scheduler.LambdaLR | LambdaLRList
    param_groups: list[dict[str, Any]]


@torch.no_grad()
def apply_init(model: nn.Module, init: Mapping[str, str]) -> None:
    """A card's init on top of the model's own, per parameter name: ``keep``, ``zeros``,
    ``scale:F`` (×F) or ``normal:S`` (a fresh N(0, S²))."""
    params = dict(model.named_parameters())
    for name, how in init.items():
        p = params[name]
        if how == "zeros":
            p.zero_()
        elif how.startswith("scale:"):
            p.mul_(float(how.split(":", 1)[1]))
        elif how.startswith("normal:"):
            p.normal_(0.0, float(how.split(":", 1)[1]))


def apply(model: nn.Module, card: Mapping[str, Any]) -> Applied:
    """Initialize ``model`` (the target architecture) as the card says, register its
    forward multipliers and attention scales, and build the optimizer and scheduler.

    The optimizer comes from :func:`mutransfer.optim.build_optimizer` with one group
    per parameter (the card's absolute lr, weight decay and eps); the scheduler is a
    ``torch.optim.lr_scheduler.LambdaLR`` of :class:`mutransfer.schedules.Schedule`,
    so the LR of a group at step ``s`` is ``card lr × schedule(s)``. A v1 card whose
    schedule cannot be built (a decaying kind without total steps) is refused with one
    clear error rather than given a guessed schedule.
    """
    card = validate_card(card)
    try:
        sched_cfg = schedule_config(card["schedule"])
        schedule = Schedule(sched_cfg)
    except ValueError as exc:
        raise ValueError(f"card field schedule: {exc}") from None
    params = dict(model.named_parameters())
    groups_by_name = {g["name"]: g for g in card["param_groups"]}
    if set(params) != set(groups_by_name):
        extra = sorted(set(params) - set(groups_by_name))[:3]
        missing = sorted(set(groups_by_name) - set(params))[:3]
        raise ValueError(f"model does not match the card: unknown {extra}, missing {missing}")
    for name, p in params.items():
        if list(p.shape) != list(groups_by_name[name]["shape"]):
            raise ValueError(f"parameter {name} has shape {list(p.shape)}, the card says "
                             f"{groups_by_name[name]['shape']}")
    if getattr(model, "_mutransfer_hooks", None):
        raise ValueError("this model is already parametrized; build a fresh one")
    apply_init(model, {name: groups_by_name[name]["init"] for name in params})
    fm = card["forward_multipliers"]
    Parametrization.install_forward_multipliers(model, fm["hooks"], fm["attention"])
    opt_card = card["optimizer"]
    groups = []
    for name, p in params.items():
        g = groups_by_name[name]
        groups.append({"params": [p], "names": [name], "lr": g["lr"], "base_lr": opt_card["lr"],
                       "lr_mult": g.get("lr_mult", 1.0), "weight_decay": g["weight_decay"],
                       "eps": g.get("eps", 1e-8), "optimizer": g.get("optimizer", "adamw"),
                       "role": g.get("role")})
    tags = {g["optimizer"] for g in groups}
    name = "muon" if "muon" in tags else "sgd" if tags == {"sgd"} else opt_card["name"]
    # The optimizer gets copies: its LambdaLR rescales group lrs from step 0 on, while
    # ``param_groups`` keeps the card's peak values.
    opts = build_optimizer([dict(g) for g in groups], name, betas=tuple(opt_card["betas"]),
                           momentum=float(opt_card.get("momentum", 0.0)))
    lambdas = [torch.optim.lr_scheduler.LambdaLR(o, schedule) for o in opts]
    if len(lambdas) == 1:
        return Applied(model, opts.optimizers[0], lambdas[0], groups)
    return Applied(model, opts, LambdaLRList(lambdas), groups)


#: ``mutransfer.apply_card``: :func:`apply` under a name that says what it applies.
apply_card = apply

__all__ = ["SCHEMA", "SCHEMAS", "SCHEMA_V1", "SCHEMA_V2", "Applied", "LambdaLRList", "apply", "apply_init",
           "apply_card", "build_card", "check_init", "git_revision", "load_card", "save_card",
           "schedule_config", "validate_card"]
