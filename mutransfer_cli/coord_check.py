"""``mutransfer coord-check``: activation size against width (and depth), with a verdict."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mutransfer._io import check_fresh_dir, check_output
from mutransfer.checks.coord_check import LR_PER_INIT_STD, coord_check, default_lr, init_std
from mutransfer.models.builder import logits_of
from mutransfer.models.gpt import GPT, GPTConfig
from mutransfer.models.mlp import MLP
from mutransfer.models.presets import get_preset
from mutransfer.models.source import build_model, parse_model
from mutransfer.parametrize.specs import KINDS, Rule
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.model_section import ModelSection
from mutransfer_cli._common import (
    add_output_flags,
    int_list,
    number_in,
    positive_float,
    positive_int,
    print_json,
    progress,
    seed_list,
)

HELP = "coordinate check: is the parametrization right? (csv + png + json verdict)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="gpt", metavar="MODEL",
                   help="gpt (gpt-tiny, default), mlp, a preset name, hf:PATH (a local transformers "
                        "config.json) or module:function (function(width, depth) -> module giving logits)")
    p.add_argument("--head-rule", choices=("keep_head_dim", "keep_heads"), default="keep_head_dim",
                   help="hf: models: heads scale with width (keep_head_dim, default) or head_dim does")
    p.add_argument("--parametrization", "-p", default="mup",
                   help="sp | mup | completep | muon (default mup)")
    p.add_argument("--widths", type=int_list, default=[64, 128, 256, 512],
                   help="comma-separated widths (default 64,128,256,512)")
    p.add_argument("--depths", type=int_list, default=None,
                   help="comma-separated depths: also check depth transfer (for completep)")
    p.add_argument("--base-width", type=positive_int, default=None, help="default: smallest width")
    p.add_argument("--depth-alpha", type=number_in(0.5, 1.0, only=(0.5, 1.0)), default=1.0,
                   help="CompleteP alpha, 0.5 or 1")
    p.add_argument("--readout-init", choices=("fan_in", "constant", "zero"), default="fan_in",
                   help="μP readout init: fan_in (default: SP's effective law), constant (mup's) or zero")
    p.add_argument("--steps", type=positive_int, default=5, help="training steps (default 5)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=seed_list, default=None, help="comma-separated seeds, e.g. 0,1,2")
    # default None: a given --n-seeds equal to the default must still clash with --seeds
    seeds.add_argument("--n-seeds", type=positive_int, default=None,
                       help="seeds 0..N-1 per width (default 3)")
    p.add_argument("--optimizer", choices=("adamw", "sgd", "muon"), default=None,
                   help="default: muon for -p muon, else adamw")
    p.add_argument("--lr", type=positive_float, default=None,
                   help="learning rate (default: 0.1 for sgd; for adamw/muon 1e-2 on our presets and "
                   "0.1 x the init std of the weight matrices on any other model, 2e-3 for Hugging Face's "
                   "0.02: at 1e-2 a correct muP failed on real HF shapes)")
    p.add_argument("--batch-size", type=positive_int, default=8, help="sequences in the batch")
    p.add_argument("--seq-len", type=positive_int, default=64, help="tokens per sequence")
    p.add_argument("--data", default="stdlib", help="token source (default: the embedded stdlib corpus)")
    p.add_argument("--tol", type=positive_float, default=None,
                   help="largest allowed |log2 slope| of activation size (default: 0.25 plus the "
                        "finite-width allowance of the widths, 0.37 over 64-512; see ladder_tol)")
    p.add_argument("--rule", action="append", default=[], metavar="REGEX=ROLE",
                   help="role override, first match wins (repeatable): e.g. 'pos_emb=vector'; "
                        "roles: input, hidden, output, vector, scalar")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier coord check in --out")
    p.add_argument("--strict", action="store_true", help="exit 1 when the check fails")
    p.add_argument("--no-plot", action="store_true", help="skip coord_check.png")
    add_output_flags(p)


def run(args: argparse.Namespace) -> int:
    if args.parametrization not in KINDS:
        raise ValueError(f"unknown parametrization {args.parametrization!r}; choose from {', '.join(KINDS)}")
    check_output(args.out, directory=True)
    check_fresh_dir(args.out, ("coord_check.json", "coord_check.csv"), overwrite=args.overwrite)
    optimizer = args.optimizer or ("muon" if args.parametrization == "muon" else "adamw")
    if (optimizer == "muon") != (args.parametrization == "muon"):
        raise ValueError(f"optimizer {optimizer!r} does not go with parametrization {args.parametrization!r}")
    if args.parametrization == "completep" and not args.depths:
        raise ValueError("--parametrization completep needs --depths (e.g. --depths 2,4,8)")
    seeds = args.seeds if args.seeds is not None else list(range(args.n_seeds or 3))
    rules = [_parse_rule(r) for r in args.rule]
    n = len(args.widths) * len(args.depths or [0]) * len(seeds)
    # from here on the verb builds and trains models: report it, on a terminal or piped
    with progress(n, f"coord-check {args.parametrization}", args.quiet) as bar:
        result, lr = _check(args, seeds, rules, optimizer, bar)
    paths = result.write(args.out, plot=not args.no_plot)
    return _report(args, result, lr, paths)


def _check(args: argparse.Namespace, seeds: list[int], rules: list[Any], optimizer: str,
           bar: Any) -> tuple[Any, float]:
    """Build the models, pick the LR, run the check (``bar`` advances per run)."""
    import torch

    torch.manual_seed(0)
    name = {"gpt": "gpt-tiny", "mlp": "mlp-tiny"}.get(args.model, args.model)
    source = parse_model(name, head_rule=args.head_rule)
    kind = "mlp" if source.builtin and not isinstance(get_preset(source.ref), GPTConfig) else (
        "gpt" if source.builtin else "source")
    if kind == "source":
        builder, batch, loss_fn = _source_setup(source, args)
    elif kind == "gpt":
        base = get_preset(source.ref).replace(seq_len=args.seq_len)
        for w in args.widths:
            base.replace(width=w)  # validates head divisibility with a clear error
        data = load_dataset(DataConfig(source=args.data))
        batch = data.get_batch("train", 0, args.batch_size, args.seq_len, seed=0)
        if args.depths:
            def builder(width: int, depth: int) -> torch.nn.Module:
                return GPT(base.replace(width=width, depth=depth))
        else:
            def builder(width: int) -> torch.nn.Module:  # type: ignore[misc]
                return GPT(base.replace(width=width))
        loss_fn = None
    else:
        if args.data != "stdlib":  # the MLP reads random features: a --data would be ignored
            raise ValueError(f"--data {args.data!r} is read by token models only; {name} takes random "
                             "features")
        base_m = get_preset(source.ref)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(args.batch_size * 8, base_m.in_features, generator=g)
        batch = (x, torch.randint(0, base_m.out_features, (x.shape[0],), generator=g))
        if args.depths:
            def builder(width: int, depth: int) -> torch.nn.Module:
                return MLP(base_m.replace(width=width, depth=depth))
        else:
            def builder(width: int) -> torch.nn.Module:  # type: ignore[misc]
                return MLP(base_m.replace(width=width))

        def loss_fn(model: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(model(b[0]), b[1])

    lr, lr_rule = args.lr, "given (--lr)"
    if lr is None and (optimizer == "sgd" or kind != "source"):
        lr, lr_rule = (0.1, "default for sgd") if optimizer == "sgd" else (1e-2, "default for our models")
    elif lr is None:
        probe = builder(min(args.widths), *([min(args.depths)] if args.depths else []))
        lr = default_lr(probe, optimizer)
        lr_rule = f"default: {LR_PER_INIT_STD:g} x the init std {init_std(probe):.3g} of the weight matrices"
        del probe
    kwargs = {"loss_fn": loss_fn} if loss_fn is not None else {}
    per_pass = bar.total

    def tick() -> None:
        if bar.done >= bar.total:  # the LR was lowered: the whole check runs again
            bar.extend(per_pass)
        bar.advance()

    result = coord_check(
        builder, batch, kind=args.parametrization, widths=args.widths, base_width=args.base_width,
        depths=args.depths, depth_alpha=args.depth_alpha, steps=args.steps, seeds=seeds,
        optimizer=optimizer, lr=lr, tol=args.tol, rules=rules, progress=tick,
        readout_init=args.readout_init, adapt_lr=args.lr is None, **kwargs)
    # a default LR is lowered when the run itself is unstable (a given --lr is the user's):
    # said on stderr and recorded, so the verdict names the LR it was taken at
    for low in result.settings.get("lr_lowered", []):
        print(f"coord-check: the run was unstable at lr {low['lr']:.3g} ({low['why']}); lowered to "
              f"{low['to']:.3g}", file=sys.stderr)
    if result.settings.get("unstable"):
        print(f"coord-check: still unstable at lr {result.settings['lr']:.3g} ({result.settings['unstable']}); "
              "the verdict below is not a width trend: give a lower --lr", file=sys.stderr)
    result.settings["lr_rule"] = lr_rule + (f", lowered {len(result.settings['lr_lowered'])}x by "
                                            "4 for an unstable run" if result.settings.get("lr_lowered") else "")
    return result, result.settings["lr"]


def _report(args: argparse.Namespace, result: Any, lr: float, paths: dict[str, Any]) -> int:
    summary = result.to_json_dict()
    if args.json:
        print_json(summary)
    elif not args.quiet:
        worst = summary["worst"]
        verdict = "PASSED" if result.passed else "FAILED"
        print(f"coord-check {args.parametrization}: {verdict} at lr {lr:.3g}: worst slope "
              f"{worst['slope']:+.2f} at {worst['module']}, step {worst['step']}, along {worst['axis']}; "
              f"{_allowed(result, worst)}" + _transients(result))
        print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if (args.strict and not result.passed) else 0


def _transients(result: Any) -> str:
    """The out-of-band steps that did not decide the verdict, in one clause."""
    t = result.transients()
    if t.empty:
        return ""
    first = t.iloc[0]
    return (f"; {len(t)} transient step(s) out of band did not decide it (e.g. {first['module']} at step "
            f"{first['step']}: {first['slope']:+.2f}): a module fails at 2+ steps, as a width trend does")


def _allowed(result: Any, worst: dict[str, Any]) -> str:
    """The band the worst row was judged against, said as it was judged: the μP readout
    may shrink like its init law width^-1/2 (so -0.50 is inside), growth never past tol."""
    s = result.slopes
    row = s[(s["module"] == worst["module"]) & (s["step"] == worst["step"]) & (s["axis"] == worst["axis"])]
    low = float(result.lower_bounds().loc[row.index[0]]) if len(row) else -result.tol
    band = f"allowed [{low:+.2f}, +{result.tol:.2f}]" if low > float("-inf") else f"allowed up to +{result.tol:.2f}"
    if low < -result.tol and low > float("-inf"):
        band += " (a muP readout may shrink like width^-1/2 at init)"
    return band


def _source_setup(source: Any, args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(builder, batch, loss_fn) of a model that is not ours (``hf:`` or ``module:function``):
    built by :func:`mutransfer.models.source.build_model` at the data's vocab, at its own depth
    unless ``--depths``, trained on cross-entropy of its logits."""
    import torch

    data = load_dataset(DataConfig(source=args.data))
    vocab = data.vocab_size
    _, own_depth = ModelSection(source=source.spec(), head_rule=source.head_rule).own_shape()
    for w in args.widths:  # a width the model cannot take fails here, naming the field
        for d in args.depths or [own_depth]:
            with torch.device("meta"):
                build_model(source, w, d, vocab_size=vocab)
    if source.kind == "builder":  # one real build: a builder giving no logits fails here
        build_model(source, min(args.widths), min(args.depths or [own_depth]), vocab_size=vocab)
    batch = data.get_batch("train", 0, args.batch_size, args.seq_len, seed=0)
    if args.depths:
        def builder(width: int, depth: int) -> torch.nn.Module:
            return build_model(source, width, depth, vocab_size=vocab)
    else:
        def builder(width: int) -> torch.nn.Module:  # type: ignore[misc]
            return build_model(source, width, own_depth, vocab_size=vocab)

    name = f"model {source.model_id!r}"

    def loss_fn(model: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        logits = logits_of(model(b[0]), name)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), b[1].flatten())

    return builder, batch, loss_fn


def _parse_rule(text: str) -> tuple[str, str]:
    """``REGEX=ROLE`` (split at the last ``=``: a regex may hold one) -> (regex, role),
    checked as a :class:`~mutransfer.parametrize.specs.Rule` (valid regex, known role)."""

    pattern, sep, role = text.rpartition("=")
    if not sep or not pattern:
        raise ValueError(f"--rule {text!r} is not REGEX=ROLE")
    rule = Rule(pattern, role.strip())
    return rule.pattern, rule.role
