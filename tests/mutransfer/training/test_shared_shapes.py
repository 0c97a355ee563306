"""μP's base and delta models (built for real on CPU to read the model's init law) are built
once for trials of one model, not once per trial: a fused group of K members builds them
once, and what each member's parametrization reads from them is what a build of its own
would have read."""

from __future__ import annotations

import weakref
from typing import Any

import pytest

import mutransfer.parametrize.parametrization as parametrization
from mutransfer.models.gpt import GPT
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.fused import FusedGroup
from mutransfer.training.trainer import GPTBuilder, base_sizes, build_parametrization


def tiny(**kw: Any) -> TrainConfig:
    base = dict(preset="gpt-tiny", width=64, depth=2, head_dim=16, seq_len=16, batch_size=4, steps=2,
                eval_every=0, eval_sequences=4, threads=1, data_max_bytes=300_000, base_width=16,
                device="cpu", parametrization="mup", readout_init="fan_in")
    base.update(kw)
    return TrainConfig.from_flat(base)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(base width, delta width) of every real build, with an empty cache to start from."""
    seen: list[tuple[int, int]] = []
    real = parametrization.real_models

    def counting(builder: Any, base_width: int, delta_width: int, depth: int | None) -> Any:
        seen.append((base_width, delta_width))
        return real(builder, base_width, delta_width, depth)

    monkeypatch.setattr(parametrization, "real_models", counting)
    monkeypatch.setattr(parametrization, "_MEASURED", weakref.WeakKeyDictionary())
    return seen


def test_a_fused_group_of_four_builds_base_and_delta_once(builds: list[tuple[int, int]]) -> None:
    data = load_dataset(DataConfig(max_bytes=300_000))
    group = FusedGroup([tiny(lr=lr, seed=i) for i, lr in enumerate((1e-3, 2e-3, 4e-3, 8e-3))], data=data)
    assert builds == [(16, 32)]
    # each member reads the init law an uncached build reads (torch's fan-in law: -1/2)
    cfg = tiny()
    gcfg = cfg.model_config(vocab_size=data.vocab_size)
    own = Parametrization(lambda w, d: GPT(gcfg.replace(width=w, depth=d)), width=64, base_width=16,
                          depth=2, base_depth=2, readout_init="fan_in")
    assert len(builds) == 2 and own.init_exponents and set(own.init_exponents.values()) == {-0.5}
    for m in group.members:
        assert m.trainer.pz.init_exponents == own.init_exponents
        assert m.trainer.pz.specs == own.specs


def test_other_base_widths_and_models_are_built_again(builds: list[tuple[int, int]]) -> None:
    cfg = tiny()
    gcfg = cfg.model_config(vocab_size=256)
    keep = [build_parametrization(cfg, gcfg, 256)]
    keep.append(build_parametrization(tiny(lr=5e-3), gcfg, 256))  # another lr: the same model
    assert builds == [(16, 32)]
    keep.append(build_parametrization(tiny(base_width=32), gcfg, 256))  # another base width
    keep.append(build_parametrization(cfg, gcfg.replace(mlp="swiglu"), 256))  # another model
    assert builds == [(16, 32), (32, 96), (16, 32)]  # delta 3x base when 2x is the width
    # width and depth are not part of the model's identity: the builder is the same
    assert GPTBuilder(gcfg) == GPTBuilder(gcfg.replace(width=128, depth=3))
    assert GPTBuilder(gcfg) != GPTBuilder(gcfg.replace(mlp="swiglu"))
    assert base_sizes(cfg, gcfg) == (16, 2)
