from __future__ import annotations

import subprocess
import sys

import pytest

from sweeps.spec import load_spec, spec_from_dict
from sweeps.spec_base import log2_grid, point_key
from sweeps.spec_kinds import BatchSweep, GridSweep, LRSweep


def test_default_lr_grid_is_log2_minus14_to_minus3() -> None:
    s = LRSweep(widths=(32,), parametrizations=("mup",))
    assert s.lrs == tuple(2.0**k for k in range(-14, -2))
    assert len(s.points()) == 12


def test_points_are_the_ordered_product() -> None:
    s = LRSweep(widths=(32, 64), parametrizations=("sp", "mup"), seeds=(0, 1), lrs=(1e-3, 1e-2))
    pts = s.points()
    assert len(pts) == 2 * 2 * 2 * 2
    assert pts == LRSweep(widths=(32, 64), parametrizations=("sp", "mup"), seeds=(0, 1),
                          lrs=(1e-3, 1e-2)).points()  # deterministic
    assert pts[0] == {"parametrization": "sp", "width": 32, "seed": 0, "lr": 1e-3}
    assert pts[1]["lr"] == 1e-2 and pts[-1]["parametrization"] == "mup"
    assert len({point_key(p) for p in pts}) == len(pts)
    assert s.group_keys() == ["parametrization", "width"]


def test_adaptive_lr_searches_the_range_per_group() -> None:
    s = LRSweep(widths=(32, 64), parametrizations=("mup",), sampler="tpe", trials=3)
    assert s.points() == [{"parametrization": "mup", "width": 32, "seed": 0},
                          {"parametrization": "mup", "width": 64, "seed": 0}]
    assert s.search() == {"lr": (2.0**-14, 2.0**-3)}
    assert s.trials_per_point() == 3


def test_batch_sweep_token_budgets() -> None:
    s = BatchSweep(widths=(32,), tokens=(4096, 8192), batch_sizes=(4, 8), lrs=(1e-2,))
    pts = s.points()
    assert len(pts) == 4 and all(p["parametrization"] == "mup" for p in pts)
    assert {p["tokens"] for p in pts} == {4096, 8192}


def test_generic_kind_any_field(tmp_path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("kind: run\ngrid:\n  output_mult: [0.5, 1, 2]\n  lr: [0.001, 0.01]\nbase: {steps: 3}\n")
    s = load_spec(p)
    assert isinstance(s, GridSweep) and len(s.points()) == 6
    assert s.to_dict()["grid"] == {"output_mult": [0.5, 1, 2], "lr": [0.001, 0.01]}


@pytest.mark.parametrize(("text", "match"), [
    ("kind: lr\nwidths: [32]\nbogus: 1\n", "bogus"),
    ("kind: lr\nwidths: []\n", "empty grid"),
    ("kind: lr\nwidths: [40]\n", "width 40"),
    ("kind: lr\nwidths: [32]\nparametrizations: [ntk]\n", "ntk"),
    ("kind: lr\nwidths: [32]\nlrs: [-1]\n", "-1"),
    ("kind: lr\nwidths: [32]\nsampler: annealing\n", "annealing"),
    ("kind: run\ngrid: {not_a_field: [1]}\n", "not_a_field"),
    ("kind: lr\nbase: {stepz: 3}\n", "stepz"),
    ("kind: nope\n", "nope"),
    ("- 1\n", "mapping"),
])
def test_bad_specs_raise_one_clear_value_error(tmp_path, text: str, match: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_spec(p)


def test_spec_round_trips_through_dict() -> None:
    s = LRSweep(widths=(32, 64), parametrizations=("sp",), lrs=(1e-3,), base={"steps": 3})
    assert spec_from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="does not match"):
        spec_from_dict(s.to_dict(), kind="batch")


def test_log2_grid() -> None:
    assert log2_grid(-2, 0, 0.5) == (0.25, 2**-1.5, 0.5, 2**-0.5, 1.0)
    with pytest.raises(ValueError):
        log2_grid(0, -1)


def test_import_sweeps_is_lazy() -> None:
    code = ("import sys, sweeps, sweeps.spec; sweeps.LRSweep; "
            "print('optuna' in sys.modules, 'torch' in sys.modules, 'analysis' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]


def test_mup_base_shape_defaults_to_the_smallest_width_and_depth() -> None:
    s = LRSweep(widths=(128, 32, 64), depths=(4, 2), parametrizations=("completep",))
    assert s.base["base_width"] == 32 and s.base["base_depth"] == 2
    assert LRSweep(widths=(64,), base={"base_width": 16}).base["base_width"] == 16
    assert BatchSweep(widths=(64, 32)).base["base_width"] == 32


def test_the_fields_a_sweep_may_set_are_the_train_configs_own() -> None:
    # derived from the config's section dataclasses, not a hand copy (one fell 19 fields behind)
    from mutransfer.training.config import ALIASES
    from sweeps.spec_base import train_config_fields

    assert train_config_fields() == frozenset(ALIASES)
    s = GridSweep(grid={"qk_clip_tau": [50.0, 100.0]},
                  base={"lr_mult_output": 2.0, "head_rule": "keep_head_dim"})
    assert [p["qk_clip_tau"] for p in s.points()] == [50.0, 100.0]
    with pytest.raises(ValueError, match="not_a_field"):
        GridSweep(grid={"not_a_field": [1]})
    with pytest.raises(ValueError, match="not_a_field"):
        GridSweep(grid={"lr": [1e-3]}, base={"not_a_field": 1})


def test_every_integer_field_of_the_trainer_is_recorded_as_an_integer() -> None:
    """INT_FIELDS comes from TrainConfig's type hints: a grid over spike_window (missing from
    the hand-kept list before) is an IntDistribution, so its trials record 10, not 10.0."""
    from optuna.distributions import FloatDistribution, IntDistribution

    from mutransfer.training.config import INT_FIELDS
    from sweeps.objective import dim_distribution

    were_missing = {"spike_window", "rollback_every", "max_rollbacks", "max_logit_every", "data_max_bytes"}
    assert were_missing <= INT_FIELDS
    assert "lr" not in INT_FIELDS and "spike_threshold" not in INT_FIELDS
    for name in sorted(INT_FIELDS):
        assert isinstance(dim_distribution(name, [10, 20]), IntDistribution), name
    assert isinstance(dim_distribution("spike_threshold", [2, 3]), FloatDistribution)


def test_a_trials_config_names_the_model_it_trains(tmp_path) -> None:
    """A preset sweep's trials carry ``preset``; an ``hf:`` or ``module:function`` sweep's
    carry ``source`` (the absolute config.json) and no default ``preset`` (it is not the
    model), in the overrides and in the full config a trial stores; a preset named beside
    a source (its context is the default) is kept, and the TrainConfig is the same."""
    pytest.importorskip("transformers")
    import json

    from mutransfer.training.config import TrainConfig
    from sweeps.objective import full_config
    from sweeps.resolve import resolve_config

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
        "max_position_embeddings": 64}))
    point = {"parametrization": "mup", "width": 32, "seed": 0, "lr": 1e-3}
    preset = resolve_config(LRSweep(widths=(32,), lrs=(1e-3,)), point)
    assert preset["preset"] == "gpt-tiny" and "source" not in preset
    assert full_config(preset)["preset"] == "gpt-tiny"
    hf = resolve_config(LRSweep(model=f"hf:{tmp_path}", widths=(32,), lrs=(1e-3,)), point)
    assert hf["source"] == f"hf:{tmp_path.resolve() / 'config.json'}" and "preset" not in hf
    stored = full_config(hf)
    assert stored["source"] == hf["source"] and "preset" not in stored and stored["width"] == 32
    assert TrainConfig.from_flat(stored) == TrainConfig.from_flat({**stored, "preset": "gpt-tiny"})
    named = resolve_config(LRSweep(model=f"hf:{tmp_path}", preset="gpt-small", widths=(32,), lrs=(1e-3,)),
                           point)
    assert named["preset"] == "gpt-small" and full_config(named)["preset"] == "gpt-small"
