"""``mutransfer train``: train one proxy (or a set of WSD branches) and report its losses."""

from __future__ import annotations

import argparse
import functools
import json
import math
from pathlib import Path
from typing import Any

from mutransfer._io import atomic_write_text, check_fresh_dir, check_output
from mutransfer.training.config import TrainConfig, load_config
from mutransfer.training.tracking import parse_track, tracked
from mutransfer.training.train import train, train_wsd_branches
from mutransfer_cli._common import add_output_flags, add_track_flag, float_list, key_value, progress

HELP = "train a proxy model (muP/SP/CompleteP/Muon) on the embedded corpus or your data"



def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``mutransfer train``."""
    p.add_argument("--preset", default=None, metavar="NAME",
                   help="model preset: gpt-tiny (default), gpt-small, gpt-40m")
    p.add_argument("--model", default=None, metavar="MODEL",
                   help="your model: hf:PATH (a local transformers config.json, or its folder; never a "
                        "hub id) or module:function (function(width, depth) -> module mapping token ids "
                        "to logits); a preset name works too. Width/depth come from --set width=/depth=")
    p.add_argument("--head-rule", choices=("keep_head_dim", "keep_heads"), default=None,
                   help="hf: models: heads scale with width, head_dim kept (keep_head_dim, default), "
                        "or head_dim scales (keep_heads)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="YAML/JSON file of TrainConfig fields, flat (lr: 3e-3) or by section "
                        "(optim: {lr: 3e-3}) (read with yaml.safe_load)")
    p.add_argument("--set", dest="overrides", action="append", type=key_value, default=[],
                   metavar="KEY=VALUE",
                   help="override a TrainConfig field by its flat or dotted name, e.g. --set lr=3e-3 "
                        "--set model.width=128 (repeatable; 'none' for None). Applied after --config "
                        "and --preset")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write result.json, metrics.jsonl (and checkpoints if checkpoint_every) here")
    p.add_argument("--resume", default=None, metavar="CKPT", help="resume from this checkpoint")
    p.add_argument("--overwrite", action="store_true",
                   help="let --out replace an earlier run's result.json, metrics and checkpoint")
    p.add_argument("--wsd-branches", default=None,
                   type=functools.partial(float_list, high=1.0, what="WSD branch fraction"),
                   metavar="F,F,...",
                   help="WSD branching: one stable run, a cooldown at each fraction of the steps "
                        "(e.g. 0.25,0.5,1.0); each branch equals a separate run of that length")
    add_track_flag(p)
    add_output_flags(p)


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def build_config(args: argparse.Namespace) -> Any:
    """TrainConfig from defaults, then --config, --preset, --set, --out, --resume."""

    cfg = load_config(args.config) if args.config else TrainConfig()
    overrides: dict[str, Any] = {}
    if args.preset is not None:
        overrides["preset"] = args.preset
    if args.model is not None:
        overrides["source"] = args.model
    if args.head_rule is not None:
        overrides["head_rule"] = args.head_rule
    for key, value in args.overrides:
        overrides[key] = value
    if args.out is not None:
        overrides["out_dir"] = args.out
    if args.resume is not None:
        overrides["resume"] = args.resume
    cfg = TrainConfig.from_overrides(cfg, overrides)
    if cfg.optim.lr > MAX_LR:  # the config takes any positive LR; a run at 1e300 only diverges
        raise ValueError(f"lr must be at most {MAX_LR:g} (what a card may hold), got {cfg.optim.lr!r}")
    return cfg


#: The largest base LR trained: the card's own bound (``CARD_RANGES["lr"]``).
MAX_LR = 1e4


#: what a finished run leaves in --out (a resume continues it; anything else needs --overwrite)
_RUN_FILES = ("result.json", "metrics.jsonl", "metrics.csv", "checkpoint.pt")


def run(args: argparse.Namespace) -> int:
    """Train; print a summary (or ``--json``) and write ``result.json`` under ``--out``."""

    cfg = build_config(args)  # every bad value fails here or before the first write
    check_output(cfg.output.out_dir, inputs=[cfg.output.resume, args.config], directory=True)
    check_fresh_dir(cfg.output.out_dir, _RUN_FILES, overwrite=args.overwrite or bool(cfg.output.resume))
    if args.wsd_branches and cfg.output.resume:
        raise ValueError("--wsd-branches cannot be combined with --resume")
    callback, tracker = None, None
    if args.track is not None:
        track = parse_track(args.track, cfg.output.out_dir)
        name = Path(cfg.output.out_dir).resolve().name if cfg.output.out_dir else (
            f"{cfg.parametrization.kind},lr={cfg.optim.lr:.4g},seed={cfg.run.seed}")
        callback, tracker = tracked(None, track, name, cfg.to_flat())
    results: list[Any] = []
    # piped, a line every progress interval from here (building an hf: model takes a while
    # too); on a terminal the trainer's own bar
    bar = progress(cfg.run.steps, "train", args.quiet, unit="step", tty_bar=False)
    inner = callback

    def report(step: int, metrics: dict[str, Any]) -> bool | None:
        loss = metrics.get("val_loss", metrics.get("loss"))
        bar.set(done=step, best=loss if isinstance(loss, float) else None)
        return inner(step, metrics) if inner is not None else None

    try:
        if args.wsd_branches:
            results = train_wsd_branches(cfg, args.wsd_branches, callback=report, progress=not args.quiet)
        else:
            results = [train(cfg, callback=report, progress=not args.quiet)]
    finally:
        bar.close()
        if tracker is not None:
            tracker.finish(results)
    docs = [_clean({"row": r.to_row(), "evals": [list(e) for e in r.evals], "spikes": r.spikes,
                    "rollbacks": [list(x) for x in r.rollbacks]}) for r in results]
    doc: Any = docs[0] if len(docs) == 1 else {"branches": docs}
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if cfg.output.out_dir:
        atomic_write_text(Path(cfg.output.out_dir) / "result.json", text)
    if args.json:
        print(text, end="")
    else:
        for r in results:
            first = r.history[0]["loss"] if r.history else float("nan")
            status = "DIVERGED" if r.diverged else ("pruned" if r.pruned else "done")
            print(f"{status}: {r.parametrization} width {r.width} depth {r.depth} "
                  f"({r.n_params / 1e6:.2f}M params), {r.steps_done}/{r.steps} steps, {r.tokens:,} tokens, "
                  f"train loss {first:.3f} -> {r.train_loss:.3f}, val loss {r.loss:.4f}, "
                  f"{r.tokens_per_s:,.0f} tok/s, {r.wall_s:.1f} s")
    return 0
