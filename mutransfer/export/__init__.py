"""Export a transfer card to the config of a training engine, in the engine's own field
names: Hugging Face ``transformers``, torchtitan and Megatron.

Every field name written here was read from the engine's source; at export time the
names are checked against the installed package when it is importable (an engine field
the installed version lacks is an error), otherwise against the names recorded below from
the version the exporter was written for (``verified_against`` in the export says which).

- **hf** (transformers >= 5): ``training_arguments`` is a dict ``TrainingArguments(**d)``
  accepts (LR schedule mapped to HF's own scheduler names); :func:`hf_param_groups`
  builds the ``optimizer_grouped_parameters`` with each parameter's absolute LR, weight
  decay and eps from the card. The card's init and forward multipliers are put on the
  model with :func:`mutransfer.card.apply` (hooks survive ``Trainer``).
- **torchtitan** (0.3.0): nested config sections ``optimizer`` (one ``ParamGroupConfig``
  per distinct (lr, weight decay, eps), its regex naming the parameters),
  ``lr_scheduler`` and ``training``, in the field names of ``OptimizersContainer.Config``,
  ``ParamGroupConfig``, ``LRSchedulersContainer.Config`` and ``TrainingConfig``.
  :func:`torchtitan_param_groups` turns them into ``ParamGroupConfig`` objects.
- **megatron** (megatron-core 0.19.2): the whole architecture and the μP fields as the
  keyword arguments of ``TransformerConfig``, ``GPTModel``, ``OptimizerConfig`` and
  Megatron-LM's ``SchedulerConfig``, ``TrainingConfig`` and ``TokenizerConfig``
  (:mod:`mutransfer.export.megatron` says how each card field maps). What Megatron cannot
  express (its μP init, per-parameter values off its table, CompleteP's residual
  multiplier) is an error naming the field unless ``drop`` names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch.nn as nn

from mutransfer.export._common import check_fields, check_model
from mutransfer.export.hf import export_hf, hf_param_groups
from mutransfer.export.megatron import MEGATRON_FIELDS, MEGATRON_VERIFIED, export_megatron
from mutransfer.export.torchtitan import export_torchtitan, torchtitan_param_groups

ENGINES: tuple[str, ...] = ("hf", "torchtitan", "megatron")


def export_card(card: Mapping[str, Any], engine: str, model: nn.Module | None = None,
                drop: Sequence[str] = ()) -> dict[str, Any]:
    """The card as ``engine``'s config (see the module docstring). With ``model``, the
    card must describe it (names and shapes). ``drop``: card fields the engine cannot
    express to export without (recorded in the export's ``dropped``; megatron only)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if model is not None:
        check_model(model, card)
    if engine == "megatron":
        return export_megatron(card, drop=drop)
    if drop:
        raise ValueError(f"--drop {drop[0]}: only the megatron export drops fields")
    fn = {"hf": export_hf, "torchtitan": export_torchtitan}[engine]
    return fn(card)


__all__ = ["ENGINES", "MEGATRON_FIELDS", "MEGATRON_VERIFIED", "check_fields", "check_model", "export_card",
           "export_hf", "export_megatron", "export_torchtitan", "hf_param_groups", "torchtitan_param_groups"]
