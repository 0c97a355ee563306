"""The model section of :class:`~mutransfer.training.config.TrainConfig`: which model a run
trains and its shape.

:class:`ModelSection` names a GPT preset with its overrides, or your own model (``source``:
an ``hf:`` config or a ``module:function`` builder, parsed once by
:func:`mutransfer.models.source.parse_model`), checks the two agree, and gives the model's
:class:`ModelShape` (width, depth, context) and, for a preset, its ``GPTConfig``.
"""

from __future__ import annotations

import typing
from typing import Any, ClassVar, Literal

from mutransfer.models.gpt import GPTConfig
from mutransfer.models.presets import PRESETS, get_preset
from mutransfer.models.source import ModelSource, hf_proxy_config, hf_shape, parse_model, widths_hint
from mutransfer.training.config_fields import _Section, _section

__all__ = ["ModelSection", "ModelShape"]


class ModelShape(typing.NamedTuple):
    """Width, depth and training context of a run's model (any source)."""

    width: int
    depth: int
    seq_len: int


#: Model fields a non-built-in model (``source``) cannot take, and why.
_BUILTIN_ONLY: dict[str, str] = {
    "head_dim": "the head dim of an hf: model follows head_rule; a builder sets its own",
    "tie_embeddings": "tying is the model's own choice (tie_word_embeddings in its config)",
    "qk_norm": "QK-norm needs our attention module",
    "freeze_norm_gains": "freezing norm gains needs our RMSNorm modules",
}


@_section("model")
class ModelSection(_Section):
    """The model: a GPT preset and its overrides (``None``: the preset's value), or your
    own model (``source``: a local Hugging Face config or a ``module:function`` builder)."""

    preset: str = "gpt-tiny"
    """Model preset (:data:`mutransfer.models.presets.PRESETS`), a GPT one. With a
    ``source``, only its context (``seq_len``) and, for a builder, its width and depth are
    the defaults."""
    width: int | None = None
    """Model width d_model (None: the preset's; an hf: model's own hidden size)."""
    depth: int | None = None
    """Number of blocks (None: the preset's; an hf: model's own layer count)."""
    head_dim: int | None = None
    """Per-head dimension (None: the preset's); heads = width / head_dim. Presets only."""
    seq_len: int | None = None
    """Tokens per training sequence (None: the preset's context, capped at an hf: model's)."""
    tie_embeddings: bool | None = None
    """Share the embedding with the readout (None: the preset's). Presets only."""
    qk_norm: bool | None = None
    """RMS-normalize queries and keys (None: the preset's). Presets only."""
    logit_softcap: float | None = None
    """Soft-cap logits at cap·tanh(x/cap) (None: the preset's; 0 turns it off); for a
    ``source`` applied to its logits."""
    z_loss: float | None = None
    """z-loss coefficient (PaLM's 1e-4 when on; None: the preset's); for a ``source``
    computed from its logits."""
    freeze_norm_gains: bool | None = None
    """Keep RMSNorm gains at 1 (Lingle 2024; None: the preset's). Presets only."""
    source: str | None = None
    """Your model instead of the preset (:func:`mutransfer.models.source.parse_model`):
    ``hf:PATH`` (a local transformers config.json, or a folder holding one; never a hub id)
    or ``module:function`` (``function(width, depth)`` returning a module that maps token ids
    [B, T] to logits [B, T, V]). None: the preset. A preset name here means that preset."""
    head_rule: Literal["keep_head_dim", "keep_heads"] | None = None
    """How an ``hf:`` model's attention follows width: ``keep_head_dim`` (heads and KV heads
    scale together, the GQA ratio kept; None means this) or ``keep_heads`` (head_dim scales)."""

    # The shape is what a fused group batches over: nothing here is per member.
    PER_MEMBER: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose from {', '.join(PRESETS)}")
        if not isinstance(get_preset(self.preset), GPTConfig):
            gpts = [n for n in PRESETS if isinstance(get_preset(n), GPTConfig)]
            raise ValueError(f"preset {self.preset!r} is not a GPT; the trainer takes {', '.join(gpts)}")
        if self.head_rule is not None and self.head_rule not in ("keep_head_dim", "keep_heads"):
            raise self._bad("head_rule", "keep_head_dim, keep_heads or None")
        self._ints(("width", "depth", "head_dim", "seq_len"), 1, "a positive integer or None", optional=True)
        if self.z_loss is not None and not (self.z_loss >= 0):
            raise self._bad("z_loss", ">= 0 or None")
        if self.logit_softcap is not None and not (self.logit_softcap >= 0):
            raise self._bad("logit_softcap", ">= 0 or None")
        if self.source is not None:
            src = parse_model(self.source, head_rule=self.head_rule or "keep_head_dim")
            if src.builtin:  # source=gpt-small is preset=gpt-small
                object.__setattr__(self, "preset", src.ref)
                object.__setattr__(self, "source", None)
            else:  # hf: the absolute config.json, so rows, checkpoints and workers agree
                object.__setattr__(self, "source", src.spec())
                # parsed once here, handed to everything that asks (model_source)
                object.__setattr__(self, "_source", src)
        if self.source is None:
            self.gpt_config()  # width/head divisibility etc., with GPTConfig's own messages
            return
        for name, why in _BUILTIN_ONLY.items():
            if getattr(self, name) is not None:
                raise ValueError(f"{name} does not apply to model {self.source!r}: {why}")
        self.shape()  # an hf: config checked at this width and depth

    def model_source(self) -> ModelSource:
        """The :class:`~mutransfer.models.source.ModelSource` of this section, parsed once
        (in validation) for a ``source`` model."""
        src = self.__dict__.get("_source")
        if src is None:  # a preset: nothing to read
            src = parse_model(self.source or self.preset, head_rule=self.head_rule or "keep_head_dim")
        return typing.cast(ModelSource, src)

    @property
    def builtin(self) -> bool:
        """Whether the model is one of our presets (no ``source``)."""
        return self.source is None

    def own_shape(self) -> tuple[int, int]:
        """(width, depth) of the model as given, before overrides: the preset's, an hf:
        config's own, or (for a builder) the preset's."""
        src = self.model_source()
        if src.kind == "hf":
            w, d, _ = hf_shape(src.hf_config())
            return w, d
        base = get_preset(self.preset)
        return base.width, base.depth

    def shape(self) -> ModelShape:
        """Width, depth and training context of this model with the overrides applied; an
        hf: config that cannot take the width raises ValueError naming the field."""
        if self.source is None:
            g = self.gpt_config()
            return ModelShape(g.width, g.depth, g.seq_len)
        base = get_preset(self.preset)
        assert isinstance(base, GPTConfig)
        src = self.model_source()
        if src.kind != "hf":
            return ModelShape(self.width or base.width, self.depth or base.depth,
                              self.seq_len or base.seq_len)
        config = src.hf_config()
        w, d, ctx = hf_shape(config)
        width, depth = self.width or w, self.depth or d
        try:
            hf_proxy_config(config, width, depth, src.head_rule)
        except ValueError as exc:
            raise ValueError(f"{exc}. {widths_hint(config, src.head_rule)}") from None
        seq = self.seq_len or (min(base.seq_len, ctx) if ctx else base.seq_len)
        if ctx is not None and seq > ctx:
            raise ValueError(f"seq_len={seq} is longer than model {self.source!r}'s context {ctx}")
        return ModelShape(width, depth, seq)

    def gpt_config(self, vocab_size: int | None = None) -> GPTConfig:
        """The preset's GPTConfig with this section's overrides (and the data's vocab);
        a ``source`` model has none (ValueError)."""
        if self.source is not None:
            raise ValueError(f"model {self.source!r} is not a built-in GPT (it has no GPTConfig)")
        base = get_preset(self.preset)
        assert isinstance(base, GPTConfig)
        changes: dict[str, Any] = {}
        for name in ("width", "depth", "head_dim", "seq_len", "tie_embeddings", "qk_norm",
                     "z_loss", "freeze_norm_gains"):
            if getattr(self, name) is not None:
                changes[name] = getattr(self, name)
        if self.logit_softcap is not None:
            changes["logit_softcap"] = self.logit_softcap or None
        if vocab_size is not None:
            changes["vocab_size"] = vocab_size
        if "head_dim" in changes and base.n_head is not None:
            changes["n_head"] = None
        return base.replace(**changes)
