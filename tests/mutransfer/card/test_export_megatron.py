"""The Megatron export: the whole architecture, the μP fields, CompleteP, what is refused
and what ``drop`` records; and, where ``MUTRANSFER_MEGATRON_PYTHON`` names a Python 3.12
with megatron-core 0.19.2 (``bash .ci/megatron_env.sh``), megatron-core's own config
classes and optimizer grouping built from the export give the card's values."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from mutransfer.card.build import build_card, save_card
from mutransfer.card.engines.megatron import MEGATRON_FIELDS
from mutransfer.card.export import export_card
from mutransfer.card.target import TargetModel
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.parametrize.specs import Multipliers
from mutransfer_cli import main

SCHEDULE = {"kind": "wsd", "warmup_steps": 10, "decay_fraction": 0.2, "total_steps": 100,
            "decay_shape": "1-sqrt", "lr_floor": 0.1}
OPT = {"name": "adamw", "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8}
GPT_CFG = GPTConfig(width=64, depth=2, head_dim=16, seq_len=32, vocab_size=64)
# Megatron's μP init: the one card field it cannot take (LR, eps and weight decay go per
# parameter name into config_overrides)
MUP_DROPS = ["init"]
ORACLE = Path(__file__).with_name("megatron_oracle.py")


def card_for(kind: str = "mup", depth: int = 2, base_depth: int = 2, alpha: float = 1.0,
             fields: dict | None = None, **kw) -> dict:
    base = GPT_CFG.replace(**(fields or {}))
    cfg = base.replace(width=128, depth=depth)
    if kind == "completep":
        pz = Parametrization(lambda w, d: GPT(base.replace(width=w, depth=d)), width=128, base_width=32,
                             depth=depth, base_depth=base_depth, depth_alpha=alpha, kind=kind, **kw)
    else:
        pz = Parametrization(lambda w: GPT(base.replace(width=w, depth=depth)), width=128, base_width=32,
                             kind=kind, **kw)
    # The card's target.model as `mutransfer transfer` writes it.
    target = {"model": TargetModel("gpt", cfg, "gpt-tiny").to_dict(), "width": 128, "depth": depth,
              "dp_size": 2}
    return build_card(pz, lr=3e-3, optimizer=OPT, schedule=SCHEDULE,
                      batch={"sequences": 8, "tokens": 256, "dp_size": 2}, target=target)


def megatron_values(export: dict, card: dict) -> dict[str, dict[str, float]]:
    """What megatron-core's ``_get_param_groups`` gives each card parameter from the export
    (``get_standard_config_overrides`` + the export's ``config_overrides``, merged as megatron-core
    merges them: fnmatch on the Megatron name, a conflicting value an error), by card name."""
    import fnmatch

    from mutransfer.card.engines.megatron_groups import megatron_name

    oc = export["optimizer_config"]
    out = {}
    for g in card["param_groups"]:
        name = megatron_name(g["name"])
        assert name is not None, g["name"]
        merged: dict[str, float] = {}
        if len(g["shape"]) == 1 or name.endswith(".bias"):  # the standard override
            merged["wd_mult"] = 0.0
        for o in export["config_overrides"]:
            if fnmatch.fnmatch(name, o["name"]):
                for k, v in o["override"].items():
                    assert merged.get(k, v) == v, f"conflicting {k} on {name}"
                    merged[k] = v
        out[g["name"]] = {"max_lr": merged.get("max_lr", oc["lr"]),
                          "min_lr": merged.get("min_lr", oc["min_lr"]),
                          "eps": merged.get("eps", oc["adam_eps"]),
                          "weight_decay": oc["weight_decay"] * merged.get("wd_mult", 1.0)}
    return out


def assert_cards_values(export: dict, card: dict, folds: dict[str, float] | None = None) -> None:
    """Every parameter gets the card's LR, min LR, eps and weight decay from Megatron's
    grouping, a folded one (card name -> s) LR·s, eps/s and λ/s."""
    got, floor = megatron_values(export, card), card["schedule"]["lr_floor"]
    for g in card["param_groups"]:
        s = (folds or {}).get(g["name"], 1.0)
        mg = got[g["name"]]
        assert mg["max_lr"] == pytest.approx(g["lr"] * s, rel=1e-12), g["name"]
        assert mg["min_lr"] == pytest.approx(g["lr"] * s * floor, rel=1e-12), g["name"]
        assert mg["eps"] == pytest.approx(g["eps"] / s, rel=1e-12), g["name"]
        assert mg["weight_decay"] == pytest.approx(g["weight_decay"] / s, rel=1e-12, abs=1e-300), g["name"]


def llama_shaped() -> dict:
    """The card of a SwiGLU, grouped-query target (the Llama-shaped GPT fields), its param
    groups built from that model (the validator checks their shapes against it)."""
    return card_for(fields={"mlp": "swiglu", "q_per_kv": 2, "mlp_ratio": 2.6875, "norm_eps": 1e-5,
                            "rope_theta": 500000.0})


def test_the_whole_architecture_is_exported() -> None:
    with pytest.warns(UserWarning, match="dropped card field init"):
        e = export_card(card_for(), "megatron", drop=MUP_DROPS)
    t, g = e["transformer_config"], e["gpt_model"]
    heads = (t["num_layers"], t["hidden_size"], t["num_attention_heads"], t["num_query_groups"])
    assert heads == (2, 128, 8, 8)
    assert (t["kv_channels"], t["ffn_hidden_size"], t["gated_linear_unit"]) == (16, 512, False)
    assert (t["normalization"], t["layernorm_epsilon"], t["add_bias_linear"]) == ("RMSNorm", 1e-6, False)
    assert t["hidden_dropout"] == t["attention_dropout"] == 0.0 and e["transformer_config_callables"] == {}
    assert g == {"vocab_size": 64, "max_sequence_length": 32, "share_embeddings_and_output_weights": False,
                 "position_embedding_type": "rope", "rotary_base": 10000.0, "rotary_percent": 1.0}
    assert e["training_config"] == {"global_batch_size": 8, "micro_batch_size": 4, "train_iters": 100}
    o = e["optimizer_config"]
    assert (o["lr"], o["min_lr"]) == (3e-3, pytest.approx(3e-4, rel=1e-12))
    assert {d["field"] for d in e["dropped"]} == {"init"}
    assert_cards_values(e, card_for())  # μP's hidden LR/m, the card's eps, per-group decay
    # Megatron's head init is mup's constant readout; the card's default fan_in head is sqrt(m) larger
    init = next(d["why"] for d in e["dropped"] if d["field"] == "init")
    assert "Megatron's untied head is readout_init constant, the card's is fan_in: its head init std is 2x" in init
    for section, names in MEGATRON_FIELDS.items():
        assert set(e[section]) <= names, section
    with pytest.warns(UserWarning):
        ll = export_card(llama_shaped(), "megatron", drop=MUP_DROPS)
    t = ll["transformer_config"]
    assert (t["num_query_groups"], t["ffn_hidden_size"], t["gated_linear_unit"], t["layernorm_epsilon"]) == (
        4, 344, True, 1e-5)
    assert ll["transformer_config_callables"] == {"activation_func": "torch.nn.functional.silu"}
    assert ll["gpt_model"]["rotary_base"] == 500000.0


def test_an_output_multiplier_of_exactly_one_survives_megatrons_auto_default() -> None:
    # output multiplier 4 at m = 4: the readout's forward multiplier is 4/4 = 1.0, which
    # Megatron would silently replace by 1/m.
    with pytest.warns(UserWarning):
        e = export_card(card_for(multipliers=Multipliers(output=4.0)), "megatron", drop=MUP_DROPS)
    mult = e["transformer_config"]["mup_output_mult"]
    assert mult != 1.0 and mult == math.nextafter(1.0, 2.0)
    assert any("replaces exactly 1.0 by 1/m" in n for n in e["notes"])
    with pytest.warns(UserWarning):
        plain = export_card(card_for(), "megatron", drop=MUP_DROPS)
    assert plain["transformer_config"]["mup_output_mult"] == 0.25


def test_completep_folds_the_residual_multiplier_into_the_output_projections() -> None:
    card = card_for("completep", depth=8, base_depth=2, alpha=1.0)
    with pytest.raises(ValueError, match=r"cannot carry card field init: .*pass --drop init"):
        export_card(card, "megatron")
    with pytest.warns(UserWarning, match="dropped card field init") as caught:
        e = export_card(card, "megatron", drop=MUP_DROPS)
    assert not any("residual_multiplier" in str(w.message) for w in caught)
    assert e["transformer_config"]["num_layers"] == 8 and {d["field"] for d in e["dropped"]} == {"init"}
    # (8/2)^-1 = 1/4 on every attention and MLP branch: folded into c_proj (attn and mlp)
    folds = {g["name"]: 0.25 for g in card["param_groups"] if ".c_proj." in g["name"]}
    assert len(folds) == 16
    assert_cards_values(e, card, folds)
    proj = next(o for o in e["config_overrides"] if o["name"] == "*.self_attention.linear_proj.weight")
    assert proj["override"]["max_lr"] == pytest.approx(0.00075 * 0.25, rel=1e-12)  # LR x s
    eps = proj["override"].get("eps", e["optimizer_config"]["adam_eps"])
    assert eps == pytest.approx(6.25e-10 / 0.25, rel=1e-12)  # eps / s (here the vectors' eps: no entry)
    assert megatron_values(e, card)["blocks.3.mlp.c_proj.weight"]["weight_decay"] == pytest.approx(0.4 / 0.25)
    init = next(d["why"] for d in e["dropped"] if d["field"] == "init")
    assert "output projections' init by x0.25" in init
    assert any(n.startswith("residual multiplier folded (CompleteP's x0.25 on 16") for n in e["notes"])
    # the old command's --drop residual_multiplier no longer takes the multiplier away: it is carried
    with pytest.warns(UserWarning):
        again = export_card(card, "megatron", drop=[*MUP_DROPS, "residual_multiplier"])
    assert again["config_overrides"] == e["config_overrides"]
    assert {d["field"] for d in again["dropped"]} == {"init"}
    assert any(n.startswith("--drop residual_multiplier: nothing dropped") for n in again["notes"])
    # alpha = 1/2: blocks' norms train at lr x (8/2)^-1/2, the final norm at lr: two names, two groups
    half = card_for("completep", depth=8, base_depth=2, alpha=0.5)
    with pytest.warns(UserWarning):
        e = export_card(half, "megatron", drop=MUP_DROPS)
    assert_cards_values(e, half, {g["name"]: 0.5 for g in half["param_groups"] if ".c_proj." in g["name"]})
    got = megatron_values(e, half)
    assert got["ln_f.weight"]["max_lr"] == pytest.approx(3e-3) and got["blocks.0.ln_1.weight"]["max_lr"] == (
        pytest.approx(1.5e-3))


def test_a_residual_hook_with_nothing_to_fold_into_is_refused_by_name() -> None:
    card = card_for("completep", depth=8, base_depth=2, alpha=1.0)
    hooks = [dict(h, module=h["module"].replace(".attn", ".attnx"))
             for h in card["forward_multipliers"]["hooks"]]
    odd = dict(card, forward_multipliers=dict(card["forward_multipliers"], hooks=hooks))
    for drop in (MUP_DROPS, [*MUP_DROPS, "residual_multiplier"]):  # refused, and not droppable
        with pytest.raises(ValueError, match=r"residual_multiplier: x0.25 on blocks.0.attnx: no output "
                                             r"projection .*; it is not droppable"):
            export_card(odd, "megatron", drop=drop, validated=True)


def test_per_group_weight_decay_is_carried_and_explained() -> None:
    card = card_for()  # coupled per-group decay: hidden matrices at λ·m (m = 4), the rest at λ
    assert all(g["weight_decay"] == pytest.approx(0.4) for g in card["param_groups"] if g["role"] == "hidden")
    with pytest.warns(UserWarning):
        e = export_card(card, "megatron", drop=["init"])
    got = megatron_values(e, card)
    # the embedding and head keep the card's λ, not the hidden matrices' 4x
    assert got["wte.weight"]["weight_decay"] == pytest.approx(0.1)
    assert got["lm_head.weight"]["weight_decay"] == pytest.approx(0.1)
    assert got["blocks.0.attn.c_q.weight"]["weight_decay"] == pytest.approx(0.4)
    note = next(n for n in e["notes"] if n.startswith("weight decay:"))
    # η·λ per step beside λ: 0.4 x 7.5e-4 = 3e-4 for the hidden matrices
    assert "λ 0.4 at lr 0.00075, η·λ 0.0003 per step" in note
    assert "λ 0.1 at lr 0.003, η·λ 0.0003 per step" in note
    # a card without weight decay: the README's --drop weight_decay is a note, not a refusal
    bare = build_card(Parametrization(lambda w: GPT(GPT_CFG.replace(width=w)), width=128, base_width=32),
                      lr=3e-3, optimizer=dict(OPT, weight_decay=0.0), schedule=SCHEDULE,
                      batch={"sequences": 8, "tokens": 256, "dp_size": 2},
                      target={"model": TargetModel("gpt", GPT_CFG.replace(width=128), "gpt-tiny").to_dict(),
                              "width": 128, "depth": 2, "dp_size": 2})
    with pytest.warns(UserWarning):
        e = export_card(bare, "megatron", drop=["init", "eps", "weight_decay"])
    assert e["optimizer_config"]["weight_decay"] == 0.0 and {d["field"] for d in e["dropped"]} == {"init"}
    want = "--drop weight_decay: nothing dropped, the megatron export carries this card's weight_decay"
    assert want in e["notes"]


def test_bad_input_names_the_field(tmp_path, capsys) -> None:
    card = card_for()
    odd = dict(card, target=dict(card["target"], model=dict(card["target"]["model"], frobnicate=3)))
    # an unknown model field: the card validator names it before any engine sees it
    with pytest.raises(ValueError, match=r"card field target.model.frobnicate: is not a GPTConfig field"):
        export_card(odd, "megatron", drop=MUP_DROPS)
    capped = dict(card, target=dict(card["target"], model=dict(card["target"]["model"], logit_softcap=30.0)))
    with pytest.raises(ValueError, match=r"target.model.logit_softcap: 30.0: only None"):
        export_card(capped, "megatron", drop=MUP_DROPS)
    with pytest.raises(ValueError, match="--drop frobnicate: the megatron export carries that field"):
        export_card(card, "megatron", drop=[*MUP_DROPS, "frobnicate"])
    with pytest.raises(ValueError, match="card field target.model: missing"):
        export_card(dict(card, target={"width": 128}), "megatron", drop=MUP_DROPS)
    path = save_card(card, tmp_path / "card.yaml")
    out = tmp_path / "m.json"
    assert main(["export", str(path), "--to", "megatron", "--out", str(out)]) == 2
    assert "--drop init" in capsys.readouterr().err and not out.exists()
    assert main(["export", str(path), "--to", "megatron", "--out", str(out), "--drop", "init",
                 "--drop", "eps", "--drop", "weight_decay", "--quiet", "--micro-batch", "2"]) == 0
    assert "warning: megatron export: dropped card field init" in capsys.readouterr().err
    e = json.loads(out.read_text())
    assert {d["field"] for d in e["dropped"]} == {"init"}
    assert sum(n.startswith("--drop ") and "nothing dropped" in n for n in e["notes"]) == 2
    assert e["training_config"] == {"global_batch_size": 8, "micro_batch_size": 2, "train_iters": 100}


# ---- megatron-core itself ----------------------------------------------------------------

MEGATRON_PYTHON = os.environ.get("MUTRANSFER_MEGATRON_PYTHON")
needs_megatron = pytest.mark.skipif(
    not MEGATRON_PYTHON, reason="MUTRANSFER_MEGATRON_PYTHON is unset (a Python 3.12 with megatron-core "
                                "0.19.2: bash .ci/megatron_env.sh builds one)")


HF_LLAMA = {"model_type": "llama", "vocab_size": 96, "hidden_size": 256, "intermediate_size": 688,
            "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 16,
            "tie_word_embeddings": False, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0}


def hf_llama_card(tmp: Path | None = None) -> dict:
    """A card whose target is a local HF Llama config (``transfer --model hf:PATH``): its own
    parameter names, GQA 16/4 (4/1 at the base width 64), head dim 16, rotate-half RoPE."""
    import tempfile

    pytest.importorskip("transformers")
    from mutransfer.card.target import hf_transfer_builder, resolve_hf_target

    folder = Path(tmp or tempfile.mkdtemp())
    (folder / "config.json").write_text(json.dumps(HF_LLAMA))
    target = resolve_hf_target(f"hf:{folder / 'config.json'}")
    pz = Parametrization(hf_transfer_builder(target), width=256, base_width=64)
    return build_card(pz, lr=3e-3, optimizer=OPT, schedule=SCHEDULE,
                      batch={"sequences": 8, "tokens": 256, "seq_len": 32, "dp_size": 2},
                      target={"model": target.to_dict(), "width": 256, "depth": 2, "dp_size": 2})


def test_an_hf_llama_target_maps_onto_megatrons_fields(tmp_path) -> None:
    card = hf_llama_card(tmp_path)
    with pytest.warns(UserWarning):
        e = export_card(card, "megatron", drop=MUP_DROPS)
    assert_cards_values(e, card)  # HF names map onto GPTModel's (q/k/v -> linear_qkv, ...)
    t, g = e["transformer_config"], e["gpt_model"]
    assert (t["num_layers"], t["hidden_size"], t["num_attention_heads"]) == (2, 256, 16)
    assert t["num_query_groups"] == 4  # GQA 16/4
    assert (t["kv_channels"], t["ffn_hidden_size"], t["gated_linear_unit"]) == (16, 688, True)
    assert t["rotary_interleaved"] is False and t["layernorm_epsilon"] == 1e-5  # HF's rotate-half RoPE
    assert (g["vocab_size"], g["max_sequence_length"], g["rotary_base"]) == (96, 32, 500000.0)
    assert g["share_embeddings_and_output_weights"] is False
    assert e["transformer_config_callables"] == {"activation_func": "torch.nn.functional.silu"}
    rope = dict(HF_LLAMA, rope_scaling={"rope_type": "linear", "factor": 8.0})
    (tmp_path / "config.json").write_text(json.dumps(rope))
    with pytest.raises(ValueError, match=r"target.model.config.rope_parameters"):
        from mutransfer.card.target import hf_transfer_builder, resolve_hf_target

        target = resolve_hf_target(f"hf:{tmp_path / 'config.json'}")
        pz = Parametrization(hf_transfer_builder(target), width=256, base_width=64)
        card = build_card(pz, lr=3e-3, optimizer=OPT, schedule=SCHEDULE,
                          batch={"sequences": 8, "tokens": 256, "dp_size": 2},
                          target={"model": target.to_dict(), "width": 256, "depth": 2, "dp_size": 2})
        export_card(card, "megatron", drop=MUP_DROPS)


#: Llama 3's RoPE scaling as Llama-3.2 configs carry it.
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}


def hf_llama_rope_card() -> dict:
    """:func:`hf_llama_card` with Llama-3.2's rope scaling (factor 32)."""
    import tempfile

    folder = Path(tempfile.mkdtemp())
    (folder / "config.json").write_text(json.dumps(dict(HF_LLAMA, rope_scaling=LLAMA3_ROPE,
                                                        max_position_embeddings=131072)))
    from mutransfer.card.target import hf_transfer_builder, resolve_hf_target

    target = resolve_hf_target(f"hf:{folder / 'config.json'}")
    pz = Parametrization(hf_transfer_builder(target), width=256, base_width=64)
    return build_card(pz, lr=3e-3, optimizer=OPT, schedule=SCHEDULE,
                      batch={"sequences": 8, "tokens": 256, "seq_len": 32, "dp_size": 2},
                      target={"model": target.to_dict(), "width": 256, "depth": 2, "dp_size": 2})


def test_llama3_rope_scaling_maps_onto_gpt_models_arguments() -> None:
    with pytest.warns(UserWarning):
        e = export_card(hf_llama_rope_card(), "megatron", drop=MUP_DROPS)
    g = e["gpt_model"]
    assert (g["rope_scaling"], g["rope_scaling_factor"], g["rotary_base"]) == (True, 32.0, 500000.0)
    # what megatron-core builds from them: tests/mutransfer/card/test_hf_apply.py (its formula, on
    # any machine) and test_megatron_core_builds_the_export_and_gives_the_cards_values (the
    # real RotaryEmbedding, where megatron-core is installed)


CASES = {
    "hf-llama": (hf_llama_card, MUP_DROPS),
    "hf-llama-rope-scaled": (hf_llama_rope_card, MUP_DROPS),
    "mup": (lambda: card_for(), MUP_DROPS),
    "mup-output-mult-1": (lambda: card_for(multipliers=Multipliers(output=4.0)), MUP_DROPS),
    "llama-shaped": (lambda: llama_shaped(), MUP_DROPS),
    "completep": (lambda: card_for("completep", depth=8, base_depth=2, alpha=1.0), MUP_DROPS),
}


@pytest.fixture(scope="module")
def megatron_built(tmp_path_factory) -> dict[str, tuple[dict, dict, dict]]:
    """case -> (card, export, what megatron-core built from it): one oracle process."""
    tmp = tmp_path_factory.mktemp("megatron")
    cards, exports = {}, {}
    for case, (make, drop) in CASES.items():
        cards[case] = make()
        with pytest.warns(UserWarning):
            exports[case] = export_card(cards[case], "megatron", drop=drop)
    from mutransfer.card.engines.megatron_groups import megatron_name

    payload = [{"export": exports[c], "groups": [{**{k: g[k] for k in ("name", "shape", "role")},
                                                  "megatron_name": megatron_name(g["name"])}
                                                 for g in cards[c]["param_groups"]]} for c in CASES]
    (tmp / "cases.json").write_text(json.dumps(payload))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([str(MEGATRON_PYTHON), str(ORACLE), str(tmp / "cases.json"), str(tmp / "out.json")],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    assert run.returncode == 0, run.stderr[-3000:]
    built = json.loads((tmp / "out.json").read_text())
    return {c: (cards[c], exports[c], b) for c, b in zip(CASES, built, strict=True)}


@needs_megatron
@pytest.mark.parametrize("case", list(CASES))
def test_megatron_core_builds_the_export_and_gives_the_cards_values(case: str, megatron_built) -> None:
    card, export, got = megatron_built[case]
    assert got["version"] == "0.19.2"
    # Every field constructs and keeps the exported value (post-init defaults included:
    # mup_output_mult 1.0 would have become 1/m).
    for section in ("transformer_config", "optimizer_config", "scheduler_config", "training_config",
                    "tokenizer_config"):
        assert got[section] == export[section], section
    assert got["gpt_model_args_missing"] == []
    for section, names in MEGATRON_FIELDS.items():  # the recorded names are the real ones
        if section != "transformer_config_callables":
            assert names <= set(got["fields"][section]), section
    assert "activation_func" in got["fields"]["transformer_config"]
    want_act = export["transformer_config_callables"].get("activation_func", "torch.nn.functional.gelu")
    assert got["activation_func"] == want_act
    assert got["mup_width_mult"] == 4.0
    model = card["target"].get("model", {})
    if model.get("kind") == "hf":  # RoPE: megatron-core's frequencies are HF's for the same config
        import transformers

        hf_cfg = transformers.AutoConfig.for_model(**model["config"])
        hf = transformers.AutoModelForCausalLM.from_config(hf_cfg)
        hf_inv = hf.model.rotary_emb.inv_freq
        assert got["rope_inv_freq"] == pytest.approx(hf_inv.tolist(), rel=1e-6), case
    # Megatron's own optimizer grouping (standard overrides + the export's per-name ones)
    # gives each parameter the card's LR, min LR, eps and weight decay, the residual
    # branches' output projections the folded ones; the in-process reading agrees.
    folds = {}
    if card["parametrization"]["kind"] == "completep":
        folds = {g["name"]: 0.25 for g in card["param_groups"] if ".c_proj." in g["name"]}
    floor = card["schedule"]["lr_floor"]
    ours = megatron_values(export, card)
    for g in card["param_groups"]:
        mg, f = got["per_param"][g["name"]], folds.get(g["name"], 1.0)
        assert mg == pytest.approx(ours[g["name"]], rel=1e-12), g["name"]
        assert mg["max_lr"] == pytest.approx(g["lr"] * f, rel=1e-12), g["name"]
        assert mg["min_lr"] == pytest.approx(g["lr"] * f * floor, rel=1e-12), g["name"]
        assert mg["eps"] == pytest.approx(g["eps"] / f, rel=1e-12), g["name"]
        assert mg["weight_decay"] == pytest.approx(g["weight_decay"] / f, rel=1e-12, abs=1e-300), g["name"]


def test_megatron_env_prints_an_absolute_venvs_interpreter_as_is(tmp_path) -> None:
    """``MUTRANSFER_MEGATRON_PYTHON=$(bash .ci/megatron_env.sh | tail -1)`` with an absolute
    ``MEGATRON_VENV``: the path printed is that venv's python, not ``<repo>//abs/...`` (an
    installed venv, its stamp newer than the script: nothing is installed)."""

    script = Path(__file__).resolve().parents[3] / ".ci" / "megatron_env.sh"
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".megatron-installed").touch()
    os.utime(venv / ".megatron-installed", (script.stat().st_mtime + 10,) * 2)
    run = subprocess.run(["bash", str(script)], env={**os.environ, "MEGATRON_VENV": str(venv)},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == f"{venv}/bin/python"
