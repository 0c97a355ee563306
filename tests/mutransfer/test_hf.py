"""Hugging Face models (tiny, from configs, random init, no download) under
Parametrization with no user flags: roles, the init law measured from two builds, the
attention scale through the module's own ``scaling``, and μP passing the coordinate check
where SP fails."""

from __future__ import annotations

import math

import pytest
import torch

tf = pytest.importorskip("transformers", reason="the [engines] extra (transformers) is not installed")

from mutransfer.coord_check import coord_check  # noqa: E402
from mutransfer.engines.hf import hf_loss, tiny_builder  # noqa: E402
from mutransfer.parametrization import Parametrization  # noqa: E402


def roles(pz: Parametrization) -> dict[str, str]:
    return {n: s.role for n, s in pz.specs.items()}


@pytest.mark.parametrize("tie", [False, True])
def test_llama_roles_init_and_attention(tie: bool) -> None:
    pz = Parametrization(tiny_builder("llama", tie=tie), width=128, base_width=32)
    r = roles(pz)
    assert r["model.embed_tokens.weight"] == "input"
    for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        assert r[f"model.layers.1.{proj}.weight"] == "hidden", proj
    assert r["model.layers.0.input_layernorm.weight"] == r["model.norm.weight"] == "vector"
    assert ("lm_head.weight" in r) != tie and r.get("lm_head.weight", "output") == "output"
    # The readout multiplier sits on lm_head whether or not it shares the embedding.
    assert pz.forward_multipliers()["hooks"] == [{"module": "lm_head", "kind": "pre", "scale": 0.25}]
    # HF's init is one std for every matrix (fan-in exponent 0): μP's hidden init is
    # rescaled by 1/sqrt(m_in), the readout kept.
    assert pz.init_exponents["model.layers.0.mlp.up_proj.weight"] == 0.0
    assert pz.specs["model.layers.0.mlp.up_proj.weight"].init == "scale:0.5"
    assert pz.specs["model.layers.0.mlp.down_proj.weight"].init == "scale:0.5"  # fan_in 256 over 64
    if not tie:
        assert pz.specs["lm_head.weight"].init == "keep"
    model = pz.build(seed=0)
    std = float(model.model.layers[0].mlp.up_proj.weight.std())
    assert std == pytest.approx(0.02 * 0.5, rel=0.05)
    assert float(model.model.embed_tokens.weight.std()) == pytest.approx(0.02, rel=0.05)
    # Head dim fixed at 16: μP's attention scale equals SP's, set on HF's own attribute.
    assert model.model.layers[0].self_attn.scaling == pytest.approx(0.25)


def test_gpt2_conv1d_tied_head_and_growing_head_dim() -> None:
    pz = Parametrization(tiny_builder("gpt2", tie=True), width=128, base_width=32)
    r = roles(pz)
    assert r["transformer.wte.weight"] == r["transformer.wpe.weight"] == "input"
    for p in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
        s = pz.specs[f"transformer.h.0.{p}.weight"]
        assert s.role == "hidden" and s.lr_mult == pytest.approx(1 / s.fan_in_mult), p
    # Conv1D weights are (in, out): fan_in is dim 0 (c_fc: 128 -> 512, m_in = 4).
    assert pz.specs["transformer.h.0.mlp.c_proj.weight"].fan_in_mult == 4.0
    assert "lm_head.weight" not in r
    model = pz.build(seed=0)
    # Two heads at every width: the head dim grows 16 -> 64, μP's scale is sqrt(16)/64.
    attn = model.transformer.h[0].attn
    assert attn.head_dim == 64 and attn.scaling == pytest.approx(math.sqrt(16) / 64)
    sp = Parametrization(tiny_builder("gpt2", tie=True), width=128, base_width=32, kind="sp").build(seed=0)
    assert sp.transformer.h[0].attn.scaling == pytest.approx(1 / 8)


def test_qwen2_and_mixtral_roles() -> None:
    r = roles(Parametrization(tiny_builder("qwen2"), width=128, base_width=32))
    assert r["model.layers.0.self_attn.q_proj.bias"] == "vector"
    assert r["model.layers.0.self_attn.q_proj.weight"] == "hidden"
    pz = Parametrization(tiny_builder("mixtral"), width=128, base_width=32)
    r = roles(pz)
    # Expert banks are (experts, out, in) raw tensors: hidden, fan_in the last dim.
    for bank in ("gate_up_proj", "down_proj"):
        s = pz.specs[f"model.layers.0.mlp.experts.{bank}"]
        assert s.role == "hidden" and s.fan_in_mult == 4.0 and s.init == "scale:0.5", bank
    # The router F.linear(hidden, weight (experts, hidden)) is a readout: 1/m on its input.
    assert r["model.layers.0.mlp.gate.weight"] == "output"
    hooks = {h["module"] for h in pz.forward_multipliers()["hooks"]}
    assert hooks == {"lm_head", "model.layers.0.mlp.gate", "model.layers.1.mlp.gate"}


ARCHS = [("llama", False), ("llama", True), ("qwen2", False), ("gpt2", True), ("mixtral", False)]


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "tie"), ARCHS)
def test_mup_passes_and_sp_fails_the_coord_check(arch: str, tie: bool) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 128, (4, 33), generator=g)
    kw = dict(widths=(32, 64, 128, 256), steps=3, seeds=1, lr=3e-3, loss_fn=hf_loss)
    builder = tiny_builder(arch, tie=tie)
    mu = coord_check(builder, (x[:, :-1], x[:, 1:]), kind="mup", **kw)
    sp = coord_check(builder, (x[:, :-1], x[:, 1:]), kind="sp", **kw)
    assert mu.passed, mu.violations()
    assert not sp.passed and sp.slopes["slope"].max() > 1.0
