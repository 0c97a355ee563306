"""``mutransfer fold``: a plain checkpoint with the forward multipliers in the weights."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from mutransfer._io import atomic_path, check_output
from mutransfer.parametrize.fold import PLAIN_FORMAT, fold
from mutransfer.training.checkpoint import load_checkpoint, state_dict_error
from mutransfer.training.config import TrainConfig
from mutransfer.training.trainer import build_parametrization
from mutransfer_cli._common import add_output_flags, print_json

HELP = "fold the μP forward multipliers into the weights: a plain checkpoint for any tool"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="a checkpoint written by `mutransfer train` (checkpoint.pt)")
    p.add_argument("--out", required=True, help="the plain checkpoint to write (.pt)")
    add_output_flags(p)


def run(args: argparse.Namespace) -> int:
    import torch

    if Path(args.out).suffix not in (".pt", ".pth"):  # torch.save's zip whatever the name: say so
        raise ValueError(f"--out {args.out!r} must end in .pt or .pth (fold writes a torch checkpoint)")
    check_output(args.out, inputs=[("the checkpoint", args.checkpoint)])  # never onto a resumable run
    doc = load_checkpoint(args.checkpoint)
    config = doc.get("config")
    source = config.get("source") if isinstance(config, dict) else None  # flat (TrainConfig.to_flat)
    if source:
        raise ValueError(f"checkpoint {args.checkpoint!r} is of your own model ({source}); fold folds the "
                         "multipliers of mutransfer's GPT presets only: load these weights into the model "
                         "your builder or config makes")
    if not isinstance(config, dict):
        raise ValueError(f"checkpoint {args.checkpoint!r} holds no trainer config: it was not written by "
                         "`mutransfer train`")
    if "wte.weight" not in doc["model"]:
        raise ValueError(f"checkpoint {args.checkpoint!r} holds no GPT weights (no wte.weight)")
    cfg = TrainConfig.from_overrides(None, doc["config"])
    gcfg = cfg.model_config(vocab_size=int(doc["model"]["wte.weight"].shape[0]))
    pz = build_parametrization(cfg, gcfg)
    model = pz.build(seed=0)
    try:
        model.load_state_dict(doc["model"])
    except RuntimeError as exc:
        raise ValueError(f"checkpoint {args.checkpoint!r} does not fit its own config: "
                         f"{state_dict_error(exc)}") from None
    idx = torch.zeros(1, min(8, gcfg.seq_len), dtype=torch.long)
    report = fold(model, lambda m: m(idx))
    plain_cfg = gcfg.replace(tie_embeddings=gcfg.tie_embeddings and not report["untied"])
    out = Path(args.out)
    with atomic_path(out) as tmp:
        torch.save({"format": PLAIN_FORMAT, "model": model.state_dict(),
                    "model_config": dataclasses.asdict(plain_cfg), "folded": report}, tmp)
    summary = {"out": str(out), "folded": report["folded"], "untied": report["untied"],
               "parametrization": pz.kind}
    if args.json:
        print_json(summary)
    elif not args.quiet:
        print(f"folded {len(report['folded'])} multiplier(s) of a {pz.kind} model into the weights"
              + (f"; untied {report['untied']}" if report["untied"] else "") + f"; wrote {out}")
    return 0
