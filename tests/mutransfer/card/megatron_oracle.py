"""Run by the Python 3.12 interpreter that has megatron-core 0.19.2 (not by pytest): build
the real Megatron config objects from a Megatron export and report what they hold.

    python megatron_oracle.py CASES.json OUT.json

CASES.json is a list of {"export": a Megatron export, "groups": the card's parameters
(name, shape, role)}; OUT.json gets one result per case, in order (one process for all
cases: importing megatron-core and torch takes most of the time). For each, a parameter of that
shape, named as GPTModel names it, is tagged as megatron-core's LanguageModule tags the
embedding and output layer, and Megatron's own optimizer grouping (_get_param_groups) gives
its max LR, min LR, Adam eps and weight decay (get_standard_config_overrides plus the
export's per-name config_overrides, as the export's notes say); a RoPE model's rotary frequencies come from
megatron-core's own RotaryEmbedding built with the export's GPTModel arguments.
Standalone: mutransfer is not importable
in that interpreter.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import sys
import tempfile


def main(cases_path: str, out_path: str) -> None:
    import torch

    # One process, gloo, a file rendezvous: _get_param_groups all-gathers its group keys.
    init = os.path.join(tempfile.mkdtemp(), "rendezvous")
    torch.distributed.init_process_group("gloo", init_method=f"file://{init}", rank=0, world_size=1)
    results = [build(case["export"], case["groups"]) for case in json.load(open(cases_path))]
    torch.distributed.destroy_process_group()
    with open(out_path, "w") as f:
        json.dump(results, f)


def build(export: dict, groups: list) -> dict:
    import importlib.metadata

    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.optimizer import (
        OptimizerConfig,
        ParamKey,
        _get_param_groups,
        get_standard_config_overrides,
    )
    from megatron.core.transformer import TransformerConfig
    from megatron.training.config.training_config import SchedulerConfig, TokenizerConfig, TrainingConfig

    callables = {k: _resolve(v) for k, v in export["transformer_config_callables"].items()}
    tc = TransformerConfig(**export["transformer_config"], **callables)
    oc = OptimizerConfig(**export["optimizer_config"])
    sc = SchedulerConfig(**export["scheduler_config"])
    trc = TrainingConfig(**export["training_config"])
    tok = TokenizerConfig(**export["tokenizer_config"])
    gpt_args = set(inspect.signature(GPTModel.__init__).parameters)

    def values(obj: object, names: object) -> dict:
        return {k: getattr(obj, k) for k in names}

    out = {
        "version": importlib.metadata.version("megatron-core"),
        "transformer_config": values(tc, export["transformer_config"]),
        "mup_width_mult": tc.mup_width_mult,
        # by identity: F.gelu is a builtin whose __module__ is torch._C._nn
        "activation_func": next((f"torch.nn.functional.{n}" for n in dir(torch.nn.functional)
                                 if getattr(torch.nn.functional, n) is tc.activation_func),
                                repr(tc.activation_func)),
        "optimizer_config": values(oc, export["optimizer_config"]),
        "scheduler_config": values(sc, export["scheduler_config"]),
        "training_config": values(trc, export["training_config"]),
        "tokenizer_config": values(tok, export["tokenizer_config"]),
        "gpt_model_args_missing": sorted(set(export["gpt_model"]) - gpt_args),
        "fields": {"transformer_config": [f.name for f in dataclasses.fields(TransformerConfig)],
                   "optimizer_config": [f.name for f in dataclasses.fields(OptimizerConfig)],
                   "scheduler_config": [f.name for f in dataclasses.fields(SchedulerConfig)],
                   "training_config": [f.name for f in dataclasses.fields(TrainingConfig)],
                   "tokenizer_config": [f.name for f in dataclasses.fields(TokenizerConfig)],
                   "gpt_model": sorted(gpt_args)},
    }

    if export["gpt_model"].get("position_embedding_type") == "rope":
        # the RoPE frequencies GPTModel's own RotaryEmbedding gets from these arguments
        from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

        g = export["gpt_model"]
        rope = RotaryEmbedding(kv_channels=tc.kv_channels, rotary_percent=g.get("rotary_percent", 1.0),
                               rotary_interleaved=tc.rotary_interleaved, rotary_base=g["rotary_base"],
                               rope_scaling=g.get("rope_scaling", False),
                               rope_scaling_factor=g.get("rope_scaling_factor", 8.0),
                               use_cpu_initialization=True)
        out["rope_inv_freq"] = rope.inv_freq.tolist()

    chunk = torch.nn.Module()
    for i, g in enumerate(groups):
        p = torch.nn.Parameter(torch.zeros(g["shape"]))
        if g["role"] in ("input", "output"):  # LanguageModule's tags (use_mup on)
            p.is_embedding_or_output_parameter = True
            p.is_embedding_parameter = True
        chunk.register_parameter(f"p{i}_{g['name'].replace('.', '_')}", p)
    # Megatron matches its ParamKey globs on GPTModel's own names: each parameter carries
    # the name GPTModel gives it; results are reported by the card's name.
    ids = [id(p) for p in chunk.parameters()]
    mnames = dict(zip(ids, (g["megatron_name"] for g in groups), strict=True))
    names = dict(zip(ids, (g["name"] for g in groups), strict=True))

    class Named(torch.nn.Module):
        def named_parameters(self, *a: object, **k: object):  # GPTModel's names
            for p in chunk.parameters():
                yield mnames[id(p)], p

    # the export's notes: standard overrides plus its per-name ones, instead of get_mup_config_overrides
    overrides = get_standard_config_overrides(oc)
    overrides.update({ParamKey(name=o["name"]): o["override"] for o in export["config_overrides"]})
    per_param = {}
    for pg in _get_param_groups([Named()], oc, overrides):
        for p in pg["params"]:
            per_param[names[id(p)]] = {"max_lr": pg["max_lr"], "min_lr": pg["min_lr"],
                                       "eps": pg.get("eps", oc.adam_eps),
                                       "weight_decay": oc.weight_decay * pg["wd_mult"]}
    out["per_param"] = per_param
    return out


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


if __name__ == "__main__":
    main(*sys.argv[1:3])
