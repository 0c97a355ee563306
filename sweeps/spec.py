"""Sweep specs, the grammar: a spec file (YAML or a mapping) -> one of the frozen spec
dataclasses, each field checked against its declared type first.

Five kinds (``kind:`` in the file):

* ``lr`` (:class:`LRSweep`): log2 learning-rate grid (default 2^-14 ... 2^-3 in steps of 1)
  or an adaptive TPE/GP search over the same range, x widths (x depths) x
  parametrizations x seeds. The muTransfer check and proxy tuning.
* ``batch`` (:class:`BatchSweep`): learning rate x batch size x widths and/or token
  budgets, for eta*(N, D), B*(D) and B_crit.
* ``scaling`` (:class:`ScalingSweep`): token budget D (WSD branches: one run, several
  budgets) x batch size B x an LR grid around the optimum at the base width, plus a check
  at one wider width, every run logging its gradient noise scale: eta*(B, D), B*(D), B_crit.
* ``run`` (:class:`GridSweep`): any TrainConfig field (or multiplier) as a dimension.
* ``multipliers`` (:class:`MultiplierSweep`): an adaptive search over μP's multipliers.

Where each part lives: the shared :class:`SweepSpec` in :mod:`sweeps.spec_base`, the kinds
in :mod:`sweeps.spec_kinds` and :mod:`sweeps.spec_scaling`, and the
resolution of a spec into TrainConfigs in :mod:`sweeps.resolve`.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mutransfer._io import read_yaml_mapping
from sweeps.spec_base import SweepSpec, as_tuple
from sweeps.spec_kinds import BatchSweep, GridSweep, LRSweep, MultiplierSweep
from sweeps.spec_scaling import ScalingSweep

__all__ = ["KINDS", "LOG2_LR_LIMIT", "load_spec", "spec_from_dict"]

KINDS: dict[str, type[SweepSpec]] = {"lr": LRSweep, "batch": BatchSweep, "scaling": ScalingSweep,
                                     "run": GridSweep, "multipliers": MultiplierSweep}


def spec_from_dict(data: Mapping[str, Any], kind: str | None = None) -> SweepSpec:
    """Build a spec from a plain mapping (``kind`` key or argument); unknown keys -> ValueError."""
    data = dict(data)
    k = data.pop("kind", None) or kind
    if kind is not None and k != kind:
        raise ValueError(f"spec kind {k!r} does not match the command {kind!r}")
    if k not in KINDS:
        raise ValueError(f"unknown sweep kind {k!r}; choose from {', '.join(KINDS)}")
    cls = KINDS[k]
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown field(s) in {k} sweep spec: {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(names))})")
    data = {name: _field_value(cls, k, name, v) for name, v in data.items()}
    try:
        return cls(**data)
    except TypeError as exc:  # wrong value types that slipped past validation
        raise ValueError(f"bad {k} sweep spec: {exc}") from None
    except OverflowError:  # an LR grid beyond floats: the log2 fields are bounded, the product may not be
        raise ValueError(f"{k} sweep spec: the LR grid overflows (lr_center x (batch / lr_center_batch) "
                         "^ lr_batch_exponent x 2^offset); check those fields") from None


#: log2 LR fields lie in [-LOG2_LR_LIMIT, LOG2_LR_LIMIT]: 2^64 is no learning rate, and 2^2000
#: is beyond a float.
LOG2_LR_LIMIT = 64.0


def _field_value(cls: type, kind: str, name: str, value: Any) -> Any:
    """Check one spec field against its declared type before the spec is built, so a bad
    value is named by its field (``log2_lr_min: abc``, ``base: abc``), used or not. Numbers
    written as text (YAML 1.1 reads ``1e6`` as a string) become numbers."""
    tp = typing.get_type_hints(cls).get(name)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        if value is None:
            return None
        tp = args[0]
    where = f"{kind} sweep spec field {name!r}"
    origin = typing.get_origin(tp)
    if tp in (int, float):
        value = _number(value, tp, where)
        if name.startswith("log2_lr") and name != "log2_lr_step" and abs(value) > LOG2_LR_LIMIT:
            raise ValueError(f"{where}: {value!r} is outside [-{LOG2_LR_LIMIT:g}, {LOG2_LR_LIMIT:g}]")
        return value
    if origin is tuple and typing.get_args(tp)[:1] and typing.get_args(tp)[0] in (int, float):
        inner = typing.get_args(tp)[0]
        items = as_tuple(value) or ()
        out = tuple(_number(v, inner, f"{where} item") for v in items)
        if name == "log2_lr_offsets" and any(abs(o) > LOG2_LR_LIMIT for o in out):
            raise ValueError(f"{where}: {list(out)!r} must lie in [-{LOG2_LR_LIMIT:g}, {LOG2_LR_LIMIT:g}]")
        return out
    if tp is str and not isinstance(value, str):
        raise ValueError(f"{where}: {value!r} is not a string")
    if origin in (Mapping, dict) or tp in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: {value!r} is not a mapping of KEY: VALUE")
    return value


def _number(value: Any, tp: type, where: str) -> Any:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"{where}: {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: {value!r} is not a number")
    if not math.isfinite(value):
        raise ValueError(f"{where}: {value!r} must be finite")
    if tp is int:
        if value != int(value):
            raise ValueError(f"{where}: {value!r} is not an integer")
        return int(value)
    return value


def load_spec(path: str | Path, kind: str | None = None) -> SweepSpec:
    """Load a spec from YAML (``yaml.safe_load``; JSON is YAML too)."""
    doc = read_yaml_mapping(path, "spec file")
    if not doc:  # an empty file reads as an empty mapping: say which file, not "empty grid"
        raise ValueError(f"spec file {str(path)!r} is empty: a spec holds at least its grid (e.g. kind: run, "
                         "grid: {lr: [0.001, 0.003]})")
    return spec_from_dict(doc, kind)

