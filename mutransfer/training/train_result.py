"""What a proxy run returns: :class:`TrainResult`, whose ``to_row()`` is one row of the
results table, and the per-step metrics file (:func:`write_metrics`)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutransfer._io import atomic_write_text
from mutransfer.training.config import TrainConfig

# Row keys required by docs/architecture.md's results table, in order.
ROW_KEYS = ("arch", "parametrization", "width", "depth", "n_params", "n_params_nonembed", "tokens",
            "steps", "batch_size", "seq_len", "batch_tokens", "lr", "seed", "loss", "train_loss", "gns",
            "wall_s", "diverged")


# Config fields that say where/how a run executes, not what it is: kept out of rows.
_NOT_HYPERPARAMETERS = frozenset({"out_dir", "resume", "device", "threads", "compile", "metrics_format",
                                  "checkpoint_every", "data_cache"})


@dataclass
class TrainResult:
    """What a run returns; :meth:`to_row` is one results-table row."""

    config: TrainConfig
    arch: str
    """The model's id (:attr:`mutransfer.models.source.ModelSource.model_id`): a preset
    name, ``hf:<model_type>@<config sha256[:8]>`` or ``builder:module:function``."""
    parametrization: str
    width: int
    depth: int
    n_params: int
    n_params_nonembed: int
    tokens: int
    """Tokens trained on (steps done × batch tokens)."""
    steps: int
    """Planned optimizer steps (``steps_done`` says how many ran)."""
    steps_done: int
    batch_size: int
    seq_len: int
    lr: float
    seed: int
    loss: float
    """Final held-out loss (nats/token); the worst-case ln V (or the initial loss if
    larger) when diverged."""
    train_loss: float
    """Mean training loss of the last (up to) 10 steps."""
    gns: float | None
    """Smoothed gradient noise scale B_simple in sequences (None without grad_accum >= 2)."""
    wall_s: float
    diverged: bool = False
    pruned: bool = False
    stop_reason: str = "completed"
    """completed, pruned, diverged."""
    history: list[dict[str, Any]] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    spikes: list[int] = field(default_factory=list)
    """Steps at which a loss spike was detected."""
    rollbacks: list[tuple[int, int]] = field(default_factory=list)
    """(spike step, step restored to) of every rollback."""
    flops_per_token: int = 0
    tokens_per_s: float = 0.0
    device: str = "cpu"
    tokenizer: str = "unknown"
    """What made the token ids (:attr:`mutransfer.training.data.TokenDataset.tokenizer`): the
    tokenizer file's sha256[:12], ``bytes`` or ``unknown``; tables mixing them are refused."""
    vocab_size: int | None = None
    """The vocabulary the model was built with (the data's): ``transfer`` reads the proxy's
    from here, never from a preset."""
    compute_dtype: str = "fp32"
    """What the forward ran in: ``fp32`` or ``bf16`` (autocast over fp32 weights)."""
    compile_fallback: str | None = None
    """Why a ``compile`` run's training ran eager for some steps (dynamo's recompile limit
    hit, a graph break: :mod:`mutransfer.training.compile_watch`); None when it stayed
    compiled or was not compiled. In the row only when set."""

    @property
    def batch_tokens(self) -> int:
        return self.batch_size * self.seq_len

    def to_row(self) -> dict[str, Any]:
        """docs/architecture.md's results-table keys, then ``pruned``, ``steps_done`` and every
        hyperparameter of the config (not where/how it ran) under its field name."""
        row: dict[str, Any] = {k: getattr(self, k) for k in ROW_KEYS}
        row.update(pruned=self.pruned, steps_done=self.steps_done, stop_reason=self.stop_reason,
                   tokens_per_s=self.tokens_per_s, flops_per_token=self.flops_per_token,
                   tokenizer=self.tokenizer, vocab_size=self.vocab_size, compute_dtype=self.compute_dtype)
        if self.compile_fallback is not None:
            row["compile_fallback"] = self.compile_fallback
        for k, v in self.config.to_flat().items():
            if k not in row and k not in _NOT_HYPERPARAMETERS and v is not None:
                row[k] = v
        if self.config.model.source is not None:
            # an hf: or module:function model is no preset: the config's default preset
            # (gpt-tiny) would name another model; ``arch`` and ``source`` name this one
            row.pop("preset", None)
        return row


def finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


METRIC_COLUMNS = ("step", "loss", "lr", "grad_norm", "tokens", "gns", "max_attn_logit", "wall_s")


def write_metrics(history: Sequence[Mapping[str, Any]], path: str | os.PathLike[str],
                  fmt: str = "jsonl") -> Path:
    """Write per-step records as JSONL or CSV atomically; NaN/inf are written as null
    (JSONL) or an empty cell (CSV)."""
    rows = [{k: finite_or_none(v) for k, v in h.items()} for h in history]
    if fmt == "jsonl":
        text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows)
    else:
        cols = list(METRIC_COLUMNS) + sorted({k for r in rows for k in r} - set(METRIC_COLUMNS))
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, restval="", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
        text = buf.getvalue()
    return atomic_write_text(path, text)
