"""Trainer checkpoints: plain state dicts, written atomically, loaded with ``weights_only``.

A checkpoint is one ``torch.save`` file holding only tensors, numbers, strings, lists and
dicts (so ``torch.load(weights_only=True)`` can read it and no pickled code ever runs):
the model and optimizer state dicts, the step, the data cursor, the RNG states and the
trainer's small running state (noise-scale EMAs, spike window, history). It is written
to a temp file and renamed, so a crash mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mutransfer._io import atomic_path

__all__ = ["CHECKPOINT_FORMAT", "RESUMABLE_FIELDS", "check_resume", "get_rng_state", "load_checkpoint",
           "save_checkpoint", "set_rng_state"]

CHECKPOINT_FORMAT = "mutransfer.checkpoint/v1"
_REQUIRED = ("format", "model", "optimizer", "step", "data_offset")

#: TrainConfig fields (flat names, :data:`mutransfer.training.config.ALIASES`) a resumed run may
#: change: how long it runs, how often it evaluates and saves, where and on what it runs.
#: Anything else (lr, seed, batch size,
#: parametrization, ...) would be silently half-applied: the optimizer state restores the
#: old base LR, the data cursor assumes the old batch; so a resume refuses it.
RESUMABLE_FIELDS = frozenset({
    "steps", "eval_every", "eval_sequences", "checkpoint_every", "out_dir", "resume", "metrics_format",
    "device", "threads", "compile", "data_cache", "max_logit_every",
})


def state_dict_error(exc: BaseException) -> str:
    """One line for a failed ``load_state_dict``: torch's header ("Error(s) in loading
    state_dict for GPT:") is nothing without the detail, so the first detail comes with
    its first mismatching key and a count of the rest."""
    import re

    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    head = lines[0]
    if head.endswith(":") and len(lines) > 1:
        detail = lines[1]
        keys = re.findall(r'"([^"]+)"', detail)
        if len(keys) > 1:  # Missing/Unexpected key(s) in state_dict: "a", "b", ...
            detail = f'{detail.split(":", 1)[0]}: "{keys[0]}" (and {len(keys) - 1} more)'
        more = len(lines) - 2
        head = f"{head} {detail}" + (f" (+{more} more problem(s))" if more > 0 else "")
    return head


def check_resume(saved: dict[str, Any] | None, config: dict[str, Any], step: int) -> None:
    """Refuse to resume a checkpoint (its config ``saved``, at ``step``) under ``config``
    when a field outside :data:`RESUMABLE_FIELDS` differs, or the run would end before the
    checkpoint's step; the ValueError names every changed field, old and new value."""
    if saved is not None:
        changed = sorted(k for k in set(saved) | set(config)
                         if k not in RESUMABLE_FIELDS and saved.get(k) != config.get(k))
        if changed:
            what = ", ".join(f"{k} {saved.get(k)!r} -> {config.get(k)!r}" for k in changed)
            raise ValueError(f"--resume cannot change {what}; only "
                             f"{', '.join(sorted(RESUMABLE_FIELDS - {'resume'}))} may differ from the "
                             "checkpoint's run (start a new run to change the others)")
    steps = config.get("steps")
    if isinstance(steps, int) and steps < step:
        raise ValueError(f"steps={steps} is below the checkpoint's step {step}; a resumed run "
                         "can only go on")


def get_rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU (and CUDA) RNG states in weights_only-loadable types."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "numpy": {"kind": kind, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_state` captured."""
    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in py["state"]), py["gauss"]))
    n = state["numpy"]
    legacy = (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"])
    np.random.set_state(legacy)  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Write ``state`` (plus the format tag) to ``path`` atomically; returns the path."""
    doc = {"format": CHECKPOINT_FORMAT, **state}
    with atomic_path(path) as tmp:
        torch.save(doc, tmp)
    return Path(path)


def load_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with ``torch.load(weights_only=True)``.

    Raises ValueError naming the file when it is missing, truncated, corrupt, not a
    mutransfer checkpoint, or lacks a required entry.
    """
    p = Path(path)
    if p.is_dir():
        hint = f"; it holds {p / 'checkpoint.pt'}" if (p / "checkpoint.pt").is_file() else ""
        raise ValueError(f"checkpoint {str(p)!r} is a directory, not a checkpoint file{hint}")
    if not p.is_file():
        raise ValueError(f"checkpoint {str(p)!r} does not exist")
    try:
        doc = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as exc:  # zipfile, unpickling, EOF, RuntimeError: all mean "corrupt"
        # Only the exception type: torch's own text suggests weights_only=False, which is
        # exactly what must not be done with a file of unknown origin.
        raise ValueError(f"checkpoint {str(p)!r} is corrupt, truncated or holds more than "
                         f"tensors and plain data ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        fmt = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"checkpoint {str(p)!r} is not a {CHECKPOINT_FORMAT} file (format {fmt!r})")
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"checkpoint {str(p)!r} lacks {missing}")
    return doc
