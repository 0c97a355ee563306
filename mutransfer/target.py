"""The target of a transfer: a whole model (not a width) and the plan for its run.

Two halves, both used by ``mutransfer transfer``:

- :func:`resolve_target` turns a preset plus ``KEY=VALUE`` overrides, or a YAML/JSON
  model config, into a :class:`TargetModel` (config, parameter counts), and
  :func:`transfer_builder` gives the ``builder(width, depth)`` a
  :class:`~mutransfer.parametrization.Parametrization` needs: the target's own config at
  the target width, and the *proxy's* head and MLP shape scheme at the base and delta
  widths, so the μP multipliers are measured against the shapes that were tuned.
- :func:`plan_run` moves the proxy's optimum to the target's batch and token budget
  with the laws of ``mutransfer fit scaling`` (:class:`ScalingLaws`, read from its
  FIT.json) and gives batch, steps, warmup, weight decay (through the AdamW timescale
  tau) and the WSD decay fraction, each with its interval and extrapolation factor.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.nn as nn

from mutransfer.models import GPT, MLP, GPTConfig, MLPConfig, get_preset

__all__ = [
    "ALIASES",
    "HFTarget",
    "RunPlan",
    "ScalingLaws",
    "TargetModel",
    "build_target_model",
    "hf_config_of",
    "model_fields",
    "hf_transfer_builder",
    "parse_overrides",
    "plan_run",
    "read_scaling_fit",
    "resolve_hf_target",
    "resolve_target",
    "transfer_builder",
]

#: Other names for config fields (Megatron / Hugging Face spellings). ``d_ff`` (the MLP
#: hidden size) is special: it sets ``mlp_ratio = d_ff / width``.
ALIASES: dict[str, str] = {
    "d_model": "width", "hidden_size": "width", "n_embd": "width",
    "n_layers": "depth", "n_layer": "depth", "num_layers": "depth", "num_hidden_layers": "depth",
    "heads": "n_head", "n_heads": "n_head", "num_heads": "n_head", "num_attention_heads": "n_head",
    "vocab": "vocab_size", "context": "seq_len", "seq_length": "seq_len",
    "max_position_embeddings": "seq_len", "ffn_hidden_size": "d_ff", "intermediate_size": "d_ff",
}
_KINDS: dict[str, tuple[type, type[nn.Module]]] = {"gpt": (GPTConfig, GPT), "mlp": (MLPConfig, MLP)}


# ---- the target model -------------------------------------------------------------------


@dataclass(frozen=True)
class TargetModel:
    """A resolved target architecture."""

    kind: str
    """``gpt`` or ``mlp``: which model class builds it."""
    config: GPTConfig | MLPConfig
    """The full model config."""
    preset: str | None
    """The preset it started from, if any."""

    def build(self) -> nn.Module:
        """A fresh model of this architecture (on the current default device)."""
        return _KINDS[self.kind][1](self.config)

    @property
    def vocab_size(self) -> int | None:
        """The vocabulary (None for an MLP)."""
        return getattr(self.config, "vocab_size", None)

    def to_dict(self) -> dict[str, Any]:
        """The card's ``target.model``: kind, preset and every config field."""
        return {"kind": self.kind, "preset": self.preset, **dataclasses.asdict(self.config)}

    def n_params(self) -> tuple[int, int]:
        """(total, non-embedding) parameter counts, from a build on the meta device."""
        import torch

        with torch.device("meta"):
            model = self.build()
        total = sum(p.numel() for p in model.parameters())
        nonembed = model.num_params(non_embedding=True) if hasattr(model, "num_params") else total
        return int(total), int(nonembed)


@dataclass(frozen=True)
class HFTarget:
    """A target given as a local Hugging Face config (``--model hf:PATH``): the user's
    own ``transformers`` model, built from that config, with its own parameter names."""

    source: Any
    """The :class:`mutransfer.models.source.ModelSource` (kind ``hf``)."""
    config: Any
    """The full-size ``transformers`` config."""
    kind: str = "hf"
    preset: str | None = None

    @property
    def width(self) -> int:
        from mutransfer.models.source import hf_shape

        return hf_shape(self.config)[0]

    @property
    def depth(self) -> int:
        from mutransfer.models.source import hf_shape

        return hf_shape(self.config)[1]

    @property
    def vocab_size(self) -> int | None:
        v = getattr(self.config, "vocab_size", None)
        return int(v) if isinstance(v, int) else None

    def build(self) -> nn.Module:
        """The full model at random init (build it under ``torch.device("meta")`` to get
        the names and shapes of a large one for nothing)."""
        import transformers as tf

        return tf.AutoModelForCausalLM.from_config(self.config)

    def to_dict(self) -> dict[str, Any]:
        """The card's ``target.model``: source, head rule, model type and the whole config."""
        return {"kind": "hf", "source": self.source.spec(), "model_id": self.source.model_id,
                "head_rule": self.source.head_rule, "model_type": str(self.config.model_type),
                "config": _plain_config(self.config)}

    def n_params(self) -> tuple[int, int]:
        """(total, non-embedding) parameter counts from a meta build; non-embedding leaves
        out the input embedding and an untied readout (as Kaplan et al. count N)."""
        import torch

        with torch.device("meta"):
            model = self.build()
        total = sum(p.numel() for p in model.parameters())
        embed = {id(p) for m in (model.get_input_embeddings(), model.get_output_embeddings())
                 if m is not None for p in m.parameters()}
        nonembed = sum(p.numel() for p in model.parameters() if id(p) not in embed)
        return int(total), int(nonembed)


def _plain_config(config: Any) -> dict[str, Any]:
    """A transformers config as plain JSON data (what ``config.json`` holds)."""
    return json.loads(config.to_json_string(use_diff=False))


def resolve_hf_target(spec: str, head_rule: str = "keep_head_dim") -> HFTarget:
    """``hf:PATH`` (a local config.json, or a folder holding one) as a target; a hub id
    or a missing file is a ValueError naming it (never a download)."""
    from mutransfer.models.source import load_hf_config, parse_model

    source = parse_model(spec, head_rule=head_rule)
    if source.kind != "hf":
        raise ValueError(f"--model {spec!r} is not hf:PATH (a local transformers config.json)")
    return HFTarget(source, load_hf_config(source.ref))


def hf_transfer_builder(target: HFTarget) -> Callable[..., nn.Module]:
    """``builder(width, depth=None)`` for a Parametrization of an HF target: the target's
    own config at its width and depth, else the same architecture scaled by
    :func:`mutransfer.models.source.hf_proxy_config` (hidden size, MLP ratio kept, heads by
    the source's head rule, layers), so every parameter keeps its name."""
    import transformers as tf

    from mutransfer.models.source import hf_proxy_config

    def builder(width: int, depth: int | None = None) -> nn.Module:
        d = target.depth if depth is None else depth
        cfg = target.config if (width, d) == (target.width, target.depth) else hf_proxy_config(
            target.config, width, d, target.source.head_rule)
        return tf.AutoModelForCausalLM.from_config(cfg)

    return builder


def _kind_of(cfg: GPTConfig | MLPConfig) -> str:
    return "gpt" if isinstance(cfg, GPTConfig) else "mlp"


def _scalar(text: str) -> Any:
    """``"64"`` -> 64, ``"4.0"``/``"1e3"`` -> float, true/false/null, else the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def parse_overrides(items: Sequence[str | tuple[str, Any]]) -> dict[str, Any]:
    """``["width=4096", "depth=24"]`` (or the CLI's parsed ``(key, value)`` pairs) ->
    ``{"width": 4096, "depth": 24}``."""
    out: dict[str, Any] = {}
    for item in items:
        if isinstance(item, tuple):
            key, value = item
            out[key] = _scalar(value) if isinstance(value, str) else value
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--set {item!r} must look like KEY=VALUE (e.g. --set depth=24)")
        out[key.strip()] = _scalar(value)
    return out


def _coerce(cls: type, name: str, value: Any, current: Any) -> Any:
    """A value of the type the config field holds; one ValueError naming the field."""
    ftype = str(next(f.type for f in dataclasses.fields(cls) if f.name == name))
    is_num = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(current, bool) or ftype == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"model field {name} must be true or false, got {value!r}")
        return value
    if value is None and "None" in ftype:
        return None
    if ftype.startswith("int"):
        if not is_num or not math.isfinite(value) or value != int(value):
            raise ValueError(f"model field {name} must be an integer, got {value!r}")
        return int(value)
    if ftype.startswith("float"):
        if not is_num or not math.isfinite(value):
            raise ValueError(f"model field {name} must be a finite number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"model field {name} must be a string, got {value!r}")
    return value


def _apply_overrides(cfg: GPTConfig | MLPConfig, overrides: Mapping[str, Any],
                     what: str) -> GPTConfig | MLPConfig:
    cls = type(cfg)
    names = {f.name for f in dataclasses.fields(cls)}
    changes: dict[str, Any] = {}
    d_ff = None
    for raw, value in overrides.items():
        key = ALIASES.get(raw, raw)
        if key == "d_ff" and cls is GPTConfig:
            d_ff = value
            continue
        if key not in names:
            known = sorted(names | ({"d_ff"} if cls is GPTConfig else set()))
            raise ValueError(f"{what}: unknown model field {raw!r}; {cls.__name__} has "
                             f"{', '.join(known)}")
        changes[key] = _coerce(cls, key, value, getattr(cfg, key))
    if cls is GPTConfig and "head_dim" in changes and "n_head" not in changes:
        changes["n_head"] = None  # an explicit head dim wins over a preset's head count
    try:
        cfg = cfg.replace(**changes)
        if d_ff is not None:
            if not (isinstance(d_ff, int) and not isinstance(d_ff, bool) and d_ff >= 1):
                raise ValueError(f"model field d_ff must be an integer >= 1, got {d_ff!r}")
            cfg = cfg.replace(mlp_ratio=d_ff / cfg.width)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: {exc}") from None
    return cfg


def resolve_target(
    proxy: GPTConfig | MLPConfig,
    *,
    preset: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    model_config: str | Path | None = None,
    proxy_preset: str | None = None,
) -> TargetModel:
    """The target architecture: ``preset`` (default: the proxy's config) with
    ``overrides``, or a YAML/JSON ``model_config`` file holding config fields (and
    optionally ``preset`` and ``kind``; a card's ``target.model`` is such a mapping),
    to which ``overrides`` still apply. Field aliases: :data:`ALIASES`."""
    from mutransfer._io import read_yaml_mapping

    base, name = (get_preset(preset), preset) if preset else (proxy, proxy_preset)
    fields: dict[str, Any] = {}
    what = "--set"
    if model_config is not None:
        doc = dict(read_yaml_mapping(model_config, "model config"))
        what = f"model config {str(model_config)!r}"
        kind = doc.pop("kind", None)
        if doc.get("preset") is not None:
            name = str(doc["preset"])
            base = get_preset(name)
        doc.pop("preset", None)
        if kind is not None and kind not in _KINDS:
            raise ValueError(f"{what}: kind must be gpt or mlp, got {kind!r}")
        if kind is not None and kind != _kind_of(base):
            base = _KINDS[kind][0]()
            name = None
        fields.update(doc)
    cfg = _apply_overrides(base, fields, what)
    cfg = _apply_overrides(cfg, dict(overrides or {}), "--set")
    if type(cfg) is not type(proxy):
        raise ValueError(f"the target is a {_kind_of(cfg)} model but the proxy is a {_kind_of(proxy)}")
    return TargetModel(_kind_of(cfg), cfg, name)


def model_fields(kind: str) -> frozenset[str]:
    """The keys a card's ``target.model`` of this kind (``gpt`` or ``mlp``) may hold: its
    config's fields, their :data:`ALIASES`, ``d_ff`` for a GPT, and ``kind``/``preset``."""
    if kind not in _KINDS:
        raise ValueError(f"card field target.model.kind: must be gpt or mlp, got {kind!r}")
    cls = _KINDS[kind][0]
    names = {f.name for f in dataclasses.fields(cls)}
    return frozenset(names | {a for a, n in ALIASES.items() if n in names} | {"kind", "preset"}
                     | ({"d_ff"} if cls is GPTConfig else set()))


def hf_config_of(model: Mapping[str, Any]) -> Any:
    """The transformers config a card's ``target.model`` of kind ``hf`` holds (rebuilt from
    the card's own fields: no file, no download); one ValueError naming the field."""
    import transformers as tf

    fields = dict(model.get("config") or {})
    model_type = fields.pop("model_type", model.get("model_type"))
    try:
        return tf.AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # noqa: BLE001 - a config class rejecting the card's fields
        raise ValueError(f"card field target.model.config ({model_type}): {exc}") from None


def build_target_model(card: Mapping[str, Any]) -> nn.Module:
    """A fresh model of a v2 card's ``target.model`` (to pass to ``card.apply``); an
    ``hf`` target is rebuilt from the config the card holds (no file, no download)."""
    model = card.get("target", {}).get("model")
    if not isinstance(model, Mapping):
        raise ValueError("the card has no target.model (a v1 card names only a width)")
    if model.get("kind") == "hf":
        import transformers as tf

        return tf.AutoModelForCausalLM.from_config(hf_config_of(model))
    fields = {k: v for k, v in model.items() if k not in ("kind", "preset")}
    kind = model.get("kind", "gpt")
    if kind not in _KINDS:
        raise ValueError(f"card field target.model.kind: must be gpt or mlp, got {kind!r}")
    cls = _KINDS[kind][0]
    cfg = _apply_overrides(cls(), fields, "card field target.model")
    return _KINDS[kind][1](cfg)


def transfer_builder(target: TargetModel, proxy: GPTConfig | MLPConfig
                     ) -> Callable[..., nn.Module]:
    """``builder(width, depth=None)`` for a Parametrization of the target.

    At the target width it builds the target. At other widths (the base and delta
    models μP compares shapes with) it builds the target's config with the proxy's
    head and MLP scheme (head_dim / n_head / mlp_ratio), i.e. the shapes of the proxy
    family the LR was tuned on. Everything else (vocab, context, norms, tying) is the
    target's, so parameter names and fixed dimensions agree.
    """
    cls = _KINDS[target.kind][1]
    scheme: dict[str, Any] = {}
    if isinstance(proxy, GPTConfig):
        scheme = {"head_dim": proxy.head_dim, "n_head": proxy.n_head, "mlp_ratio": proxy.mlp_ratio}

    def builder(width: int, depth: int | None = None) -> nn.Module:
        cfg = target.config if width == target.config.width else target.config.replace(
            width=width, **scheme)
        if depth is not None:
            cfg = cfg.replace(depth=depth)
        return cls(cfg)

    return builder


# ---- the scaling laws -------------------------------------------------------------------


def _num(doc: Mapping[str, Any], path: str, where: str, *, positive: bool = False,
         optional: bool = False) -> float | None:
    obj: Any = doc
    for key in path.split("."):
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    if obj is None and optional:
        return None
    if not isinstance(obj, (int, float)) or isinstance(obj, bool) or not math.isfinite(obj) or (
            positive and obj <= 0):
        kind = "a positive finite number" if positive else "a finite number"
        raise ValueError(f"{where}: field {path} must be {kind}, got {obj!r}")
    return float(obj)


def _pair(obj: Any) -> tuple[float, float] | None:
    """``[lo, hi]`` or ``{"lo": .., "hi": ..}`` -> (lo, hi); anything else -> None."""
    if isinstance(obj, Mapping):
        obj = [obj.get("lo"), obj.get("hi")]
    if (isinstance(obj, (list, tuple)) and len(obj) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in obj)):
        return float(min(obj)), float(max(obj))
    return None


def _exp_ci(section: Mapping[str, Any], name: str) -> tuple[float, float] | None:
    ci = section.get("ci")
    if not isinstance(ci, Mapping):
        return None
    exps = ci.get("exponents")
    return _pair(ci.get(name)) or (_pair(exps.get(name)) if isinstance(exps, Mapping) else None)


@dataclass(frozen=True)
class ScalingLaws:
    """The laws of ``mutransfer fit scaling`` (its FIT.json):
    eta*(B, D) = c_eta · B^a · D^b, B*(D) = c_B · D^g, the AdamW timescale
    tau = B / (eta · lambda · D) at the proxy optimum (Wang & Aitchison 2024; Bergsma et
    al. 2025, "Power Lines"), the warmup in tokens and the WSD decay fraction, with the
    measured ranges of tokens and batch (for the extrapolation factors)."""

    lr_exponents: dict[str, float]
    """a (``batch_tokens``) and b (``tokens``) of eta*(B, D)."""
    lr_exponent_ci: dict[str, tuple[float, float] | None]
    batch_coef: float
    batch_exponent: float
    batch_exponent_ci: tuple[float, float] | None
    tau: float | None
    tau_ci: tuple[float, float] | None
    warmup: dict[str, Any]
    decay_fraction: float | None
    decay_fraction_ci: tuple[float, float] | None
    measured_tokens: tuple[float, float]
    measured_batch_tokens: tuple[float, float]
    level: float = 0.9
    source: str = "FIT.json"
    lr_cov: tuple[tuple[float, ...], ...] | None = None
    """Covariance of (ln c_eta, a, b) over the bootstrap (``lr.cov_log``), if given."""
    batch_cov: tuple[tuple[float, ...], ...] | None = None
    """Covariance of (ln c_B, g) over the bootstrap (``batch.cov_log``), if given."""
    batch_edges: tuple[int, int] = (0, 0)
    """(budgets whose best batch sat at the edge of the batch grid, budgets measured)."""
    batch_bounds: tuple[str, ...] = ()
    """Where the fit's B* is only a bound (each: the FIT.json field that says so and its
    budget): ``budgets[i].edge``, ``bracketing[i].batch.bracketed: false``,
    ``bracketed.batch: false``. Empty: every B* is an optimum inside its grid."""
    lr_bounds: tuple[str, ...] = ()
    """Where an LR optimum under eta*(B, D) is only a bound: ``bracketing[i].lr.bracketed:
    false``, ``bracketed.lr: false``."""
    lr_loso: tuple[tuple[float, float], ...] = ()
    """(a, b) of eta*(B, D) refitted without each seed (``sensitivity.loso``); empty with one seed."""
    n_seeds: int = 0
    """Seeds of the scaling sweep (``sensitivity.n_seeds``; 0 when the fit does not say)."""
    tau_source: str | None = None
    """``tau.source``: ``measured`` (tau* at its optimum over a weight-decay axis) or
    ``default λ`` (at the sweep's one weight decay); None in older fits."""

    @property
    def z(self) -> float:
        """Normal quantile of the interval level (two-sided)."""
        from statistics import NormalDist

        return NormalDist().inv_cdf(0.5 + self.level / 2)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "scaling fit") -> ScalingLaws:
        """Read and check the FIT.json mapping; one ValueError naming the bad field."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"{where} must hold a JSON object, got {type(doc).__name__}")
        if doc.get("kind", "scaling") != "scaling" or not isinstance(doc.get("lr"), Mapping):
            raise ValueError(f"{where} is not the output of `mutransfer fit scaling` "
                             f"(kind {doc.get('kind')!r}, no lr law)")
        for section in ("lr", "batch", "measured"):
            if not isinstance(doc.get(section), Mapping):
                raise ValueError(f"{where}: field {section} is missing or not an object")
        lr, batch, measured = doc["lr"], doc["batch"], doc["measured"]
        exps = {n: _num(doc, f"lr.exponents.{n}", where) for n in ("batch_tokens", "tokens")}
        for path in (*(f"lr.exponents.{n}" for n in exps), "batch.exponents.tokens"):
            e = _num(doc, path, where) or 0.0
            if abs(e) > 10:  # real ones lie within +-1; 1e3 overflows D^b
                raise ValueError(f"{where}: field {path} must lie in [-10, 10], got {e!r}")
        _num(doc, "lr.coef", where, positive=True)
        ranges = {}
        for axis in ("tokens", "batch_tokens"):
            r = _pair(measured.get(axis))
            if r is None or r[0] <= 0:
                raise ValueError(f"{where}: field measured.{axis} must be [min, max] of positive "
                                 f"numbers, got {measured.get(axis)!r}")
            ranges[axis] = r
        tau = doc.get("tau") if isinstance(doc.get("tau"), Mapping) else {}
        dec = doc.get("decay_fraction")
        dec_value = None
        if isinstance(dec, Mapping):
            dec_value = _num(doc, "decay_fraction.value", where, optional=True)
        elif dec is not None:
            dec_value = _num(doc, "decay_fraction", where)
        if dec_value is not None and not 0 <= dec_value <= 1:
            raise ValueError(f"{where}: field decay_fraction must lie in [0, 1], got {dec_value!r}")
        level = doc.get("level", 0.9)
        return cls(
            lr_exponents=exps,  # type: ignore[arg-type]
            lr_exponent_ci={n: _exp_ci(lr, n) for n in exps},
            batch_coef=_num(doc, "batch.coef", where, positive=True),  # type: ignore[arg-type]
            batch_exponent=_num(doc, "batch.exponents.tokens", where),  # type: ignore[arg-type]
            batch_exponent_ci=_exp_ci(batch, "tokens"),
            tau=_num({"tau": tau}, "tau.value", where, positive=True, optional=True),
            tau_ci=_pair(tau.get("ci")),
            tau_source=tau.get("source") if tau.get("source") in ("measured", "default λ") else None,
            warmup=dict(doc["warmup"]) if isinstance(doc.get("warmup"), Mapping) else {},
            decay_fraction=dec_value,
            decay_fraction_ci=_pair(dec.get("ci")) if isinstance(dec, Mapping) else None,
            measured_tokens=ranges["tokens"],
            measured_batch_tokens=ranges["batch_tokens"],
            level=float(level) if isinstance(level, (int, float)) and 0 < level < 1 else 0.9,
            source=where,
            lr_cov=_cov(lr.get("cov_log"), 3),
            batch_cov=_cov(batch.get("cov_log"), 2),
            batch_edges=_batch_edges(doc.get("budgets")),
            **_bounds(doc),
            **_loso_laws(doc, where),
        )

    def batch_law_doubts(self, tokens: float, limit: float) -> list[str]:
        """Why B*(D) of this fit should not set the target's batch (empty: it may).
        A best batch at the edge of the grid at half the budgets or more is a bound, not an
        optimum; beyond ``limit``× the measured budgets the law is a guess. Inside the limit
        an uncertain exponent is no reason to borrow someone else's law: it widens the
        batch's interval (:meth:`batch_law_cautions` says so), the law still carries it."""
        out = []
        edge, n = self.batch_edges
        if n and 2 * edge >= n:
            out.append(f"the best batch sat at the edge of the batch grid at {edge} of {n} budgets")
        f = _factor(tokens, self.measured_tokens)
        if f > limit:
            out.append(f"the target's {tokens:.3g} tokens lie {f:.3g}x beyond the measured budgets "
                       f"(limit {limit:g}x)")
        return out

    def batch_law_cautions(self) -> list[str]:
        """What makes B*(D) uncertain without ruling it out: an exponent whose interval
        reaches 0 (growth with D not resolved; the target's batch interval is wide)."""
        lo = (self.batch_exponent_ci or (self.batch_exponent, self.batch_exponent))[0]
        if not lo > 0:
            return [f"the B*(D) exponent's interval reaches {lo:.3g} (no growth with D is resolved): "
                    "the batch's interval is wide; more budgets, or seeds, narrow it"]
        return []

    def lr_ratio(self, batch: tuple[float, float], tokens: tuple[float, float]
                 ) -> tuple[float, float, float]:
        """eta*(B1, D1) / eta*(B0, D0) = (B1/B0)^a (D1/D0)^b and its (lo, hi): from the
        bootstrap covariance of (a, b) when the fit gives it (ln ratio ± z·sd, with
        var = x' C x, x = (ln B1/B0, ln D1/D0)), else over the corners of the exponent
        intervals (the ratio is monotone in each exponent)."""
        rb, rd = batch[1] / batch[0], tokens[1] / tokens[0]
        a, b = self.lr_exponents["batch_tokens"], self.lr_exponents["tokens"]
        if self.lr_cov is not None:
            x = (0.0, math.log(rb), math.log(rd))
            var = sum(x[i] * self.lr_cov[i][j] * x[j] for i in range(3) for j in range(3))
            half = self.z * math.sqrt(max(var, 0.0))
            r = rb**a * rd**b
            return r, r * math.exp(-half), r * math.exp(half)
        ca = self.lr_exponent_ci["batch_tokens"] or (a, a)
        cb = self.lr_exponent_ci["tokens"] or (b, b)
        corners = [rb**x * rd**y for x in ca for y in cb]
        return rb**a * rd**b, min(corners), max(corners)

    def batch_at(self, tokens: float) -> tuple[float, float, float]:
        """B*(D) = c_B · D^g with its interval: from the bootstrap covariance of
        (ln c_B, g) when given, else the exponent's interval pivoted at the geometric
        centre of the measured budgets (where the fitted line is pinned best, so
        coefficient and exponent are nearly uncorrelated there)."""
        g = self.batch_exponent
        value = self.batch_coef * tokens**g
        if self.batch_cov is not None:  # ln B = ln c + g ln D, var = x' C x, x = (1, ln D)
            x = (1.0, math.log(tokens))
            var = sum(x[i] * self.batch_cov[i][j] * x[j] for i in range(2) for j in range(2))
            half = self.z * math.sqrt(max(var, 0.0))
            return value, value * math.exp(-half), value * math.exp(half)
        lo_d, hi_d = self.measured_tokens
        centre = math.sqrt(lo_d * hi_d)
        at_centre = self.batch_coef * centre**g
        ci = self.batch_exponent_ci or (g, g)
        ends = [at_centre * (tokens / centre) ** x for x in ci]
        return value, min(ends), max(ends)

    def warmup_tokens(self, tokens: float, batch_tokens: float, n_params: float | None
                      ) -> float | None:
        """The fit's warmup rule (Porian et al. 2024): ``per_param · N`` tokens when the
        model size N is known, else ``fraction · D``; at most ``max_fraction · D``;
        rounded up to whole steps, at least ``min_steps``. None when the fit has none."""
        w = self.warmup
        if not w:
            return None
        vals = {}
        for key, default in (("per_param", None), ("fraction", None), ("max_fraction", 1.0),
                             ("min_steps", 0)):
            v = w.get(key, default)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                                  or not math.isfinite(v) or v < 0):
                raise ValueError(f"{self.source}: field warmup.{key} must be a finite number >= 0, "
                                 f"got {v!r}")
            vals[key] = v
        if vals["per_param"] is not None and n_params is not None:
            raw = vals["per_param"] * n_params
        elif vals["fraction"] is not None:
            raw = vals["fraction"] * tokens
        else:
            return None
        raw = min(raw, vals["max_fraction"] * tokens)
        return float(max(int(vals["min_steps"]), math.ceil(raw / batch_tokens - 1e-9)) * batch_tokens)


def _cov(obj: Any, n: int) -> tuple[tuple[float, ...], ...] | None:
    """An n×n finite covariance matrix with a positive diagonal, else None."""
    if (isinstance(obj, list) and len(obj) == n and all(
            isinstance(r, list) and len(r) == n and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in r)
            for r in obj) and any(obj[i][i] > 0 for i in range(n))):
        return tuple(tuple(float(v) for v in r) for r in obj)
    return None


def _loso_laws(doc: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``lr_loso`` and ``n_seeds`` from a fit's ``sensitivity`` section (absent: none)."""
    sens = doc.get("sensitivity")
    if sens is None:
        return {}
    if not isinstance(sens, Mapping) or not isinstance(sens.get("loso", []), list):
        raise ValueError(f"{where}: field sensitivity must be an object with a list sensitivity.loso")
    n = sens.get("n_seeds", 0)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"{where}: field sensitivity.n_seeds must be an integer >= 0, got {n!r}")
    loso = sens.get("loso", [])
    exps = tuple((_num(f if isinstance(f, Mapping) else {}, "lr.exponents.batch_tokens",
                       f"{where}: sensitivity.loso[{i}]"),
                  _num(f if isinstance(f, Mapping) else {}, "lr.exponents.tokens",
                       f"{where}: sensitivity.loso[{i}]"))
                 for i, f in enumerate(loso))
    return {"lr_loso": exps, "n_seeds": n}


def lr_sensitivity(proxy: Mapping[str, Any] | None, laws: ScalingLaws | None, *,
                   proxy_batch_tokens: float | None, proxy_tokens: float | None,
                   batch_tokens: float, tokens: float) -> dict[str, Any]:
    """Leave-one-seed-out spread of the card's base LR (``projected.lr.loso_ratio``).

    The base LR is the proxy optimum times the laws' ratio eta*(B_t, D_t) / eta*(B_p, D_p).
    Each part has its own refits without each seed: the proxy optimum's (``proxy``: the
    ``sensitivity`` of ``fit optimum``, ``ratio`` = max/min of the refit optima) and the
    ratio redone with each refit's exponents (``laws.lr_loso``). The two sweeps' seeds
    are different runs, so the card's ratio is the product of the two: the most that
    one seed of each could move the LR. ``loso_ratio`` is None when no part could be
    refitted; ``loso.complete`` is false when a part the LR depends on has fewer than 2
    seeds (e.g. a one-seed scaling sweep): the ratio is then a lower bound.
    """
    proxy = proxy or {}
    r = proxy.get("ratio")
    if r is not None and not (isinstance(r, (int, float)) and not isinstance(r, bool)
                              and math.isfinite(r) and r >= 1):
        raise ValueError(f"the proxy optimum's sensitivity.ratio must be a number >= 1 or null, got {r!r}")
    parts: dict[str, dict[str, Any]] = {
        "proxy": {"n_seeds": proxy.get("n_seeds"), "ratio": proxy.get("ratio")}}
    if laws is not None:
        ratio = None
        if len(laws.lr_loso) >= 2 and proxy_batch_tokens and proxy_tokens:
            rb, rd = batch_tokens / proxy_batch_tokens, tokens / proxy_tokens
            rs = [rb**a * rd**b for a, b in laws.lr_loso]
            ratio = max(rs) / min(rs)
        parts["law"] = {"n_seeds": laws.n_seeds, "ratio": ratio}
    known = [p["ratio"] for p in parts.values() if p["ratio"] is not None]
    total = math.prod(known) if known else None
    return {"loso_ratio": total, "loso_octaves": None if total is None else math.log2(total),
            "loso": {"method": "leave-one-seed-out: max/min of the LR refitted without each seed",
                     **parts, "complete": len(known) == len(parts)}}


def read_scaling_fit(path: str | Path) -> ScalingLaws:
    """:class:`ScalingLaws` from the FIT.json of ``mutransfer fit scaling``."""
    from mutransfer._io import read_text

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"scaling fit {str(p)!r} does not exist")
    try:
        doc = json.loads(read_text(p, "scaling fit"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"scaling fit {str(p)!r} is not valid JSON: {exc}") from None
    return ScalingLaws.from_dict(doc, f"scaling fit {p.name!r}")


# ---- the run plan -----------------------------------------------------------------------


def _estimate(value: float, lo: float | None, hi: float | None, level: float, source: str,
              extrapolation: float = 1.0) -> dict[str, Any]:
    """The projection's value record (as ``analysis.project.Estimate.to_dict()``)."""
    return {"value": float(value), "lo": None if lo is None else float(lo),
            "hi": None if hi is None else float(hi), "level": float(level), "source": source,
            "extrapolation": float(extrapolation)}


def _factor(target: float, measured: tuple[float, float]) -> float:
    """How far outside the measured range: target / largest, or smallest / target."""
    return max(1.0, target / measured[1], measured[0] / target)


@dataclass
class RunPlan:
    """Batch, steps, LR, weight decay, warmup and schedule of the target run."""

    lr: float
    batch_sequences: int
    micro_batch: int
    batch_tokens: int
    steps: int
    warmup_tokens: float
    warmup_steps: int
    decay_fraction: float
    weight_decay: float
    tau: float | None
    projected: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def _batch_edges(budgets: Any) -> tuple[int, int]:
    if not isinstance(budgets, Sequence) or isinstance(budgets, (str, bytes)):
        return 0, 0
    rows = [b for b in budgets if isinstance(b, Mapping)]
    return sum(1 for b in rows if b.get("edge")), len(rows)


def _bounds(doc: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """``batch_bounds`` and ``lr_bounds`` of :class:`ScalingLaws` from FIT.json's
    ``budgets[i].edge``, ``bracketing`` and ``bracketed`` (each is optional: older fits lack
    the last two)."""
    batch: list[str] = []
    lr: list[str] = []

    def at(row: Mapping[str, Any]) -> str:
        t = row.get("tokens")
        return f" (budget {t:.3g} tokens)" if isinstance(t, (int, float)) and not isinstance(t, bool) else ""

    budgets = doc.get("budgets")
    if isinstance(budgets, Sequence) and not isinstance(budgets, (str, bytes)):
        for i, b in enumerate(budgets):
            if isinstance(b, Mapping) and b.get("edge"):
                batch.append(f"budgets[{i}].edge {b['edge']!r}{at(b)}")
    rows = doc.get("bracketing")
    if isinstance(rows, Sequence) and not isinstance(rows, (str, bytes)):
        for i, r in enumerate(rows):
            if not isinstance(r, Mapping):
                continue
            for key, out in (("batch", batch), ("lr", lr)):
                sec = r.get(key)
                if isinstance(sec, Mapping) and sec.get("bracketed") is False:
                    edge = sec.get("edge")
                    out.append(f"bracketing[{i}].{key}.bracketed false"
                               f"{f' (edge {edge!r})' if isinstance(edge, str) and edge else ''}{at(r)}")
    overall = doc.get("bracketed")
    if isinstance(overall, Mapping):
        for key, out in (("batch", batch), ("lr", lr)):
            if overall.get(key) is False and not out:
                out.append(f"bracketed.{key} false")
    return {"batch_bounds": tuple(batch), "lr_bounds": tuple(lr)}


#: Values of the fit that ``--accept-edge`` may take although they are only bounds.
EDGE_VALUES = ("batch", "lr")

#: How the target's batch is chosen when none is given: ``fit`` = our B*(D); ``deepseek``
#: = DeepSeek LLM's B_opt(C); ``auto`` = ours unless it is in doubt
#: (:meth:`ScalingLaws.batch_law_doubts`), then DeepSeek's, flagged.
BATCH_RULES = ("auto", "fit", "deepseek")


def default_micro_batch(sequences: int, dp_size: int = 1) -> int:
    """The largest power of two (at most 8) that divides each rank's share of the batch:
    a micro-batch every usual accelerator count and memory size can take."""
    share = sequences // max(dp_size, 1)
    micro = 1
    while micro < 8 and share % (micro * 2) == 0:
        micro *= 2
    return micro



def plan_run(
    *,
    proxy_lr: float,
    proxy_lr_interval: Sequence[float | None] | None,
    tokens: float,
    seq_len: int,
    laws: ScalingLaws | None = None,
    proxy_batch_tokens: float | None = None,
    proxy_tokens: float | None = None,
    batch_tokens: float | None = None,
    batch_sequences: int | None = None,
    dp_size: int | None = None,
    micro_batch: int | None = None,
    weight_decay: float | None = None,
    wd_mode: str = "coupled",
    warmup_tokens: float | None = None,
    warmup_fraction: float | None = None,
    decay_fraction: float | None = None,
    extrapolation_limit: float = 100.0,
    n_params: float | None = None,
    batch_rule: str = "auto",
    proxy_tau: float | None = None,
    accept_edge: Sequence[str] = (),
) -> RunPlan:
    """Project the run of the target from the proxy optimum and (optionally) the laws.

    - Batch: ``batch_sequences`` or ``batch_tokens`` if given, else B*(D) of the laws;
      rounded to whole sequences and to a multiple of ``dp_size × micro_batch``. Without
      ``micro_batch`` a projected batch is rounded to a multiple of ``dp_size × 8`` (or of
      the largest power of two that fits a smaller batch), so it splits over any usual
      device count; the micro-batch is then the largest power of two <= 8 dividing each
      rank's share (:func:`default_micro_batch`), recorded in
      ``projected.batch_split``. A given ``batch_sequences`` must be such a multiple.
    - Base LR: the proxy's μP optimum ``proxy_lr`` moved by the fitted law's ratio
      eta*(B_t, D_t) / eta*(B_p, D_p) from the proxy's batch and tokens to the target's.
    - Weight decay: given, or lambda = B / (eta · tau · D) with the laws' tau (coupled
      AdamW decay, per step eta·lambda; ``independent`` decay is per step lambda, so
      lambda = B / (tau · D)), else with ``proxy_tau``, the timescale of a tuned proxy
      (the weight decay its sweep chose, as a fraction of its run: Wang & Aitchison 2024
      find the optimal tau roughly constant across model and data size). tau is
      recorded either way.
    - Steps = ceil(D / B); warmup tokens given, from the laws' rule (``n_params``, the
      target's non-embedding N, feeds it), or ``warmup_fraction`` of D (default 1%);
      WSD decay fraction given, from the laws, or 0.2.
    - Baselines (sqrt and linear LR–batch rules, DeepSeek LLM, Step Law, Power Lines;
      :func:`analysis.baselines.scaling_baselines`) anchored at the proxy optimum, for
      comparison only.
    Each projected value carries its interval and its extrapolation factor (target ÷
    largest measured, per axis); beyond ``extrapolation_limit`` a warning says so.

    ``batch_rule`` (:data:`BATCH_RULES`): small proxies measure B* over a few hundred
    thousand tokens, and a law fitted there can be 10^5x short of a real budget, or not
    resolved at all (:meth:`ScalingLaws.batch_law_doubts`: the best batch at the grid's edge
    at half the budgets or more, or the target beyond ``extrapolation_limit``; inside the
    limit our B*(D) carries the batch even when its exponent is uncertain, with a warning).
    Then ``auto`` takes DeepSeek LLM's B_opt = 0.2920·C^0.3271 tokens
    (Bi et al. 2024; C = 6·N·D FLOPs, N = ``n_params``), fitted on 1e17–3e20 FLOPs, and
    says so; our law's value stays in the card as ``batch_fit`` beside it.

    A bound is never a value: with ``batch_rule="fit"`` a B* (or an LR optimum) that the
    fit flags as at its grid's edge (:attr:`ScalingLaws.batch_bounds`, ``lr_bounds``) is a
    ValueError naming where, unless ``accept_edge`` names it (``"batch"``, ``"lr"``); then
    it is taken, recorded in ``projected.accepted_edges`` and warned about. Under ``auto``
    an edge batch falls back to DeepSeek's (as above) and an edge LR is a warning.
    """
    if batch_rule not in BATCH_RULES:
        raise ValueError(f"batch rule must be one of {', '.join(BATCH_RULES)}, got {batch_rule!r}")
    for what in accept_edge:
        if what not in EDGE_VALUES:
            raise ValueError(f"--accept-edge must be one of {', '.join(EDGE_VALUES)}, got {what!r}")
        if batch_rule != "fit":
            raise ValueError(f"--accept-edge {what} contradicts --batch-rule {batch_rule}: only --batch-rule "
                             "fit takes the fit's values as they are; drop one")
    if "batch" in accept_edge and (batch_sequences is not None or batch_tokens is not None):
        flag = "--batch-size" if batch_sequences is not None else "--batch-tokens"
        raise ValueError(f"--accept-edge batch contradicts {flag}: the batch is given, not taken from the "
                         "fit; drop one")
    if accept_edge and laws is None:
        raise ValueError(f"--accept-edge {accept_edge[0]} needs --scaling-fit: there is no fit whose edge "
                         "it would accept")
    warnings: list[str] = []
    accepted: dict[str, list[str]] = {}

    def bound(what: str, where: tuple[str, ...], how: str) -> None:
        """Refuse, or accept and record, a value of the fit that is only a bound."""
        if not where:
            return
        said = "; ".join(where[:4]) + (f"; and {len(where) - 4} more" if len(where) > 4 else "")
        if what in accept_edge:
            accepted[what] = list(where)
            warnings.append(f"the {how} rests on bounds, not optima ({said}); taken as a value because "
                            f"--accept-edge {what}")
        elif batch_rule == "fit":
            src = laws.source if laws is not None else "the scaling fit"
            raise ValueError(f"--batch-rule fit: the {how} rests on bounds, not optima: {said} in {src}. "
                             "A bound is not a value: extend the grid (sweep scaling brackets it), use "
                             f"--batch-rule auto, or pass --accept-edge {what} to take it anyway (recorded "
                             "in the card)")
        elif what == "lr":
            warnings.append(f"the {how} rests on bounds, not optima ({said})")
    projected_batch_fit = None
    if not (math.isfinite(tokens) and tokens > 0):
        raise ValueError(f"token budget must be a positive finite number, got {tokens!r}")
    dp = dp_size or 1
    level = laws.level if laws else 0.9
    ext = {"tokens": 1.0, "batch_tokens": 1.0}
    if laws is not None:
        ext["tokens"] = _factor(tokens, laws.measured_tokens)

    # batch
    given = ("--batch-size", batch_sequences) if batch_sequences is not None else (
        ("--batch-tokens", batch_tokens) if batch_tokens is not None else None)
    if given is not None and batch_rule != "auto":  # a fixed batch would silently drop the rule
        raise ValueError(f"--batch-rule {batch_rule} contradicts {given[0]} {given[1]:g}: the rule picks "
                         "the batch, the flag fixes it; give one")
    if batch_tokens is not None and batch_tokens < seq_len:
        raise ValueError(f"--batch-tokens {batch_tokens:g} is below one sequence of {seq_len} tokens")
    if micro_batch is not None and not (isinstance(micro_batch, int) and micro_batch >= 1):
        raise ValueError(f"--micro-batch must be a positive integer, got {micro_batch!r}")
    if batch_sequences is not None:
        if batch_sequences % (dp * (micro_batch or 1)):
            raise ValueError(f"--batch-size {batch_sequences} is not a multiple of --dp-size {dp}"
                             + (f" × --micro-batch {micro_batch}" if micro_batch else ""))
        b_est = _estimate(batch_sequences * seq_len, None, None, level, "given (--batch-size)")
        raw_seqs = float(batch_sequences)
    elif batch_tokens is not None:
        b_est = _estimate(batch_tokens, None, None, level, "given (--batch-tokens)")
        raw_seqs = batch_tokens / seq_len
    elif laws is not None or batch_rule == "deepseek":
        doubts: list[str] = []
        fit_est = None
        if laws is not None:
            b, lo, hi = laws.batch_at(tokens)
            fit_est = _estimate(b, lo, hi, level, f"B*(D) = {laws.batch_coef:.4g} · "
                                f"D^{laws.batch_exponent:.4g} ({laws.source})", ext["tokens"])
            doubts = laws.batch_law_doubts(tokens, extrapolation_limit)
        if laws is not None and batch_rule == "fit":
            bound("batch", laws.batch_bounds, "fitted B*(D)")
        if batch_rule == "deepseek" or (batch_rule == "auto" and doubts):
            if n_params is None:
                raise ValueError("DeepSeek's batch law needs the target's parameter count (C = 6·N·D)")
            from analysis.baselines import deepseek_llm

            compute = 6.0 * float(n_params) * tokens
            b = float(deepseek_llm(compute)["batch_tokens"])
            why = "; ".join(doubts) if doubts else "asked for (--batch-rule deepseek)"
            b_est = _estimate(b, None, None, level, f"DeepSeek LLM B_opt = 0.2920·C^0.3271 tokens at "
                              f"C = 6·N·D = {compute:.3g} FLOPs (Bi et al. 2024), because {why}")
            if fit_est is not None:
                projected_batch_fit = fit_est
                warnings.append(f"batch from DeepSeek LLM's law ({b:.4g} tokens), not from the fitted "
                                f"B*(D) ({fit_est['value']:.4g} tokens): {why}")
        else:
            b_est = fit_est
            if laws is not None:
                warnings.extend(laws.batch_law_cautions())
        raw_seqs = b_est["value"] / seq_len
    else:
        raise ValueError("no batch for the target: the batch size needs the scaling fit "
                         "B*(D) (--scaling-fit FIT.json from `mutransfer fit scaling`), or give it "
                         "with --batch-tokens or --batch-size")
    if batch_sequences is not None:
        seqs, unit = batch_sequences, dp * (micro_batch or 1)
        how = "given (--batch-size)"
    else:
        if micro_batch is not None:
            unit, how = dp * micro_batch, f"a multiple of --dp-size {dp} × --micro-batch {micro_batch}"
        else:
            pow2 = 8
            while pow2 > 1 and raw_seqs / dp < pow2:
                pow2 //= 2
            unit = dp * pow2
            how = (f"a multiple of dp_size {dp} × {pow2} (power-of-two default: no --micro-batch given)")
        seqs = max(unit, int(round(raw_seqs / unit)) * unit)

    micro = micro_batch or default_micro_batch(seqs, dp)
    split = {"sequences": seqs, "dp_size": dp, "micro_batch": micro,
             "grad_accum": seqs // (dp * micro), "rounded_to": unit, "rule": how,
             "micro_batch_source": "given (--micro-batch)" if micro_batch else
             "default: the largest power of two <= 8 dividing each rank's share"}
    b_tok = seqs * seq_len
    if laws is not None:
        ext["batch_tokens"] = _factor(b_tok, laws.measured_batch_tokens)
        b_est["extrapolation"] = max(b_est["extrapolation"], ext["batch_tokens"])
    if tokens < b_tok:
        raise ValueError(f"the token budget {tokens:.6g} is below one batch of {b_tok} tokens "
                         f"({seqs} sequences of {seq_len})")
    steps = math.ceil(tokens / b_tok)

    # base LR
    # No interval given (--lr): the law's alone. An open side (optimum at the grid's
    # edge) stays open (None).
    p_lo, p_hi = (list(proxy_lr_interval) + [None, None])[:2] if proxy_lr_interval else (
        proxy_lr, proxy_lr)
    if laws is not None:
        if proxy_batch_tokens is None or proxy_tokens is None:
            raise ValueError("--scaling-fit moves the proxy's LR to the target's batch and tokens, so "
                             "it needs the proxy's batch and token budget: give --proxy-batch-tokens "
                             "and --proxy-tokens (or --results with batch_tokens and tokens columns)")
        bound("lr", laws.lr_bounds, "fitted LR law eta*(B, D)")
        r, r_lo, r_hi = laws.lr_ratio((proxy_batch_tokens, b_tok), (proxy_tokens, tokens))
        lr = proxy_lr * r
        lr_est = _estimate(lr, None if p_lo is None else p_lo * r_lo,
                           None if p_hi is None else p_hi * r_hi, level,
                           f"proxy optimum {proxy_lr:.4g} × eta*(B, D) ratio {r:.4g} from (B "
                           f"{proxy_batch_tokens:.4g}, D {proxy_tokens:.4g}) to (B {b_tok}, D "
                           f"{tokens:.4g})", max(ext.values()))
    else:
        lr = proxy_lr
        lo_hi = (p_lo, p_hi) if proxy_lr_interval else (None, None)
        lr_est = _estimate(lr, *lo_hi, level, "proxy optimum (no scaling fit: not moved to the "
                           "target's batch and tokens)")
        if proxy_batch_tokens is not None and proxy_batch_tokens != b_tok:
            warnings.append(f"the batch changes from the proxy's {proxy_batch_tokens:.6g} to {b_tok} "
                            "tokens but there is no --scaling-fit, so the LR is not moved with it")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"the projected base LR is not a positive finite number ({lr!r})")

    # weight decay through tau
    def lam_from_tau(t: float) -> float:
        return b_tok / (t * tokens) if wd_mode == "independent" else b_tok / (lr * t * tokens)

    if weight_decay is not None:
        if not (math.isfinite(weight_decay) and weight_decay >= 0):
            raise ValueError(f"--weight-decay must be a finite number >= 0, got {weight_decay!r}")
        wd = weight_decay
        tau = (b_tok / ((1.0 if wd_mode == "independent" else lr) * wd * tokens)) if wd > 0 else None
        wd_est = _estimate(wd, None, None, level, "given (--weight-decay)")
        tau_est = None if tau is None else _estimate(tau, None, None, level, "from the given weight decay")
    elif laws is not None and laws.tau is not None:
        tau = laws.tau
        wd = lam_from_tau(tau)
        t_lo, t_hi = laws.tau_ci or (tau, tau)
        wd_est = _estimate(wd, lam_from_tau(t_hi), lam_from_tau(t_lo), level,
                           f"lambda = B / ({'' if wd_mode == 'independent' else 'eta · '}tau · D), "
                           f"tau {tau:.4g}", max(ext.values()))
        what = {"measured": "tau* measured at its optimum over the weight decays",
                "default λ": "at the sweep's one weight decay, not optimised"}.get(laws.tau_source or "", "")
        tau_est = _estimate(tau, t_lo, t_hi, level, f"AdamW timescale at the proxy optimum"
                            f"{': ' + what if what else ''} ({laws.source})")
    elif proxy_tau is not None:
        if not (math.isfinite(proxy_tau) and proxy_tau > 0):
            raise ValueError(f"the proxy's weight-decay timescale tau must be a positive finite number, "
                             f"got {proxy_tau!r}")
        tau = proxy_tau
        wd = lam_from_tau(tau)
        wd_est = _estimate(wd, None, None, level,
                           f"lambda = B / ({'' if wd_mode == 'independent' else 'eta · '}tau · D), "
                           f"tau {tau:.4g} of the tuned proxy")
        tau_est = _estimate(tau, None, None, level, "the tuned proxy's weight decay (--proxy-config)")
    else:
        wd, tau = 0.0, None
        wd_est = _estimate(0.0, None, None, level, "default (no --weight-decay, no tau in a scaling fit)")
        tau_est = None

    # warmup and decay
    w_rule = laws.warmup_tokens(tokens, b_tok, n_params) if laws is not None else None
    if warmup_tokens is not None:
        w, w_est = warmup_tokens, _estimate(warmup_tokens, None, None, level, "given (--warmup-tokens)")
    elif warmup_fraction is None and w_rule is not None:
        w = w_rule
        w_est = _estimate(w, None, None, level, f"warmup rule of {laws.source}",  # type: ignore[union-attr]
                          ext["tokens"])
    else:
        frac = 0.01 if warmup_fraction is None else warmup_fraction
        w = frac * tokens
        w_est = _estimate(w, None, None, level, f"{frac:g} of the token budget")
    warmup_steps = min(steps, int(round(w / b_tok)))
    if decay_fraction is not None:
        dec, d_est = decay_fraction, _estimate(decay_fraction, None, None, level, "given (--decay-fraction)")
    elif laws is not None and laws.decay_fraction is not None:
        dec = laws.decay_fraction
        lo, hi = laws.decay_fraction_ci or (dec, dec)
        d_est = _estimate(dec, lo, hi, level, f"WSD decay fraction of {laws.source}")
    else:
        dec, d_est = 0.2, _estimate(0.2, None, None, level, "default (Hägele et al. 2024: 10-20%)")

    extrapolated = any(f > extrapolation_limit for f in ext.values())
    for axis, f in ext.items():
        if f > extrapolation_limit:
            warnings.append(f"the target's {axis} lies {f:.3g}× outside the measured range of the "
                            f"scaling sweep (limit {extrapolation_limit:g}×): treat the projection "
                            "as a guess")
    baselines: dict[str, Any] = {}
    if proxy_batch_tokens and proxy_tokens:
        # Textbook rules beside ours, anchored at the proxy optimum (shown, never used).
        from analysis.baselines import scaling_baselines

        baselines = scaling_baselines(tokens=tokens, batch_tokens=b_tok, ref_lr=proxy_lr,
                                      ref_batch_tokens=proxy_batch_tokens, ref_tokens=proxy_tokens,
                                      n_params=n_params)
    projected = {
        "lr": {**lr_est, "interval": [lr_est["lo"], lr_est["hi"]], "method": lr_est["source"]},
        "batch_tokens": b_est, "batch_sequences": seqs, "batch_split": split, "steps": steps,
        "weight_decay": wd_est, "tau": tau_est, "warmup_tokens": w_est, "decay_fraction": d_est,
        "extrapolation": ext, "extrapolation_limit": float(extrapolation_limit),
        "extrapolated": extrapolated, "baselines": baselines,
        "proxy": {"lr": proxy_lr, "batch_tokens": proxy_batch_tokens, "tokens": proxy_tokens},
        "warnings": warnings,
    }
    if accepted:  # bounds the user took as values (--accept-edge), and where they were flagged
        projected["accepted_edges"] = accepted
    if projected_batch_fit is not None:  # the fitted law's batch, shown beside the one used
        projected["batch_fit"] = projected_batch_fit
    return RunPlan(lr=lr, batch_sequences=seqs, micro_batch=micro, batch_tokens=b_tok, steps=steps,
                   warmup_tokens=w,
                   warmup_steps=warmup_steps, decay_fraction=dec, weight_decay=wd, tau=tau,
                   projected=projected, warnings=warnings)
