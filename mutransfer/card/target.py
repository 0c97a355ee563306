"""The target of a transfer: a whole model (not a width) and the plan for its run.

Two halves, both used by ``mutransfer transfer``:

- :func:`resolve_target` turns a preset plus ``KEY=VALUE`` overrides, or a YAML/JSON
  model config, into a :class:`TargetModel` (config, parameter counts), and
  :func:`transfer_builder` gives the ``builder(width, depth)`` a
  :class:`~mutransfer.parametrize.parametrization.Parametrization` needs: the target's own config at
  the target width, and the *proxy's* head and MLP shape scheme at the base and delta
  widths, so the μP multipliers are measured against the shapes that were tuned.
- :func:`plan_run` (in :mod:`mutransfer.card.plan`, re-exported here) moves the proxy's
  optimum to the target's batch and token budget with the laws of ``mutransfer fit
  scaling`` (the one projection object, :class:`analysis.ScalingLawFit`, read from its
  FIT.json) and gives batch, steps, warmup, weight decay (through the AdamW timescale
  tau) and the WSD decay fraction, each with its interval and extrapolation factor.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from mutransfer._io import read_yaml_mapping
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP, MLPConfig
from mutransfer.models.presets import get_preset
from mutransfer.models.source import ModelSource, check_model_sizes, hf_proxy_config, hf_shape, parse_model
from mutransfer.redact import redact

__all__ = [
    "ALIASES",
    "HFTarget",
    "TargetModel",
    "PRECISION",
    "WEIGHT_DTYPES",
    "build_target_model",
    "config_dtype",
    "hf_config_of",
    "model_fields",
    "hf_transfer_builder",
    "parse_overrides",
    "resolve_hf_target",
    "resolve_target",
    "transfer_builder",
    "weight_dtype",
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
        with torch.device("meta"):
            model = self.build()
        total = sum(p.numel() for p in model.parameters())
        nonembed = model.num_params(non_embedding=True) if hasattr(model, "num_params") else total
        return int(total), int(nonembed)


@dataclass(frozen=True)
class HFTarget:
    """A target given as a local Hugging Face config (``--model hf:PATH``): the user's
    own ``transformers`` model, built from that config, with its own parameter names."""

    source: ModelSource
    """The model's source (kind ``hf``), parsed once: its config.json is not read again."""
    config: Any
    """The full-size ``transformers`` config."""
    kind: str = "hf"
    preset: str | None = None

    @property
    def width(self) -> int:
        return hf_shape(self.config)[0]

    @property
    def depth(self) -> int:
        return hf_shape(self.config)[1]

    @property
    def vocab_size(self) -> int | None:
        v = getattr(self.config, "vocab_size", None)
        return int(v) if isinstance(v, int) else None

    def build(self) -> nn.Module:
        """The full model at random init (build it under ``torch.device("meta")`` to get
        the names and shapes of a large one for nothing)."""
        import transformers as tf

        # a copy: from_config(dtype=...) writes the dtype into the config it is given
        return tf.AutoModelForCausalLM.from_config(copy.deepcopy(self.config), dtype=torch.float32)

    def to_dict(self) -> dict[str, Any]:
        """The card's ``target.model``: source, head rule, model type and the whole config,
        less anything that looks like a credential (:func:`redact_secrets`; ``redacted``
        lists the fields dropped or masked, when there are any)."""
        config, redacted = redact_secrets(_plain_config(self.config))
        out = {"kind": "hf", "source": self.source.spec(), "model_id": self.source.model_id,
               "head_rule": self.source.head_rule, "model_type": str(self.config.model_type),
               "config": config}
        if redacted:
            out["redacted"] = redacted
        return out

    def n_params(self) -> tuple[int, int]:
        """(total, non-embedding) parameter counts from a meta build; non-embedding leaves
        out the input embedding and an untied readout (as Kaplan et al. count N)."""
        with torch.device("meta"):
            model = self.build()
        total = sum(p.numel() for p in model.parameters())
        embed = {id(p) for m in (model.get_input_embeddings(), model.get_output_embeddings())
                 if m is not None for p in m.parameters()}
        nonembed = sum(p.numel() for p in model.parameters() if id(p) not in embed)
        return int(total), int(nonembed)


def redact_secrets(doc: Any, path: str = "") -> tuple[Any, list[str]]:
    """``doc`` (JSON data) without credentials: :func:`mutransfer.redact.redact`, the one
    rule for every record the project writes."""
    return redact(doc, path)


def _plain_config(config: Any) -> dict[str, Any]:
    """A transformers config as plain JSON data (what ``config.json`` holds)."""
    return json.loads(config.to_json_string(use_diff=False))


def resolve_hf_target(spec: str, head_rule: str = "keep_head_dim") -> HFTarget:
    """``hf:PATH`` (a local config.json, or a folder holding one) as a target; a hub id
    or a missing file is a ValueError naming it (never a download)."""
    source = parse_model(spec, head_rule=head_rule)
    if source.kind != "hf":
        raise ValueError(f"--model {spec!r} is not hf:PATH (a local transformers config.json)")
    return HFTarget(source, source.hf_config())


def hf_transfer_builder(target: HFTarget) -> Callable[..., nn.Module]:
    """``builder(width, depth=None)`` for a Parametrization of an HF target: the target's
    own config at its width and depth, else the same architecture scaled by
    :func:`mutransfer.models.source.hf_proxy_config` (hidden size, MLP ratio kept, heads by
    the source's head rule, layers), so every parameter keeps its name."""
    import transformers as tf

    def builder(width: int, depth: int | None = None) -> nn.Module:
        d = target.depth if depth is None else depth
        cfg = target.config if (width, d) == (target.width, target.depth) else hf_proxy_config(
            target.config, width, d, target.source.head_rule)
        # float32, never the config's bf16; a copy, which from_config(dtype=...) writes into
        return tf.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), dtype=torch.float32)

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
    check_config_sizes(cfg, what if model_config is not None and not overrides else "the target model")
    if type(cfg) is not type(proxy):
        raise ValueError(f"the target is a {_kind_of(cfg)} model but the proxy is a {_kind_of(proxy)}")
    return TargetModel(_kind_of(cfg), cfg, name)


def check_config_sizes(cfg: GPTConfig | MLPConfig, where: str) -> None:
    """The sizes of a target config within :data:`mutransfer.models.source.MODEL_LIMITS`, and
    the parameters they imply within ``MAX_MODEL_PARAMS``, before anything is built (one
    ValueError naming the field, its value, and the parameters and memory it implies)."""
    sizes: dict[str, Any] = {"hidden": ("width", cfg.width), "layers": ("depth", cfg.depth)}
    if isinstance(cfg, GPTConfig):
        sizes.update(vocab_size=("vocab_size", cfg.vocab_size), head_dim=("head_dim", cfg.head_dim),
                     intermediate=("d_ff (mlp_ratio x width)", int(cfg.mlp_ratio * cfg.width)))
        if cfg.n_head is not None:
            sizes["heads"] = ("n_head", cfg.n_head)
    check_model_sizes(where, sizes, tied=bool(getattr(cfg, "tie_embeddings", False)))


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


#: The dtypes a target's weights may be built in (the card's ``target.dtype``).
WEIGHT_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                                         "float16": torch.float16}
#: What each dtype means for training, said in the card and when the model is built.
PRECISION: dict[str, str] = {
    "float32": "mixed precision: float32 master weights, bf16 autocast for compute "
               "(TrainingArguments(bf16=True); torchtitan training.dtype float32; Megatron --bf16)",
    "bfloat16": "pure bf16: bfloat16 weights and optimizer state, no float32 master copy",
    "float16": "pure fp16: float16 weights and optimizer state, no float32 master copy",
}


def weight_dtype(dtype: torch.dtype | str | None) -> str:
    """The name in :data:`WEIGHT_DTYPES` of ``dtype`` (``torch.bfloat16``, ``"bf16"``,
    ``"bfloat16"``; None: ``float32``); anything else is a ValueError naming it."""
    if dtype is None:
        return "float32"
    if isinstance(dtype, torch.dtype):
        name = next((k for k, v in WEIGHT_DTYPES.items() if v == dtype), None)
    else:
        name = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "float": "float32",
                "half": "float16"}.get(str(dtype).lower(), str(dtype).lower())
    if name not in WEIGHT_DTYPES:
        raise ValueError(f"weights dtype {dtype!r}: choose from {', '.join(WEIGHT_DTYPES)}")
    return name


def config_dtype(config: Any) -> str | None:
    """The dtype a transformers config names (``dtype``, or the older ``torch_dtype``), as a
    :data:`WEIGHT_DTYPES` name; None when it names none."""
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if value is None or value == "auto":
        return None
    try:
        return weight_dtype(value)
    except ValueError:
        return None


def build_target_model(card: Mapping[str, Any], *, dtype: torch.dtype | str | None = None) -> nn.Module:
    """A fresh model of a v2 card's ``target.model`` (to pass to ``card.apply``); an
    ``hf`` target is rebuilt from the config the card holds (no file, no download).

    The weights are built in ``dtype``, else the card's ``target.dtype``, else float32:
    mixed precision (float32 master weights, the forward under bf16 autocast), whatever
    the config's ``torch_dtype`` says (a checkpoint's storage dtype, ``bfloat16`` in real
    configs, which ``from_config`` would otherwise build pure-bf16 weights in, silently).
    Pure bf16 only when asked (``dtype=torch.bfloat16`` or the card's ``target.dtype``).
    Without ``dtype``, a config naming another dtype than the one built is warned about,
    naming both."""
    import warnings

    model = card.get("target", {}).get("model")
    if not isinstance(model, Mapping):
        raise ValueError("the card has no target.model (a v1 card names only a width)")
    name = weight_dtype(dtype if dtype is not None else card.get("target", {}).get("dtype"))
    if model.get("kind") == "hf":
        import transformers as tf

        cfg = hf_config_of(model)
        said = config_dtype(cfg)
        if said is not None and said != name and dtype is None:  # an explicit dtype was asked for
            warnings.warn(f"target.model.config says dtype {said}; building {name} weights "
                          f"({PRECISION[name]}); pass dtype=torch.{said} for {said} weights", stacklevel=2)
        return tf.AutoModelForCausalLM.from_config(cfg, dtype=WEIGHT_DTYPES[name])
    fields = {k: v for k, v in model.items() if k not in ("kind", "preset")}
    kind = model.get("kind", "gpt")
    if kind not in _KINDS:
        raise ValueError(f"card field target.model.kind: must be gpt or mlp, got {kind!r}")
    cls = _KINDS[kind][0]
    cfg = _apply_overrides(cls(), fields, "card field target.model")
    return _KINDS[kind][1](cfg).to(WEIGHT_DTYPES[name])


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
