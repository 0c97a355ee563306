"""μP on torchtitan's own models: a torchtitan ``ModelConfigConverter`` that installs a
card's init, forward multipliers and attention scales (the ``mup`` section of
``mutransfer export --to torchtitan``), and the llama3 model an HF card describes.

torchtitan (0.3.0) builds a model from its config on the meta device, then calls
``init_states`` on the real device. :class:`MuPConverter` wraps the root model config
(the extension point ``ModelConfigConverter.convert`` allows) so that its ``build``
checks every parameter name and shape against the export (the first mismatch is a
ValueError naming it), registers the forward hooks, sets each attention module's
``scaling`` (the softmax scale torchtitan passes to its attention kernels) and makes
``init_states`` apply the card's init after torchtitan's own. An HF card's export gives
every weight matrix an absolute std (``normal:S``), so the result does not depend on the
init the config starts from; a ``scale:F`` (the export of a card for a model of your own)
multiplies the config's own init, which must then be the init of the model the card was
made for.

A card for an HF Llama-family config (``transfer --model hf:...``) exports its
architecture too (the export's ``model`` section); :func:`model_spec` turns that into
torchtitan's llama3 ``ModelSpec``, with separate wq/wk/wv (the card's names: torchtitan's
own ``model_registry`` flavours fuse q/k/v, which no HF card can describe), HF's init
under the card's rules, and the converter installed::

    from mutransfer.card.engines.torchtitan_model import model_spec

    spec = model_spec("tt.json")          # spec.model.build() is μP

For a model config of your own whose names already are the card's::

    from mutransfer.card.engines.torchtitan_model import MuPConverter

    model_config = MuPConverter.Config(export="tt.json").build().convert(model_config)

Import this module only where torchtitan is installed (``[engines]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.nn as nn
from torchtitan.protocols.model import ModelConfigConverter

from mutransfer._io import read_json, read_yaml_mapping
from mutransfer.card.apply import apply_init
from mutransfer.parametrize.parametrization import Parametrization


def load_mup(export: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """The ``mup`` section of a torchtitan export (a JSON/YAML file or the export dict)."""
    if not isinstance(export, Mapping):
        p = Path(export)
        doc = read_json(p, "torchtitan export") if p.suffix == ".json" else read_yaml_mapping(
            p, "torchtitan export")
    else:
        doc = export
    mup = doc.get("mup") if isinstance(doc, Mapping) else None
    if not isinstance(mup, Mapping) or not {"init", "shapes", "hooks", "attention"} <= set(mup):
        raise ValueError("the torchtitan export has no mup section (write it with `mutransfer export --to "
                         "torchtitan`)")
    return dict(mup)


def check_names(model: nn.Module, mup: Mapping[str, Any]) -> None:
    """The model's parameters are the export's, name by name and shape by shape."""
    params = {n: list(p.shape) for n, p in model.named_parameters()}
    for name in sorted(set(params) | set(mup["shapes"])):
        if name not in mup["shapes"]:
            raise ValueError(f"the torchtitan model does not match the card: it has {name}, the card does "
                             "not (build llama3 with fuse_qkv=False)")
        if name not in params:
            raise ValueError(f"the torchtitan model does not match the card: the card has {name}, the model "
                             "does not")
        if params[name] != list(mup["shapes"][name]):
            raise ValueError(f"the torchtitan model does not match the card: {name} has shape "
                             f"{params[name]}, the card says {mup['shapes'][name]}")



def install(model: nn.Module, mup: Mapping[str, Any]) -> nn.Module:
    """Check names, register the card's hooks, set attention scales, and wrap
    ``init_states`` so the card's init follows torchtitan's own."""
    check_names(model, mup)
    modules = dict(model.named_modules())
    for aname in mup["attention"]:
        if not hasattr(modules.get(aname), "scaling"):
            raise ValueError(f"torchtitan module {aname!r} has no attention scaling to set")
    Parametrization.install_forward_multipliers(model, mup["hooks"], {})
    for aname, scale in mup["attention"].items():
        modules[aname].scaling = float(scale)
    own = model.init_states

    def init_states(*args: Any, **kwargs: Any) -> Any:
        out = own(*args, **kwargs)
        apply_init(model, mup["init"])
        return out

    model.init_states = init_states  # type: ignore[method-assign]
    return model


class MuPConverter(ModelConfigConverter):
    """Makes torchtitan build its model under the card's μP (see the module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(ModelConfigConverter.Config):
        export: str = ""
        """Path of the torchtitan export (``mutransfer export --to torchtitan --out FILE``)."""
        mup: dict = field(default_factory=dict)
        """Or the export's ``mup`` section itself (wins over ``export`` when given)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def convert(self, model_config: Any) -> Any:
        mup = load_mup({"mup": self.config.mup} if self.config.mup else self.config.export)
        base = type(model_config)

        def build(cfg: Any, **kwargs: Any) -> nn.Module:
            return install(base.build(cfg, **kwargs), mup)

        cls = type(f"MuP{base.__name__}", (base,), {"__slots__": (), "build": build,
                                                     "__qualname__": f"MuP{base.__qualname__}"})
        kw = {f.name: getattr(model_config, f.name) for f in dataclasses.fields(model_config) if f.init}
        return cls(**kw)


def _load_export(export: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(export, Mapping):
        return dict(export)
    p = Path(export)
    return dict(read_json(p, "torchtitan export") if p.suffix == ".json"
                else read_yaml_mapping(p, "torchtitan export"))


def llama3_config(export: str | Path | Mapping[str, Any], *, attn_backend: str = "flex") -> Any:
    """torchtitan's ``Llama3Model.Config`` for the export's ``model`` section (written for a
    card whose target is an HF Llama-family config): its sizes, GQA heads, head dim, norm
    eps, tying and RoPE (Llama 3 scaling included); separate wq/wk/wv; every weight
    initialised as HF initialises it (normal, std ``initializer_range``; norms ones,
    biases zeros), the init the card's ``scale:`` rules were measured on. Without the
    converter: the plain (SP) model."""
    from functools import partial

    import torch
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.config_utils import get_attention_config, make_ffn_config, make_gqa_config
    from torchtitan.models.llama3 import Llama3Model
    from torchtitan.models.llama3.model import Llama3TransformerBlock

    doc = _load_export(export)
    arch = doc.get("model")
    if not isinstance(arch, Mapping):
        raise ValueError("the torchtitan export has no model section: its card's target is not an HF "
                         "Llama-family config; build your own model config and convert it with "
                         "MuPConverter")
    a = dict(arch)
    dim, v = int(a["dim"]), int(a["vocab_size"])
    linear = {"weight": partial(torch.nn.init.normal_, std=float(a["init_std"])),
              "bias": torch.nn.init.zeros_}
    norm = {"weight": torch.nn.init.ones_}
    rope = ComplexRoPE.Config(dim=int(a["head_dim"]), max_seq_len=int(a["max_seq_len"]), **a["rope"])

    def rms() -> Any:
        return RMSNorm.Config(normalized_shape=dim, eps=float(a["norm_eps"]), param_init=norm)

    layers = [Llama3TransformerBlock.Config(
        attention_norm=rms(), ffn_norm=rms(),
        attention=make_gqa_config(dim=dim, n_heads=int(a["n_heads"]), n_kv_heads=int(a["n_kv_heads"]),
                                  head_dim=int(a["head_dim"]), wqkv_param_init=linear, wo_param_init=linear,
                                  inner_attention=get_attention_config(attn_backend), fuse_qkv=False,
                                  rope=rope),
        feed_forward=make_ffn_config(dim=dim, hidden_dim=int(a["hidden_dim"]), w1_param_init=linear,
                                     w2w3_param_init=linear))
        for _ in range(int(a["n_layers"]))]
    return Llama3Model.Config(
        dim=dim, vocab_size=v, enable_weight_tying=bool(a["enable_weight_tying"]),
        tok_embeddings=Embedding.Config(num_embeddings=v, embedding_dim=dim, param_init=linear),
        norm=rms(), lm_head=Linear.Config(in_features=dim, out_features=v, param_init=linear),
        layers=layers)


def model_spec(export: str | Path | Mapping[str, Any], *, attn_backend: str = "flex") -> Any:
    """torchtitan's llama3 ``ModelSpec`` of the export (:func:`llama3_config`) with
    :class:`MuPConverter` applied: what ``torchtitan.models.llama3.model_registry`` returns
    for its own flavours, for the card's model under the card's μP."""
    from torchtitan.distributed.pipeline_parallel import pipeline_llm
    from torchtitan.models.llama3 import Llama3StateDictAdapter, parallelize_llama
    from torchtitan.protocols.model_spec import ModelSpec

    doc = _load_export(export)
    converter = MuPConverter.Config(mup=load_mup(doc)).build()
    config = converter.convert(llama3_config(doc, attn_backend=attn_backend))
    return ModelSpec(name="llama3", flavor="mutransfer", model=config, parallelize_fn=parallelize_llama,
                     pipelining_fn=pipeline_llm, post_optimizer_build_fn=None,
                     state_dict_adapter=Llama3StateDictAdapter)


__all__ = ["MuPConverter", "check_names", "install", "llama3_config", "load_mup", "model_spec"]
