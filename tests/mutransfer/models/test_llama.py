"""The llama-shaped GPT under μP: every parameter gets the role of its HF Llama twin, the
coordinate check passes under μP and fails under SP, and QK-clip under GQA clips each
query head's max logit to tau exactly."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from mutransfer.checks.coord_check import coord_check
from mutransfer.models.convert import _names, to_hf_config
from mutransfer.models.gpt import GPT
from mutransfer.models.presets import llama_tiny
from mutransfer.parametrize.parametrization import Parametrization
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.optim import qk_clip, track_max_logits

CFG = llama_tiny().replace(seq_len=32)  # 16-dim heads, 2 query heads per key/value head


def test_roles_match_hf_llama_twins() -> None:
    """gate/up/down and the narrower k/v are hidden (both dims scale), the embedding is
    input, the readout output, norm gains vectors; and the Parametrization of the real
    LlamaForCausalLM at the same widths gives each twin the same role and LR multiplier."""
    ours = Parametrization(lambda w: GPT(CFG.replace(width=w)), width=128, base_width=32, kind="mup")
    hf = Parametrization(lambda w: LlamaForCausalLM(to_hf_config(CFG.replace(width=w))), width=128,
                         base_width=32, kind="mup")
    rows = {r["name"]: r for r in ours.describe()}
    hf_rows = {r["name"]: r for r in hf.describe()}
    for name in ("attn.c_q", "attn.c_k", "attn.c_v", "attn.c_proj", "mlp.c_gate", "mlp.c_fc", "mlp.c_proj"):
        r = rows[f"blocks.1.{name}.weight"]
        assert (r["role"], r["lr_mult"]) == ("hidden", 32 / 128), name
    assert rows["blocks.0.attn.c_k.weight"]["shape"] == (64, 128)  # 4 query heads, 2 key/value heads
    assert [rows[n]["role"] for n in ("wte.weight", "lm_head.weight", "ln_f.weight")] == \
        ["input", "output", "vector"]
    for name, hf_name in _names(CFG):
        assert (rows[name]["role"], rows[name]["lr_mult"]) == \
            (hf_rows[hf_name]["role"], hf_rows[hf_name]["lr_mult"]), name


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    data = load_dataset(DataConfig(max_bytes=200_000))
    return data.get_batch("train", 0, 4, CFG.seq_len, seed=0)


def test_coord_check_passes_under_mup_and_fails_under_sp(batch) -> None:
    res = {kind: coord_check(lambda w: GPT(CFG.replace(width=w)), batch, kind=kind, widths=(32, 64, 128, 256),
                             steps=3, seeds=2, lr=1e-2) for kind in ("sp", "mup")}
    assert res["mup"].passed and not res["sp"].passed
    assert res["sp"].slopes["slope"].max() > 0.8  # SP's activations grow ~linearly in width
    assert res["mup"].slopes["slope"].max() < 0.15
    mlp = res["sp"].slopes.query("module == 'blocks.1.mlp' and step == 3")["slope"].item()
    assert mlp > 0.5  # the SwiGLU branch itself blows up under SP


def test_qk_clip_under_gqa_clips_each_query_head_to_tau() -> None:
    torch.manual_seed(0)
    model = GPT(CFG.replace(width=64, depth=1)).eval()
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.c_q.weight.mul_(4.0)  # large logits, so some heads exceed tau
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    track_max_logits(model)
    with torch.no_grad():
        model(x)
    s = attn.max_logit.clone()
    tau = float(s.median())
    k_before = attn.c_k.weight.clone()
    assert qk_clip(model, tau) == int((s > tau).sum()) > 0
    with torch.no_grad():
        model(x)
    torch.testing.assert_close(attn.max_logit, torch.minimum(s, torch.tensor(tau)), rtol=1e-5, atol=1e-5)
    assert torch.equal(attn.c_k.weight, k_before)  # a key head serves two query heads: untouched
