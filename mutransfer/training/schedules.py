"""Learning-rate and batch-size schedules, as pure functions of the step.

A schedule maps the optimizer step to a multiplier in ``[0, 1]`` of the base LR (each
parameter group's muP LR multiplier is applied beside it, so every schedule composes
with every parametrization). Only the step is checkpointed: resuming with a different
:class:`ScheduleConfig` changes the future and nothing else, which is exactly how a
warmup-stable-decay (WSD) *branch* is made: resume the stable run at step ``b`` with
``decay_start=b`` and a new ``total_steps``.

Step convention (0-indexed, as ``torch.optim.lr_scheduler.LambdaLR`` calls it):

- warmup occupies steps ``[0, warmup_steps)`` and rises linearly as
  ``(step + 1) / warmup_steps``, so the first step already learns and step
  ``warmup_steps - 1`` is at the peak;
- a decay over steps ``[start, total_steps)`` is at the peak on step ``start`` and at
  ``lr_floor`` on the last step ``total_steps - 1``; later steps stay at ``lr_floor``.

Batch-size ramps (:class:`BatchRamp`, :class:`NoiseScaleRamp`) grow the batch during
training, in multiples of the micro-batch.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DECAY_SHAPES",
    "SCHEDULE_KINDS",
    "BatchRamp",
    "BatchRampConfig",
    "NoiseScaleRamp",
    "Schedule",
    "ScheduleConfig",
    "decay_shape",
    "make_schedule",
]

ScheduleKind = Literal["constant", "cosine", "linear", "inverse_sqrt", "wsd"]
DecayShape = Literal["linear", "1-sqrt", "exp", "cosine"]
SCHEDULE_KINDS: tuple[str, ...] = typing.get_args(ScheduleKind)
DECAY_SHAPES: tuple[str, ...] = typing.get_args(DecayShape)


@dataclass(frozen=True)
class ScheduleConfig:
    """A learning-rate schedule: a multiplier of the base LR as a function of the step."""

    kind: str = "cosine"
    """One of ``constant``, ``cosine``, ``linear``, ``inverse_sqrt``, ``wsd``."""

    warmup_steps: int = 0
    """Length of the linear warmup from ``1/warmup_steps`` to 1 (0: no warmup)."""

    total_steps: int | None = None
    """Number of optimizer steps of the run; required by ``cosine``, ``linear`` and
    ``wsd`` (the decay ends on step ``total_steps - 1``)."""

    lr_floor: float = 0.0
    """Final multiplier, as a fraction of the peak, in ``[0, 1]``: where ``cosine``,
    ``linear`` and the ``wsd`` cooldown end, and the lower clamp of ``inverse_sqrt``.
    Ignored by ``constant``."""

    decay_fraction: float = 0.2
    """``wsd`` only: cooldown length as a fraction of ``total_steps`` (Hägele et al.
    2024 find 10-20% matches cosine); the cooldown starts at
    ``total_steps - round(decay_fraction * total_steps)``. 0 means no cooldown."""

    decay_start: int | None = None
    """``wsd`` only: explicit first step of the cooldown; overrides ``decay_fraction``.
    Setting it to the resume step of a stable run makes a branch."""

    decay_shape: str = "1-sqrt"
    """``wsd`` only: cooldown shape, ``linear``, ``1-sqrt`` (Hägele et al. 2024, the
    better of their shapes), ``exp`` (MiniCPM's exponential) or ``cosine``."""

    exp_rate: float = 5.0
    """``exp`` cooldown only: rate ``k`` of ``(e^{-k p} - e^{-k}) / (1 - e^{-k})``; the
    multiplier has fallen to about ``e^{-k/2}`` halfway through the cooldown."""

    timescale: int | None = None
    """``inverse_sqrt`` only: the step ``tau`` where the ``sqrt(tau / n)`` decay starts;
    ``None`` uses ``max(warmup_steps, 1)`` (Vaswani et al.'s choice)."""


def decay_shape(shape: str, p: float, exp_rate: float = 5.0) -> float:
    """Cooldown curve from 1 at progress ``p = 0`` to 0 at ``p = 1``.

    - ``linear``: ``1 - p``.
    - ``1-sqrt``: ``1 - sqrt(p)`` (Hägele et al. 2024, "Scaling Laws and Compute-Optimal
      Training Beyond Fixed Training Durations", Sec. 3, Fig. 4).
    - ``exp``: ``(e^{-k p} - e^{-k}) / (1 - e^{-k})``, an exponential decay shifted and
      rescaled to hit exactly 0, default ``k = 5`` (MiniCPM, Hu et al. 2024, Sec. 4.1,
      uses ``0.5^{(s - T)/T_half}``).
    - ``cosine``: ``(1 + cos(pi p)) / 2`` (Loshchilov & Hutter 2017, Eq. 5).
    """
    p = min(max(p, 0.0), 1.0)
    if shape == "linear":
        return 1.0 - p
    if shape == "1-sqrt":
        return 1.0 - math.sqrt(p)
    if shape == "exp":
        end = math.exp(-exp_rate)
        return (math.exp(-exp_rate * p) - end) / (1.0 - end)
    if shape == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"decay_shape must be one of {', '.join(DECAY_SHAPES)}, got {shape!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Schedule:
    """The multiplier of the base LR at a step: ``Schedule(cfg)(step) -> float in [0, 1]``.

    A plain class (not a closure) so it pickles, e.g. inside a checkpointed
    ``torch.optim.lr_scheduler.LambdaLR``. Formulas, after the warmup, with ``f`` the
    ``lr_floor``, ``w`` the warmup steps, ``T`` the total steps and ``n = step + 1``:

    - ``constant``: 1.
    - ``cosine``: ``f + (1 - f)(1 + cos(pi p)) / 2``, ``p = (step - w) / (T - 1 - w)``
      (SGDR, Loshchilov & Hutter 2017, Eq. 5, one cycle without restarts).
    - ``linear``: ``f + (1 - f)(1 - p)``, same ``p``.
    - ``inverse_sqrt``: ``max(f, min(1, sqrt(tau / n)))``, ``tau`` defaults to ``w``; with
      ``tau = w`` this is Vaswani et al. 2017, Eq. 3, ``min(n^-0.5, n w^-1.5)`` divided
      by its peak ``w^-0.5``.
    - ``wsd``: 1 until the cooldown start ``D``, then ``f + (1 - f) shape(p)``,
      ``p = (step - D) / (T - 1 - D)`` (warmup-stable-decay: MiniCPM, Hu et al. 2024,
      Sec. 4.1; Hägele et al. 2024). See :func:`decay_shape`.
    """

    def __init__(self, cfg: ScheduleConfig) -> None:
        _validate(cfg)
        self.cfg = cfg
        self.decay_start = _decay_start(cfg)

    def __repr__(self) -> str:
        return f"Schedule({self.cfg!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and other.cfg == self.cfg

    def __hash__(self) -> int:
        return hash(self.cfg)

    def __call__(self, step: int) -> float:
        if not _is_int(step) or step < 0:
            raise ValueError(f"step must be a non-negative integer, got {step!r}")
        cfg = self.cfg
        w = cfg.warmup_steps
        if step < w:
            return (step + 1) / w
        if cfg.kind == "constant":
            return 1.0
        if cfg.kind == "inverse_sqrt":
            tau = cfg.timescale if cfg.timescale is not None else max(w, 1)
            return max(cfg.lr_floor, min(1.0, math.sqrt(tau / (step + 1))))
        start = self.decay_start
        assert cfg.total_steps is not None and start is not None  # checked by _validate
        last = cfg.total_steps - 1
        if step < start or start > last:  # no decay inside the run: WSD's stable phase
            return 1.0
        if step >= last:
            return cfg.lr_floor
        p = (step - start) / (last - start)
        shape = {"cosine": "cosine", "linear": "linear"}.get(cfg.kind, cfg.decay_shape)
        return cfg.lr_floor + (1.0 - cfg.lr_floor) * decay_shape(shape, p, cfg.exp_rate)


def _decay_start(cfg: ScheduleConfig) -> int | None:
    if cfg.kind in ("cosine", "linear"):
        return cfg.warmup_steps
    if cfg.kind == "wsd":
        assert cfg.total_steps is not None
        if cfg.decay_start is not None:
            return cfg.decay_start
        return cfg.total_steps - round(cfg.decay_fraction * cfg.total_steps)
    return None


def _validate(cfg: ScheduleConfig) -> None:
    if cfg.kind not in SCHEDULE_KINDS:
        raise ValueError(
            f"schedule kind must be one of {', '.join(SCHEDULE_KINDS)}, got {cfg.kind!r}"
        )
    if not _is_int(cfg.warmup_steps) or cfg.warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a non-negative integer, got {cfg.warmup_steps!r}")
    if not (isinstance(cfg.lr_floor, (int, float)) and 0.0 <= cfg.lr_floor <= 1.0):
        raise ValueError(f"lr_floor must be in [0, 1], got {cfg.lr_floor!r}")
    if cfg.kind in ("cosine", "linear", "wsd"):
        if cfg.total_steps is None:
            raise ValueError(f"total_steps is required by the {cfg.kind!r} schedule, got None")
        if not _is_int(cfg.total_steps) or cfg.total_steps < 1:
            raise ValueError(f"total_steps must be a positive integer, got {cfg.total_steps!r}")
        if cfg.warmup_steps > cfg.total_steps:
            raise ValueError(
                f"warmup_steps={cfg.warmup_steps} exceeds total_steps={cfg.total_steps}"
            )
    if cfg.kind == "wsd":
        if not (isinstance(cfg.decay_fraction, (int, float)) and 0.0 <= cfg.decay_fraction <= 1.0):
            raise ValueError(f"decay_fraction must be in [0, 1], got {cfg.decay_fraction!r}")
        if cfg.decay_shape not in DECAY_SHAPES:
            raise ValueError(
                f"decay_shape must be one of {', '.join(DECAY_SHAPES)}, got {cfg.decay_shape!r}"
            )
        if cfg.decay_shape == "exp" and not (
            isinstance(cfg.exp_rate, (int, float))
            and math.isfinite(cfg.exp_rate)
            and cfg.exp_rate > 0
        ):
            raise ValueError(f"exp_rate must be a positive finite number, got {cfg.exp_rate!r}")
        if cfg.decay_start is not None and not _is_int(cfg.decay_start):
            raise ValueError(f"decay_start must be an integer, got {cfg.decay_start!r}")
        start = _decay_start(cfg)
        assert start is not None and cfg.total_steps is not None
        if not cfg.warmup_steps <= start <= cfg.total_steps:
            raise ValueError(
                f"decay_start={start} must lie in [warmup_steps, total_steps] = "
                f"[{cfg.warmup_steps}, {cfg.total_steps}]"
            )
    if (
        cfg.kind == "inverse_sqrt"
        and cfg.timescale is not None
        and (not _is_int(cfg.timescale) or cfg.timescale < 1)
    ):
        raise ValueError(f"timescale must be a positive integer, got {cfg.timescale!r}")


def make_schedule(cfg: ScheduleConfig) -> Schedule:
    """Build the picklable ``step -> multiplier`` function for ``cfg``.

    Use it as ``LambdaLR(optimizer, make_schedule(cfg))``: LambdaLR multiplies each
    group's initial LR (base LR x muP multiplier) by it.
    """
    return Schedule(cfg)


# ---- batch-size ramps ----------------------------------------------------------------


@dataclass(frozen=True)
class BatchRampConfig:
    """A batch size that grows with the tokens seen, in multiples of the micro-batch."""

    start: int
    """Batch size (sequences) at the beginning; a multiple of ``multiple``."""

    end: int
    """Batch size (sequences) once ``ramp_tokens`` tokens are seen; a multiple of
    ``multiple`` and at least ``start``."""

    ramp_tokens: int
    """Tokens over which the batch grows from ``start`` to ``end``."""

    kind: str = "linear"
    """``linear`` (grow continuously, rounded down to the multiple) or ``step`` (jump in
    ``n_stages`` equal stages of tokens)."""

    n_stages: int = 4
    """``step`` only: number of jumps between ``start`` and ``end``."""

    multiple: int = 1
    """Granularity of the batch (the micro-batch rows times the data-parallel ranks), so
    every batch is a whole number of micro-batches."""


class BatchRamp:
    """Batch size as a function of the tokens seen: ``BatchRamp(cfg)(tokens) -> int``.

    With ``q = min(1, tokens / ramp_tokens)`` the batch is
    ``start + floor(q (end - start) / multiple) * multiple`` (``linear``), or the same
    with ``q`` rounded down to a multiple of ``1 / n_stages`` (``step``): never
    decreasing, always a multiple of ``multiple``, ``start`` at 0 tokens and ``end``
    from ``ramp_tokens`` on. Growing the batch during training follows the
    critical-batch picture of McCandlish et al. 2018 (the noise scale grows as the loss
    falls); GPT-3 (Brown et al. 2020, App. B) ramps the batch linearly over the first
    4-12B tokens.
    """

    def __init__(self, cfg: BatchRampConfig) -> None:
        for name in ("start", "end", "ramp_tokens", "n_stages", "multiple"):
            value = getattr(cfg, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if cfg.kind not in ("linear", "step"):
            raise ValueError(f"batch ramp kind must be 'linear' or 'step', got {cfg.kind!r}")
        if cfg.end < cfg.start:
            raise ValueError(f"end={cfg.end} must be at least start={cfg.start}")
        for name in ("start", "end"):
            if getattr(cfg, name) % cfg.multiple:
                raise ValueError(
                    f"{name}={getattr(cfg, name)} is not a multiple of multiple={cfg.multiple}"
                )
        self.cfg = cfg

    def __repr__(self) -> str:
        return f"BatchRamp({self.cfg!r})"

    def __call__(self, tokens: int) -> int:
        if not (_is_int(tokens) and tokens >= 0):
            raise ValueError(f"tokens must be a non-negative integer, got {tokens!r}")
        cfg = self.cfg
        if tokens >= cfg.ramp_tokens:
            return cfg.end
        if cfg.kind == "step":
            # Integer arithmetic keeps the stage boundaries exact.
            stage = tokens * cfg.n_stages // cfg.ramp_tokens
            grow = (cfg.end - cfg.start) * stage // cfg.n_stages
        else:
            grow = (cfg.end - cfg.start) * tokens // cfg.ramp_tokens
        return cfg.start + grow // cfg.multiple * cfg.multiple

    def batch_sizes(self, n_steps: int, seq_len: int) -> list[int]:
        """Batch size of each of the first ``n_steps`` steps when each sequence has
        ``seq_len`` tokens (step ``s`` uses the tokens seen before it), so the ramp is
        a pure function of the step too, for planning and for resuming."""
        if not (_is_int(n_steps) and n_steps >= 0 and _is_int(seq_len) and seq_len >= 1):
            raise ValueError(f"n_steps must be >= 0 and seq_len >= 1, got {n_steps!r}, {seq_len!r}")
        out: list[int] = []
        tokens = 0
        for _ in range(n_steps):
            b = self(tokens)
            out.append(b)
            tokens += b * seq_len
        return out


class NoiseScaleRamp:
    """Batch size driven by the measured gradient noise scale, never decreasing.

    ``update(gns)`` sets the batch to
    ``max(current, clip(round_to_multiple(factor * gns), b_min, b_max))``: the critical
    batch of McCandlish et al. 2018 (Sec. 2.2) is about ``B_simple``, in the same units
    as the batch sizes given to the estimator (sequences when those are sequences).
    Feed it the smoothed value from :class:`mutransfer.training.noise_scale.NoiseScaleEstimator`;
    ``None`` or a non-finite or non-positive value keeps the current batch. Its state
    (the current batch) round-trips through ``state_dict``.
    """

    def __init__(self, b_min: int, b_max: int, multiple: int = 1, factor: float = 1.0) -> None:
        for name, value in (("b_min", b_min), ("b_max", b_max), ("multiple", multiple)):
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if b_max < b_min:
            raise ValueError(f"b_max={b_max} must be at least b_min={b_min}")
        if b_min % multiple or b_max % multiple:
            raise ValueError(
                f"b_min={b_min} and b_max={b_max} must be multiples of multiple={multiple}"
            )
        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise ValueError(f"factor must be a positive finite number, got {factor!r}")
        self.b_min, self.b_max, self.multiple, self.factor = b_min, b_max, multiple, float(factor)
        self.batch = b_min

    def update(self, gns: float | None) -> int:
        """Take a new noise-scale estimate and return the batch size to use next."""
        if gns is None or not math.isfinite(gns) or gns <= 0:
            return self.batch
        target = round(self.factor * gns / self.multiple) * self.multiple
        target = min(max(target, self.b_min), self.b_max)
        self.batch = max(self.batch, target)
        return self.batch

    def state_dict(self) -> dict[str, int]:
        """The current batch, for checkpoints."""
        return {"batch": self.batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore the current batch from :meth:`state_dict`."""
        batch = state.get("batch")
        if not (_is_int(batch) and self.b_min <= batch <= self.b_max):
            raise ValueError(
                f"batch in state must be an integer in [{self.b_min}, {self.b_max}], got {batch!r}"
            )
        self.batch = batch
