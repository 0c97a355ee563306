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
- **megatron** (megatron-core >= 0.17, μP fields): ``transformer_config`` (``use_mup``,
  ``mup_base_hidden_size``, ``mup_base_head_dim``, ``mup_embedding_mult``,
  ``mup_output_mult``, ``softmax_scale``), ``optimizer_config`` (``lr``, ``min_lr``,
  ``decoupled_lr`` ...), ``scheduler_config`` and ``training_config`` (Megatron-LM's
  ``megatron.training.config``). Megatron's own μP divides the LR *and* Adam eps of every
  non-embedding matrix, the output layer included, by the width multiplier
  (``megatron.core.optimizer.get_mup_config_overrides``); TP-V keeps the readout's Adam LR
  and puts 1/m in its forward. ``decoupled_lr`` (an absolute LR for the embedding and
  output layer that μP leaves alone) set to the card's base LR reproduces the card's LRs;
  the eps difference is listed in ``notes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.nn as nn

from mutransfer.export._common import check_fields, check_model
from mutransfer.export.hf import export_hf, hf_param_groups
from mutransfer.export.megatron import MEGATRON_FIELDS, MEGATRON_VERIFIED, export_megatron
from mutransfer.export.torchtitan import export_torchtitan, torchtitan_param_groups

ENGINES: tuple[str, ...] = ("hf", "torchtitan", "megatron")


def export_card(card: Mapping[str, Any], engine: str, model: nn.Module | None = None) -> dict[str, Any]:
    """The card as ``engine``'s config (see the module docstring). With ``model``, the
    card must describe it (names and shapes)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if model is not None:
        check_model(model, card)
    fn = {"hf": export_hf, "torchtitan": export_torchtitan, "megatron": export_megatron}[engine]
    return fn(card)


__all__ = ["ENGINES", "MEGATRON_FIELDS", "MEGATRON_VERIFIED", "check_fields", "check_model", "export_card",
           "export_hf", "export_megatron", "export_torchtitan", "hf_param_groups", "torchtitan_param_groups"]
