"""What every config section shares: the frozen-dataclass section decorator, the field
checks (choices from ``Literal`` types, positive numbers, bounded integers), the flat names
that differ from a field's own, and the parsing of ``--set`` strings by a field's type.
The sections themselves are in :mod:`mutransfer.training.config` (the model's in
:mod:`mutransfer.training.model_section`)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

#: Section fields whose flat name is not the field's own name: ``(section, field) -> flat``.
_RENAMES: dict[tuple[str, str], str] = {
    ("parametrization", "kind"): "parametrization",
    ("optim", "name"): "optimizer",
    ("schedule", "kind"): "schedule",
}


_S = TypeVar("_S")


#: Upper bounds of integer fields: far above any real run, below what would allocate or
#: loop without end (``steps: 1e23`` parses as an integer). Seeds stop at numpy's 2**32 - 1.
INT_LIMITS: dict[str, int] = {
    "steps": 10**9, "batch_size": 1 << 24, "grad_accum": 1 << 24, "eval_sequences": 10**6,
    "seed": (1 << 32) - 1, "eval_every": 10**9, "max_logit_every": 10**9, "threads": 4096,
    "width": 1 << 20, "depth": 10_000, "head_dim": 1 << 16, "seq_len": 1 << 24,
    "checkpoint_every": 10**9, "rollback_every": 10**9, "max_rollbacks": 10**6, "spike_window": 10**6,
    "data_max_bytes": 1 << 50, "warmup_steps": 10**9,
}


class _Section:
    """What every section shares: its name in :class:`TrainConfig`, the fields that may
    differ per fused member, and the checks its ``__post_init__`` uses (errors name the
    field by its flat name, as ``--set`` spells it)."""

    #: The section's attribute name on :class:`TrainConfig`.
    NAME: ClassVar[str] = ""
    #: Fields that may differ between the members of one fused group (every other
    #: field is part of :func:`mutransfer.training.fusion.fusion_key`).
    PER_MEMBER: ClassVar[frozenset[str]] = frozenset()

    def _bad(self, name: str, what: str) -> ValueError:
        flat = _RENAMES.get((self.NAME, name), name)
        return ValueError(f"{flat} must be {what}, got {getattr(self, name)!r}")

    def _check_choices(self) -> None:
        """Every ``Literal``-typed field holds one of its choices."""
        for name, allowed in _choices(type(self)).items():
            if getattr(self, name) not in allowed:
                raise self._bad(name, f"one of {', '.join(map(str, allowed))}")

    def _positive(self, *names: str) -> None:
        for name in names:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
                raise self._bad(name, "a positive finite number")

    def _ints(self, names: tuple[str, ...], low: int, what: str, optional: bool = False) -> None:
        for name in names:
            v = getattr(self, name)
            if optional and v is None:
                continue
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= low):
                raise self._bad(name, what)
            if v > INT_LIMITS.get(name, v):
                raise self._bad(name, f"at most {INT_LIMITS[name]:,} (what a real run could have)")

    def _unit(self, *names: str) -> None:
        for name in names:
            if not (0.0 <= getattr(self, name) < 1.0):
                raise self._bad(name, "in [0, 1)")


def _section(name: str) -> Callable[[type[_S]], type[_S]]:
    """Make ``cls`` a frozen dataclass section named ``name``, whose ``==`` refuses a
    string: ``cfg.parametrization == "mup"`` (a flat read left over from before the
    sections) raises TypeError instead of being silently False."""

    def wrap(cls: type[_S]) -> type[_S]:
        cls.NAME = name  # type: ignore[attr-defined]
        dc = dataclass(frozen=True)(cls)
        eq = dc.__eq__

        def __eq__(self: Any, other: object) -> bool:
            if isinstance(other, str):
                raise TypeError(f"comparing the {name!r} config section with the string {other!r}; "
                                f"compare one of its fields (e.g. cfg.{name}.kind)")
            return eq(self, other)  # type: ignore[no-any-return]

        dc.__eq__ = __eq__  # type: ignore[method-assign,assignment]
        return dc

    return wrap


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _choices(cls: type) -> dict[str, tuple[Any, ...]]:
    """The allowed values of every ``Literal``-typed field of ``cls``."""
    out = {}
    for f in dataclasses.fields(cls):
        tp = _hints(cls)[f.name]
        if typing.get_origin(tp) is Literal:
            out[f.name] = typing.get_args(tp)
    return out


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Parse/check ``value`` for a field of type ``tp`` (int, float, str, bool, a str
    ``Literal``, X | None); the choice of a ``Literal`` is the section's to check."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is Literal:
        args, tp = (), str
    optional = type(None) in args
    inner = next((a for a in args if a is not type(None)), tp) if args else tp
    if typing.get_origin(inner) is Literal:
        inner = str
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
        if optional:
            return None
        raise ValueError(f"config field {key!r} cannot be None")
    if inner is str and isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, str) and inner is not str:
        text = value.strip()
        try:
            if inner is bool:
                low = text.lower()
                if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError
                return low in ("true", "1", "yes", "on")
            if inner is int:
                try:
                    return int(text)
                except ValueError:
                    f = float(text)  # "1e3" is a fine integer
                    if not f.is_integer():
                        raise
                    return int(f)
            if inner is float:
                return float(text)
        except ValueError:
            raise ValueError(f"config field {key!r} expects {inner.__name__}, got {value!r}") from None
    ok = (isinstance(value, inner) and not (inner is int and isinstance(value, bool))) or (
        inner is float and isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise ValueError(f"config field {key!r} expects {inner.__name__}, got {value!r}")
    return float(value) if inner is float else value


def build_aliases(sections: Mapping[str, type]) -> dict[str, tuple[str, str]]:
    """Flat field name -> (section, field) over ``sections`` in order: the field's own
    name, or its :data:`_RENAMES` entry; a flat name given twice is a RuntimeError."""
    out: dict[str, tuple[str, str]] = {}
    for sec, cls in sections.items():
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            flat = _RENAMES.get((sec, f.name), f.name)
            if flat in out:
                raise RuntimeError(f"flat config name {flat!r} is both {out[flat]} and {(sec, f.name)}")
            out[flat] = (sec, f.name)
    return out


def expand_sections(overrides: Mapping[str, Any], sections: Mapping[str, type]) -> dict[str, Any]:
    """Nested ``{section: {field: value}}`` entries (``section`` one of ``sections``) as
    dotted keys; others as given."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in sections and isinstance(value, Mapping):
            for k, v in value.items():
                out[f"{key}.{k}"] = v
        else:
            out[str(key)] = value
    return out


def lookup_field(key: str, aliases: Mapping[str, tuple[str, str]],
                 dotted: frozenset[str]) -> tuple[str, str]:
    """(section, field) of a flat key (``aliases``: flat name -> (section, field)) or a
    dotted one (``dotted``); unknown -> ValueError with a close match."""
    if key in aliases:
        return aliases[key]
    if key in dotted:
        sec, name = key.split(".", 1)
        return sec, name
    names = sorted(dotted if "." in key else aliases)
    close = [n for n in names if key.replace("-", "_") == n or key in n] or difflib.get_close_matches(
        key, names, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"unknown config field {key!r}{hint}")


__all__ = ["INT_LIMITS", "build_aliases", "expand_sections", "lookup_field"]
