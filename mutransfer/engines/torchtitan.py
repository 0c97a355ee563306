"""μP on torchtitan's own models: a torchtitan ``ModelConfigConverter`` that installs a
card's init, forward multipliers and attention scales (the ``mup`` section of
``mutransfer export --to torchtitan``).

torchtitan (0.3.0) builds a model from its config on the meta device, then calls
``init_states`` on the real device. :class:`MuPConverter` wraps the root model config
(the extension point ``ModelConfigConverter.convert`` allows) so that its ``build``
checks every parameter name and shape against the export (the first mismatch is a
ValueError naming it), registers the forward hooks, sets each attention module's
``scaling`` (the softmax scale torchtitan passes to its attention kernels) and makes
``init_states`` apply the card's init after torchtitan's own::

    from torchtitan.models.llama3 import model_registry
    from mutransfer.engines.torchtitan import MuPConverter

    spec = model_registry("1B", converters=[MuPConverter.Config(export="tt.json")])

Import this module only where torchtitan is installed (``[engines]``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.nn as nn
from torchtitan.protocols.model import ModelConfigConverter

from mutransfer._io import read_yaml_mapping
from mutransfer.card import apply_init
from mutransfer.parametrization import Parametrization


def load_mup(export: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """The ``mup`` section of a torchtitan export (a JSON/YAML file or the export dict)."""
    if not isinstance(export, Mapping):
        p = Path(export)
        doc = json.loads(p.read_text(encoding="utf-8")) if p.suffix == ".json" else read_yaml_mapping(
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


__all__ = ["MuPConverter", "check_names", "install", "load_mup"]
