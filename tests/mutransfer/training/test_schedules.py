from __future__ import annotations

import math
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mutransfer.training.schedules import (
    DECAY_SHAPES,
    BatchRamp,
    BatchRampConfig,
    NoiseScaleRamp,
    ScheduleConfig,
    decay_shape,
    make_schedule,
)

FAST = settings(max_examples=60, deadline=None)


@st.composite
def configs(draw: st.DrawFn) -> ScheduleConfig:
    kind = draw(st.sampled_from(["constant", "cosine", "linear", "inverse_sqrt", "wsd"]))
    total = draw(st.integers(1, 400))
    warmup = draw(st.integers(0, total))
    cfg = ScheduleConfig(
        kind=kind,
        warmup_steps=warmup,
        total_steps=total,
        lr_floor=draw(st.floats(0.0, 1.0)),
        decay_fraction=draw(st.floats(0.0, 1.0)),
        decay_shape=draw(st.sampled_from(DECAY_SHAPES)),
        timescale=draw(st.none() | st.integers(1, 100)),
    )
    if kind == "wsd" and cfg.total_steps - round(cfg.decay_fraction * total) < warmup:
        cfg = ScheduleConfig(**{**cfg.__dict__, "decay_start": warmup})
    return cfg


# ---- known answers -------------------------------------------------------------------


def test_known_values() -> None:
    cos = make_schedule(ScheduleConfig("cosine", warmup_steps=10, total_steps=111, lr_floor=0.1))
    assert [cos(s) for s in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert cos(9) == 1.0 and cos(10) == 1.0  # peak at the end of warmup and first step after
    assert cos(60) == pytest.approx(0.55)  # halfway: f + (1 - f) / 2
    assert cos(110) == pytest.approx(0.1) and cos(10_000) == pytest.approx(0.1)

    lin = make_schedule(ScheduleConfig("linear", total_steps=101))
    assert lin(0) == 1.0 and lin(25) == pytest.approx(0.75) and lin(100) == 0.0

    inv = make_schedule(ScheduleConfig("inverse_sqrt", warmup_steps=4))
    assert [inv(s) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert inv(15) == pytest.approx(0.5)  # sqrt(4 / 16)
    # Vaswani et al. Eq. 3 divided by its peak, with n = step + 1.
    for n in range(1, 50):
        vaswani = min(n**-0.5, n * 4**-1.5) / 4**-0.5
        assert inv(n - 1) == pytest.approx(vaswani)

    const = make_schedule(ScheduleConfig("constant", warmup_steps=2))
    assert [const(s) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("shape", DECAY_SHAPES)
def test_wsd_cooldown_shapes(shape: str) -> None:
    by_fraction = make_schedule(ScheduleConfig("wsd", total_steps=1000, decay_fraction=0.2))
    assert by_fraction.decay_start == 800
    wsd = make_schedule(
        ScheduleConfig("wsd", total_steps=1001, decay_start=800, decay_shape=shape, lr_floor=0.0)
    )
    assert wsd(799) == 1.0 and wsd(800) == 1.0 and wsd(1000) == 0.0
    mid = wsd(900)  # p = 0.5
    expected = {
        "linear": 0.5,
        "1-sqrt": 1 - math.sqrt(0.5),
        "exp": (math.exp(-2.5) - math.exp(-5)) / (1 - math.exp(-5)),
        "cosine": 0.5,
    }[shape]
    assert mid == pytest.approx(expected)


def test_decay_shape_endpoints() -> None:
    for shape in DECAY_SHAPES:
        assert decay_shape(shape, 0.0) == pytest.approx(1.0)
        assert decay_shape(shape, 1.0) == pytest.approx(0.0, abs=1e-12)


def test_picklable_and_works_with_lambdalr() -> None:
    sched = make_schedule(ScheduleConfig("wsd", warmup_steps=3, total_steps=20))
    clone = pickle.loads(pickle.dumps(sched))
    assert clone == sched and [clone(s) for s in range(25)] == [sched(s) for s in range(25)]
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.5)
    lr_sched = torch.optim.lr_scheduler.LambdaLR(opt, sched)
    seen = []
    for _ in range(20):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        lr_sched.step()
    assert seen == pytest.approx([0.5 * sched(s) for s in range(20)])
    pickle.dumps(lr_sched.state_dict())


@pytest.mark.parametrize(
    "cfg,match",
    [
        (ScheduleConfig("triangle"), "'triangle'"),
        (ScheduleConfig("cosine"), "total_steps is required"),
        (ScheduleConfig("cosine", total_steps=10, warmup_steps=11), "warmup_steps=11"),
        (ScheduleConfig("linear", total_steps=10, lr_floor=1.5), "lr_floor must be in"),
        (ScheduleConfig("wsd", total_steps=10, decay_shape="square"), "'square'"),
        (ScheduleConfig("wsd", total_steps=10, decay_start=11), "decay_start=11"),
        (ScheduleConfig("wsd", total_steps=10, warmup_steps=5, decay_start=2), "decay_start=2"),
        (ScheduleConfig("wsd", total_steps=10, decay_fraction=-0.1), "decay_fraction"),
        (ScheduleConfig("constant", warmup_steps=-1), "warmup_steps must be"),
        (ScheduleConfig("inverse_sqrt", timescale=0), "timescale"),
    ],
)
def test_bad_configs(cfg: ScheduleConfig, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_schedule(cfg)


def test_negative_step_rejected() -> None:
    with pytest.raises(ValueError, match="-1"):
        make_schedule(ScheduleConfig("constant"))(-1)


# ---- properties ----------------------------------------------------------------------


@FAST
@given(configs())
def test_values_in_unit_interval_and_warmup_monotone(cfg: ScheduleConfig) -> None:
    f = make_schedule(cfg)
    vals = [f(s) for s in range(cfg.total_steps + 5)]
    assert all(0.0 <= v <= 1.0 and math.isfinite(v) for v in vals)
    warm = vals[: cfg.warmup_steps]
    assert all(a < b for a, b in zip(warm, warm[1:], strict=False))
    if cfg.warmup_steps:
        assert vals[cfg.warmup_steps - 1] == 1.0
    # After warmup nothing increases (all kinds decay or hold).
    post = vals[cfg.warmup_steps :]
    assert all(b <= a + 1e-12 for a, b in zip(post, post[1:], strict=False))


@FAST
@given(configs())
def test_decaying_kinds_end_at_floor(cfg: ScheduleConfig) -> None:
    f = make_schedule(cfg)
    assert cfg.total_steps is not None
    last = cfg.total_steps - 1
    if cfg.kind in ("cosine", "linear") and cfg.warmup_steps <= last:
        assert f(last) == pytest.approx(cfg.lr_floor)
    if cfg.kind == "wsd" and f.decay_start <= last:
        assert f(last) == pytest.approx(cfg.lr_floor)
        assert f(cfg.total_steps + 100) == pytest.approx(cfg.lr_floor)


@FAST
@given(configs())
def test_wsd_is_constant_before_decay_start(cfg: ScheduleConfig) -> None:
    if cfg.kind != "wsd":
        return
    wsd = make_schedule(cfg)
    const = make_schedule(ScheduleConfig("constant", warmup_steps=cfg.warmup_steps))
    for s in range(wsd.decay_start):
        assert wsd(s) == const(s)
    if wsd.decay_start < cfg.total_steps - 1:  # a one-step cooldown is already at the floor
        assert wsd(wsd.decay_start) == 1.0


@FAST
@given(
    warmup=st.integers(0, 50),
    stable=st.integers(0, 300),
    decay=st.integers(1, 200),
    shape=st.sampled_from(DECAY_SHAPES),
    floor=st.floats(0.0, 0.5),
)
def test_branch_resumes_continuously_and_equals_fresh_schedule(
    warmup: int, stable: int, decay: int, shape: str, floor: float
) -> None:
    """A branch of a long stable run at step b == a fresh run decaying from b."""
    b = warmup + stable
    long_run = make_schedule(
        ScheduleConfig("wsd", warmup_steps=warmup, total_steps=10_000, decay_fraction=0.0)
    )
    branch_cfg = ScheduleConfig(
        "wsd",
        warmup_steps=warmup,
        total_steps=b + decay,
        decay_start=b,
        decay_shape=shape,
        lr_floor=floor,
    )
    branch = make_schedule(branch_cfg)
    for s in range(b):  # identical history: resuming at b changes only the future
        assert branch(s) == long_run(s)
    if decay > 1:  # the cooldown starts at the peak (a one-step one is at the floor)
        assert branch(b) == 1.0
    fresh = make_schedule(ScheduleConfig(**{**branch_cfg.__dict__}))
    assert [branch(s) for s in range(b + decay + 3)] == [fresh(s) for s in range(b + decay + 3)]
    # The same cooldown expressed as a decay fraction, when it is representable.
    frac = decay / (b + decay)
    by_fraction = make_schedule(
        ScheduleConfig(
            "wsd",
            warmup_steps=warmup,
            total_steps=b + decay,
            decay_fraction=frac,
            decay_shape=shape,
            lr_floor=floor,
        )
    )
    if by_fraction.decay_start == b:
        assert [by_fraction(s) for s in range(b + decay)] == [branch(s) for s in range(b + decay)]


# ---- batch ramps ---------------------------------------------------------------------


def test_linear_batch_ramp_known_values() -> None:
    ramp = BatchRamp(BatchRampConfig(start=32, end=256, ramp_tokens=1000, multiple=32))
    assert ramp(0) == 32 and ramp(1000) == 256 and ramp(10**9) == 256
    assert ramp(500) == 128  # 32 + floor(112 / 32) * 32
    steps = BatchRamp(BatchRampConfig(32, 160, 1000, kind="step", n_stages=4, multiple=32))
    assert [steps(t) for t in (0, 249, 250, 500, 999, 1000)] == [32, 32, 64, 96, 128, 160]


@FAST
@given(
    start=st.integers(1, 8),
    extra=st.integers(0, 16),
    multiple=st.sampled_from([1, 2, 4, 8]),
    ramp_tokens=st.integers(1, 10_000),
    kind=st.sampled_from(["linear", "step"]),
    n_stages=st.integers(1, 10),
)
def test_batch_ramp_properties(
    start: int, extra: int, multiple: int, ramp_tokens: int, kind: str, n_stages: int
) -> None:
    cfg = BatchRampConfig(
        start * multiple, (start + extra) * multiple, ramp_tokens, kind, n_stages, multiple
    )
    ramp = BatchRamp(cfg)
    grid = sorted({0, ramp_tokens - 1, ramp_tokens, *range(0, ramp_tokens + 50, 97)})
    vals = [ramp(t) for t in grid if t >= 0]
    assert all(v % multiple == 0 and cfg.start <= v <= cfg.end for v in vals)
    assert all(a <= b for a, b in zip(vals, vals[1:], strict=False))
    assert ramp(0) == cfg.start and ramp(ramp_tokens) == cfg.end


def test_batch_sizes_per_step_follow_tokens() -> None:
    ramp = BatchRamp(BatchRampConfig(start=2, end=8, ramp_tokens=100, multiple=2))
    sizes = ramp.batch_sizes(10, seq_len=10)
    tokens = 0
    for b in sizes:
        assert b == ramp(tokens)
        tokens += b * 10
    assert sizes[0] == 2 and sizes[-1] == 8


def test_batch_ramp_errors() -> None:
    with pytest.raises(ValueError, match="end=16 must be at least start=32"):
        BatchRamp(BatchRampConfig(32, 16, 100))
    with pytest.raises(ValueError, match="start=12 is not a multiple of multiple=8"):
        BatchRamp(BatchRampConfig(12, 16, 100, multiple=8))
    with pytest.raises(ValueError, match="'cubic'"):
        BatchRamp(BatchRampConfig(8, 16, 100, kind="cubic"))


def test_noise_scale_ramp_never_decreases_and_rounds() -> None:
    ramp = NoiseScaleRamp(b_min=8, b_max=64, multiple=8)
    assert ramp.batch == 8
    assert ramp.update(None) == 8
    assert ramp.update(float("nan")) == 8
    assert ramp.update(-3.0) == 8
    assert ramp.update(21.0) == 24  # nearest multiple of 8
    assert ramp.update(10.0) == 24  # never decreases
    assert ramp.update(45.0) == 48
    assert ramp.update(1e6) == 64  # clipped
    state = ramp.state_dict()
    other = NoiseScaleRamp(8, 64, 8)
    other.load_state_dict(state)
    assert other.batch == 64
    with pytest.raises(ValueError, match="b_max=4 must be at least b_min=8"):
        NoiseScaleRamp(8, 4)
    with pytest.raises(ValueError, match="got 100"):
        other.load_state_dict({"batch": 100})
