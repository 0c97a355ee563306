"""Which trials can train fused, and how many at once: the fields that must be equal inside
a group (:data:`NON_FUSIBLE_FIELDS`, from each config section's ``PER_MEMBER``), the key that
groups them (:func:`fusion_key`), what cannot run fused at all (:func:`unsupported_reason`),
the partition of a list of configs into groups, and the group size K from memory
(:func:`choose_k`). Training a group is :mod:`mutransfer.training.fused`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from mutransfer.models.gpt import GPT
from mutransfer.training.config import ALIASES, SECTIONS, TrainConfig
from mutransfer.training.device import resolve_device

#: (flat name, section, field) of every field that must be equal across the members of
#: one fused group: each section's fields minus its ``PER_MEMBER`` ones.
_SHARED: tuple[tuple[str, str, str], ...] = tuple(
    (flat, sec, name) for flat, (sec, name) in ALIASES.items() if name not in SECTIONS[sec].PER_MEMBER)


#: Fields that must be equal across the members of one fused group (flat names).
NON_FUSIBLE_FIELDS: tuple[str, ...] = tuple(flat for flat, _, _ in _SHARED)


#: K on CPU when not given: past ~16 members a CPU step is compute bound and fusion only
#: adds memory (see benchmarks/fused_sweep.py).
CPU_DEFAULT_K = 16

#: On CPU fusion saves per-step overhead only, so it pays for small members and not for
#: large ones (benchmarks/fused_sweep.py ``cpu_crossover``, 6 LRs of llama-small, one
#: thread: 2.1x at 1.5e7 FLOPs per member micro-step, 1.2-1.5x from 5e7 to 4e8, 1.09x at
#: 1.5e9, 0.99x there in another run). Above this a CPU sweep's automatic K is 1: the
#: gain is within run-to-run noise, and one group per shape can leave other workers idle.
CPU_FUSE_MAX_FLOPS = 1e9


#: Upper bound of the automatic K on a GPU (the benchmark's largest group).
MAX_K = 64


def _shared_values(cfg: TrainConfig) -> dict[str, Any]:
    """The non-fusible fields of ``cfg`` by flat name, as the run will see them: the
    model's resolved against the preset (``width=None`` and ``width=64`` on a width-64
    preset are the same shape), device and dtype resolved."""
    gc = cfg.model_config()
    dev = resolve_device(cfg.run.device)
    out: dict[str, Any] = {}
    for flat, sec, name in _SHARED:
        if sec == "model" and name not in ("preset", "source", "head_rule"):
            out[flat] = gc.d_head if name == "head_dim" else getattr(gc, name)
        elif (sec, name) == ("run", "device"):
            out[flat] = str(dev)
        elif (sec, name) == ("run", "dtype") and cfg.run.dtype == "auto":
            out[flat] = "bf16" if dev.type == "cuda" else "fp32"
        else:
            out[flat] = getattr(getattr(cfg, sec), name)
    return out


def fusion_key(cfg: TrainConfig) -> tuple[Any, ...]:
    """The non-fusible fields of ``cfg`` (resolved), section by section: trials with
    equal keys can train as one fused group. Use it to partition pending sweep trials."""
    return tuple(_shared_values(cfg).values())


def unsupported_reason(cfg: TrainConfig) -> str | None:
    """Why ``cfg`` cannot run fused at all (run it with :func:`mutransfer.training.train.train`),
    or None when it can."""
    if cfg.model.source is not None:
        return (f"model {cfg.model.source!r} is not a built-in preset: fused training swaps stacked "
                "parameters into our own GPT, and its exactness is only guaranteed there")
    if cfg.stabilizers.spike_policy == "rollback":
        return "spike_policy='rollback' rewinds one member's data stream; run it unfused"
    if cfg.output.resume:
        return "resume is not supported by fused training"
    if cfg.output.checkpoint_every:
        return "checkpoint_every > 0 is not supported by fused training"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "fused training is single-process (WORLD_SIZE > 1)"
    return None


def check_fusible(configs: Sequence[TrainConfig]) -> None:
    """Raise ValueError naming the first non-fusible field (and both values) on which
    ``configs`` differ, or the reason one of them cannot run fused."""
    if not configs:
        raise ValueError("train_fused needs at least one config")
    for i, c in enumerate(configs):
        if not isinstance(c, TrainConfig):
            raise ValueError(f"config {i} is a {type(c).__name__}, not a TrainConfig")
        why = unsupported_reason(c)
        if why is not None:
            raise ValueError(f"config {i} cannot be fused: {why}")
    values = [_shared_values(c) for c in configs]
    for name, a in values[0].items():
        for i, v in enumerate(values[1:], start=1):
            b = v[name]
            if a != b:
                raise ValueError(f"cannot fuse trials that differ in non-fusible field {name!r}: "
                                 f"{a!r} (config 0) vs {b!r} (config {i})")


def partition(configs: Sequence[TrainConfig], k: int | None = None) -> list[list[int]]:
    """Indices of ``configs`` grouped for fusion: equal :func:`fusion_key`, at most ``k``
    per group (``k=None``: :func:`choose_k` of the group's first config), input order kept
    inside a group. Configs that cannot run fused (:func:`unsupported_reason`) come back
    as groups of one; run those with :func:`mutransfer.training.train.train`."""
    check_k(k)
    buckets: dict[tuple[Any, ...], list[int]] = {}
    singles: list[list[int]] = []
    for i, c in enumerate(configs):
        if unsupported_reason(c) is not None:
            singles.append([i])
        else:
            buckets.setdefault(fusion_key(c), []).append(i)
    out: list[list[int]] = []
    for idx in buckets.values():
        kk = k if k is not None else choose_k(configs[idx[0]])
        out.extend(idx[j:j + kk] for j in range(0, len(idx), kk))
    return out + singles


def check_k(k: int | None) -> None:
    """``k`` (members per fused group) is None (automatic) or an integer >= 1."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k (members per fused group) must be an integer >= 1, got {k!r}")


def member_bytes(cfg: TrainConfig, vocab_size: int | None = None, dtype: str | None = None) -> int:
    """A deliberately generous estimate of one member's training memory in bytes, at the
    run's real vocabulary (``vocab_size``: the data's; None: the preset's), sequence length
    and compute dtype (``dtype``: ``bf16``/``fp32``; None: the config's, ``auto`` as bf16):

    - fp32 weights, gradients and Adam state: 4 + 4 + 8 bytes/param;
    - activations kept for the backward: ~40 bytes per token, per block and per unit of
      width in bf16 (a little above Korthikanti et al. 2022's 34 for 16-bit activations
      without attention scores, since ours are fp32 outside the matmuls), 72 in fp32;
    - the logits, per token and vocabulary entry: bf16 logits (2), their fp32 copy (4),
      the saved log-softmax (4) and the fp32 and bf16 gradients (4 + 2) = 16 bytes in bf16;
      12 in fp32 (logits, log-softmax, gradient). At vocab 50,304 and 8,192 tokens a
      micro-batch this term alone is 6.6 GB: the vocabulary, not the model, sizes K."""
    gc = cfg.model_config(vocab_size=vocab_size)
    with torch.device("meta"):
        n = GPT(gc).num_params()
    dtype = dtype or cfg.run.dtype
    half = dtype != "fp32"
    tokens = cfg.run.batch_size // cfg.run.grad_accum * gc.seq_len
    act = tokens * ((40 if half else 72) * gc.width * gc.depth + (16 if half else 12) * gc.vocab_size)
    return int(16 * n + act)


def member_step_flops(cfg: TrainConfig, vocab_size: int = 256) -> int:
    """Training FLOPs of one member's micro-step: the model's FLOPs per token
    (:meth:`GPT.flops_per_token`, 6·N + 6·L·T·C) times the tokens of one micro-batch."""
    gc = cfg.model_config(vocab_size=vocab_size)
    with torch.device("meta"):
        per_token = GPT(gc).flops_per_token()
    return int(per_token * (cfg.run.batch_size // cfg.run.grad_accum) * gc.seq_len)


def choose_k(cfg: TrainConfig, device: torch.device | str | None = None, *, headroom: float = 0.6,
             vocab_size: int | None = None) -> int:
    """Members per fused group when not given. Off CUDA: :data:`CPU_DEFAULT_K` while one
    member's micro-step is below :data:`CPU_FUSE_MAX_FLOPS`, else 1 (unfused). On CUDA,
    ``headroom`` x the free memory (``torch.cuda.mem_get_info``) over
    :func:`member_bytes` at ``vocab_size`` (the data's), clamped to [1, :data:`MAX_K`].
    Free memory is read after ``torch.cuda.empty_cache()``, so memory the allocator keeps
    cached from an earlier group counts as free."""
    dev = torch.device(device) if device is not None else resolve_device(cfg.run.device)
    if dev.type != "cuda":
        return CPU_DEFAULT_K if member_step_flops(cfg, vocab_size or 256) < CPU_FUSE_MAX_FLOPS else 1
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(dev)
    need = max(1, member_bytes(cfg, vocab_size, "bf16" if cfg.run.dtype == "auto" else cfg.run.dtype))
    return max(1, min(MAX_K, int(headroom * free) // need))


__all__ = ["CPU_DEFAULT_K", "CPU_FUSE_MAX_FLOPS", "MAX_K", "NON_FUSIBLE_FIELDS", "check_fusible", "check_k",
           "choose_k", "fusion_key", "member_bytes", "member_step_flops", "partition", "unsupported_reason"]
