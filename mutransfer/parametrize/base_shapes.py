"""Which dimensions of each parameter scale with width, as ``mup`` finds them: the model
built at the base width and at a second (delta) width on the meta device, compared shape
by shape, or a ``mup`` base-shapes (.bsh) file read instead."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from mutransfer.parametrize.layers import call_builder
from mutransfer.parametrize.specs import Builder


def load_base_shapes(path: str | Path) -> dict[str, list[int | None]]:
    """Read a ``mup`` base-shapes (.bsh) file: YAML ``{name: [base_dim | null, ...]}``
    where ``null`` marks a finite (non-width) dimension. Loaded with ``yaml.safe_load``."""
    import yaml

    text = Path(path).read_text()
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a mup base-shapes file: expected a mapping of names")
    out: dict[str, list[int | None]] = {}
    for name, dims in data.items():
        if not isinstance(dims, list):
            raise ValueError(f"{path}: entry {name!r} is not a list of dimensions")
        out[str(name)] = [None if d is None else int(d) for d in dims]
    return out


def width_dims_from_bsh(shapes: dict[str, tuple[int, ...]],
                         bsh: Mapping[str, Sequence[int | None]]) -> dict[str, tuple[int, ...]]:
    out = {}
    for n, s in shapes.items():
        if n not in bsh:
            raise ValueError(f"parameter {n} is missing from the base-shapes file")
        if len(bsh[n]) != len(s):
            raise ValueError(f"parameter {n} has rank {len(s)} but the base shape {bsh[n]}")
        out[n] = tuple(i for i, b in enumerate(bsh[n]) if b is not None)
    return out



@dataclass(frozen=True)
class Shapes:
    """What :func:`find_shapes` found."""

    target: nn.Module
    """The model at the target width, on the meta device."""
    shapes: dict[str, tuple[int, ...]]
    """Name -> shape at the target width."""
    base: dict[str, tuple[int, ...]]
    """Name -> shape at the base width."""
    width_dims: dict[str, tuple[int, ...]]
    """Name -> indices of the dimensions that scale with width."""
    base_model: nn.Module | None
    """The base model (meta device), None when the base shapes came from a .bsh."""
    delta_width: int | None
    """The second width built to find the width dimensions (None with a .bsh)."""


def find_shapes(builder: Builder, *, width: int, base_width: int, depth: int | None,
                base_shapes: str | Path | Mapping[str, Sequence[int | None]] | None = None,
                delta_width: int | None = None) -> Shapes:
    """The target on meta (cheap at any width), the base from a .bsh or a build at the
    base and a delta width (default twice the base, thrice when that is the target); one
    ValueError naming the parameter when names or ranks change with width, or when
    nothing does."""
    with torch.device("meta"):
        target = call_builder(builder, width, depth)
    shapes = {n: tuple(p.shape) for n, p in target.named_parameters()}
    if not shapes:
        raise ValueError("the builder's model has no parameters")
    if base_shapes is not None:
        bsh = load_base_shapes(base_shapes) if isinstance(base_shapes, (str, Path)) else {
            k: list(v) for k, v in base_shapes.items()}
        width_dims = width_dims_from_bsh(shapes, bsh)
        base = {n: tuple(b if b is not None else s for b, s in zip(bsh[n], shapes[n]))
                for n in shapes}
        base_model = None  # a .bsh holds no modules: head dims are taken as fixed
        delta_w: int | None = None
    else:
        delta_w = delta_width or (base_width * 2 if base_width * 2 != width else base_width * 3)
        with torch.device("meta"):
            base_model = call_builder(builder, base_width, depth)
            delta_model = call_builder(builder, delta_w, depth)
        base = {n: tuple(p.shape) for n, p in base_model.named_parameters()}
        delta = {n: tuple(p.shape) for n, p in delta_model.named_parameters()}
        if set(base) != set(shapes) or set(delta) != set(shapes):
            missing = sorted(set(shapes) ^ set(base) | set(shapes) ^ set(delta))
            raise ValueError(
                f"the builder gives different parameter names at different widths: {missing[:3]}")
        width_dims = {}
        for n in shapes:
            if len(base[n]) != len(delta[n]):
                raise ValueError(f"parameter {n} changes rank with width: {base[n]} vs {delta[n]}")
            width_dims[n] = tuple(i for i, (b, d) in enumerate(zip(base[n], delta[n])) if b != d)
        if not any(width_dims.values()):
            raise ValueError(
                f"the builder's shapes do not change with width (built at {base_width} and "
                f"{delta_w}): no parameter depends on width, so there is nothing to parametrize")
    return Shapes(target, shapes, base, width_dims, base_model, delta_w)


__all__ = ["Shapes", "find_shapes", "load_base_shapes", "width_dims_from_bsh"]
