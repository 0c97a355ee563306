"""The card as torchtitan (0.3.0) config sections, parameter groups and μP model converter.

A card whose parameters carry Hugging Face Llama names (``transfer --model hf:...`` on a
Llama config) is exported onto torchtitan's own llama3 model: :data:`HF_TO_TORCHTITAN`
renames parameters and modules exactly as torchtitan's ``Llama3StateDictAdapter.from_hf_map``
does (``model.layers.N.self_attn.q_proj`` -> ``layers.N.attention.qkv_linear.wq``, ...;
build the model with ``fuse_qkv=False``). A card whose names match none of those rules is
exported under its own names (a model whose names already are torchtitan's).

What torchtitan's config cannot hold (μP's init and forward multipliers: the readout's
×1/m, residual multipliers, attention scales) goes into the export's ``mup`` section,
which :class:`mutransfer.engines.torchtitan.MuPConverter` (a torchtitan
``ModelConfigConverter``) installs on the model it builds. The LR schedule is matched step
for step: torchtitan's ``total_steps`` is set one below the run's steps so its decay ends
on the card's last step at the card's ``lr_floor``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mutransfer.card import schedule_config, validate_card
from mutransfer.export._common import Drops, _groups, _lr_floor, check_fields, split_batch
from mutransfer.schedules import Schedule

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
    names, and the ``mup`` section for :class:`mutransfer.engines.torchtitan.MuPConverter`."""
    card = validate_card(card)
    drops = Drops("torchtitan", drop)
    groups = _groups(card)
    rename, names_from = _renamer(card)
    opt, batch = card["optimizer"], card["batch"]
    betas = [float(b) for b in opt.get("betas", (0.9, 0.95))]
    by_key: dict[tuple[float, float, float], list[str]] = {}
    for g in groups:
        key = (float(g["lr"]), float(g["weight_decay"]), float(g.get("eps", opt.get("eps", 1e-8))))
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
    fm = card["forward_multipliers"]
    mup = {"init": {rename(g["name"]): g["init"] for g in groups},
           "shapes": {rename(g["name"]): list(g["shape"]) for g in groups},
           "hooks": [dict(h, module=rename(h["module"])) for h in fm["hooks"]],
           "attention": {rename(a): float(v) for a, v in fm["attention"].items()}}
    out = {"engine": "torchtitan", "names": names_from, "optimizer": {"param_groups": param_groups},
           "lr_scheduler": _schedule(card, drops), "training": training, "mup": mup,
           "batch": split._asdict(),
           "notes": [f"{split.dp_size} data-parallel rank(s) × local_batch_size {split.micro_batch} × "
                     f"{split.grad_accum} accumulation steps = global_batch_size {split.sequences}",
                     "install μP's init and forward multipliers with the model converter "
                     "mutransfer.engines.torchtitan.MuPConverter.Config(export=<this file>) in "
                     "model_registry(..., converters=[...]); without it the model is not μP"]}
    drops.check_used()
    out["dropped"] = drops.dropped
    out["verified_against"] = _check_torchtitan(out)
    return out


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
