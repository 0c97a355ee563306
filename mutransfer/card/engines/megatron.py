"""The card as Megatron-LM config sections (megatron-core 0.19.2): the whole architecture,
the μP fields, the optimizer, the schedule and the batch.

Sections, each the keyword arguments of one megatron-core / Megatron-LM class:

- ``transformer_config``: ``megatron.core.transformer.TransformerConfig`` (sizes, heads,
  query groups, MLP, RMSNorm, biases, dropout 0, the μP fields and the softmax scale);
- ``transformer_config_callables``: fields whose value is a callable, as dotted names to
  resolve and pass alongside (``activation_func``: ``torch.nn.functional.silu`` for SwiGLU,
  which is what Megatron-LM's ``--swiglu`` sets together with ``gated_linear_unit``);
- ``gpt_model``: the model-construction arguments of ``megatron.core.models.gpt.GPTModel``
  (vocab, sequence length, tied or untied head, RoPE type and base);
- ``optimizer_config``: ``megatron.core.optimizer.OptimizerConfig``;
- ``scheduler_config``, ``training_config``, ``tokenizer_config``: Megatron-LM's
  ``megatron.training.config.training_config`` classes.

The model side is Megatron's μP (``TransformerConfig.__post_init__``, read in 0.19.2:
``use_mup``, the embedding and output multipliers, the softmax scale). The optimizer side is
not Megatron's ``get_mup_config_overrides`` (one LR/m and eps/m for every hidden matrix, one
weight decay for every matrix) but the section ``config_overrides``: megatron-core
``ParamKey(name=GLOB)`` -> ``ParamGroupOverride`` entries (``max_lr``, ``min_lr``, ``eps``,
``wd_mult``) that give every parameter the card's LR, Adam eps and weight decay by its
GPTModel name (:mod:`mutransfer.card.engines.megatron_groups`), used with
``get_standard_config_overrides`` in place of the μP ones. CompleteP's residual-branch
multiplier ``(L/L_base)^-α``, which Megatron has no field for, is folded into each branch's
output projection (``linear_proj``, ``linear_fc2``): LR × s, eps / s, weight decay / s and
init × s train exactly as the multiplier does (the fold's derivation is in that module).

Whatever the card says that Megatron cannot express is an error naming the field;
``drop=[FIELD]`` (CLI ``--drop FIELD``, :class:`mutransfer.card.engines._common.Drops`) exports
without it, records it in ``dropped`` and warns; a droppable field this card does not need
dropped is a note, not an error. A residual multiplier with no output projection to fold
into is refused and cannot be dropped (the run would be another model). The fields
(:data:`DROPPABLE`): ``init`` (Megatron's own μP init replaces the card's, including the
fold's factor on the output projections); ``eps``,
``lr`` and ``weight_decay`` (values that differ within one Megatron parameter, e.g. q and k
of one fused ``linear_qkv``; decay on a vector; decay independent of the LR);
``target.model.<name>`` (an architecture field Megatron lacks).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from mutransfer.card.engines._common import (
    Drops,
    _groups,
    _lr_floor,
    _steps,
    check_fields,
    decay_note,
    family_traits,
    split_batch,
)
from mutransfer.card.engines.megatron_groups import branch_scales, config_overrides, folded

# Field names read from megatron-core 0.19.2's source (transformer/transformer_config.py,
# models/gpt/gpt_model.py, optimizer/optimizer_config.py, and Megatron-LM's
# training/config/training_config.py shipped in the same wheel): used to check an export
# where megatron-core (Python >= 3.12) is not importable; the Megatron test checks these
# names against the real classes.
MEGATRON_VERSION = "0.19.2"
MEGATRON_VERIFIED = f"megatron-core {MEGATRON_VERSION} source"
MEGATRON_FIELDS: dict[str, frozenset[str]] = {
    "transformer_config": frozenset({
        "num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
        "ffn_hidden_size", "gated_linear_unit", "normalization", "layernorm_epsilon", "add_bias_linear",
        "add_qkv_bias", "qk_layernorm", "rotary_interleaved", "hidden_dropout", "attention_dropout",
        "use_mup", "mup_base_hidden_size", "mup_base_head_dim", "mup_embedding_mult", "mup_output_mult",
        "mup_attn_scale_power", "softmax_scale", "init_method_std"}),
    "transformer_config_callables": frozenset({"activation_func"}),
    "gpt_model": frozenset({"vocab_size", "max_sequence_length", "share_embeddings_and_output_weights",
                            "position_embedding_type", "rotary_base", "rotary_percent", "rope_scaling",
                            "rope_scaling_factor"}),
    "optimizer_config": frozenset({"optimizer", "lr", "min_lr", "decoupled_lr", "decoupled_min_lr",
                                   "weight_decay", "adam_beta1", "adam_beta2", "adam_eps"}),
    "scheduler_config": frozenset({"lr_decay_style", "lr_wsd_decay_style", "lr_decay_iters",
                                   "lr_wsd_decay_iters", "lr_warmup_iters", "lr_warmup_init"}),
    "training_config": frozenset({"global_batch_size", "micro_batch_size", "train_iters"}),
    "tokenizer_config": frozenset({"padded_vocab_size"}),
}
#: What ``drop`` may name besides ``target.model.<field>``, and what dropping it means.
DROPPABLE: dict[str, str] = {
    "init": "Megatron initializes with its own μP rule instead of the card's init",
    "eps": "some parameters get another parameter's Adam eps (one Megatron group)",
    "lr": "some parameters get another parameter's LR (one Megatron group)",
    "weight_decay": "some parameters get Megatron's weight decay instead of the card's",
    "residual_multiplier": "never: folded into the output projections, or refused (a note when folded)",
    "target.dtype": "the weights are Megatron's (float32 main params under --bf16), not the card's pure "
                    "low-precision ones",
}


# card target.model field -> where it lands in Megatron. A field missing here is refused
# by name (``target.model.<field>``); each entry says how the GPT defines it.
ARCH_MAP: dict[str, str] = {
    "kind": "must be 'gpt' (a decoder-only transformer)",
    "preset": "a name only",
    "width": "transformer_config.hidden_size",
    "depth": "transformer_config.num_layers",
    "head_dim": "heads = width // head_dim -> num_attention_heads; kv_channels = width // heads",
    "n_head": "num_attention_heads (wins over head_dim)",
    "q_per_kv": "num_query_groups = heads // q_per_kv (Megatron-LM's --group-query-attention)",
    "mlp_ratio": "ffn_hidden_size = round(mlp_ratio * width)",
    "mlp": "gelu: activation_func F.gelu (Megatron's default); swiglu: gated_linear_unit + F.silu",
    "norm_eps": "layernorm_epsilon (RMSNorm)",
    "rope_theta": "gpt_model.rotary_base",
    "pos_emb": "gpt_model.position_embedding_type: rope | learned_absolute",
    "vocab_size": "gpt_model.vocab_size and tokenizer_config.padded_vocab_size (no padding)",
    "seq_len": "gpt_model.max_sequence_length (Megatron-LM's --seq-length)",
    "tie_embeddings": "gpt_model.share_embeddings_and_output_weights",
    "qk_norm": "transformer_config.qk_layernorm",
    "bias": "add_bias_linear and add_qkv_bias",
    "logit_softcap": "only None: Megatron's GPT has no logit soft-capping",
    "z_loss": "only 0: Megatron's dense GPT has no z-loss",
    "freeze_norm_gains": "only false: Megatron trains its norm gains",
}


#: HF model types whose decoder Megatron's GPTModel builds (pre-norm RMSNorm, RoPE,
#: SwiGLU, GQA), and whether the q/k/v projections carry biases (Qwen2's do). Phi-3's
#: fused qkv_proj and gate_up_proj are Megatron's linear_qkv and linear_fc1.
HF_FAMILIES: dict[str, bool] = {"llama": False, "mistral": False, "qwen2": True, "phi3": False}


#: The Llama 3 RoPE scaling megatron-core's ``RotaryEmbedding._apply_scaling`` hard-codes
#: (only the factor reaches it, as ``GPTModel(rope_scaling=True, rope_scaling_factor=...)``):
#: an HF ``rope_type: llama3`` maps onto it when its other three values are these.
MEGATRON_LLAMA3_ROPE: dict[str, float] = {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192}


def _rope_scaling(rope: Mapping[str, Any], problems: list[tuple[str, str]]) -> dict[str, Any]:
    """GPTModel's ``rope_scaling``/``rope_scaling_factor`` for an HF config's RoPE: none,
    or Llama 3's scaling with Megatron's fixed low/high factors and original context; any
    other type or value is a problem naming the ``rope_parameters`` field."""
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return {}
    if kind != "llama3":
        problems.append(("target.model.config.rope_parameters.rope_type",
                         f"{kind!r}: megatron-core's GPTModel has Llama 3's rope scaling (llama3) or none"))
        return {}
    for key, want in MEGATRON_LLAMA3_ROPE.items():
        if float(rope.get(key, want)) != want:
            problems.append((f"target.model.config.rope_parameters.{key}",
                             f"{rope.get(key)!r}: megatron-core's Llama 3 rope scaling fixes it at {want:g} "
                             "(only rope_scaling_factor is a GPTModel argument)"))
    return {"rope_scaling": True, "rope_scaling_factor": float(rope["factor"])}


def _from_hf(model: Mapping[str, Any], seq_len: int | None,
             problems: list[tuple[str, str]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """An HF target (``target.model.kind == "hf"``) in the GPT fields above, plus the
    Megatron fields the GPT fields cannot say: for ``transformer_config`` rotate-half RoPE,
    q/k/v-only biases, a head dim that is not width / heads; for ``gpt_model`` Llama 3's
    rope scaling. Anything the decoder has that Megatron would build otherwise is a
    problem named ``target.model.config.<field>``."""
    mt, cfg = str(model.get("model_type")), dict(model.get("config") or {})
    if mt not in HF_FAMILIES:
        # torchtitan's llama3 covers fewer of them (TORCHTITAN_HF_FAMILIES): hf is what is left
        raise ValueError(f"the megatron export cannot carry card field target.model.model_type: {mt!r}"
                         f"{family_traits(mt)}: Megatron's GPTModel export covers {', '.join(HF_FAMILIES)} "
                         "(export this card to hf instead)")
    w, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or w // heads)
    rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    gpt_extra = _rope_scaling(rope, problems)
    # Phi-3's partial RoPE (the first fraction of each head rotates, as in megatron-core)
    partial = float(rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
    if not 0.0 < partial <= 1.0:
        problems.append(("target.model.config.partial_rotary_factor", f"{partial!r}: not in (0, 1]"))
    elif partial != 1.0:
        gpt_extra["rotary_percent"] = partial
    for key, ok, why in (
            ("hidden_act", cfg.get("hidden_act", "silu") == "silu", "Megatron's swiglu is silu-gated"),
            ("attention_bias", not cfg.get("attention_bias"), "an o_proj bias without MLP biases"),
            ("mlp_bias", not cfg.get("mlp_bias"), "MLP biases without q/k/v biases"),
            ("sliding_window", not cfg.get("sliding_window") or not cfg.get("use_sliding_window", True),
             "no sliding-window attention in this export")):
        if not ok:
            problems.append((f"target.model.config.{key}", f"{cfg.get(key, rope)!r}: {why}"))
    gpt_fields = {"kind": "gpt", "width": w, "depth": int(cfg["num_hidden_layers"]), "n_head": heads,
                  "q_per_kv": heads // kv, "mlp": "swiglu", "mlp_ratio": int(cfg["intermediate_size"]) / w,
                  "norm_eps": float(cfg.get("rms_norm_eps", 1e-6)), "rope_theta": theta, "pos_emb": "rope",
                  "vocab_size": int(cfg["vocab_size"]),
                  "seq_len": int(seq_len or cfg.get("max_position_embeddings") or 0),
                  "tie_embeddings": bool(cfg.get("tie_word_embeddings", False))}
    extra = {"rotary_interleaved": False, "add_qkv_bias": HF_FAMILIES[mt], "add_bias_linear": False,
             "kv_channels": head_dim}
    return gpt_fields, extra, gpt_extra


def _architecture(model: Mapping[str, Any], width: int, problems: list[tuple[str, str]],
                  seq_len: int | None = None) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    hf_extra: dict[str, Any] = {}
    gpt_extra: dict[str, Any] = {}
    if model.get("kind") == "hf":
        model, hf_extra, gpt_extra = _from_hf(model, seq_len, problems)
    for key in model:
        if key not in ARCH_MAP:
            problems.append((f"target.model.{key}", f"has no Megatron field (known: {', '.join(ARCH_MAP)})"))
    kind = model.get("kind", "gpt")
    if kind != "gpt":
        raise ValueError(f"card field target.model.kind: Megatron's GPTModel needs a 'gpt' target, "
                         f"got {kind!r}")
    w = int(model.get("width", width))
    if w != width:
        raise ValueError(f"card field target.model.width: {w} is not parametrization.width {width}")
    heads = int(model["n_head"]) if model.get("n_head") else max(1, w // int(model.get("head_dim", 32)))
    q_per_kv = int(model.get("q_per_kv", 1))
    if w % heads or heads % q_per_kv:
        raise ValueError(f"card field target.model: width {w}, {heads} heads and q_per_kv {q_per_kv} "
                         "do not divide")
    mlp = model.get("mlp", "gelu")
    if mlp not in ("gelu", "swiglu"):
        raise ValueError(f"card field target.model.mlp: Megatron takes gelu or swiglu, got {mlp!r}")
    pos = model.get("pos_emb", "rope")
    if pos not in ("rope", "learned"):
        raise ValueError(f"card field target.model.pos_emb: must be rope or learned, got {pos!r}")
    for key, ok in (("logit_softcap", model.get("logit_softcap") is None),
                    ("z_loss", not model.get("z_loss")),
                    ("freeze_norm_gains", not model.get("freeze_norm_gains"))):
        if not ok:
            problems.append((f"target.model.{key}", f"{model[key]!r}: {ARCH_MAP[key]}"))
    bias = bool(model.get("bias", False))
    tcfg: dict[str, Any] = {
        "num_layers": int(model["depth"]), "hidden_size": w, "num_attention_heads": heads,
        "num_query_groups": heads // q_per_kv, "kv_channels": w // heads,
        "ffn_hidden_size": int(round(float(model.get("mlp_ratio", 4.0)) * w)),
        "gated_linear_unit": mlp == "swiglu", "normalization": "RMSNorm",
        "layernorm_epsilon": float(model.get("norm_eps", 1e-6)),
        "add_bias_linear": bias, "add_qkv_bias": bias,
        "qk_layernorm": bool(model.get("qk_norm", False)), "hidden_dropout": 0.0, "attention_dropout": 0.0}
    gpt: dict[str, Any] = {
        "vocab_size": int(model["vocab_size"]), "max_sequence_length": int(model["seq_len"]),
        "share_embeddings_and_output_weights": bool(model.get("tie_embeddings", False)),
        "position_embedding_type": "rope" if pos == "rope" else "learned_absolute"}
    if pos == "rope":
        # The GPT rotates pairs (2i, 2i+1): Megatron's rotary_interleaved. The default
        # rotate-half layout differs by a fixed permutation of q/k rows, the same model
        # when trained from scratch.
        tcfg["rotary_interleaved"] = True
        gpt.update(rotary_base=float(model.get("rope_theta", 10000.0)), rotary_percent=1.0)
    tcfg.update(hf_extra)  # an HF decoder: rotate-half RoPE, its own biases and head dim
    gpt.update(gpt_extra)  # and Llama 3's rope scaling
    callables = {"activation_func": "torch.nn.functional.silu"} if mlp == "swiglu" else {}
    return tcfg, gpt, callables


def _role_modules(groups: list[dict[str, Any]], role: str) -> set[str]:
    return {g["name"].rpartition(".")[0] for g in groups if g.get("role") == role}


def _multipliers(card: Mapping[str, Any], groups: list[dict[str, Any]],
                 problems: list[tuple[str, str]]) -> tuple[float, float]:
    """(embedding mult, output mult) from the card's forward hooks; the residual branches'
    hooks are folded (:func:`mutransfer.card.engines.megatron_groups.branch_scales`)."""
    inputs, outputs = _role_modules(groups, "input"), _role_modules(groups, "output")
    emb, out = 1.0, 1.0
    for h in card["forward_multipliers"].get("hooks", []):
        mod, kind, scale = h["module"], h["kind"], float(h["scale"])
        leaf = mod.rpartition(".")[2]
        if kind == "post" and mod in inputs:
            emb *= scale
        elif kind == "pre" and (mod in outputs or leaf in ("lm_head", "output_layer", "head")):
            out *= scale  # a pre-hook on a bias-free readout scales the logits
    if any(g.get("role") == "output" and g["name"].endswith(".bias") for g in groups):
        problems.append(("target.model.bias", "a readout bias: Megatron's mup_output_mult scales logits, "
                         "not the readout's input"))
    return emb, out


def _fit(card: Mapping[str, Any], groups: list[dict[str, Any]], lr_floor: float,
         problems: list[tuple[str, str]]) -> tuple[dict[str, float], list[dict[str, Any]], dict[str, float]]:
    """Megatron's base (lr, adam_eps, weight_decay), the per-name ``config_overrides``
    that give every other parameter the card's values (the residual multiplier folded
    in), and the folded multiplier of each parameter (card name -> s)."""
    wd_mode = str(card["optimizer"].get("wd_mode", "coupled"))
    scales = branch_scales(card, groups, problems)
    vectors = [g for g in groups if len(g["shape"]) < 2 or g["name"].endswith(".bias")]
    ref = (vectors or groups)[0]
    lr, eps, _ = folded(ref, scales.get(ref["name"], 1.0), wd_mode)
    decays = [folded(g, scales.get(g["name"], 1.0), wd_mode)[2] for g in groups if g not in vectors]
    wd = max(decays, default=0.0)
    if wd_mode != "coupled" and wd:
        problems.append(("weight_decay", f"wd_mode {wd_mode!r}: Megatron's AdamW decays by lr x weight_decay "
                         "per step (decoupled_weight_decay), not independently of the LR"))
    overrides = config_overrides(groups, scales, base_lr=lr, base_eps=eps, base_wd=wd, lr_floor=lr_floor,
                                 wd_mode=wd_mode, problems=problems)
    return {"lr": lr, "adam_eps": eps, "weight_decay": wd}, overrides, scales


def export_megatron(card: Mapping[str, Any], *, dp_size: int | None = None, micro_batch: int | None = None,
                    drop: Iterable[str] = ()) -> dict[str, Any]:
    """The card as Megatron's config sections (module docstring). ``dp_size`` and
    ``micro_batch`` split the global batch (:func:`mutransfer.card.engines._common.split_batch`).
    A card field Megatron cannot express raises ValueError naming it (and every other such
    field), unless ``drop`` names it: then it is listed in the export's ``dropped`` and a
    warning is issued; a ``drop`` that names nothing the export met is an error too."""
    drops = Drops("megatron", drop, known=DROPPABLE)
    pz, opt, s = card["parametrization"], card["optimizer"], card["schedule"]
    if pz.get("kind") not in ("mup", "completep") or pz.get("rules", "adam") != "adam":
        raise ValueError(f"Megatron's μP covers kind 'mup' with Adam rules (and 'completep', its depth rules "
                         f"checked field by field); the card has kind {pz.get('kind')!r} with "
                         f"{pz.get('rules')!r} rules")
    model = card["target"].get("model")
    if not isinstance(model, Mapping):
        raise ValueError("card field target.model: missing; the Megatron export needs the target "
                         "architecture (cards from `mutransfer transfer` carry it)")
    groups = _groups(card)
    width, base = int(pz["width"]), int(pz["base_width"])
    m = width / base
    problems: list[tuple[str, str]] = []
    tcfg, gpt, callables = _architecture(model, width, problems, seq_len=card.get("batch", {}).get("seq_len"))
    lr_floor = _lr_floor(s)
    base_opt, overrides, folds = _fit(card, groups, lr_floor, problems)
    lr, eps, wd = base_opt["lr"], base_opt["adam_eps"], base_opt["weight_decay"]
    emb_mult, out_mult = _multipliers(card, groups, problems)
    # TransformerConfig.__post_init__ and GPTModel (0.19.2), σ = init_method_std: embedding
    # and untied head N(0, σ); hidden matrices σ/sqrt(m); the residual branches' output
    # projections (attention proj, MLP fc2) σ/sqrt(2·L·m).
    # Its head, N(0, σ) under the 1/m output multiplier, is readout_init "constant" (mup's);
    # a card with the default "fan_in" stores the untied head sqrt(m) larger than that.
    readout = pz.get("readout_init", "constant")
    head = ("" if readout == "constant" or m == 1.0 or model.get("tie_embeddings") else
            f" (Megatron's untied head is readout_init constant, the card's is {readout}: its head "
            f"init std is {m ** 0.5:.4g}x Megatron's)")
    problems.insert(0, ("init", "Megatron's μP init is N(0, σ) for the embedding and the untied head, "
                        "σ/sqrt(m) for hidden matrices and σ/sqrt(2 L m) for the residual branches' "
                        "output projections (σ = init_method_std); the card's per-parameter init has no "
                        f"Megatron field{head}{_fold_init(folds)}"))
    notes: list[str] = []
    if folds:
        fs = sorted(set(folds.values()))
        notes.append(f"residual multiplier folded (CompleteP's x{', x'.join(f'{f:g}' for f in fs)} on "
                     f"{len(folds)} output-projection parameter(s)): their LR x s, Adam eps / s and weight "
                     "decay / s are in config_overrides; their init takes the factor s (see dropped 'init' "
                     "if dropped); the model runs without a multiplier")
    # Megatron replaces a mup_output_mult of exactly 1.0 by 1/m (TransformerConfig.__post_init__:
    # `if self.mup_output_mult == 1.0 and self.mup_width_mult != 1.0`). The next float
    # above 1 keeps the card's logits (it rounds to 1 in every training dtype).
    if out_mult == 1.0 and m != 1.0:
        out_mult = math.nextafter(1.0, 2.0)
        notes.append(f"mup_output_mult is {out_mult!r}, not 1.0: Megatron replaces exactly 1.0 by "
                     f"1/m = {1 / m:g}; the card's readout multiplier is 1")
    scales = sorted(set(card["forward_multipliers"].get("attention", {}).values()))
    if len(scales) > 1:
        raise ValueError(f"card field forward_multipliers.attention: {len(scales)} different scales; "
                         "Megatron has one softmax_scale")
    tcfg.update(use_mup=True, mup_base_hidden_size=base, mup_embedding_mult=emb_mult,
                mup_output_mult=out_mult)
    if scales:
        tcfg["softmax_scale"] = float(scales[0])
    total, warmup, decay = _steps(card)
    kind = s.get("kind")
    style = {"wsd": "WSD", "cosine": "cosine", "linear": "linear", "constant": "constant",
             "inverse_sqrt": "inverse-square-root"}.get(kind)
    if style is None:
        raise ValueError(f"card field schedule.kind: {kind!r} has no Megatron lr_decay_style")
    sched: dict[str, Any] = {"lr_decay_style": style, "lr_warmup_iters": warmup, "lr_warmup_init": 0.0,
                             "lr_decay_iters": total}
    if kind == "wsd":
        shapes = {"linear": "linear", "cosine": "cosine", "1-sqrt": "minus_sqrt"}
        shape = shapes.get(s.get("decay_shape") or "1-sqrt")
        if shape is None:
            raise ValueError(f"card field schedule.decay_shape: Megatron has no WSD decay style for "
                             f"{s.get('decay_shape')!r}")
        sched.update(lr_wsd_decay_style=shape, lr_wsd_decay_iters=decay)
    betas = list(opt["betas"])
    ocfg = {"optimizer": "adam", "lr": lr, "min_lr": lr * lr_floor, "weight_decay": wd,
            "adam_beta1": float(betas[0]), "adam_beta2": float(betas[1]), "adam_eps": eps}
    notes.append(_decay_note(groups, folds, ocfg, str(opt.get("wd_mode", "coupled"))))
    split = split_batch(card, dp_size, micro_batch)
    training = {"global_batch_size": split.sequences, "micro_batch_size": split.micro_batch,
                "train_iters": total}
    notes.append(f"global batch {split.sequences} = data-parallel size {split.dp_size} x micro batch "
                 f"{split.micro_batch} x {split.grad_accum} accumulation step(s); Megatron-LM derives the "
                 "accumulation from its own data-parallel size")
    if callables:
        notes.append("SwiGLU: pass activation_func=torch.nn.functional.silu with gated_linear_unit=True "
                     "(Megatron-LM's --swiglu sets both)")
    dtype = card["target"].get("dtype") or "float32"
    if dtype != "float32":
        problems.append(("target.dtype", f"{dtype!r}: Megatron's --bf16 keeps float32 main params in its "
                         "optimizer; pure low-precision weights have no field here"))
    notes.append("weights float32: mixed precision is Megatron's bf16=True (TransformerConfig; Megatron-LM's "
                 "--bf16), which keeps float32 main params in the optimizer")
    if gpt.get("rope_scaling"):
        notes.append(f"Llama 3 rope scaling: GPTModel(rope_scaling=True, rope_scaling_factor="
                     f"{gpt['rope_scaling_factor']:g}) (Megatron-LM's --use-rope-scaling "
                     "--rope-scaling-factor); megatron-core fixes low/high frequency factors 1 and 4 and the "
                     "original context 8192, as the card's config has them")
    notes.append("the model: `from megatron.core.transformer import TransformerConfig; from "
                 "megatron.core.models.gpt import GPTModel; from megatron.core.models.gpt.gpt_layer_specs "
                 "import get_gpt_layer_local_spec`; config = "
                 "TransformerConfig(**export['transformer_config'], "
                 "**callables) with each transformer_config_callables value resolved to its function; "
                 "GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), "
                 "**export['gpt_model']), after torch.distributed.init_process_group(...) and "
                 "megatron.core.parallel_state.initialize_model_parallel() (GPTModel needs the "
                 "model-parallel groups; Megatron-LM's pretrain_gpt.py does both)")
    notes.append("the optimizer: `from megatron.core.optimizer import OptimizerConfig, ParamKey, "
                 "get_megatron_optimizer, get_standard_config_overrides`; oc = "
                 "OptimizerConfig(**export['optimizer_config']); overrides = "
                 "get_standard_config_overrides(oc); overrides.update({ParamKey(name=o['name']): "
                 "o['override'] for o in export['config_overrides']}); get_megatron_optimizer(oc, "
                 "model_chunks, config_overrides=overrides). These per-name overrides replace Megatron's "
                 "get_mup_config_overrides (do not add it: Megatron-LM's training.py adds it under "
                 "use_mup, and then refuses the conflicting LRs); scheduler_config, training_config and "
                 "tokenizer_config are Megatron-LM's `megatron.training.config.training_config` "
                 "SchedulerConfig, TrainingConfig and TokenizerConfig")
    seen: set[str] = set()
    problems = [p for p in problems if not (p[0] in seen or seen.add(p[0]))]  # one line per field
    unfolded = next((why for f, why in problems if f == "residual_multiplier"), None)
    if unfolded is not None:  # never dropped: the model would train without it under CompleteP's LRs
        raise ValueError(f"the megatron export cannot carry card field residual_multiplier: {unfolded}; "
                         "it is not droppable (without it Megatron trains another model than the card's): "
                         "export to hf or torchtitan, which run the multiplier")
    refused = [(f, why) for f, why in problems if f not in drops.allowed]
    if len(refused) > 1:  # all of them at once, not one per try
        problems = [refused[0], *problems]
        last = f"; it cannot carry {', '.join(f for f, _ in refused[1:])} either"
        problems[0] = (refused[0][0], refused[0][1] + last)
    for field, why in problems:
        drops.cannot(field, why)
    drops.check_used()
    out: dict[str, Any] = {
        "engine": "megatron", "transformer_config": tcfg, "transformer_config_callables": callables,
        "gpt_model": gpt, "optimizer_config": ocfg,
        "config_overrides": [{"name": o["name"], "override": o["override"]} for o in overrides],
        "scheduler_config": sched, "training_config": training,
        "tokenizer_config": {"padded_vocab_size": gpt["vocab_size"]}, "dropped": drops.dropped,
        "notes": notes + drops.notes}
    out["verified_against"] = _check_megatron(out)
    return out


def _fold_init(folds: Mapping[str, float]) -> str:
    if not folds:
        return ""
    fs = sorted(set(folds.values()))
    return (f"; the folded residual multiplier also scales the branches' output projections' init by "
            f"x{', x'.join(f'{f:g}' for f in fs)} (TransformerConfig.output_layer_init_method)")


def _decay_note(groups: list[dict[str, Any]], folds: Mapping[str, float], ocfg: Mapping[str, Any],
                wd_mode: str) -> str:
    """Which parameters get which weight decay λ, with η·λ (Megatron's decoupled AdamW:
    p -= lr·λ·p), the fold applied."""
    entries = []
    for g in groups:
        lr, _, wd = folded(g, folds.get(g["name"], 1.0), wd_mode)
        entries.append((g["name"], lr, wd))
    return decay_note(entries, f"optimizer_config.weight_decay {ocfg['weight_decay']:.4g} x each group's "
                               "wd_mult (config_overrides; 0 for biases and norms)")


def _check_megatron(export: Mapping[str, Any]) -> str:
    """Names checked against the installed megatron-core where importable (Python >= 3.12),
    else against :data:`MEGATRON_FIELDS`."""
    for section, names in MEGATRON_FIELDS.items():
        check_fields("megatron", section, export[section], names, MEGATRON_VERIFIED)
    return f"names checked against {MEGATRON_VERIFIED}"
