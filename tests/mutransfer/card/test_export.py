"""Exporters: the engine's own config objects accept the export, and where the engine
computes per-parameter LRs on CPU they equal the card's to 1e-12; bad input exits 2."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from mutransfer.card.apply import apply_card
from mutransfer.card.build import build_card, save_card
from mutransfer.card.engines._common import check_fields
from mutransfer.card.engines.hf import hf_param_groups
from mutransfer.card.engines.megatron import MEGATRON_FIELDS
from mutransfer.card.export import export_card
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer_cli import main

SCHEDULE = {"kind": "wsd", "warmup_steps": 10, "decay_fraction": 0.2, "total_steps": 100,
            "decay_shape": "1-sqrt"}
OPT = {"name": "adamw", "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8}
GPT_CFG = GPTConfig(width=64, depth=2, head_dim=16, seq_len=32, vocab_size=64)


def gpt_card(**kw) -> tuple[Parametrization, dict]:
    pz = Parametrization(lambda w: GPT(GPT_CFG.replace(width=w)), width=128, base_width=32, **kw)
    card = build_card(pz, lr=3e-3, optimizer=OPT, schedule=SCHEDULE,
                      batch={"sequences": 8, "tokens": 256}, target={"width": 128, "depth": 2, "seq_len": 32})
    return pz, card


def with_model(card: dict) -> dict:
    """The card with its target architecture (``target.model``), which Megatron's export needs."""
    model = {**dataclasses.asdict(GPT_CFG.replace(width=128)), "kind": "gpt"}
    return dict(card, target=dict(card["target"], model=model))


def test_hf_training_arguments_accept_it_and_per_parameter_lrs_equal_the_card() -> None:
    tf = pytest.importorskip("transformers", reason="the [engines] extra is not installed")
    from mutransfer.models.hf_tiny import tiny_builder

    builder = tiny_builder("llama")
    pz = Parametrization(builder, width=128, base_width=32)
    card = build_card(pz, lr=3e-3, optimizer=OPT, schedule=SCHEDULE,
                      batch={"sequences": 8, "tokens": 512}, target={"width": 128, "depth": 2})
    export = export_card(card, "hf")
    args = tf.TrainingArguments(output_dir="unused", report_to=[], **export["training_arguments"])
    assert args.lr_scheduler_type == "warmup_stable_decay" and args.max_steps == 100
    model = builder(128)
    apply_card(model, card)
    opt = torch.optim.AdamW(hf_param_groups(model, card))
    # What Trainer.create_scheduler builds from these arguments.
    sched = tf.get_scheduler(args.lr_scheduler_type, opt, num_warmup_steps=args.get_warmup_steps(100),
                             num_training_steps=100, scheduler_specific_kwargs=args.lr_scheduler_kwargs)
    for _ in range(50):  # the stable phase: the schedule's factor is 1
        opt.step()
        sched.step()
    want = {g["name"]: g for g in card["param_groups"]}
    lrs = {n: (g["lr"], g["weight_decay"], g["eps"]) for g in opt.param_groups for n in g["names"]}
    assert set(lrs) == set(want)
    for name, (lr, wd, eps) in lrs.items():
        assert lr == pytest.approx(want[name]["lr"], rel=1e-12, abs=0), name
        assert (wd, eps) == (want[name]["weight_decay"], want[name]["eps"])
    assert len({v[0] for v in lrs.values()}) == 2  # μP: hidden at lr/4, the rest at lr
    # Into the cooldown, HF's 1-sqrt reaches min_lr_ratio = 0 at the end.
    for _ in range(50):
        opt.step()
        sched.step()
    assert all(g["lr"] == 0.0 for g in opt.param_groups)


def test_torchtitan_optimizers_container_gives_the_cards_lrs() -> None:
    pytest.importorskip("torchtitan", reason="torchtitan is not installed")
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
    from torchtitan.components.optimizer.optimizer import OptimizersContainer

    from mutransfer.card.engines.torchtitan import torchtitan_param_groups

    pz, card = gpt_card()
    export = export_card(card, "torchtitan")
    assert export["verified_against"].startswith("torchtitan ")
    model = pz.build(seed=0)
    opts = OptimizersContainer.Config(param_groups=torchtitan_param_groups(export),
                                      implementation="for-loop").build(model_parts=[model])
    LRSchedulersContainer.Config(**export["lr_scheduler"]).build(optimizers=opts, training_steps=100)
    want = {g["name"]: g["lr"] for g in card["param_groups"]}
    ids = {id(p): n for n, p in model.named_parameters()}
    got = {ids[id(p)]: g.get("initial_lr", g["lr"]) for o in opts.optimizers for g in o.param_groups
           for p in g["params"]}
    assert set(got) == set(want)
    for name, lr in got.items():
        assert lr == pytest.approx(want[name], rel=1e-12, abs=0), name


def test_megatron_fields_and_lrs() -> None:
    pz, card = gpt_card()
    card = with_model(card)
    # Megatron's μP init is dropped explicitly; LR, eps and decay go by name (see
    # test_export_megatron).
    with pytest.warns(UserWarning, match="dropped card field"):
        export = export_card(card, "megatron", drop=["init"])
    t, o = export["transformer_config"], export["optimizer_config"]
    assert t["use_mup"] is True and t["mup_base_hidden_size"] == 32 and t["mup_output_mult"] == 0.25
    assert t["softmax_scale"] == pytest.approx(0.25)  # head dim 16 fixed: SP's value
    # The per-name overrides give the card's LRs: μP's lr/m on every hidden matrix.
    import fnmatch

    from mutransfer.card.engines.megatron_groups import megatron_name

    m = t["hidden_size"] / t["mup_base_hidden_size"]
    for g in card["param_groups"]:
        entry = [x["override"] for x in export["config_overrides"]
                 if fnmatch.fnmatch(megatron_name(g["name"]), x["name"])]
        megatron_lr = entry[0].get("max_lr", o["lr"]) if entry else o["lr"]
        assert megatron_lr == pytest.approx(g["lr"], rel=1e-12), g["name"]
        if g["role"] == "hidden":
            assert megatron_lr == pytest.approx(o["lr"] / m, rel=1e-12), g["name"]
    for section, names in MEGATRON_FIELDS.items():
        assert set(export[section]) <= names
    s = export["scheduler_config"]
    got = (s["lr_decay_style"], s["lr_wsd_decay_style"], s["lr_wsd_decay_iters"])
    assert got == ("WSD", "minus_sqrt", 20)
    # A card Megatron's μP cannot express is refused, naming why.
    with pytest.raises(ValueError, match="Megatron's μP covers kind 'mup' with Adam rules"):
        export_card(gpt_card(optimizer="sgd")[1], "megatron")


def test_an_engine_field_the_installed_version_lacks_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"megatron transformer_config field\(s\) \['mup_frobnicate'\] "
                                         r"are not in the installed megatron-core 0.19.2"):
        check_fields("megatron", "transformer_config", {"use_mup": True, "mup_frobnicate": 1},
                     MEGATRON_FIELDS["transformer_config"], "megatron-core 0.19.2")


def test_cli_export_writes_json_and_bad_input_exits_2(tmp_path, capsys) -> None:
    _, card = gpt_card()
    card = with_model(card)
    path = save_card(card, tmp_path / "card.yaml")
    assert main(["export", str(path), "--to", "megatron", "--out", str(tmp_path / "m.json"), "--quiet",
                 "--drop", "init", "--drop", "eps", "--drop", "weight_decay"]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["transformer_config"]["use_mup"] is True
    assert main(["export", str(path), "--to", "deepspeed", "--out", str(tmp_path / "x.json")]) == 2
    assert "unknown engine 'deepspeed'" in capsys.readouterr().err
    # A card for another model: names (and shapes) must match.
    bad = dict(card, param_groups=[dict(g, shape=[3, 3]) if g["name"] == "wte.weight" else g
                                   for g in card["param_groups"]])
    with pytest.raises(ValueError, match=r"wte.weight has shape \[64, 128\], the card says \[3, 3\]"):
        export_card(dict(bad, target={k: v for k, v in card["target"].items() if k != "model"}), "megatron",
                    model=GPT(GPT_CFG.replace(width=128)))
    # With target.model the validator builds it (meta device) and refuses the shape first.
    with pytest.raises(ValueError, match=r"param_groups\[0\] \(wte.weight\).shape.*\[64, 128\].*\[3, 3\]"):
        export_card(bad, "megatron", model=GPT(GPT_CFG.replace(width=128)))
    tf = pytest.importorskip("transformers")
    cfg = tmp_path / "hf"
    from mutransfer.models.hf_tiny import tiny_config

    tiny_config("llama", 128).save_pretrained(cfg)
    assert main(["export", str(path), "--to", "hf", "--hf-config", str(cfg), "--out",
                 str(tmp_path / "h.json")]) == 2
    assert "the card does not match the model" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "h.json").exists()
    assert tf is not None
