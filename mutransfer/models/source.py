"""One way to name a model: a built-in preset, a local Hugging Face config, or your builder.

``parse_model(text)`` reads what every verb's ``--model`` (and the config field
``model.source``) takes:

- ``gpt-tiny`` or ``preset:gpt-tiny``: a built-in preset (:data:`mutransfer.models.presets.PRESETS`);
- ``hf:PATH``: a local ``config.json`` (or a folder holding one) of a ``transformers``
  causal LM. The JSON is read here and its ``model_type`` checked against
  ``transformers.CONFIG_MAPPING``; nothing is ever downloaded, so a hub id is refused;
- ``module:function``: a Python builder ``function(width, depth) -> nn.Module`` mapping
  token ids [B, T] to logits [B, T, V] (a tensor or an output with ``.logits``); the
  current directory is importable, as for ``python -m``.

:func:`build_model` builds any of them at a width and depth; for ``hf:`` the proxy's
config comes from :func:`hf_proxy_config` (width sets the hidden size, the MLP keeps its
ratio, heads follow ``head_rule``, depth sets the layer count; vocab and context stay the
user's; where each family keeps those sizes: :mod:`mutransfer.models.hf_families`); a
builder is loaded, contained and called by :mod:`mutransfer.models.builder`.
:attr:`ModelSource.model_id` is the short stable name in the results table's ``model`` column.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn as nn

from mutransfer.models.builder import call_builder, contain_builder, load_builder
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.hf_families import HEAD_DIM_SCALARS, hf_fields
from mutransfer.models.mlp import MLP
from mutransfer.models.presets import PRESETS, get_preset

HeadRule = Literal["keep_head_dim", "keep_heads"]
HEAD_RULES: tuple[str, ...] = typing.get_args(HeadRule)
SourceKind = Literal["preset", "hf", "builder"]


@dataclass(frozen=True)
class ModelSource:
    """A parsed model name (:func:`parse_model`)."""

    kind: SourceKind
    """``preset``, ``hf`` (a local transformers config) or ``builder`` (``module:function``)."""
    ref: str
    """The preset's name, the absolute path of the ``config.json``, or ``module:function``."""
    head_rule: HeadRule = "keep_head_dim"
    """How an ``hf`` proxy's attention follows its width: ``keep_head_dim`` (heads and KV
    heads scale with width, the GQA ratio kept) or ``keep_heads`` (head_dim scales)."""
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False, hash=False)
    """What an ``hf`` source read from its config.json (the bytes, the fields, the built
    config): read once per source, so a run reads the file once however often it asks."""

    def __post_init__(self) -> None:
        if self.kind not in ("preset", "hf", "builder"):
            raise ValueError(f"model source kind must be preset, hf or builder, got {self.kind!r}")
        if self.head_rule not in HEAD_RULES:
            raise ValueError(f"head_rule must be one of {', '.join(HEAD_RULES)}, got {self.head_rule!r}")

    @property
    def builtin(self) -> bool:
        """Whether this is one of our presets (our GPT/MLP, with its own loss and attention)."""
        return self.kind == "preset"

    @property
    def model_id(self) -> str:
        """Short stable name for the results table: ``gpt-small``,
        ``hf:llama@<first 8 hex of the config.json's sha256>`` (``/keep_heads`` appended
        under that head rule), ``builder:pkg.mod:build``."""
        if self.kind == "preset":
            return self.ref
        if self.kind == "builder":
            return f"builder:{self.ref}"
        raw = self.config_bytes()
        model_type = self.config_fields()[0]
        tail = "" if self.head_rule == "keep_head_dim" else f"/{self.head_rule}"
        return f"hf:{model_type}@{hashlib.sha256(raw).hexdigest()[:8]}{tail}"

    def describe(self) -> str:
        """The same as :attr:`model_id`."""
        return self.model_id

    def spec(self) -> str:
        """The text :func:`parse_model` reads back into this source."""
        return {"preset": self.ref, "hf": f"hf:{self.ref}", "builder": self.ref}[self.kind]

    def config_bytes(self) -> bytes:
        """An ``hf`` source's config.json as read (once; later calls return the same bytes)."""
        if self.kind != "hf":
            raise ValueError(f"model {self.spec()!r} is a {self.kind}, not hf:PATH: it has no config.json")
        if "bytes" not in self._cache:
            try:
                self._cache["bytes"] = Path(self.ref).read_bytes()
            except OSError as exc:
                raise ValueError(f"config {self.ref!r} is not readable: {exc}") from None
        return typing.cast(bytes, self._cache["bytes"])

    def config_fields(self) -> tuple[str, dict[str, Any]]:
        """(model_type, the other fields) of an ``hf`` source's config.json, the model_type
        checked against ``transformers.CONFIG_MAPPING``; a copy the caller may change."""
        if "fields" not in self._cache:
            self._cache["fields"] = _parse_config_json(Path(self.ref), self.config_bytes())
        model_type, fields = self._cache["fields"]
        return model_type, copy.deepcopy(fields)

    def hf_config(self) -> Any:
        """The ``transformers`` config of an ``hf`` source (``AutoConfig.for_model``; no hub,
        no network), built once; each call returns its own copy, free to change."""
        if "config" not in self._cache:
            model_type, fields = self.config_fields()
            from transformers import AutoConfig

            try:
                self._cache["config"] = AutoConfig.for_model(model_type, **fields)
            except Exception as exc:  # noqa: BLE001 - a config class rejecting the user's fields
                raise ValueError(f"config {self.ref!r} ({model_type}) cannot be built: {exc}") from None
        return copy.deepcopy(self._cache["config"])


#: parse_model's sources by (config path, head rule, the file's mtime and size): one
#: ``hf:`` model is read and checked once per process, however many configs name it; a
#: changed file is a new key, so an edit is seen.
_PARSED: dict[tuple[str, str, int, int], ModelSource] = {}


def parse_model(text: str, head_rule: str = "keep_head_dim") -> ModelSource:
    """Parse a model name: ``NAME``/``preset:NAME``, ``hf:PATH`` or ``module:function``.

    Everything is checked here (the preset exists; the config.json is local, valid JSON
    with a known ``model_type``; the builder imports and is callable), each failure a
    ValueError naming ``text``. Never touches the network."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"model must be a preset name, hf:PATH or module:function, got {text!r}")
    text = text.strip()
    if head_rule not in HEAD_RULES:
        raise ValueError(f"head_rule must be one of {', '.join(HEAD_RULES)}, got {head_rule!r}")
    rule = typing.cast(HeadRule, head_rule)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):  # not a module named "https"
        raise ValueError(f"model {text!r} is a URL; mutransfer never downloads: give hf:PATH (a local "
                         "config.json), a preset name or module:function")
    if text.startswith("hf:"):
        path = _local_config_path(text)
        stat = path.stat()
        key = (str(path), rule, stat.st_mtime_ns, stat.st_size)
        if key not in _PARSED:
            src = ModelSource("hf", str(path), rule)
            _check_hf_sizes(path, *src.config_fields())  # checked now, not at the first build
            if len(_PARSED) >= 64:
                _PARSED.clear()
            _PARSED[key] = src
        return _PARSED[key]
    name = text[len("preset:"):] if text.startswith("preset:") else text
    if ":" not in name:
        if name not in PRESETS:
            raise ValueError(f"unknown model {text!r}: not a preset ({', '.join(PRESETS)}), "
                             "hf:PATH (a local config.json) or module:function")
        return ModelSource("preset", name, rule)
    contain_builder(text)  # its import first runs in a child when the CLI asks (mutransfer.contain)
    load_builder(text)
    return ModelSource("builder", text, rule)


# ---- Hugging Face configs ------------------------------------------------------------------


def _local_config_path(text: str) -> Path:
    """The local config.json that ``hf:PATH`` names; a hub id or a missing file is refused."""
    raw = text[len("hf:"):]
    if not raw:
        raise ValueError(f"model {text!r} names no path; give hf:PATH/TO/config.json")
    path = Path(raw).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"model {text!r}: {str(path)!r} is not a local config.json or a folder holding one; "
                         "mutransfer never downloads (no hub ids): give a local config.json")
    return path.resolve()


def _parse_config_json(path: Path, raw: bytes) -> tuple[str, dict[str, Any]]:
    """(model_type, the other fields) of the config.json ``path`` whose bytes are ``raw``,
    the model_type checked against ``transformers.CONFIG_MAPPING``."""
    try:
        doc = json.loads(raw.decode())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"config {str(path)!r} is not readable JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"config {str(path)!r} is not a JSON object")
    model_type = doc.pop("model_type", None)
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"config {str(path)!r} has no model_type")
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise ValueError(f"config {str(path)!r}: unknown model_type {model_type!r} (not in this "
                         "transformers' CONFIG_MAPPING; remote code is never run)")
    return model_type, doc


#: Limits of the sizes in a model config (``hf:`` config.json, a card's ``target.model``,
#: ``transfer --set``): far above any real model, below what would allocate without end
#: (``vocab_size: 1e10`` asked for terabytes). ``MAX_MODEL_PARAMS`` bounds their product.
MODEL_LIMITS: dict[str, int] = {"hidden": 1 << 20, "layers": 10_000, "heads": 1 << 16,
                                "kv_heads": 1 << 16, "intermediate": 1 << 22, "head_dim": 1 << 16,
                                "vocab_size": 1 << 24}
MAX_MODEL_PARAMS = 10**13


def implied_size(n_params: float) -> str:
    """``"1.2e+11 parameters, 480 GB in fp32"``: what a size implies, for error lines."""
    tb = n_params * 4 / 1e12
    mem = f"{tb:.2g} TB" if tb >= 1e4 else f"{tb:,.1f} TB" if tb >= 1 else f"{tb * 1e3:,.1f} GB"
    return f"{n_params:.2g} parameters, {mem} in fp32"


def estimate_params(hidden: int, layers: int, vocab: int, intermediate: int | None, tied: bool = False
                    ) -> float:
    """Parameters of a decoder of these sizes, roughly: embeddings (and an untied readout)
    plus 4·h² attention and 3·h·ffn SwiGLU per layer (norms and biases left out)."""
    ffn = intermediate if intermediate else 4 * hidden
    embed = float(vocab) * hidden * (1 if tied else 2)
    return embed + float(layers) * (4.0 * hidden * hidden + 3.0 * hidden * ffn)


def check_model_sizes(where: str, sizes: Mapping[str, Any], *, tied: bool = False) -> None:
    """Every size in ``sizes`` (keys of :data:`MODEL_LIMITS`, each a config field's value,
    ``(field name, value)``) an integer >= 1 within its limit, and the parameter count they
    imply within :data:`MAX_MODEL_PARAMS`; else one ValueError naming ``where``, the field,
    its value, and the parameters and memory it implies. Nothing is allocated."""
    vals: dict[str, int] = {}
    for key, item in sizes.items():
        if item is None:
            continue
        name, v = item
        if v is None:
            continue
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{where}: {name} must be an integer, got {v!r}")
        if v < 1:
            raise ValueError(f"{where}: {name} must be >= 1, got {v}")
        vals[key] = v
    h = vals.get("hidden", 1)
    for key, v in vals.items():
        limit = MODEL_LIMITS[key]
        if v > limit:
            layers, vocab = vals.get("layers", 1), vals.get("vocab_size", 1)
            alone = {"hidden": estimate_params(v, layers, vocab, None, tied),
                     "vocab_size": float(v) * h * (1 if tied else 2),
                     "intermediate": 3.0 * h * v * vals.get("layers", 1)}.get(key)
            implies = f" ({implied_size(alone)})" if alone else ""
            raise ValueError(f"{where}: {sizes[key][0]} {v:,} is above the limit {limit:,}{implies}")
    if "hidden" in vals:
        n = estimate_params(h, vals.get("layers", 1), vals.get("vocab_size", 1), vals.get("intermediate"),
                            tied)
        if n > MAX_MODEL_PARAMS:
            raise ValueError(f"{where}: these sizes imply {implied_size(n)}, above the limit of "
                             f"{MAX_MODEL_PARAMS:.0e} parameters")


def _check_hf_sizes(path: Path, model_type: str, fields: Mapping[str, Any]) -> None:
    """The family's shape fields of a config.json, before transformers sees them: present
    where transformers would silently default them (a missing head count becomes 32), and
    bounded (:func:`check_model_sizes`)."""
    f = hf_fields(model_type)
    where = f"config {str(path)!r}"
    for name in (f.hidden, f.layers, f.heads):
        if name not in fields:
            raise ValueError(f"{where} has no {name}: transformers would take its default for "
                             f"{model_type}; write it in the config")
    sizes = {"hidden": (f.hidden, fields.get(f.hidden)), "layers": (f.layers, fields.get(f.layers)),
             "heads": (f.heads, fields.get(f.heads)), "vocab_size": ("vocab_size", fields.get("vocab_size"))}
    for key, name in (("kv_heads", f.kv_heads), ("intermediate", f.intermediate), ("head_dim", f.head_dim)):
        if name is not None:
            sizes[key] = (name, fields.get(name))
    check_model_sizes(where, sizes, tied=bool(fields.get("tie_word_embeddings", False)))


def load_hf_config(path: str | Path) -> Any:
    """A ``transformers`` config from a local config.json (or a folder holding one),
    built with ``AutoConfig.for_model(model_type, **fields)``: no hub, no network. Its
    sizes are checked first (:func:`_check_hf_sizes`)."""
    return parse_model(f"hf:{path}").hf_config()



def _scaled(value: int, width: int, hidden: int, field: str, model_type: str) -> int:
    """value × width / hidden as an exact positive integer, else ValueError naming ``field``."""
    num = value * width
    if num % hidden or num // hidden < 1:
        raise ValueError(f"{model_type} at width {width}: {field} = {value} × {width} / {hidden} "
                         f"= {num / hidden:g} is not a positive integer; pick a width that keeps it whole")
    return num // hidden


def _proxy_changes(config: Any, width: int, depth: int, head_rule: str) -> dict[str, Any]:
    """The config fields :func:`hf_proxy_config` sets at ``width`` and ``depth`` (checked, no copy)."""
    if head_rule not in HEAD_RULES:
        raise ValueError(f"head_rule must be one of {', '.join(HEAD_RULES)}, got {head_rule!r}")
    for label, v in (("width", width), ("depth", depth)):
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    mt = str(getattr(config, "model_type", "") or type(config).__name__)
    f = hf_fields(mt)
    for name in (f.hidden, f.layers, f.heads):
        if not isinstance(getattr(config, name, None), int):
            raise ValueError(f"{mt} config has no integer {name}; mutransfer reads shapes from "
                             f"{', '.join(n for n in dataclasses.astuple(f) if n)}")
    hidden, heads = int(getattr(config, f.hidden)), int(getattr(config, f.heads))
    kv = getattr(config, f.kv_heads, None) if f.kv_heads else None
    kv = heads if kv is None else int(kv)
    hd = getattr(config, f.head_dim, None) if f.head_dim else None
    if hd is None and hidden % heads:
        raise ValueError(f"{mt}: {f.hidden}={hidden} is not divisible by {f.heads}={heads}")
    hd = hidden // heads if hd is None else int(hd)
    changes: dict[str, Any] = {f.hidden: width, f.layers: depth}
    if f.intermediate and getattr(config, f.intermediate, None) is not None:
        changes[f.intermediate] = _scaled(int(getattr(config, f.intermediate)), width, hidden,
                                          f.intermediate, mt)
    if head_rule == "keep_head_dim":
        # Heads (and KV heads) shrink with the width; a narrower proxy can keep every head
        # and scale the head dim instead, which the refusal says.
        keep = "; --head-rule keep_heads keeps every head and scales the head dim instead"
        try:
            new_heads = _scaled(heads, width, hidden, f.heads, mt)
            new_kv = _scaled(kv, width, hidden, f.kv_heads, mt) if (
                f.kv_heads and getattr(config, f.kv_heads, None) is not None) else None
        except ValueError as exc:
            raise ValueError(f"{exc}{keep}") from None
        changes[f.heads] = new_heads
        if new_kv is not None:
            if new_heads * kv != new_kv * heads:
                raise ValueError(f"{mt} at width {width}: {f.kv_heads}={new_kv} breaks the GQA ratio "
                                 f"{heads}:{kv} of {f.heads}={new_heads}{keep}")
            changes[f.kv_heads] = new_kv
        new_hd = hd
    else:
        new_hd = _scaled(hd, width, hidden, "head_dim", mt)
        if f.head_dim:
            changes[f.head_dim] = new_hd
        for name in HEAD_DIM_SCALARS:  # Gemma's 1/sqrt(query_pre_attn_scalar) follows the head dim
            v = getattr(config, name, None)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and new_hd != hd:
                whole = isinstance(v, int) and v * new_hd % hd == 0
                changes[name] = v * new_hd // hd if whole else v * new_hd / hd
    if not f.head_dim and width % changes.get(f.heads, heads):
        raise ValueError(f"{mt} at width {width}: {f.hidden} is not divisible by "
                         f"{f.heads}={changes.get(f.heads, heads)}")
    if not f.head_dim and width // changes.get(f.heads, heads) != new_hd:
        raise ValueError(f"{mt} at width {width}: head_dim would be {width // changes.get(f.heads, heads)}, "
                         f"not {new_hd}")
    return changes


def hf_proxy_config(config: Any, width: int, depth: int, head_rule: str = "keep_head_dim") -> Any:
    """A copy of a ``transformers`` config at hidden size ``width`` and ``depth`` layers.

    The intermediate size keeps its ratio to the hidden size. ``keep_head_dim``: query and
    KV heads scale with width together (GQA ratio kept), head_dim fixed; ``keep_heads``:
    head counts fixed, head_dim scales, and so does a field that is a head dim in another
    name (:data:`mutransfer.models.hf_families.HEAD_DIM_SCALARS`: Gemma's
    query_pre_attn_scalar). Vocab and context are the user's. A per-layer
    ``layer_types`` list is repeated to the new depth. A width the config cannot represent
    (a non-integer size or head count) raises ValueError naming the field."""
    changes = _proxy_changes(config, width, depth, head_rule)
    out = copy.deepcopy(config)
    for k, v in changes.items():
        setattr(out, k, v)
    types = getattr(out, "layer_types", None)
    if isinstance(types, list) and types and len(types) != depth:
        out.layer_types = [types[i % len(types)] for i in range(depth)]
    return out


def valid_widths(config: Any, head_rule: str = "keep_head_dim", upto: int | None = None) -> list[int]:
    """Every width up to ``upto`` (default: the config's own) at which
    :func:`hf_proxy_config` can represent ``config`` under ``head_rule``: whole head counts,
    the GQA ratio kept, a whole MLP size."""
    top = int(upto if upto is not None else hf_shape(config)[0])
    out = []
    for w in range(1, top + 1):
        try:
            _proxy_changes(config, w, 1, head_rule)
        except ValueError:
            continue
        out.append(w)
    return out


def widths_hint(config: Any, head_rule: str = "keep_head_dim", below: int | None = None) -> str:
    """One sentence: the widths ``config`` takes under ``head_rule`` up to ``below`` (its own
    width by default), and, when fewer than 3 lie below it, the other head rule's."""
    own = int(below if below is not None else hf_shape(config)[0])
    mt = str(getattr(config, "model_type", "") or "the model")

    def listed(ws: list[int]) -> str:
        step = math.gcd(*ws) if ws else None
        step = step if step and len(ws) == (ws[-1] - ws[0]) // step + 1 else None
        shown = ", ".join(map(str, ws[:8])) + (f", ... {ws[-1]}" if len(ws) > 8 else "")
        return shown + (f" (multiples of {step})" if step and len(ws) > 2 else "")

    ws = valid_widths(config, head_rule, own)
    text = f"{mt} under --head-rule {head_rule} takes widths {listed(ws) or 'none'} up to {own}"
    if len([w for w in ws if w < own]) < 3:
        other = "keep_heads" if head_rule == "keep_head_dim" else "keep_head_dim"
        alt = [w for w in valid_widths(config, other, own) if w >= 16]
        text += (f"; fewer than 3 lie below {own}: try --head-rule {other} ({listed(alt) or 'none'})"
                 if alt else f"; fewer than 3 lie below {own}")
    return text


def hf_shape(config: Any) -> tuple[int, int, int | None]:
    """(width, depth, context) of a ``transformers`` config (context None if it has none)."""
    f = hf_fields(str(getattr(config, "model_type", "")))
    ctx = next((getattr(config, n) for n in ("max_position_embeddings", "n_positions")
                if isinstance(getattr(config, n, None), int)), None)
    return int(getattr(config, f.hidden)), int(getattr(config, f.layers)), ctx


# ---- building a named model ----------------------------------------------------------------


def build_model(source: ModelSource, width: int, depth: int, *, vocab_size: int | None = None,
                device: torch.device | str | None = None) -> nn.Module:
    """``source`` at ``width`` and ``depth`` (and the data's ``vocab_size``), at random init.

    A builder's model is probed with one forward of two tokens (unless built on the meta
    device) so that a builder that raises, returns no module or no [B, T, V] logits is a
    ValueError naming ``module:function`` here, not a crash mid-run
    (:func:`mutransfer.models.builder.call_builder`)."""
    if source.kind == "preset":
        cfg = get_preset(source.ref)
        if isinstance(cfg, GPTConfig):
            g = cfg.replace(width=width, depth=depth, **({"vocab_size": vocab_size} if vocab_size else {}))
            model: nn.Module = GPT(g)
        else:
            model = MLP(cfg.replace(width=width, depth=depth))
    elif source.kind == "hf":
        import transformers as tf

        full = source.hf_config()
        try:
            cfg = hf_proxy_config(full, width, depth, source.head_rule)
        except ValueError as exc:
            raise ValueError(f"{exc}. {widths_hint(full, source.head_rule)}") from None
        if vocab_size is not None:
            cfg.vocab_size = int(vocab_size)
            # Special-token ids of the user's tokenizer mean nothing on the data's vocab
            # (and a pad id past it breaks the embedding).
            for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
                tok = getattr(cfg, name, None)
                if isinstance(tok, int) and tok >= vocab_size:
                    setattr(cfg, name, None)
        # float32 weights whatever the config's torch_dtype (a checkpoint's storage dtype):
        # the trainer's run.dtype decides autocast, never a silent pure-bf16 proxy
        model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    else:
        model = call_builder(source.ref, width, depth, vocab_size)
    return model.to(device) if device is not None else model


__all__ = [
    "HEAD_RULES",
    "HeadRule",
    "ModelSource",
    "build_model",
    "hf_proxy_config",
    "hf_shape",
    "load_hf_config",
    "parse_model",
    "valid_widths",
    "widths_hint",
]
