"""Applying and exporting a card for a real HF model family: forward-multiplier hooks on
modules that return tuples and ModelOutputs (HF attention returns ``(out, weights)``),
the weights' dtype said out loud (float32 master weights unless asked), torchtitan
refusing at export what its llama3 cannot build, and Megatron's mapping of Llama 3's
rope scaling checked against HF's own frequencies."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from mutransfer.parametrize.layers import scale_first, scale_output

tf = pytest.importorskip("transformers", reason="the [engines] extra is not installed")

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


# ---- hooks on any output -------------------------------------------------------------------


class Pair(typing.NamedTuple):
    out: torch.Tensor
    aux: torch.Tensor


@dataclasses.dataclass
class Plain:
    aux: object
    hidden: torch.Tensor
    other: torch.Tensor


def test_scale_first_scales_the_main_tensor_of_every_output_form_and_nothing_else() -> None:
    x, w = torch.randn(2, 3), torch.rand(2, 3)
    torch.testing.assert_close(scale_first(x, 0.5), x * 0.5)
    out = scale_first((x, w), 0.5)
    assert isinstance(out, tuple) and out[1] is w  # attention weights untouched
    torch.testing.assert_close(out[0], x * 0.5)
    pair = scale_first(Pair(x, w), 0.25)
    assert type(pair) is Pair and pair.aux is w
    torch.testing.assert_close(pair.out, x * 0.25)
    lst = scale_first([x, w], 2.0)
    assert isinstance(lst, list) and lst[1] is w
    plain = scale_first(Plain("tag", x, w), 3.0)
    assert plain.aux == "tag" and plain.other is w
    torch.testing.assert_close(plain.hidden, x * 3.0)
    from transformers.modeling_outputs import BaseModelOutputWithPast

    mo = scale_first(BaseModelOutputWithPast(last_hidden_state=x, hidden_states=(w,)), 0.5)
    assert type(mo) is BaseModelOutputWithPast and mo.hidden_states[0] is w
    torch.testing.assert_close(mo.last_hidden_state, x * 0.5)
    torch.testing.assert_close(mo[0], x * 0.5)  # its tuple view agrees
    with pytest.raises(TypeError, match=r"cannot scale the output of Identity: it returned str"):
        scale_output(2.0)(nn.Identity(), (x,), "logits")


def test_a_post_hook_on_hf_attention_scales_its_output_and_the_model_runs() -> None:
    """The CompleteP residual multiplier on ``LlamaAttention``, which returns a tuple
    (before: ``TypeError: can't multiply sequence by non-int of type 'float'`` on the first
    forward): the branch output is exactly ×scale, its attention weights untouched."""
    cfg = tf.AutoConfig.for_model("llama", vocab_size=32, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                  head_dim=8)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    attn = model.model.layers[0].self_attn
    h = torch.randn(1, 5, 32)
    pos = model.model.rotary_emb(h, torch.arange(5)[None])
    with torch.no_grad():
        plain = attn(h, position_embeddings=pos, attention_mask=None)
        attn.register_forward_hook(scale_output(0.125))
        hooked = attn(h, position_embeddings=pos, attention_mask=None)
        logits = model(torch.randint(0, 32, (1, 5))).logits
    assert isinstance(plain, tuple) and isinstance(hooked, tuple) and len(hooked) == len(plain)
    torch.testing.assert_close(hooked[0], plain[0] * 0.125)
    assert torch.isfinite(logits).all()


# ---- the weights' dtype ---------------------------------------------------------------------


def _tiny_card(tmp_path: Path, config: dict, *extra: str, base_width: int = 64) -> dict:
    from mutransfer.card.build import load_card
    from mutransfer_cli import main

    (tmp_path / "config.json").write_text(json.dumps(config))
    out = tmp_path / "card.yaml"
    # a bare --lr names no proxy rows: the preset's byte vocabulary against the config's
    code = main(["transfer", "--model", f"hf:{tmp_path / 'config.json'}", "--lr", "0.01", "--tokens", "1280",
                 "--batch-size", "8", "--seq-len", "16", "--target-seq-len", "16", "--base-width", str(base_width), "--base-depth", "1",
                 "--allow-vocab-change", "--weight-decay", "0.1", "--out", str(out), *extra])
    assert code == 0
    return load_card(out)


TINY_LLAMA = {"model_type": "llama", "vocab_size": 64, "hidden_size": 128, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
              "tie_word_embeddings": True, "max_position_embeddings": 64, "rope_theta": 500000.0,
              "torch_dtype": "bfloat16"}


def test_the_card_builds_float32_master_weights_unless_asked_and_says_so(tmp_path, capsys) -> None:
    from mutransfer.card.target import build_target_model

    card = _tiny_card(tmp_path, TINY_LLAMA)
    err = capsys.readouterr().err
    assert "torch_dtype is bfloat16; the card builds float32 weights (mixed precision" in err
    assert card["target"]["dtype"] == "float32" and "master weights" in card["target"]["precision"]
    with pytest.warns(UserWarning, match=r"config says dtype bfloat16; building float32 weights"):
        model = build_target_model(card)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    model = build_target_model(card, dtype=torch.bfloat16)  # asked: pure bf16, and no warning
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with pytest.raises(ValueError, match=r"weights dtype 'int8': choose from float32, bfloat16"):
        build_target_model(card, dtype="int8")
    pure = _tiny_card(tmp_path, TINY_LLAMA, "--weights-dtype", "bfloat16")
    assert pure["target"]["dtype"] == "bfloat16" and "pure bf16" in pure["target"]["precision"]
    assert {p.dtype for p in build_target_model(pure).parameters()} == {torch.bfloat16}
    from mutransfer.card.export import export_card

    assert export_card(card, "hf")["dtype"] == "float32"
    assert export_card(card, "torchtitan")["training"]["dtype"] == "float32"
    assert export_card(pure, "torchtitan")["training"]["dtype"] == "bfloat16"
    mg = ["init", "eps", "weight_decay", "residual_multiplier"]
    with pytest.warns(UserWarning):
        assert any("weights float32" in n for n in export_card(card, "megatron", drop=mg)["notes"])
        with pytest.raises(ValueError, match=r"megatron export cannot carry card field target.dtype: 'bf"):
            export_card(pure, "megatron", drop=mg)
        dropped = export_card(pure, "megatron", drop=[*mg, "target.dtype"])["dropped"]
        assert dropped[-1]["field"] == "target.dtype"


def test_an_hf_proxy_trains_in_float32_whatever_its_config_says(tmp_path) -> None:
    from mutransfer.models.source import build_model, parse_model

    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    model = build_model(parse_model(f"hf:{tmp_path / 'config.json'}"), 64, 1)
    assert {p.dtype for p in model.parameters()} == {torch.float32}


# ---- torchtitan: refused at export, by field -------------------------------------------------


TINY_QWEN = {"model_type": "qwen2", "vocab_size": 64, "hidden_size": 224, "intermediate_size": 1216,
             "num_hidden_layers": 2, "num_attention_heads": 14, "num_key_value_heads": 2, "head_dim": 16,
             "tie_word_embeddings": True, "max_position_embeddings": 64, "rope_theta": 1000000.0}


def test_torchtitan_refuses_qwens_qkv_biases_at_export_naming_the_field(tmp_path, capsys) -> None:
    from mutransfer.card.engines.torchtitan import llama3_architecture
    from mutransfer.card.export import export_card
    from mutransfer_cli import main

    card = _tiny_card(tmp_path, TINY_QWEN, base_width=112)
    with pytest.raises(ValueError, match=r"torchtitan export cannot carry card field "
                                         r"target.model.model_type: "
                                         r"Qwen2's q/k/v biases \(6 parameters, e\.g\. model\.layers\.0\."
                                         r"self_attn\.k_proj\.bias\)"):
        export_card(card, "torchtitan")
    out = tmp_path / "tt.json"
    capsys.readouterr()
    assert main(["export", str(tmp_path / "card.yaml"), "--to", "torchtitan", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "q/k/v biases" in err and len(err.splitlines()) == 1 and not out.exists()
    # every problem at once: a GELU MLP and a linear RoPE scaling on top
    odd = dict(TINY_QWEN, hidden_act="gelu", rope_scaling={"rope_type": "linear", "factor": 4.0})
    card = _tiny_card(tmp_path, odd, base_width=112)
    with pytest.raises(ValueError, match=r"it cannot carry target.model.config.hidden_act, "
                                         r"target.model.config.rope_parameters.rope_type either"):
        llama3_architecture(card)
    # Llama 3's own scaling maps onto torchtitan's ComplexRoPE fields
    card = _tiny_card(tmp_path, dict(TINY_LLAMA, rope_scaling=LLAMA3_ROPE))
    arch = export_card(card, "torchtitan")["model"]
    assert arch["rope"] == {"theta": 500000.0, "scaling": "llama", "scaling_factor": 32.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}
    heads = (arch["n_heads"], arch["n_kv_heads"], arch["head_dim"], arch["enable_weight_tying"])
    assert heads == (8, 2, 16, True)


# ---- Megatron: Llama 3's rope scaling ------------------------------------------------------


def megatron_llama3_inv_freq(kv_channels: int, base: float, factor: float) -> torch.Tensor:
    """megatron-core's ``RotaryEmbedding`` inv_freq with ``rope_scaling=True`` (its
    ``_apply_scaling``, read from megatron-core's source: low 1, high 4, context 8192 fixed),
    written out here so the mapping is checked where megatron-core is not installed."""
    freqs = 1.0 / (base ** (torch.arange(0, kv_channels, 2, dtype=torch.float32) / kv_channels))
    low, high, old = 1, 4, 8192
    wavelen = 2 * math.pi / freqs
    scaled = torch.where(wavelen > old / low, freqs / factor, freqs)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) * ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def _megatron_export(tmp_path: Path, config: dict, base_width: int = 64) -> dict:
    from mutransfer.card.export import export_card

    card = _tiny_card(tmp_path, config, base_width=base_width)
    with pytest.warns(UserWarning):
        return export_card(card, "megatron", drop=["init", "eps", "weight_decay", "residual_multiplier"])


def test_megatron_maps_llama3_rope_scaling_onto_gpt_model_and_gives_hfs_frequencies(tmp_path) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from mutransfer.card.engines.megatron import MEGATRON_FIELDS

    config = dict(TINY_LLAMA, rope_scaling=LLAMA3_ROPE, max_position_embeddings=131072)
    e = _megatron_export(tmp_path, config)
    g, t = e["gpt_model"], e["transformer_config"]
    assert (g["rope_scaling"], g["rope_scaling_factor"], g["rotary_base"]) == (True, 32.0, 500000.0)
    assert {"rope_scaling", "rope_scaling_factor"} <= MEGATRON_FIELDS["gpt_model"]
    assert any("rope_scaling=True, rope_scaling_factor=32" in n for n in e["notes"])
    hf_inv, _ = ROPE_INIT_FUNCTIONS["llama3"](tf.AutoConfig.for_model(**config), "cpu")
    mg_inv = megatron_llama3_inv_freq(t["kv_channels"], g["rotary_base"], g["rope_scaling_factor"])
    torch.testing.assert_close(mg_inv, hf_inv.float(), rtol=1e-6, atol=0)
    plain = megatron_llama3_inv_freq(t["kv_channels"], g["rotary_base"], 1.0)
    assert (plain - hf_inv).abs().max() > 1e-5  # the scaling is not a no-op at these sizes
    # a plain-RoPE config exports no scaling at all
    e = _megatron_export(tmp_path, dict(TINY_LLAMA))
    assert "rope_scaling" not in e["gpt_model"]
    # values megatron-core fixes are refused by name
    odd = dict(config, rope_scaling=dict(LLAMA3_ROPE, high_freq_factor=8.0))
    from mutransfer.card.export import export_card

    card = _tiny_card(tmp_path, odd)
    with pytest.raises(ValueError, match=r"card field target.model.config.rope_parameters.high_freq_factor: "
                                         r"8\.0: megatron-core's Llama 3 rope scaling fixes it at 4"):
        export_card(card, "megatron", drop=["init", "eps", "weight_decay", "residual_multiplier"])


def test_megatron_maps_qwens_qkv_biases(tmp_path) -> None:
    e = _megatron_export(tmp_path, TINY_QWEN, base_width=112)
    t, g = e["transformer_config"], e["gpt_model"]
    got = (t["add_qkv_bias"], t["add_bias_linear"], t["num_query_groups"], t["kv_channels"])
    assert got == (True, False, 2, 16)
    assert g["rotary_base"] == 1e6 and g["share_embeddings_and_output_weights"] is True
    assert any("from megatron.core.transformer import TransformerConfig" in n for n in e["notes"])
