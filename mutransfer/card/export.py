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
  model with :func:`mutransfer.card.apply.apply_card` (hooks survive ``Trainer``).
- **torchtitan** (0.3.0): nested config sections ``optimizer`` (one ``ParamGroupConfig``
  per distinct (lr, weight decay, eps), its regex naming the parameters),
  ``lr_scheduler`` and ``training``, in the field names of ``OptimizersContainer.Config``,
  ``ParamGroupConfig``, ``LRSchedulersContainer.Config`` and ``TrainingConfig``.
  :func:`torchtitan_param_groups` turns them into ``ParamGroupConfig`` objects.
- **megatron** (megatron-core 0.19.2): the whole architecture and the μP fields as the
  keyword arguments of ``TransformerConfig``, ``GPTModel``, ``OptimizerConfig`` and
  Megatron-LM's ``SchedulerConfig``, ``TrainingConfig`` and ``TokenizerConfig``
  (:mod:`mutransfer.card.engines.megatron` says how each card field maps), every parameter's
  LR, eps and weight decay as per-name ``config_overrides``, CompleteP's residual multiplier
  folded into the branches' output projections. What Megatron cannot express (its μP init)
  is an error naming the field unless ``--drop`` names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch.nn as nn

from mutransfer.card.engines._common import check_model
from mutransfer.card.engines.hf import export_hf
from mutransfer.card.engines.megatron import export_megatron
from mutransfer.card.engines.torchtitan import export_torchtitan
from mutransfer.card.schema import validate_card

ENGINES: tuple[str, ...] = ("hf", "torchtitan", "megatron")


def export_card(card: Mapping[str, Any], engine: str, model: nn.Module | None = None, *,
                dp_size: int | None = None, micro_batch: int | None = None,
                drop: Iterable[str] = (), validated: bool = False) -> dict[str, Any]:
    """The card as ``engine``'s config (see the module docstring), after
    :func:`mutransfer.card.schema.validate_card` (skipped with ``validated=True``, for a card
    :func:`~mutransfer.card.build.load_card` or ``make_card`` has just validated: one
    validation per export). With ``model``, the card must describe it (names
    and shapes; the first mismatch is named). ``dp_size``/``micro_batch`` split the card's
    global batch (:func:`mutransfer.card.engines._common.split_batch`); ``drop`` names card fields
    the engine may leave out (each recorded in ``dropped``), any other field it cannot
    carry is a ValueError naming it."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if not validated:
        card = validate_card(card)
    if model is not None:
        check_model(model, card)
    drop = tuple(drop)
    fn = {"hf": export_hf, "torchtitan": export_torchtitan, "megatron": export_megatron}[engine]
    return fn(card, dp_size=dp_size, micro_batch=micro_batch, drop=drop)


__all__ = ["ENGINES", "export_card"]
