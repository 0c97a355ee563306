"""Rotary position embeddings (Su et al. 2021, "RoFormer"), in Meta's Llama layout: the
pairs (2i, 2i+1) of a head rotate by angle t·theta^(-2i/D). The tables are built in fp32
(:func:`rope_cache`), cast once per forward to the compute dtype (:func:`rope_tables`), and
the rotation runs in that dtype (:func:`rope_rotate`)."""

from __future__ import annotations

import torch


def rope_cache(seq_len: int, d_head: int, theta: float = 10000.0,
               device: torch.device | None = None) -> torch.Tensor:
    """cos/sin table [T, D/2, 2] for rotary embeddings (Su et al. 2021), base ``theta``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d_head, 2, device=device).float() / d_head))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv_freq)  # [T, D/2]
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def rope_tables(cache_TD2: torch.Tensor, T: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, signed sin), each ``[T, D]`` in ``dtype``, from :func:`rope_cache`: cos_i and
    (-sin_i, +sin_i) on the pair (2i, 2i+1), so that :func:`rope_rotate` is two products
    and a sum. Built once per forward, not per layer."""
    cos, sin = cache_TD2[:T, :, 0], cache_TD2[:T, :, 1]
    return (cos.repeat_interleave(2, dim=-1).to(dtype),
            torch.stack([-sin, sin], dim=-1).flatten(-2).to(dtype))


def rope_rotate(x_TD: torch.Tensor, cos_TD: torch.Tensor, sin_TD: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (2i, 2i+1) of ``x`` by :func:`rope_tables`' angles in ``x``'s own
    dtype: x·cos + swap(x)·sin, swap exchanging each pair's two entries. Four kernels
    forward (flip, mul, mul, add), where the fp32 round trip took eight; in fp32 it is the
    same arithmetic as the pairwise formula, so the result is bit for bit equal."""
    if cos_TD.dtype != x_TD.dtype:  # e.g. fp32 q after a QK-norm that autocast keeps in fp32
        cos_TD, sin_TD = cos_TD.to(x_TD.dtype), sin_TD.to(x_TD.dtype)
    swapped = x_TD.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    return x_TD * cos_TD + swapped * sin_TD


def apply_rope(x_TD: torch.Tensor, cache_TD2: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (2i, 2i+1) by angle t·theta_i (Meta's Llama layout; HF's rotate_half
    pairs (i, i + D/2) instead: the converter permutes q/k rows between the two), in
    ``x``'s dtype (:func:`rope_rotate`)."""
    return rope_rotate(x_TD, *rope_tables(cache_TD2, x_TD.shape[-2], x_TD.dtype))
