"""Known answers for the init the torchtitan export puts on an HF Llama card's target.

The card's ``scale:F`` entries are factors on the HF model's own init (one std,
``initializer_range``, for every matrix); torchtitan's own llama3 configs initialise the
embedding with std 1, the output head with a truncated std dim^-1/2 and ``wo``/``w2``/``w3``
with depth-scaled stds. At a target 4x the base width (m = 4, HF's 0.02) μP's init is
known in closed form: embedding 0.02, every hidden matrix 0.02/sqrt(m) = 0.01, the
readout 0.02 sqrt(m) = 0.04 (``readout_init="fan_in"``, the default), 0.02 (constant) or 0
(zero). Our own :class:`Parametrization` gives those stds (the ground truth); so must
torchtitan's llama3 built from the export, whichever init its config starts from.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from mutransfer.card.build import build_card
from mutransfer.card.export import export_card
from mutransfer.parametrize.parametrization import Parametrization

pytest.importorskip("transformers", reason="the [engines] extra is not installed")
L = pytest.importorskip("torchtitan.models.llama3", reason="torchtitan's llama3 needs triton")

from mutransfer.card.engines.torchtitan import torchtitan_name  # noqa: E402
from mutransfer.card.engines.torchtitan_model import MuPConverter, model_spec  # noqa: E402

W, BASE, HF_STD = 256, 64, 0.02
M = W / BASE
CFG = {"model_type": "llama", "vocab_size": 512, "hidden_size": W, "intermediate_size": 688,
       "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 16,
       "tie_word_embeddings": False, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
       "rope_theta": 500000.0, "initializer_range": HF_STD}
SCHEDULE = {"kind": "wsd", "warmup_steps": 10, "decay_fraction": 0.2, "total_steps": 100,
            "decay_shape": "1-sqrt"}
OPT = {"name": "adamw", "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-8}
#: μP's init std at m = 4 on HF's 0.02, by readout_init, for the readout
READOUT = {"fan_in": HF_STD * math.sqrt(M), "constant": HF_STD, "zero": 0.0}
#: one parameter of each kind (HF names): its known std, the readout's by readout_init
KINDS = {"model.embed_tokens.weight": HF_STD,
         "model.layers.0.self_attn.q_proj.weight": HF_STD / math.sqrt(M),
         "model.layers.1.self_attn.o_proj.weight": HF_STD / math.sqrt(M),
         "model.layers.0.mlp.gate_proj.weight": HF_STD / math.sqrt(M),
         "model.layers.1.mlp.up_proj.weight": HF_STD / math.sqrt(M),
         "model.layers.1.mlp.down_proj.weight": HF_STD / math.sqrt(M),
         "lm_head.weight": None}


@pytest.fixture(scope="module", params=["fan_in", "constant", "zero"])
def made(request, tmp_path_factory) -> tuple[str, dict[str, float], dict]:
    """(readout_init, the ground-truth std per HF name, the torchtitan export)."""
    from mutransfer.card.target import hf_transfer_builder, resolve_hf_target

    folder = tmp_path_factory.mktemp("llama")
    (folder / "config.json").write_text(json.dumps(CFG))
    target = resolve_hf_target(f"hf:{folder / 'config.json'}")
    pz = Parametrization(hf_transfer_builder(target), width=W, base_width=BASE, readout_init=request.param)
    card = build_card(pz, lr=3e-3, optimizer=OPT, schedule=SCHEDULE,
                      batch={"sequences": 8, "tokens": 256, "seq_len": 32},
                      target={"model": target.to_dict(), "width": W, "depth": 2})
    truth = {n: float(p.detach().std()) for n, p in pz.build(seed=0).named_parameters()}
    return request.param, truth, export_card(card, "torchtitan")


def _stds(config) -> dict[str, float]:
    torch.manual_seed(0)
    model = config.build()
    model.init_states(buffer_device=None)
    return {n: float(p.detach().std()) for n, p in model.named_parameters()}


def _mismatches(readout_init: str, truth: dict[str, float], got: dict[str, float]) -> list[str]:
    """Each kind's std (to 3%: >= 44k entries each) must be the known one, in our
    Parametrization (asserted here: it is the ground truth) and in torchtitan's model (each
    miss returned, so a test names every one at once)."""
    bad = []
    for hf_name, known in KINDS.items():
        known = READOUT[readout_init] if known is None else known
        tt = torchtitan_name(hf_name)
        assert truth[hf_name] == pytest.approx(known, rel=0.03, abs=1e-12), ("Parametrization", hf_name)
        if got[tt] != pytest.approx(known, rel=0.03, abs=1e-12):
            bad.append(f"{tt}: std {got[tt]:.4g}, μP's {known:.4g} (x{got[tt] / known:.3g})")
    return bad


def test_model_spec_gives_parametrizations_init_for_every_readout_init(made) -> None:
    """The export's own model (``model_spec``: llama3 with HF's init under the converter)."""
    readout_init, truth, export = made
    bad = _mismatches(readout_init, truth, _stds(model_spec(export).model))
    assert not bad, "; ".join(bad)


def test_the_converter_gives_it_on_torchtitans_own_init_too(made, titan_llama) -> None:
    """The converter on a llama3 config with torchtitan's own init (the registry's), not
    HF's: the exported init must not be a factor on whatever init the config had."""
    readout_init, truth, export = made
    own = titan_llama(CFG, CFG["rope_theta"])  # torchtitan's own init
    plain = _stds(own)  # torchtitan's own init really is another one
    assert plain["tok_embeddings.weight"] == pytest.approx(1.0, rel=0.03)
    assert plain["lm_head.weight"] == pytest.approx(0.987 * W**-0.5, rel=0.03)  # truncated at 3 std
    bad = _mismatches(readout_init, truth, _stds(MuPConverter.Config(mup=export["mup"]).build().convert(own)))
    assert not bad, "; ".join(bad)


def _hf_card(tmp_path, arch: str) -> dict:
    """A card for a tiny local HF config of ``arch`` (``transfer --model hf:PATH``)."""
    import json

    pytest.importorskip("transformers")
    from mutransfer.card.build import build_card
    from mutransfer.card.target import hf_transfer_builder, resolve_hf_target
    from mutransfer.models.hf_tiny import tiny_config
    from mutransfer.parametrize.parametrization import Parametrization

    cfg = tiny_config(arch, 64, vocab_size=96).to_dict()
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    target = resolve_hf_target(f"hf:{tmp_path / 'config.json'}")
    pz = Parametrization(hf_transfer_builder(target), width=64, base_width=32)
    sched = {"kind": "wsd", "warmup_steps": 2, "decay_fraction": 0.2, "total_steps": 20, "lr_floor": 0.1}
    return build_card(pz, lr=3e-3, optimizer={"name": "adamw", "weight_decay": 0.1, "betas": (0.9, 0.95),
                                              "eps": 1e-8}, schedule=sched,
                      batch={"sequences": 8, "tokens": 256, "seq_len": 32},
                      target={"model": target.to_dict(), "width": 64, "depth": 2})


def test_a_refusal_advises_only_engines_that_accept_the_card(tmp_path) -> None:
    from mutransfer.card.export import export_card

    # Gemma-2: megatron refuses it too (its HF families are llama, mistral, qwen2): hf only
    (tmp_path / "g").mkdir()
    gemma = _hf_card(tmp_path / "g", "gemma2")
    with pytest.raises(ValueError, match=r"\(export this card to hf instead; megatron refuses it too, at "
                                         r"target.model.model_type\)$") as err:
        export_card(gemma, "torchtitan")
    assert "or megatron" not in str(err.value)
    with pytest.raises(ValueError, match=r"cannot carry card field target.model.model_type: 'gemma2' "
                                         r"\(soft-capped.*covers llama, mistral, qwen2, phi3 "
                                         r"\(export this card to hf instead\)$"):
        export_card(gemma, "megatron", drop=["init"])
    # Qwen2: torchtitan's llama3 has no q/k/v biases, megatron has: both are named, and megatron takes it
    (tmp_path / "q").mkdir()
    qwen = _hf_card(tmp_path / "q", "qwen2")
    with pytest.raises(ValueError, match=r"\(export this card to hf or megatron instead\)$"):
        export_card(qwen, "torchtitan")
    with pytest.warns(UserWarning, match="dropped card field init"):
        assert export_card(qwen, "megatron", drop=["init"])["transformer_config"]["add_qkv_bias"] is True


def test_phi3_goes_to_megatron_fused_as_megatron_fuses(tmp_path) -> None:
    """Phi-3's fused ``qkv_proj`` and ``gate_up_proj`` are Megatron's ``linear_qkv`` and
    ``linear_fc1`` (same shapes); its partial RoPE is ``rotary_percent``; its sliding window
    is refused by name until dropped; torchtitan refuses it, advising megatron."""
    from mutransfer.card.engines.megatron_groups import megatron_name
    from mutransfer.card.export import export_card

    card = _hf_card(tmp_path, "phi3")
    assert (megatron_name("model.layers.1.self_attn.qkv_proj.weight")
            == "decoder.layers.1.self_attention.linear_qkv.weight")
    assert megatron_name("model.layers.0.mlp.gate_up_proj.weight") == "decoder.layers.0.mlp.linear_fc1.weight"
    with pytest.raises(ValueError, match=r"'phi3' \(fused qkv_proj.*"
                                         r"\(export this card to hf or megatron instead\)$"):
        export_card(card, "torchtitan")
    with pytest.warns(UserWarning, match="dropped card field init"):
        m = export_card(card, "megatron", drop=["init"])
    assert "rotary_percent" not in m["gpt_model"] or m["gpt_model"]["rotary_percent"] == 1.0
    assert m["transformer_config"]["kv_channels"] == 16 and m["transformer_config"]["add_qkv_bias"] is False
    cfg = card["target"]["model"]["config"]
    card2 = {**card, "target": {**card["target"], "model": {**card["target"]["model"], "config": {
        **cfg, "sliding_window": 2047, "rope_parameters": {**(cfg.get("rope_parameters") or {}),
                                                           "partial_rotary_factor": 0.75}}}}}
    with pytest.raises(ValueError, match=r"cannot carry card field target.model.config.sliding_window: "
                                         r"2047: .*pass --drop target.model.config.sliding_window"):
        export_card(card2, "megatron", drop=["init"])
    with pytest.warns(UserWarning, match="dropped card field target.model.config.sliding_window"):
        m2 = export_card(card2, "megatron", drop=["init", "target.model.config.sliding_window"])
    assert m2["gpt_model"]["rotary_percent"] == 0.75
