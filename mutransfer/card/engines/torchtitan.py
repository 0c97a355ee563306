"""The card as torchtitan (0.3.0) config sections, parameter groups and μP model converter.

A card whose parameters carry Hugging Face Llama names (``transfer --model hf:...`` on a
Llama config) is exported onto torchtitan's own llama3 model: :data:`HF_TO_TORCHTITAN`
renames parameters and modules exactly as torchtitan's ``Llama3StateDictAdapter.from_hf_map``
does (``model.layers.N.self_attn.q_proj`` -> ``layers.N.attention.qkv_linear.wq``, ...;
build the model with ``fuse_qkv=False``). A card whose names match none of those rules is
exported under its own names (a model whose names already are torchtitan's).

What torchtitan's config cannot hold (μP's init and forward multipliers: the readout's
×1/m, residual multipliers, attention scales) goes into the export's ``mup`` section,
which :class:`mutransfer.card.engines.torchtitan_model.MuPConverter` (a torchtitan
``ModelConfigConverter``) installs on the model it builds. For an HF card the init of
every weight matrix is written absolute (``normal:S``: HF's ``initializer_range`` times the
card's ``scale:F``), since the card's factors are on HF's one-std init and torchtitan's own
llama3 configs init otherwise (embedding std 1, output head dim^-1/2, depth-scaled
``wo``/``w2``/``w3``). The LR schedule is matched step
for step: torchtitan's ``total_steps`` is set one below the run's steps so its decay ends
on the card's last step at the card's ``lr_floor``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mutransfer.card.engines._common import (
    Drops,
    _groups,
    _lr_floor,
    check_fields,
    decay_note,
    family_traits,
    split_batch,
)
from mutransfer.card.engines.megatron import _from_hf
from mutransfer.card.schema import schedule_config
from mutransfer.training.schedules import Schedule

#: Hugging Face Llama name -> torchtitan llama3 name (first match wins), the renames of
#: torchtitan 0.3.0's ``Llama3StateDictAdapter.from_hf_map``, for parameters and modules.
HF_TO_TORCHTITAN: tuple[tuple[str, str], ...] = (
    (r"model\.embed_tokens", "tok_embeddings"),
    (r"model\.layers\.(\d+)\.self_attn\.q_proj", r"layers.\1.attention.qkv_linear.wq"),
    (r"model\.layers\.(\d+)\.self_attn\.k_proj", r"layers.\1.attention.qkv_linear.wk"),
    (r"model\.layers\.(\d+)\.self_attn\.v_proj", r"layers.\1.attention.qkv_linear.wv"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj", r"layers.\1.attention.wo"),
    (r"model\.layers\.(\d+)\.self_attn", r"layers.\1.attention"),
    (r"model\.layers\.(\d+)\.mlp\.gate_proj", r"layers.\1.feed_forward.w1"),
    (r"model\.layers\.(\d+)\.mlp\.up_proj", r"layers.\1.feed_forward.w3"),
    (r"model\.layers\.(\d+)\.mlp\.down_proj", r"layers.\1.feed_forward.w2"),
    (r"model\.layers\.(\d+)\.mlp", r"layers.\1.feed_forward"),
    (r"model\.layers\.(\d+)\.input_layernorm", r"layers.\1.attention_norm"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm", r"layers.\1.ffn_norm"),
    (r"model\.norm", "norm"),
    (r"lm_head", "lm_head"),
)
_RULES = tuple((re.compile(p + r"(?P<leaf>(\.(weight|bias))?)"), r) for p, r in HF_TO_TORCHTITAN)


def torchtitan_name(name: str) -> str | None:
    """The torchtitan llama3 name of a Hugging Face Llama parameter or module (None: no rule)."""
    for pat, repl in _RULES:
        m = pat.fullmatch(name)
        if m:
            return m.expand(repl) + m.group("leaf")
    return None


def _renamer(card: Mapping[str, Any]) -> tuple[Any, str]:
    names = [g["name"] for g in card["param_groups"]]
    mapped = {n: torchtitan_name(n) for n in names}
    if not any(t is not None and n.startswith("model.") for n, t in mapped.items()):
        return (lambda n: n), "the card's own parameter names"
    bad = next((n for n, t in mapped.items() if t is None), None)
    if bad is not None:
        raise ValueError(f"the torchtitan export: parameter {bad} has no torchtitan llama3 name (the card's "
                         "other names are Hugging Face Llama's)")

    def rename(n: str) -> str:
        t = torchtitan_name(n)
        if t is None:
            raise ValueError(f"the torchtitan export: module {n} has no torchtitan llama3 name")
        return t

    return rename, "torchtitan llama3 (renamed from Hugging Face Llama as Llama3StateDictAdapter does)"


#: HF model types whose decoder torchtitan's llama3 builds (pre-norm RMSNorm, RoPE,
#: SwiGLU, GQA, no biases); anything else a card's HF target has is refused by field.
TORCHTITAN_HF_FAMILIES: tuple[str, ...] = ("llama", "mistral", "qwen2")


def _rope(cfg: Mapping[str, Any], problems: list[tuple[str, str]]) -> dict[str, Any]:
    """torchtitan's ``ComplexRoPE.Config`` fields for an HF config's RoPE: none, or
    Llama 3's scaling (``rope_type: llama3``), the only HF scaling torchtitan's llama3 has."""
    rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = rope.get("rope_type", rope.get("type", "default"))
    out: dict[str, Any] = {"theta": theta, "scaling": "none"}
    if kind == "llama3":
        out.update(scaling="llama", scaling_factor=float(rope["factor"]),
                   low_freq_factor=float(rope["low_freq_factor"]),
                   high_freq_factor=float(rope["high_freq_factor"]),
                   original_max_position_embeddings=int(rope["original_max_position_embeddings"]))
    elif kind != "default":
        problems.append(("target.model.config.rope_parameters.rope_type",
                         f"{kind!r}: torchtitan's llama3 RoPE has Llama 3's scaling (llama3) or none"))
    return out


def llama3_architecture(card: Mapping[str, Any]) -> dict[str, Any] | None:
    """The torchtitan llama3 architecture of a card whose target is an HF Llama-family
    config (None for any other target): sizes, GQA heads, head dim, norm eps, tying, RoPE
    (Llama 3 scaling included) and HF's init std, what
    :func:`mutransfer.card.engines.torchtitan_model.llama3_config` builds. What the llama3 cannot
    express (q/k/v or MLP biases, another activation, another RoPE scaling, sliding
    windows, an unknown family) is one ValueError naming every such card field."""
    model = card["target"].get("model") or {}
    if model.get("kind") != "hf":
        return None
    mt, cfg = str(model.get("model_type")), dict(model.get("config") or {})
    problems: list[tuple[str, str]] = []
    if mt not in TORCHTITAN_HF_FAMILIES:
        problems.append(("target.model.model_type", f"{mt!r}{family_traits(mt)}: the torchtitan export "
                         f"covers {', '.join(TORCHTITAN_HF_FAMILIES)}"))
    biases = sorted(g["name"] for g in card["param_groups"] if g["name"].endswith(".bias"))
    if biases:
        why = "Qwen2's q/k/v biases" if mt == "qwen2" else "biases"
        field = "target.model.config.attention_bias" if cfg.get("attention_bias") else (
            "target.model.config.mlp_bias" if cfg.get("mlp_bias") else "target.model.model_type")
        problems.append((field, f"{why} ({len(biases)} parameters, e.g. {biases[0]}): torchtitan's llama3 "
                         "linears have no bias"))
    if cfg.get("hidden_act", "silu") != "silu":
        problems.append(("target.model.config.hidden_act", f"{cfg['hidden_act']!r}: torchtitan's llama3 "
                         "feed-forward is SwiGLU (silu)"))
    if cfg.get("sliding_window") and cfg.get("use_sliding_window", mt == "mistral"):
        problems.append(("target.model.config.sliding_window", f"{cfg['sliding_window']!r}: torchtitan's "
                         "llama3 attends to the whole context"))
    rope = _rope(cfg, problems)
    if problems:
        rest = ", ".join(f for f, _ in problems[1:])
        more = f"; it cannot carry {rest} either" if rest else ""
        raise ValueError(f"the torchtitan export cannot carry card field {problems[0][0]}: {problems[0][1]}"
                         f"{more} ({_instead(model)})")
    w, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    seq_len = int(card.get("batch", {}).get("seq_len") or card["target"].get("seq_len")
                  or cfg.get("max_position_embeddings") or 2048)
    return {"dim": w, "n_layers": int(cfg["num_hidden_layers"]), "n_heads": heads,
            "n_kv_heads": int(cfg.get("num_key_value_heads") or heads),
            "head_dim": int(cfg.get("head_dim") or w // heads),
            "hidden_dim": int(cfg["intermediate_size"]), "vocab_size": int(cfg["vocab_size"]),
            "norm_eps": float(cfg.get("rms_norm_eps", 1e-6)),
            "enable_weight_tying": bool(cfg.get("tie_word_embeddings", False)),
            "max_seq_len": seq_len, "init_std": float(cfg.get("initializer_range", 0.02)),
            "rope": rope}


def _instead(model: Mapping[str, Any]) -> str:
    """The advice after a refusal: the engines that accept this HF target. hf takes every
    family transformers builds; megatron only where its own architecture check passes
    (:data:`mutransfer.card.engines.megatron.HF_FAMILIES`, no sliding window, silu)."""
    problems: list[tuple[str, str]] = []
    try:
        _from_hf(model, None, problems)
    except (ValueError, KeyError, TypeError) as exc:
        named = re.search(r"card field (\S+):", str(exc))
        problems.append((named.group(1) if named else "target.model", str(exc)))
    return ("export this card to hf or megatron instead" if not problems else
            f"export this card to hf instead; megatron refuses it too, at {problems[0][0]}")


def _absolute_init(group: Mapping[str, Any], init_std: float | None) -> str:
    """The card's init of one parameter for the converter. For an HF card (``init_std``:
    its ``initializer_range``) a weight matrix's ``keep`` / ``scale:F`` is relative to HF's
    init, normal with that one std, so it is written as the absolute ``normal:S`` (S =
    init_std × F): the converter then gives μP's std whatever init the torchtitan config
    starts from (torchtitan's own llama3 configs: embedding std 1, head dim^-1/2, depth-
    scaled wo/w2/w3; a factor on those would be off by their ratio to HF's). Norm weights
    (ones in both), ``zeros`` and ``normal:S`` are kept; so is every entry of a card
    without an HF target (its factors are on the init of the model it was made for)."""
    init = str(group["init"])
    if init_std is None or len(group["shape"]) < 2:
        return init
    if init == "keep":
        return f"normal:{init_std:.6g}"
    if init.startswith("scale:"):
        return f"normal:{init_std * float(init.split(':', 1)[1]):.6g}"
    return init


def _pattern(names: Sequence[str]) -> str:
    return "^(?:" + "|".join(re.escape(n) for n in names) + ")$"


def _schedule(card: Mapping[str, Any], drops: Drops) -> dict[str, Any]:
    s = card["schedule"]
    cfg = schedule_config(s)
    total, warmup = int(s["total_steps"]), cfg.warmup_steps
    if cfg.kind not in ("wsd", "cosine", "linear"):
        drops.cannot("schedule.kind", f"torchtitan's scheduler is warmup-stable-decay; {cfg.kind!r} "
                     "has no form in it (the export then holds a constant LR after warmup)")
        return {"warmup_steps": warmup, "decay_ratio": 0.0, "decay_type": "linear", "min_lr_factor": 1.0}
    shape = cfg.decay_shape if cfg.kind == "wsd" else cfg.kind
    tt_shape = {"linear": "linear", "1-sqrt": "sqrt", "cosine": "cosine"}.get(shape)
    if tt_shape is None:
        drops.cannot("schedule.decay_shape", f"torchtitan has no decay type for shape {shape!r} (linear "
                     "is used instead)")
        tt_shape = "linear"
    # Card: progress (t - start) / (total - 1 - start), lr_floor at t = total - 1.
    # torchtitan: stable = T + 1 - W - D, progress (t + 1 - W - stable) / D with T its
    # total_steps: T = total - 1 and D = total - 1 - start give the card's curve exactly.
    start = Schedule(cfg).decay_start
    decay = total - 1 - (start if start is not None else total)
    if total < 2 or decay < 0:
        drops.cannot("schedule.decay_fraction", "no decay step inside the run")
        decay = 0
    ratio = decay / (total - 1) if total > 1 else 0.0
    if total > 1 and round((total - 1) * ratio) != decay:  # float rounding must not move a step
        raise ValueError(f"torchtitan's decay_ratio cannot express {decay} decay steps of {total - 1}")
    return {"warmup_steps": warmup, "total_steps": max(total - 1, 1), "decay_ratio": ratio,
            "decay_type": tt_shape, "min_lr_factor": _lr_floor(s)}


def export_torchtitan(card: Mapping[str, Any], *, dp_size: int | None = None, micro_batch: int | None = None,
                      drop: Iterable[str] = ()) -> dict[str, Any]:
    """``optimizer``, ``lr_scheduler`` and ``training`` sections in torchtitan's field
    names, and the ``mup`` section for :class:`mutransfer.card.engines.torchtitan_model.MuPConverter`."""
    drops = Drops("torchtitan", drop)
    groups = _groups(card)
    arch = llama3_architecture(card)  # refuses what the llama3 cannot build, before anything else
    rename, names_from = _renamer(card)
    opt, batch = card["optimizer"], card["batch"]
    betas = [float(b) for b in opt["betas"]]
    by_key: dict[tuple[float, float, float], list[str]] = {}
    for g in groups:
        key = (float(g["lr"]), float(g["weight_decay"]), float(g["eps"]))
        by_key.setdefault(key, []).append(rename(g["name"]))
    param_groups = [{"pattern": _pattern(names), "optimizer_name": "AdamW",
                     "optimizer_kwargs": {"lr": lr, "betas": betas, "eps": eps, "weight_decay": wd}}
                    for (lr, wd, eps), names in by_key.items()]
    split = split_batch(card, dp_size, micro_batch)
    seq_len = int(batch.get("seq_len") or card["target"].get("seq_len") or 0)
    training = {"steps": int(card["schedule"]["total_steps"]), "global_batch_size": split.sequences,
                "local_batch_size": split.micro_batch}
    if seq_len:
        training["seq_len"] = seq_len
    dtype = card["target"].get("dtype") or "float32"
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"the torchtitan export cannot carry card field target.dtype: {dtype!r}; "
                         "torchtitan's training.dtype is float32 (mixed precision) or bfloat16")
    training["dtype"] = dtype  # float32: fp32 master weights, bf16 compute via mixed_precision_param
    fm = card["forward_multipliers"]
    init_std = None if arch is None else float(arch["init_std"])
    mup = {"init": {rename(g["name"]): _absolute_init(g, init_std) for g in groups},
           "shapes": {rename(g["name"]): list(g["shape"]) for g in groups},
           "hooks": [dict(h, module=rename(h["module"])) for h in fm["hooks"]],
           "attention": {rename(a): float(v) for a, v in fm["attention"].items()}}
    out = {"engine": "torchtitan", "names": names_from, "optimizer": {"param_groups": param_groups},
           "lr_scheduler": _schedule(card, drops), "training": training, "mup": mup,
           "batch": split._asdict(),
           "notes": [f"{split.dp_size} data-parallel rank(s) × local_batch_size {split.micro_batch} × "
                     f"{split.grad_accum} accumulation steps = global_batch_size {split.sequences}",
                     decay_note(((g["name"], g["lr"], g["weight_decay"]) for g in groups),
                                "each optimizer.param_groups entry's optimizer_kwargs.weight_decay (AdamW)"),
                     f"training.dtype {dtype}: " + ("fp32 master weights, bf16 compute (torchtitan's "
                                                    "mixed_precision_param)" if dtype == "float32"
                                                    else "pure bf16 weights and optimizer state")]}
    if arch is not None:
        out["model"] = arch
        out["notes"] += [
            "the model: `from mutransfer.card.engines.torchtitan_model import model_spec; "
            "spec = model_spec(EXPORT)` gives torchtitan's llama3 ModelSpec of this architecture "
            "(separate wq/wk/wv, HF's init) under the card's μP; "
            "`from mutransfer.card.engines.torchtitan_model import llama3_config` gives its model config "
            "alone. torchtitan's own model_registry flavours fuse q/k/v and cannot take this card",
            "the optimizer: `from mutransfer.card.engines.torchtitan import torchtitan_param_groups; "
            "OptimizersContainer.Config(param_groups=torchtitan_param_groups(export), ...)`"]
    else:
        out["notes"] += [
            "install μP's init and forward multipliers on your own torchtitan model config with "
            "`from mutransfer.card.engines.torchtitan_model import MuPConverter; "
            "MuPConverter.Config(export=EXPORT).build().convert(model_config)`; without it the model is "
            "not μP",
            "the optimizer: `from mutransfer.card.engines.torchtitan import torchtitan_param_groups; "
            "OptimizersContainer.Config(param_groups=torchtitan_param_groups(export), ...)`"]
    out["usage"] = _usage(arch is not None)
    drops.check_used()
    out["dropped"] = drops.dropped
    out["verified_against"] = _check_torchtitan(out)
    return out


def _usage(hf: bool) -> str:
    """Python that builds torchtitan's model and optimizer groups from the export file
    (EXPORT: its path, filled in by ``mutransfer export``)."""
    head = ["import json", "",
            "from torchtitan.components.optimizer.optimizer import OptimizersContainer", "",
            "from mutransfer.card.engines.torchtitan import torchtitan_param_groups", ""]
    if hf:
        head[4:4] = ["from mutransfer.card.engines.torchtitan_model import model_spec"]
        body = ["spec = model_spec(EXPORT)  # llama3, unfused q/k/v, the card's μP installed on build"]
    else:
        head[4:4] = ["from mutransfer.card.engines.torchtitan_model import MuPConverter"]
        body = ["model_config = MuPConverter.Config(export=EXPORT).build().convert(model_config)  # yours"]
    body += ["export = json.load(open(EXPORT))",
             "optimizer = OptimizersContainer.Config(param_groups=torchtitan_param_groups(export))"]
    return "\n".join(['EXPORT = "torchtitan.json"', *head, *body]) + "\n"


def _check_torchtitan(export: Mapping[str, Any]) -> str:
    try:
        import importlib.metadata as md

        from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
        from torchtitan.components.optimizer.optimizer import OptimizersContainer, ParamGroupConfig
        from torchtitan.config.configs import TrainingConfig
    except ImportError:
        return "not checked: torchtitan is not installed (names read from torchtitan 0.3.0 source)"
    version = f"torchtitan {md.version('torchtitan')}"
    for section, cls in (("optimizer", OptimizersContainer.Config),
                         ("lr_scheduler", LRSchedulersContainer.Config), ("training", TrainingConfig)):
        names = {f.name for f in dataclasses.fields(cls)}
        check_fields("torchtitan", section, export[section], names, version)
    pg = {f.name for f in dataclasses.fields(ParamGroupConfig)}
    for g in export["optimizer"]["param_groups"]:
        check_fields("torchtitan", "ParamGroupConfig", g, pg, version)
    return version


def torchtitan_param_groups(export: Mapping[str, Any]) -> list[Any]:
    """The export's ``optimizer.param_groups`` as torchtitan ``ParamGroupConfig`` objects,
    for ``OptimizersContainer.Config(param_groups=...)``."""
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig

    return [ParamGroupConfig(**g) for g in export["optimizer"]["param_groups"]]
