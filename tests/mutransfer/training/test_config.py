"""TrainConfig as a tree (mutransfer.training.config): seven self-validating sections, one flat
alias map that keeps rows, checkpoints, specs and ``--set`` flat, and the fusion key
derived from the sections' per-member fields."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path

import pytest

from mutransfer.parametrize.specs import KINDS
from mutransfer.training.config import (
    ALIASES,
    SECTIONS,
    OptimSection,
    ParametrizationSection,
    RunSection,
    ScheduleSection,
    StabilizerSection,
    TrainConfig,
    load_config,
)
from mutransfer.training.schedules import DECAY_SHAPES, SCHEDULE_KINDS
from mutransfer.training.stabilizers import SPIKE_POLICIES

# The flat field names, in order, of the flat TrainConfig this tree replaced: rows,
# trial attributes, checkpoints and cards store exactly these keys.
FLAT = """preset width depth head_dim seq_len tie_embeddings qk_norm logit_softcap z_loss
freeze_norm_gains source head_rule parametrization base_width base_depth depth_alpha input_mult
output_mult attn_mult residual_mult lr_mult_input lr_mult_output lr_mult_vector readout_init optimizer lr
beta1 beta2 beta2_halflife_tokens eps
momentum muon_momentum weight_decay wd_mode qk_clip qk_clip_tau schedule warmup_steps decay_fraction
decay_shape lr_floor steps batch_size grad_accum seed data data_dtype data_max_bytes data_cache
eval_every eval_sequences device dtype compile threads gns_beta max_logit_every grad_clip spike_policy
spike_threshold spike_window rollback_every max_rollbacks diverge_factor out_dir metrics_format
checkpoint_every resume""".split()


def test_alias_map_covers_every_section_field_once_in_the_flat_order() -> None:
    pairs = [(sec, f.name) for sec, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    assert sorted(ALIASES.values()) == sorted(pairs) and len(set(pairs)) == len(pairs)
    assert list(ALIASES) == FLAT
    assert list(TrainConfig().to_flat()) == FLAT
    assert (ALIASES["parametrization"], ALIASES["optimizer"], ALIASES["schedule"]) == (
        ("parametrization", "kind"), ("optim", "name"), ("schedule", "kind"))
    assert [f.name for f in dataclasses.fields(TrainConfig)] == list(SECTIONS)


def test_every_field_has_a_docstring_under_it() -> None:
    import ast
    import inspect

    import mutransfer.training.config as mod

    tree = ast.parse(inspect.getsource(mod))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and (node.name in {c.__name__ for c in SECTIONS.values()}
                                               or node.name == "TrainConfig"):
            body = node.body
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.AnnAssign) and "ClassVar" not in ast.unparse(stmt.annotation):
                    nxt = body[i + 1] if i + 1 < len(body) else None
                    assert isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant), (
                        f"{node.name}.{ast.unparse(stmt.target)} has no docstring")


def test_no_flat_attribute_is_left_on_the_tree() -> None:
    """A flat read left over from before the sections fails loudly: there is no
    ``cfg.lr``, and comparing a section with a string raises instead of being False."""
    cfg = TrainConfig()
    for flat in ALIASES:
        if flat not in SECTIONS:
            assert not hasattr(cfg, flat), flat
    with pytest.raises(TypeError, match="cfg.parametrization.kind"):
        _ = cfg.parametrization == "mup"
    with pytest.raises(TypeError, match="'schedule' config section"):
        _ = "cosine" in (cfg.schedule,)
    assert cfg.parametrization.kind == "mup" and cfg.schedule.kind == "cosine"
    assert cfg.parametrization == ParametrizationSection() and hash(cfg) == hash(TrainConfig())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.optim.lr = 1.0  # type: ignore[misc]


def test_choices_come_from_the_literal_types() -> None:
    hints = {cls: typing.get_type_hints(cls) for cls in SECTIONS.values()}
    assert typing.get_args(hints[ParametrizationSection]["kind"]) == KINDS
    assert typing.get_args(hints[ScheduleSection]["kind"]) == SCHEDULE_KINDS
    assert typing.get_args(hints[ScheduleSection]["decay_shape"]) == DECAY_SHAPES
    assert typing.get_args(hints[StabilizerSection]["spike_policy"]) == SPIKE_POLICIES
    # Every Literal field refuses a value outside its choices, naming the flat field and them.
    for sec, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            if typing.get_origin(hints[cls][f.name]) is typing.Literal:
                flat = next(k for k, v in ALIASES.items() if v == (sec, f.name))
                allowed = ", ".join(typing.get_args(hints[cls][f.name]))
                with pytest.raises(ValueError, match=f"^{flat} must be one of {allowed}, got 'nope'$"):
                    cls(**{f.name: "nope"})


@pytest.mark.parametrize(("section", "kw", "match"), [
    (OptimSection, {"lr": 0.0}, "lr must be a positive finite number"),
    (OptimSection, {"beta2": 1.0}, r"beta2 must be in \[0, 1\)"),
    (RunSection, {"batch_size": 6, "grad_accum": 4}, "batch_size=6 is not divisible by grad_accum=4"),
    (RunSection, {"seed": -1}, "seed must be a non-negative integer"),
    (ScheduleSection, {"warmup_steps": -1}, "warmup_steps must be a non-negative integer or None"),
    (StabilizerSection, {"spike_window": 3}, "spike_window must be >= 4"),
    (ParametrizationSection, {"depth_alpha": 0.7}, "depth_alpha must be 0.5 or 1"),
])
def test_each_section_validates_its_own_fields(section: type, kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        section(**kw)


def test_cross_section_checks_stay_on_the_config() -> None:
    with pytest.raises(ValueError, match=r"warmup_steps must be in \[0, steps=10\], got 11"):
        TrainConfig.from_flat({"steps": 10, "warmup_steps": 11})
    with pytest.raises(ValueError, match="base_width=128 is larger than the width 64"):
        TrainConfig.from_flat({"width": 64, "base_width": 128})
    with pytest.raises(ValueError, match="optimizer 'sgd' does not go with parametrization 'muon'"):
        TrainConfig.from_flat({"parametrization": "muon", "optimizer": "sgd"})
    with pytest.raises(ValueError, match="TrainConfig.optim must be a OptimSection"):
        TrainConfig(optim={"lr": 1.0})  # type: ignore[arg-type]


def test_flat_dotted_and_nested_overrides_agree() -> None:
    flat = TrainConfig.from_overrides(None, {"lr": "3e-3", "width": 64, "parametrization": "sp"})
    dotted = TrainConfig.from_overrides(None, {"optim.lr": "3e-3", "model.width": 64,
                                               "parametrization.kind": "sp"})
    nested = TrainConfig.from_overrides(None, {"optim": {"lr": 3e-3}, "model": {"width": 64},
                                               "parametrization": {"kind": "sp"}})
    assert flat == dotted == nested
    assert flat.optim.lr == 3e-3 and flat.model.width == 64 and flat.parametrization.kind == "sp"
    with pytest.raises(ValueError, match=r"unknown config field 'optim.lrr' \(did you mean 'optim.lr'\?\)"):
        TrainConfig.from_overrides(None, {"optim.lrr": 1.0})
    with pytest.raises(ValueError, match="unknown config field 'model.lr'"):
        TrainConfig.from_overrides(None, {"model.lr": 1.0})
    with pytest.raises(ValueError, match="'lr' is given twice"):
        TrainConfig.from_overrides(None, {"lr": 1e-3, "optim.lr": 2e-3})
    with pytest.raises(ValueError, match="'lr' expects float"):
        TrainConfig.from_overrides(None, {"optim.lr": "fast"})
    assert TrainConfig.from_overrides(None, {"out_dir": Path("/tmp/x")}).output.out_dir == "/tmp/x"


def test_replace_and_flat_round_trip() -> None:
    cfg = TrainConfig.from_flat({"parametrization": "muon", "lr": 0.02, "width": 64, "seed": 3,
                                 "schedule": "wsd", "spike_policy": "skip", "out_dir": "runs/x"})
    assert cfg.optim.name == "muon"  # auto resolved against the parametrization
    assert TrainConfig.from_flat(cfg.to_flat()) == cfg
    v = cfg.replace(lr=0.01, **{"run.seed": 4})
    assert (v.optim.lr, v.run.seed, v.model.width, cfg.optim.lr) == (0.01, 4, 64, 0.02)
    assert v.to_flat() == {**cfg.to_flat(), "lr": 0.01, "seed": 4}
    # A new parametrization without an optimizer re-resolves "auto", as --set does.
    assert cfg.replace(parametrization="mup").optim.name == "adamw"
    assert cfg.replace() == cfg


def test_yaml_config_may_be_flat_or_nested(tmp_path) -> None:
    flat, nested = tmp_path / "flat.yaml", tmp_path / "nested.yaml"
    flat.write_text("lr: 0.002\nbatch_size: 4\nschedule: wsd\nparametrization: completep\n")
    nested.write_text("optim:\n  lr: 0.002\nrun:\n  batch_size: 4\nschedule:\n  kind: wsd\n"
                      "parametrization:\n  kind: completep\n")
    a, b = load_config(flat), load_config(nested)
    assert a == b and (a.optim.lr, a.run.batch_size, a.schedule.kind) == (0.002, 4, "wsd")
    assert a.parametrization.kind == "completep"


def test_cli_set_takes_dotted_keys(tmp_path) -> None:
    from mutransfer_cli.train import add_arguments, build_config

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--preset", "gpt-tiny", "--set", "optim.lr=3e-3", "--set", "run.seed=2",
                         "--set", "width=32", "--out", str(tmp_path)])
    cfg = build_config(args)
    assert (cfg.optim.lr, cfg.run.seed, cfg.model.width, cfg.output.out_dir) == (3e-3, 2, 32, str(tmp_path))


def test_fusion_key_is_the_sections_minus_their_per_member_fields() -> None:
    from mutransfer.training.fusion import NON_FUSIBLE_FIELDS, check_fusible, fusion_key

    for sec, cls in SECTIONS.items():
        assert cls.PER_MEMBER <= {f.name for f in dataclasses.fields(cls)}, sec
    # The same fields as the hand-kept list the sections replaced.
    assert set(NON_FUSIBLE_FIELDS) == {
        "preset", "width", "depth", "head_dim", "seq_len", "tie_embeddings", "qk_norm", "logit_softcap",
        "z_loss", "freeze_norm_gains", "source", "head_rule", "parametrization", "optimizer", "steps",
        "batch_size", "grad_accum", "data", "data_dtype", "data_max_bytes", "data_cache", "eval_every",
        "eval_sequences",
        "max_logit_every", "qk_clip", "device", "dtype",
        "compile"}  # one stacked forward per group: compiled for all members or none
    base = TrainConfig.from_flat({"preset": "gpt-tiny", "device": "cpu"})
    for flat in ALIASES:
        sec, name = ALIASES[flat]
        if name in SECTIONS[sec].PER_MEMBER:
            continue
        assert flat in NON_FUSIBLE_FIELDS
    # Per-member fields leave the key alone; a shared one changes it and is named.
    same = base.replace(lr=0.5, seed=7, spike_policy="skip", schedule="wsd", input_mult=2.0, out_dir="o")
    assert fusion_key(same) == fusion_key(base)
    # width=None and the preset's own width are the same shape.
    assert fusion_key(base.replace(width=base.model_config().width)) == fusion_key(base)
    other = base.replace(steps=base.run.steps + 1)
    assert fusion_key(other) != fusion_key(base)
    with pytest.raises(ValueError, match="non-fusible field 'steps'"):
        check_fusible([base, other])
