"""The demo's ladders: per size, the proxies and their LR grids, seeds and budgets, and the
scaling stage with the target its card is for."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ScalingStage:
    """The scaling sweep of the demo and the target its card is for."""

    batch_sizes: tuple[int, ...]
    """Batch sizes B in sequences (>= 4 over >= 8x, so the audit can hold one out)."""
    tokens: tuple[int, ...]
    """Token budgets D (>= 4 over >= 8x): the largest is trained, the others are WSD branches."""
    log2_lr_offsets: tuple[float, ...]
    """LR grid in octaves around the LR sweep's μP optimum, moved as sqrt(B)."""
    check_width: int
    """The wider width the scaling optimum is checked at (at the middle batch)."""
    eval_sequences: int
    """Held-out sequences per evaluation, at every batch."""
    target_width: int
    target_depth: int
    target_seq_len: int
    tokens_per_param: float = 20.0
    """Chinchilla's ~20 tokens per parameter (Hoffmann et al. 2022)."""
    check_batch_sizes: tuple[int, ...] | None = None
    """Batches of the wider check (None: the middle batch)."""
    max_extend: int = 2
    """An optimum (best batch of a budget, best LR of a cell) at the edge of its grid gets up
    to this many grid points past that edge, until bracketed (:mod:`sweeps.extend`)."""
    batch_range: tuple[int, int] | None = None
    """Batches (sequences) the extension may add (None: as the budgets and grad_accum allow)."""
    seeds: tuple[int, ...] = (0,)
    """Seeds of every scaling run (``mutransfer tune``'s second pass may add one)."""
    audit_seeds: int = 2
    """Fresh seeds the held-out audit trains the prediction and the measured best on
    (:func:`sweeps.holdout.run_holdout`): the paired gap's standard error shrinks as 1/sqrt."""


@dataclass(frozen=True)
class DemoSize:
    """One ladder of proxies and the budget of each trial."""

    preset: str
    widths: tuple[int, ...]
    log2_lr_center: float
    """The expected optimal log2 LR at the base width, where SP and μP are one model."""
    log2_lr_offsets: tuple[float, ...]
    """The LR grid in octaves around each arm's expected optimum at each width: the same
    points and spacing for SP and μP, so neither gets a finer or better-centred grid."""
    sp_lr_width_exponent: float
    """SP's expected optimum moves as (width / base)^this (Adam: about -1, the hidden
    LR's 1/m); μP's stays at the centre. 0: one grid for both at every width."""
    seeds: tuple[int, ...]
    """The seeds of both arms: every ratio of their best losses is seed-paired."""
    steps: int
    batch_size: int
    seq_len: int
    eval_sequences: int
    """Held-out sequences each LR-sweep run is scored on (one set for every run)."""
    coord_widths: tuple[int, ...]
    scaling: ScalingStage
    train_extra: tuple[tuple[str, object], ...] = ()
    """More TrainConfig fields for every run of every stage (``tune --set data=...``)."""
    budget_s: float = 270.0
    """The demo's wall-second budget (``tune --budget``; ``demo --budget`` overrides it):
    tune's plan sizes every stage to it from the measured cost of a run."""
    plan_floors: tuple[int, int] | None = None
    """(the fewest steps of a ladder run, of the largest batch in the smallest scaling
    budget) for tune's plan (None: :func:`sweeps.budget.plan_budget`'s 100 and 8); only the
    test size lowers them, to plan in seconds."""
    lr_max_extend: int = 2
    """An arm's optimum at the edge of its LR grid at some width gets up to this many grid
    points past that edge, until bracketed (:mod:`sweeps.extend`; the same rule for SP and
    μP): an edge optimum is only a bound, and its quadratic vertex would stretch the drift."""

    def log2_lrs(self, parametrization: str, width: int) -> tuple[float, ...]:
        """The arm's LR grid (log2) at ``width``: the offsets around its expected optimum."""
        m = width / self.widths[0]
        move = self.sp_lr_width_exponent * math.log2(m) if parametrization == "sp" else 0.0
        return tuple(self.log2_lr_center + move + o for o in self.log2_lr_offsets)


SIZES: dict[str, DemoSize] = {
    # 2 CPU cores, <= 10 minutes: 2-block Llamas (SwiGLU, RMSNorm, RoPE) of width 32..256
    # (8x), 250 steps of 8x64 bytes. The horizon: at 125 steps of 16x64 (the same tokens,
    # 4% less time per run) the default μP and a tuned SP tied at 256 (1.0019x, interval
    # across 1); at 250 steps of 8 μP is ahead at every width from 256 to 512 on 3 seeds
    # (readout_ladder.json: 0.997x at 256 and at 512), and its optimum moves 0.18 octave
    # over 16x. SP and μP on the same 2 seeds and the same grid, 3 LRs half an octave apart
    # around each arm's expected optimum (2^-6 at the base width; SP's moving as 1/m), and
    # an optimum at a grid edge gets more LRs past it (lr_max_extend, both arms): on the
    # ladder SP's optima sit at 2^-5.93, -6.97, -8.11, -9.14 and μP's at 2^-5.93..-6.11,
    # so each is within 0.15 octave of its grid's centre. Replayed from the ladder's runs
    # (bit-identical to the demo's), the 4-point grid of 2^-5.75 +- 0.25, 0.75 gave the
    # same best losses and a drift of 0.23 in 68 runs; this grid 0.17 in 52. The base width
    # is one set of runs for both arms (μP is SP there, bit for bit): 42 runs before
    # extensions. The scaling stage: width 32 (check at 64, batch 16), B = 1..16 sequences
    # (64..1024 tokens), D = 2^14..2^17 tokens
    # (halved from 2^15..2^18 for the 10 minutes: the stage and the audit cost in
    # proportion to the largest budget), 5 LRs half an octave apart from -1 to +1 around
    # sqrt(B) scaling (the optima sat at -0.55..+0.52 but one cell at +1.1, which the
    # extension bracketed; -1.5 was never best, at 125 or 250 steps). B* sat at one
    # sequence at every budget on earlier runs (B = 4..32 extended down to 1), so the grid
    # starts there; batch 32 was the noisiest cell (2-4% between neighbouring LRs) and is
    # gone, so the held-out batch is 16. Batch 1 accumulates 1 micro-batch (no GNS there).
    # The audit's fresh seeds: 4, since at batch 1 two runs 3% apart in LR differ by
    # 0.1-0.6% (2 seeds gave a gap of +0.37% +- 0.24%, all noise).
    "small": DemoSize(preset="llama-small", widths=(32, 64, 128, 256), log2_lr_center=-6.0,
                      log2_lr_offsets=(-0.5, 0.0, 0.5), sp_lr_width_exponent=-1.0, seeds=(0, 1),
                      steps=250, batch_size=8, seq_len=64, eval_sequences=128, coord_widths=(32, 64, 128, 256),
                      scaling=ScalingStage(batch_sizes=(1, 2, 4, 8, 16), tokens=(2**14, 2**15, 2**16, 2**17),
                                           log2_lr_offsets=(-1.0, -0.5, 0.0, 0.5, 1.0),
                                           check_width=64, eval_sequences=256, target_width=2048,
                                           target_depth=24, target_seq_len=1024,
                                           check_batch_sizes=(16,), max_extend=2, batch_range=(1, 64),
                                           audit_seeds=4), budget_s=270.0),
    # A single GPU: Llamas of width 128..2048 (16x), 1000 steps of 64x256 bytes.
    # One wide grid (2^-14..2^-4) for both arms at every width: no measured optima to centre on.
    "gpu": DemoSize(preset="llama-small", widths=(128, 256, 512, 1024, 2048), log2_lr_center=-9.0,
                    log2_lr_offsets=tuple(float(x) for x in range(-5, 6)), sp_lr_width_exponent=0.0,
                    seeds=(0, 1, 2), steps=1000, batch_size=64, seq_len=256, eval_sequences=512,
                    coord_widths=(128, 256, 512, 1024),
                    scaling=ScalingStage(batch_sizes=(16, 32, 64, 128), tokens=(2**21, 2**22, 2**23, 2**24),
                                         log2_lr_offsets=(-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5),
                                         check_width=256, eval_sequences=512, target_width=8192,
                                         target_depth=48, target_seq_len=4096), budget_s=3600.0),
    # For tests: seconds, not minutes. Numbers are not meaningful at this size.
    "tiny": DemoSize(preset="llama-small", widths=(32, 64, 128, 256), log2_lr_center=-6.0,
                     log2_lr_offsets=(-3.0, -1.0, 1.0, 3.0), sp_lr_width_exponent=-1.0, seeds=(0,), steps=6,
                     batch_size=4, seq_len=16, eval_sequences=32, coord_widths=(32, 64, 128),
                     scaling=ScalingStage(batch_sizes=(2, 4, 8, 16), tokens=(512, 1024, 2048, 4096),
                                          log2_lr_offsets=(-1.0, 0.0, 1.0), check_width=64,
                                          eval_sequences=8, target_width=512, target_depth=24,
                                          target_seq_len=256, max_extend=1),
                     lr_max_extend=1, budget_s=120.0, plan_floors=(8, 1)),
}


def model_kw(model: str) -> dict[str, str]:
    """A sweep spec's model fields: a preset by name, an ``hf:`` config as ``model``."""
    return {"model": model} if model.startswith("hf:") else {"preset": model}


def fuse_for(model: str, per_shape: int, workers: int, device: str) -> int | str | None:
    """The scaling sweep's ``fuse``: its trials of one shape (the LRs of one batch) train as
    one batched run (:mod:`mutransfer.training.fused`, equal floats). On 2 CPU cores that is 2.3x
    faster at batch 1 and 1.4x at batch 16 for 6 LRs of the width-32 proxy, so on CPU the
    ``per_shape`` trials are split into one group per worker, or a worker would sit idle
    while another trains them all. Not for the LR sweep: its cost is at widths 128-256,
    where a fused group is no faster than its trials in turn (0.98x for 5 LRs at width 128,
    125 steps of batch 16: compute bound), and one group per width left a worker idle.
    On a GPU (one worker per device) K comes from free memory. Only our own GPT fuses: a
    user's HF model trains unfused."""
    if model.startswith("hf:"):
        return None
    if device == "cpu" or workers > 1:
        return max(1, -(-per_shape // max(1, workers)))
    return "auto"
