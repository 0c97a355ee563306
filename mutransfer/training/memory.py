"""Training memory per parameter: weights, gradients, fp32 master copy, optimizer state.

Mixed-precision training with Adam keeps, per parameter (Rajbhandari et al. 2020,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", Sec. 3.1):
bf16/fp16 weights (2 bytes) and gradients (2), and an fp32 master copy of the weights
(4) plus the fp32 first and second moments (4 + 4), "K = 12" bytes of optimizer-side
state, so ``2 + 2 + 12 = 16`` bytes per parameter (their "16 Psi": 7.5B parameters ->
120 GB). At 7B that is the 112 GB of the usual fine-tuning memory tables (e.g. the
Hugging Face "Model memory anatomy" and Accelerate's model-memory estimator).

Per optimizer, the state in bytes per parameter (fp32 unless noted):

- ``adamw``: m and v, 4 + 4 (Loshchilov & Hutter 2019).
- ``sgd``: none. ``sgd-momentum``: one momentum buffer, 4.
- ``muon``: one momentum buffer, 4 (Jordan et al. 2024); Newton-Schulz iterations use
  only transient per-matrix buffers. Muon is applied to hidden matrices; embeddings,
  readout and vectors usually stay on AdamW, which ``adamw_fraction`` accounts for
  (their share pays AdamW's extra 4 bytes of second moment).
- ``adam8bit``: m and v quantized to 1 byte each, 2 (Dettmers et al. 2022, "8-bit
  Optimizers via Block-wise Quantization"); the per-block fp32 absmax (block 2048, two
  states) adds 8/2048 ~ 0.004 bytes/param, ignored here.
- ``adafactor``: the second moment of an ``r x c`` matrix is factored into a row and a
  column vector (Shazeer & Stern 2018, Sec. 3), ``4 (r + c) / (r c)`` bytes/param, which
  is ``8 / width`` for square ``width x width`` matrices and ~0 for large models (0 when
  ``width`` is not given); no momentum by default (their beta1 = 0), 4 with
  ``adafactor_momentum``.

Activations, temporary buffers, the CUDA context and allocator fragmentation are not
included: this is the model-state memory that sharding (ZeRO/FSDP) divides.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "MemoryComponent",
    "MemoryEstimate",
    "parse_count",
    "training_memory",
]

OPTIMIZERS = ("adamw", "sgd", "sgd-momentum", "muon", "adam8bit", "adafactor")
PRECISIONS = ("mixed", "fp32")
GB = 1e9
GIB = 2.0**30


@dataclass(frozen=True)
class MemoryComponent:
    """One kind of per-parameter training memory."""

    name: str
    """What it is, e.g. ``"adam m (first moment)"``."""

    dtype: str
    """Storage type, e.g. ``"bf16"``, ``"fp32"``, ``"int8"``."""

    bytes_per_param: float
    """Bytes per model parameter."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Model-state memory of training ``n_params`` parameters with one optimizer."""

    n_params: float
    """Number of parameters."""

    optimizer: str
    """One of :data:`OPTIMIZERS`."""

    precision: str
    """``mixed`` (bf16 weights and grads, fp32 master copy and state) or ``fp32``."""

    components: tuple[MemoryComponent, ...]
    """The breakdown; its bytes per parameter sum to :attr:`bytes_per_param`."""

    notes: tuple[str, ...] = field(default=())
    """Approximations made for this optimizer, one sentence each."""

    @property
    def bytes_per_param(self) -> float:
        """Total bytes per parameter."""
        return sum(c.bytes_per_param for c in self.components)

    @property
    def total_bytes(self) -> float:
        """Total bytes for all parameters."""
        return self.bytes_per_param * self.n_params

    @property
    def total_gb(self) -> float:
        """Total in GB (1e9 bytes)."""
        return self.total_bytes / GB

    @property
    def total_gib(self) -> float:
        """Total in GiB (2^30 bytes)."""
        return self.total_bytes / GIB

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary with per-component totals in bytes, GB and GiB."""
        return {
            "n_params": self.n_params,
            "optimizer": self.optimizer,
            "precision": self.precision,
            "components": [
                {
                    "name": c.name,
                    "dtype": c.dtype,
                    "bytes_per_param": c.bytes_per_param,
                    "bytes": c.bytes_per_param * self.n_params,
                    "gb": c.bytes_per_param * self.n_params / GB,
                    "gib": c.bytes_per_param * self.n_params / GIB,
                }
                for c in self.components
            ],
            "bytes_per_param": self.bytes_per_param,
            "total_bytes": self.total_bytes,
            "total_gb": self.total_gb,
            "total_gib": self.total_gib,
            "notes": list(self.notes),
            "excludes": "activations, temporary buffers, CUDA context, fragmentation",
        }


_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_count(text: str | float | int) -> float:
    """Parse a parameter count: ``7e9``, ``7000000000``, ``7B``, ``125M``, ``1.5k``, ``1T``."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = re.fullmatch(
            r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*", str(text)
        )
        if match is None:
            raise ValueError(f"parameter count must be a number like 7e9 or 7B, got {text!r}")
        value = float(match.group(1)) * _SUFFIXES[match.group(2).lower()]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"parameter count must be a positive finite number, got {text!r}")
    return value


def _state(
    optimizer: str, width: int | None, adafactor_momentum: bool, adamw_fraction: float
) -> tuple[list[MemoryComponent], list[str]]:
    fp32 = "fp32"
    if optimizer == "adamw":
        return [
            MemoryComponent("adam m (first moment)", fp32, 4.0),
            MemoryComponent("adam v (second moment)", fp32, 4.0),
        ], []
    if optimizer == "sgd":
        return [], []
    if optimizer == "sgd-momentum":
        return [MemoryComponent("momentum buffer", fp32, 4.0)], []
    if optimizer == "muon":
        comps = [MemoryComponent("momentum buffer", fp32, 4.0)]
        notes = ["Newton-Schulz orthogonalization uses transient per-matrix buffers only"]
        if adamw_fraction > 0:
            comps.append(
                MemoryComponent(
                    f"adam v for the AdamW share ({adamw_fraction:g})", fp32, 4.0 * adamw_fraction
                )
            )
        else:
            notes.append(
                "assumes every parameter is on Muon; embeddings/readout on AdamW "
                "add 4 bytes each (adamw_fraction)"
            )
        return comps, notes
    if optimizer == "adam8bit":
        return [
            MemoryComponent("adam m (first moment)", "int8", 1.0),
            MemoryComponent("adam v (second moment)", "int8", 1.0),
        ], ["block-wise fp32 absmax constants (block 2048) add ~0.004 bytes/param, ignored"]
    if optimizer == "adafactor":
        factored = 8.0 / width if width is not None else 0.0
        comps = [MemoryComponent("factored second moment (row + col)", fp32, factored)]
        notes = [
            f"factored state 4(r+c)/(rc) bytes/param taken as 8/width = {factored:g} for "
            f"square {width}x{width} matrices"
            if width is not None
            else "factored state 4(r+c)/(rc) bytes/param taken as 0 (pass width for 8/width)"
        ]
        if adafactor_momentum:
            comps.append(MemoryComponent("momentum (beta1)", fp32, 4.0))
        return comps, notes
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")


def training_memory(
    n_params: float | int | str,
    optimizer: str = "adamw",
    precision: str = "mixed",
    *,
    width: int | None = None,
    adafactor_momentum: bool = False,
    adamw_fraction: float = 0.0,
) -> MemoryEstimate:
    """Per-parameter and total model-state memory for training (see the module docstring).

    ``mixed`` precision: bf16 weights 2 + bf16 grads 2 + fp32 master 4 + optimizer
    state (ZeRO Sec. 3.1); AdamW gives 16 bytes/param, 112 GB at 7e9 parameters.
    ``fp32``: weights 4 + grads 4 + state, no master copy. ``width`` sizes Adafactor's
    factored state; ``adamw_fraction`` is the share of Muon-run models kept on AdamW.
    """
    n = parse_count(n_params)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 1):
        raise ValueError(f"width must be a positive integer, got {width!r}")
    if not (isinstance(adamw_fraction, (int, float)) and 0.0 <= adamw_fraction <= 1.0):
        raise ValueError(f"adamw_fraction must be in [0, 1], got {adamw_fraction!r}")
    if adamw_fraction and optimizer != "muon":
        raise ValueError(f"adamw_fraction applies to muon only, got optimizer {optimizer!r}")
    if adafactor_momentum and optimizer != "adafactor":
        raise ValueError(
            f"adafactor_momentum applies to adafactor only, got optimizer {optimizer!r}"
        )
    state, notes = _state(optimizer, width, adafactor_momentum, float(adamw_fraction))
    if precision == "mixed":
        comps = [
            MemoryComponent("weights", "bf16", 2.0),
            MemoryComponent("gradients", "bf16", 2.0),
            MemoryComponent("master weights", "fp32", 4.0),
        ]
    else:
        comps = [MemoryComponent("weights", "fp32", 4.0), MemoryComponent("gradients", "fp32", 4.0)]
    return MemoryEstimate(n, optimizer, precision, tuple(comps + state), tuple(notes))
