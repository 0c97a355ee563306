"""Our llama-shaped GPT <-> Hugging Face ``transformers.LlamaForCausalLM``, both ways.

A :class:`~mutransfer.models.gpt.GPTConfig` with ``mlp="swiglu"``, RoPE, RMSNorm, no
biases, no QK-norm and no soft-cap is a Llama layer for layer (the ``llama-*`` presets
are): ``wte`` is ``model.embed_tokens``, block i's ``ln_1``/``attn.c_{q,k,v,proj}``/
``ln_2``/``mlp.c_{gate,fc,proj}`` are layer i's ``input_layernorm``/``self_attn.{q,k,v,o}
_proj``/``post_attention_layernorm``/``mlp.{gate,up,down}_proj``, ``ln_f`` is
``model.norm``; GQA's ``q_per_kv`` is ``num_attention_heads / num_key_value_heads``.

One thing is not a rename. Our RoPE rotates the pairs (2i, 2i+1) of a head (Meta's
Llama layout); HF's ``rotate_half`` rotates (i, i + D/2). Both use frequency theta^(-2i/D)
for pair i, so a head's query/key rows are permuted: row 2i+j of ours is row j·D/2 + i of
HF's. That is the ``permute`` of HF's own ``convert_llama_weights_to_hf.py``; it leaves
the logits q·k unchanged because q and k are permuted alike.

Weights only: a parametrized model (μP forward multipliers as hooks, a non-standard
attention scale) must be folded into plain weights first (:func:`mutransfer.parametrize.fold.fold`).
A config that has no Llama counterpart is refused with a ValueError naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from mutransfer.models.gpt import GPT, GPTConfig

if TYPE_CHECKING:  # transformers is a heavy import: only where a conversion runs
    from transformers import LlamaConfig, LlamaForCausalLM

__all__ = ["check_convertible", "from_hf", "from_hf_config", "from_hf_state_dict", "to_hf",
           "to_hf_config", "to_hf_state_dict"]


def check_convertible(cfg: GPTConfig) -> None:
    """Raise ValueError naming the first field of ``cfg`` that LlamaForCausalLM lacks."""
    refuse = {"mlp": cfg.mlp != "swiglu", "pos_emb": cfg.pos_emb != "rope", "bias": cfg.bias,
              "qk_norm": cfg.qk_norm, "logit_softcap": cfg.logit_softcap is not None}
    for field, bad in refuse.items():
        if bad:
            raise ValueError(f"GPTConfig.{field}={getattr(cfg, field)!r} has no LlamaForCausalLM counterpart"
                             " (Llama: mlp='swiglu', pos_emb='rope', bias=False, qk_norm=False,"
                             " logit_softcap=None)")


def to_hf_config(cfg: GPTConfig) -> LlamaConfig:
    """The ``LlamaConfig`` of ``cfg`` (fp32, no dropout, default RoPE)."""
    from transformers import LlamaConfig

    check_convertible(cfg)
    return LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.width, intermediate_size=cfg.d_mlp,
        num_hidden_layers=cfg.depth, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.d_head, hidden_act="silu", max_position_embeddings=cfg.seq_len,
        rms_norm_eps=cfg.norm_eps, tie_word_embeddings=cfg.tie_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        attention_bias=False, mlp_bias=False, attention_dropout=0.0, dtype="float32")


def _rope_theta(hf_cfg: Any) -> float:
    rope = getattr(hf_cfg, "rope_parameters", None) or {}
    kind = rope.get("rope_type", "default")
    if kind != "default":
        raise ValueError(f"LlamaConfig.rope_parameters rope_type={kind!r} (RoPE scaling) is not supported;"
                         " only 'default'")
    return float(rope.get("rope_theta", getattr(hf_cfg, "rope_theta", 10000.0)))


def from_hf_config(hf_cfg: LlamaConfig, seq_len: int | None = None) -> GPTConfig:
    """The GPTConfig of a ``LlamaConfig``; ``seq_len`` overrides ``max_position_embeddings``
    (our RoPE table has one row per position)."""
    for field, ok in (("hidden_act", hf_cfg.hidden_act == "silu"),
                      ("attention_bias", not hf_cfg.attention_bias),
                      ("mlp_bias", not getattr(hf_cfg, "mlp_bias", False)),
                      ("attention_dropout", not hf_cfg.attention_dropout)):
        if not ok:
            raise ValueError(f"LlamaConfig.{field}={getattr(hf_cfg, field)!r} has no GPTConfig counterpart")
    width, heads = int(hf_cfg.hidden_size), int(hf_cfg.num_attention_heads)
    kv = int(hf_cfg.num_key_value_heads or heads)
    head_dim = int(getattr(hf_cfg, "head_dim", None) or width // heads)
    if head_dim * heads != width:  # ours: heads · head_dim = width
        raise ValueError(f"LlamaConfig.head_dim={head_dim} times num_attention_heads={heads} is not"
                         f" hidden_size={width}")
    if heads % kv:
        raise ValueError(f"LlamaConfig.num_key_value_heads={kv} does not divide num_attention_heads={heads}")
    cfg = GPTConfig(
        vocab_size=int(hf_cfg.vocab_size), seq_len=int(seq_len or hf_cfg.max_position_embeddings),
        width=width, depth=int(hf_cfg.num_hidden_layers), head_dim=head_dim,
        mlp_ratio=hf_cfg.intermediate_size / width, mlp="swiglu", q_per_kv=heads // kv,
        norm_eps=float(hf_cfg.rms_norm_eps), rope_theta=_rope_theta(hf_cfg),
        tie_embeddings=bool(hf_cfg.tie_word_embeddings))
    assert cfg.d_mlp == hf_cfg.intermediate_size and cfg.heads == heads
    return cfg


def _names(cfg: GPTConfig) -> list[tuple[str, str]]:
    """(our name, HF name) of every tensor, in model order."""
    out = [("wte.weight", "model.embed_tokens.weight")]
    for i in range(cfg.depth):
        ours, hf = f"blocks.{i}.", f"model.layers.{i}."
        out += [(ours + a + ".weight", hf + b + ".weight") for a, b in (
            ("ln_1", "input_layernorm"), ("attn.c_q", "self_attn.q_proj"), ("attn.c_k", "self_attn.k_proj"),
            ("attn.c_v", "self_attn.v_proj"), ("attn.c_proj", "self_attn.o_proj"),
            ("ln_2", "post_attention_layernorm"), ("mlp.c_gate", "mlp.gate_proj"),
            ("mlp.c_fc", "mlp.up_proj"), ("mlp.c_proj", "mlp.down_proj"))]
    return out + [("ln_f.weight", "model.norm.weight"), ("lm_head.weight", "lm_head.weight")]


def _rope_perm(w_OI: torch.Tensor, n_heads: int, to_hf: bool) -> torch.Tensor:
    """Reorder each head's rows between our (2i, 2i+1) pairs and HF's (i, i + D/2)."""
    O, I = w_OI.shape
    split = (n_heads, O // n_heads // 2, 2, I) if to_hf else (n_heads, 2, O // n_heads // 2, I)
    return w_OI.reshape(split).transpose(1, 2).reshape(O, I)


def _convert(sd: Mapping[str, torch.Tensor], cfg: GPTConfig, to_hf: bool) -> dict[str, torch.Tensor]:
    out = {}
    for ours, hf in _names(cfg):
        src, dst = (ours, hf) if to_hf else (hf, ours)
        if src not in sd and src.endswith("lm_head.weight") and cfg.tie_embeddings:
            src = "model.embed_tokens.weight" if not to_hf else "wte.weight"  # a tie may be stored once
        if src not in sd:
            raise ValueError(f"state dict has no {src!r}")
        w = sd[src].detach()
        if ours.endswith(("attn.c_q.weight", "attn.c_k.weight")):
            w = _rope_perm(w, cfg.heads if "c_q" in ours else cfg.kv_heads, to_hf)
        out[dst] = w.clone()
    return out


def to_hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """``model``'s weights under LlamaForCausalLM's names (q/k rows permuted for
    ``rotate_half``). Frozen norm gains (buffers of ones) become ordinary gains of ones."""
    _check_plain(model)
    sd = dict(model.state_dict())
    sd.update({n: b for n, b in model.named_buffers() if n.endswith(".weight")})
    return _convert(sd, model.cfg, to_hf=True)


def from_hf_state_dict(sd: Mapping[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """A LlamaForCausalLM state dict under our names, for ``GPT(cfg).load_state_dict``."""
    check_convertible(cfg)
    out = _convert(sd, cfg, to_hf=False)
    if cfg.freeze_norm_gains:  # those gains are buffers of ones in our model, not state
        out = {k: v for k, v in out.items() if not k.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))}
    return out


def _check_plain(model: GPT) -> None:
    check_convertible(model.cfg)
    for name, m in model.named_modules():
        if m._forward_hooks or m._forward_pre_hooks:
            raise ValueError(f"module {name or 'model'!r} has forward hooks (a parametrization's"
                             " multipliers): fold them into the weights first"
                             " (mutransfer.parametrize.fold.fold)")
        scale = getattr(m, "softmax_scale", None)
        if scale is not None and not (isinstance(scale, float) and math.isclose(scale, m.head_dim**-0.5)):
            raise ValueError(f"{name}.softmax_scale={scale!r} is not Llama's 1/sqrt(head_dim):"
                             " fold it into the query weights first (mutransfer.parametrize.fold.fold)")
    if model.wte.weight.dim() != 2:
        raise ValueError("a fused (stacked [K, ...]) model cannot be converted; convert one member")


def to_hf(model: GPT) -> LlamaForCausalLM:
    """A fp32 LlamaForCausalLM holding ``model``'s weights (same logits, eval mode)."""
    from transformers import LlamaForCausalLM

    sd = to_hf_state_dict(model)
    hf = LlamaForCausalLM(to_hf_config(model.cfg)).float()
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    if unexpected or [k for k in missing if not (k == "lm_head.weight" and model.cfg.tie_embeddings)]:
        raise ValueError(f"LlamaForCausalLM rejected the weights: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def from_hf(hf_model: LlamaForCausalLM, seq_len: int | None = None) -> GPT:
    """Our GPT holding ``hf_model``'s weights (fp32, same logits)."""
    cfg = from_hf_config(hf_model.config, seq_len)
    model = GPT(cfg)
    model.load_state_dict(from_hf_state_dict(hf_model.state_dict(), cfg))
    return model.float()
