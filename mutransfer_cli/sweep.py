"""``mutransfer sweep``: Optuna studies over proxies (lr | batch | scaling | run | worker | status | results).

    mutransfer sweep lr --preset gpt-tiny --widths 32,64,128 --parametrization sp,mup --out d
    mutransfer sweep batch --widths 64 --batch-sizes 8,16,32 --tokens 1e6,4e6 --out d
    mutransfer sweep scaling --width 32 --check-width 64 --batch-sizes 4,8,16,32 \
        --tokens 32768,65536,131072,262144 --lr-center 0.016 --out d --holdout
    mutransfer sweep run SPEC.yaml --out d            # any TrainConfig field as a dimension
    mutransfer sweep worker --storage postgresql://... --study lr    # join from any machine
    mutransfer sweep launch --slurm --storage-file F --study lr --workers 32 [--dry-run]  # a SLURM array
    mutransfer sweep lr ... --fuse 16     # 16 same-shape trials as one batched model per worker
    mutransfer sweep status --storage d
    mutransfer sweep results --storage d --out results.csv   # the results table

Re-running the same command resumes the study: finished grid points are never repeated.
The study opens in the dashboard: ``optuna-dashboard d/optuna.journal`` (or the RDB URL).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from mutransfer._io import atomic_write_text, check_output
from mutransfer.card.target import parse_overrides
from mutransfer.training.tracking import parse_track
from mutransfer_cli._common import (
    MAX_SEED,
    add_track_flag,
    bounded_int,
    key_value,
    number_in,
    print_json,
    seed_list,
    tracking,
)
from mutransfer_cli._slurm import SlurmJob, job_script, slug, storage_args, submit_once
from sweeps.extend import DEFAULT_MAX_EXTEND, Bounds, run_bracketed
from sweeps.fusion import check_fuse
from sweeps.holdout import FRESH_SEEDS, check_holdout, holdout_summary, run_holdout
from sweeps.results import best_config, format_status, results_table, status, write_table
from sweeps.runners import DEFAULT_RUNNER
from sweeps.spec import load_spec, spec_from_dict
from sweeps.storage import Storage, storage_refusal
from sweeps.study import prepare, run_sweep
from sweeps.worker import open_study, serve

#: The most extension rounds per axis ``--max-extend`` takes: each round runs a new grid
#: point per curve, so far more than any grid needs.
MAX_EXTEND = 100

HELP = "Optuna sweeps over proxies: lr | batch | scaling | run | worker | launch | status | results"

_EPILOG = ("Storage: default OUT/optuna.journal (many workers on one machine; --out with "
           "$MUTRANSFER_STORAGE set is an error, pass --storage); "
           "postgresql://user:pw@host/db for many machines (put it in $MUTRANSFER_STORAGE or a "
           "chmod-600 --storage-file, not on the command line, where ps shows it); sqlite:/// for "
           "one worker. Dashboard: optuna-dashboard OUT/optuna.journal (or the URL).")


def _list(conv: Any, what: str) -> Any:
    def parse(text: str) -> list[Any]:
        out = []
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            try:
                out.append(conv(item))
            except ValueError:
                raise argparse.ArgumentTypeError(f"{item!r} is not {what} (in {text!r})") from None
        if not out:
            raise argparse.ArgumentTypeError(f"{text!r} holds no values")
        return out
    return parse


#: The largest whole number a sweep flag takes: 2^53, where floats stop holding every
#: integer (a width or budget of 1e300, or inf, is refused here, not deep in a trial).
MAX_EXACT = 1 << 53


def _int(text: str, low: int = 1) -> int:
    v = float(text)  # accepts 1e6 for token budgets
    if not (math.isfinite(v) and v == int(v) and low <= v <= MAX_EXACT):
        raise ValueError(text)
    return int(v)


def _int0(text: str) -> int:
    return _int(text, 0)


def _ranged(low: float, high: float, *, open_low: bool) -> Any:
    """A list item: a finite number in (low, high] (``open_low``) or [low, high]."""
    def conv(text: str) -> float:
        v = float(text)
        if not (math.isfinite(v) and (v > low if open_low else v >= low) and v <= high):
            raise ValueError(text)
        return v
    return conv


def _octave(text: str) -> float:
    v = float(text)  # 2^2000 is beyond a float; 2^64 is no learning rate
    if not abs(v) <= 64:
        raise ValueError(text)
    return v


def _log2_range(text: str) -> tuple[float, float, float]:
    parts = text.split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--log2-lr {text!r} must be MIN:MAX[:STEP], e.g. -14:-3:1") from None
    if len(nums) not in (2, 3):
        raise argparse.ArgumentTypeError(f"--log2-lr {text!r} must be MIN:MAX[:STEP], e.g. -14:-3:1")
    if not all(abs(x) <= 64 for x in nums[:2]):
        raise argparse.ArgumentTypeError(f"--log2-lr {text!r}: MIN and MAX must lie in [-64, 64]")
    return (nums[0], nums[1], nums[2] if len(nums) == 3 else 1.0)


def _log2_bounds(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(p) for p in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--log2-lr-range {text!r} must be LO:HI, e.g. -12:-2") from None
    return (lo, hi)


def _batch_bounds(text: str) -> tuple[int, int]:
    try:
        lo, hi = (_int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch-range {text!r} must be LO,HI in sequences, "
                                         "e.g. 2,64") from None
    return (lo, hi)


def _fuse(text: str) -> Any:
    """``--fuse K|auto``; a bad value exits 2 naming it."""

    try:
        return check_fuse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_FUSE_HELP = ("train up to K trials of one shape (same width, depth, batch, steps, seq_len) as one "
              "batched model per worker; auto: 16 on CPU while a member's micro-step is under 1e9 "
              "FLOPs (larger ones gain nothing there) else 1, from free memory on CUDA; 1: unfused")



#: The verbs that run a sweep (the others join, report or write the results of one).
RUN_KINDS = ("lr", "batch", "scaling", "run", "multipliers")


def _add_run_flags(p: argparse.ArgumentParser, kind: str) -> None:
    p.add_argument("spec", nargs="?" if kind != "run" else None, metavar="SPEC.yaml",
                   help="sweep spec (YAML); flags below override its fields")
    p.add_argument("--preset", default=None, help="model preset (default gpt-tiny)")
    p.add_argument("--model", default=None, metavar="MODEL",
                   help="your model instead of the preset: hf:PATH (a local config.json) or "
                        "module:function (function(width, depth) -> module giving logits); a preset name")
    p.add_argument("--head-rule", choices=("keep_head_dim", "keep_heads"), default=None,
                   help="hf: models: heads scale with width (keep_head_dim, default) or head_dim does")
    if kind in ("lr", "batch"):
        p.add_argument("--widths", type=_list(_int, "a positive integer"), default=None,
                       help="comma-separated widths")
    if kind in ("lr", "batch", "scaling"):
        p.add_argument("--seeds", type=seed_list, default=None, help="comma-separated seeds, e.g. 0,1")
        p.add_argument("--lrs", type=_list(_ranged(0.0, 1e4, open_low=True),
                                                     "a learning rate in (0, 1e4]"), default=None,
                       help="comma-separated learning rates (default the log2 grid)")
        p.add_argument("--log2-lr", type=_log2_range, default=None, metavar="MIN:MAX[:STEP]",
                       help="log2 LR grid or search range, e.g. --log2-lr=-14:-3:1 (the default)")
    if kind in ("lr", "scaling"):
        p.add_argument("--max-extend", type=bounded_int(0, MAX_EXTEND, "--max-extend"), default=None,
                       metavar="N",
                       help="an optimum at the edge of its grid (LR; scaling: also the batch) extends "
                            "the grid one point past it, run and re-checked, up to N rounds per axis "
                            f"(default {DEFAULT_MAX_EXTEND}; 0: never; at most {MAX_EXTEND})")
        p.add_argument("--log2-lr-range", type=_log2_bounds, default=None, metavar="LO:HI",
                       help="extended LRs stay within 2^LO..2^HI (default: no bound)")
    if kind == "scaling":
        p.add_argument("--batch-range", type=_batch_bounds, default=None, metavar="LO,HI",
                       help="extended batch sizes (sequences) stay within LO..HI (default: 1 and up, "
                            "as the budgets allow)")
    if kind == "lr":
        p.add_argument("--depths", type=_list(_int, "a positive integer"), default=None,
                       help="comma-separated depths")
        p.add_argument("--parametrization", "-p", type=_list(str, "a name"), default=None,
                       help="comma-separated: sp,mup,completep,muon (default sp,mup)")
    if kind in ("batch", "scaling"):
        p.add_argument("--batch-sizes", type=_list(_int, "a positive integer"), default=None,
                       help="comma-separated batch sizes in sequences (default 8,16,32,64; "
                            "scaling: 4,8,16,32)")
        p.add_argument("--tokens", type=_list(_int, "a positive integer"), default=None,
                       help="comma-separated token budgets (steps = tokens / batch tokens; scaling: "
                            "the largest is trained, the others are WSD branches of it)")
        p.add_argument("--parametrization", "-p", default=None, help="one parametrization (default mup)")
    if kind in ("scaling", "multipliers"):
        p.add_argument("--width", type=_int, default=None, help="base width (default: the preset's)")
    if kind == "multipliers":
        p.add_argument("--parametrization", "-p", default=None, help="mup (default), completep or muon")
    if kind == "scaling":
        p.add_argument("--check-width", type=_int, default=None, help="one wider width to check at")
        p.add_argument("--check-batch-sizes", type=_list(_int, "a positive integer"), default=None,
                       help="batch sizes of the wider check (default: the middle batch)")
        p.add_argument("--lr-center", type=number_in(0.0, 1e4, open_low=True), default=None,
                       help="centre a per-batch LR grid here (the LR at --lr-center-batch)")
        p.add_argument("--lr-center-batch", type=_int, default=None,
                       help="batch (sequences) of --lr-center (default: the smallest batch)")
        p.add_argument("--lr-batch-exponent", type=number_in(-64.0, 64.0), default=None,
                       help="the centre moves as batch^exponent (default 0.5)")
        p.add_argument("--log2-lr-offsets", type=_list(_octave, "a number in [-64, 64]"), default=None,
                       help="octaves around the centre (default -1.5,-1,...,1.5)")
        p.add_argument("--warmup-tokens", type=_int0, default=None,
                       help="warmup in tokens at every batch (default 10%% of the smallest budget)")
        p.add_argument("--eval-sequences", type=_int, default=None,
                       help="held-out sequences per evaluation at every batch (default 256)")
        p.add_argument("--weight-decays",
                       type=_list(_ranged(0.0, 100.0, open_low=False), "a weight decay in [0, 100]"),
                       default=None, metavar="L1,L2,...",
                       help="weight decays run at --tau-batch-size besides the base one (>= 3 in all): "
                            "fit scaling then measures tau* = B/(eta·lambda·D) at its optimum")
        p.add_argument("--tau-batch-size", type=_int, default=None,
                       help="batch (sequences) of the --weight-decays runs (default: the middle batch)")
        p.add_argument("--holdout", action="store_true",
                       help="after the sweep: the held-out audit (fit without the largest budget, "
                            "then without the largest batch; run each predicted config) -> OUT/AUDIT.json")
        p.add_argument("--audit-out", default=None, help="where --holdout writes (default OUT/AUDIT.json)")
        p.add_argument("--holdout-seeds", type=bounded_int(1, 64, "--holdout-seeds"), default=None,
                       help="fresh seeds the held-out audit trains the prediction and the measured best on "
                            f"(paired; the gap's standard error needs 2; default {FRESH_SEEDS})")
    p.add_argument("--steps", type=bounded_int(1, 10**9, "--steps"), default=None,
                   help="training steps per trial")
    p.add_argument("--batch-size", type=bounded_int(1, 1 << 24, "--batch-size"), default=None,
                   help="sequences per batch (lr/run sweeps)")
    p.add_argument("--set", dest="settings", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="any TrainConfig field shared by all trials (repeatable)")
    p.add_argument("--out", default=None, help="output directory (journal, spec, worker logs)")
    _add_storage_flags(p, "default OUT/optuna.journal, else $MUTRANSFER_STORAGE")
    p.add_argument("--study", default=None, help="study name (default: the sweep kind)")
    p.add_argument("--workers", type=bounded_int(1, 4096, "--workers"), default=None,
                   help="worker processes (default: one per CPU core, or one per GPU with --device cuda)")
    p.add_argument("--trials", type=bounded_int(1, 10**6, "--trials"), default=None,
                   help="adaptive samplers: trials per group (default 8)")
    p.add_argument("--sampler", choices=("grid", "tpe", "gp", "random"), default=None,
                   help="grid (default) or an adaptive LR search")
    p.add_argument("--pruner", choices=("divergence", "median", "hyperband"), default=None,
                   help="divergence only (default, unbiased LR curves) | median | hyperband")
    p.add_argument("--sampler-seed", type=bounded_int(0, MAX_SEED, "--sampler-seed"), default=None,
                   help="sampler seed (default 0)")
    p.add_argument("--device", default=None, help="cpu | cuda | mps (default: the trainer's auto)")
    p.add_argument("--heartbeat", type=bounded_int(1, 86400, "--heartbeat"), default=10,
                   help="heartbeat interval in s (default 10)")
    p.add_argument("--grace", type=bounded_int(2, 10**6, "--grace"), default=60,
                   help="s without heartbeat before a trial is retried (default 60)")
    p.add_argument("--fuse", type=_fuse, default=None, metavar="K|auto",
                   help=_FUSE_HELP + " (default 1)")
    p.add_argument("--prepare-only", action="store_true",
                   help="create the study and enqueue the grid, run nothing (workers join later)")
    p.add_argument("--runner", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--quiet", action="store_true",
                   help="no progress (a bar on a terminal; piped, a line every 20 s)")
    add_track_flag(p)


def _add_storage_flags(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--storage", default=None, help=f"storage: {default}")
    p.add_argument("--storage-file", default=None, metavar="FILE",
                   help="read the storage URL (with its password) from FILE, which must be chmod 600")


def _storage(args: argparse.Namespace, default: str | None) -> Any:
    """The :class:`sweeps.storage.Storage` of this command, built once: --storage-file,
    --storage, $MUTRANSFER_STORAGE, then ``default`` (a run's ``--out`` together with
    $MUTRANSFER_STORAGE and no explicit storage is an error)."""

    out = getattr(args, "out", None) if args.sweep_cmd in RUN_KINDS else None
    return Storage.from_user(args.storage, storage_file=args.storage_file, out=out, default=default)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = _EPILOG
    sub = p.add_subparsers(dest="sweep_cmd", metavar="SUBCOMMAND")
    sub.required = True
    for kind, help_ in (("lr", "LR x width (x depth) x parametrization x seed: the transfer check"),
                        ("batch", "LR x batch size x widths / token budgets: scaling laws"),
                        ("scaling", "token budget (WSD branches) x batch x LR at the base width, plus "
                                    "a wider check; every run logs its noise scale: eta*(B,D), B*(D)"),
                        ("run", "a generic sweep from SPEC.yaml (any TrainConfig field as a dimension)"),
                        ("multipliers", "tune muP's multipliers at the base width (TPE over per-role LR "
                                        "and forward multipliers, weight decay, beta2, eps) -> "
                                        "OUT/best.yaml for `mutransfer transfer --proxy-config`")):
        _add_run_flags(sub.add_parser(kind, help=help_, description=help_, epilog=_EPILOG), kind)
    w = sub.add_parser("worker", help="join an existing study (from any machine)",
                       description="join an existing study (from any machine)")
    _add_storage_flags(w, "journal file, output directory or URL; default $MUTRANSFER_STORAGE")
    w.add_argument("--study", default=None, help="study name (default: the only one)")
    w.add_argument("--max-trials", type=bounded_int(1, 10**9, "--max-trials"), default=None,
                   help="stop after this many trials")
    w.add_argument("--worker-index", type=bounded_int(0, 10**6, "--worker-index"), default=0,
                   help="offsets the sampler seed")
    w.add_argument("--fuse", type=_fuse, default=None, metavar="K|auto",
                   help=_FUSE_HELP + " (default: the study's --fuse)")
    w.add_argument("--quiet", action="store_true", help="no progress of the study")
    add_track_flag(w)
    la = sub.add_parser("launch", help="submit a SLURM job array of workers for a prepared study",
                        description="submit a SLURM job array of N workers (one per GPU) that join a "
                                    "study made with --prepare-only; --dry-run prints the job script")
    la.add_argument("--slurm", dest="launcher", action="store_const", const="slurm", default=None,
                    help="launch on SLURM (the same as --launcher slurm)")
    la.add_argument("--launcher", choices=("slurm",), default=None, help="where the workers run")
    _add_storage_flags(la, "journal file or URL; default $MUTRANSFER_STORAGE (a URL with a password: "
                           "--storage-file, so it never enters the job script)")
    la.add_argument("--study", default=None, help="study name (default: the only one)")
    la.add_argument("--workers", type=bounded_int(1, 100000, "--workers"), required=True,
                    help="array tasks, one worker each")
    la.add_argument("--gpus-per-worker", type=bounded_int(0, 64, "--gpus-per-worker"), default=1,
                    help="GPUs per task (default 1; 0: CPU workers)")
    la.add_argument("--cpus-per-worker", type=bounded_int(1, 1024, "--cpus-per-worker"), default=4,
                    help="CPU cores per task (default 4)")
    la.add_argument("--time", default=None, help="wall-clock limit per task, e.g. 04:00:00")
    la.add_argument("--partition", default=None)
    la.add_argument("--account", default=None)
    la.add_argument("--max-parallel", type=bounded_int(1, 100000, "--max-parallel"), default=None,
                    help="at most this many tasks at once")
    la.add_argument("--sbatch-arg", action="append", default=[], metavar="--OPT=VALUE",
                    help="one more #SBATCH option (repeatable)")
    la.add_argument("--fuse", type=_fuse, default=None, metavar="K|auto",
                    help=_FUSE_HELP + " (default: the study's --fuse)")
    add_track_flag(la)
    la.add_argument("--out", default=".", help="where the script and the workers' logs go (default .)")
    la.add_argument("--dry-run", action="store_true", help="print the job script; submit nothing")
    la.add_argument("--resubmit", action="store_true",
                    help="submit another array of a study this --out submitted already (refused without it)")
    s = sub.add_parser("status", help="counts by state and the best trial per group",
                       description="counts by state and the best trial per group")
    _add_storage_flags(s, "journal file, output directory or URL (default: $MUTRANSFER_STORAGE, else .)")
    s.add_argument("--study", default=None)
    s.add_argument("--json", action="store_true")
    what = "write the results table (one row per trial; CSV or Parquet)"
    _add_results_flags(sub.add_parser("results", help="write the results table (CSV or Parquet)",
                                      description=what))


def _add_results_flags(e: argparse.ArgumentParser) -> None:
    _add_storage_flags(e, "journal file, output directory or URL (default: $MUTRANSFER_STORAGE, else .)")
    e.add_argument("--study", default=None)
    e.add_argument("--out", required=True, help="results.csv | results.csv.gz | results.parquet")
    e.add_argument("--all", action="store_true", help="also failed, running and waiting trials")
    e.add_argument("--json", action="store_true", help="print a summary as JSON")


def _spec_from_args(args: argparse.Namespace, kind: str) -> Any:
    data: dict[str, Any] = {}
    if args.spec:
        load_spec(args.spec, kind)  # validates the file alone, naming its bad fields
        with open(args.spec, encoding="utf-8") as fh:
            data = dict(yaml.safe_load(fh) or {})
        data.pop("kind", None)
    flags = {
        "preset": "preset", "model": "model", "widths": "widths", "seeds": "seeds", "lrs": "lrs",
        "depths": "depths",
        "batch_sizes": "batch_sizes", "tokens": "tokens", "trials": "trials", "sampler": "sampler",
        "pruner": "pruner", "sampler_seed": "sampler_seed", "study": "name",
        "width": "width", "check_width": "check_width", "check_batch_sizes": "check_batch_sizes",
        "lr_center": "lr_center", "lr_center_batch": "lr_center_batch",
        "lr_batch_exponent": "lr_batch_exponent", "log2_lr_offsets": "log2_lr_offsets",
        "warmup_tokens": "warmup_tokens", "eval_sequences": "eval_sequences",
        "weight_decays": "weight_decays", "tau_batch_size": "tau_batch_size",
    }
    for attr, fname in flags.items():
        v = getattr(args, attr, None)
        if v is not None:
            data[fname] = v
    par = getattr(args, "parametrization", None)
    if par is not None and kind == "multipliers":  # the multipliers sweep keeps it in base
        data.setdefault("base", {})["parametrization"] = par
    elif par is not None:
        data["parametrizations" if kind == "lr" else "parametrization"] = par
    if getattr(args, "log2_lr", None) is not None:
        lo, hi, step = args.log2_lr
        data.update(log2_lr_min=lo, log2_lr_max=hi, log2_lr_step=step)
        if args.lrs is None:
            data.pop("lrs", None)
    if kind == "scaling" and args.lrs is not None:
        data.pop("lr_center", None)  # a flag beats the spec file: one LR grid for every batch
    if kind == "scaling" and args.lr_center is not None:
        data.pop("lrs", None)
    base = dict(data.get("base") or {})
    if args.steps is not None:
        base["steps"] = args.steps
    if args.batch_size is not None:
        base["batch_size"] = args.batch_size
    base.update(parse_overrides(args.settings))  # the library reads "10" as 10, "1e-3" as 0.001
    if args.head_rule is not None:
        base["head_rule"] = args.head_rule
    if args.device is not None:  # --prepare-only records it too: every worker trains there
        base["device"] = args.device
    if base:
        data["base"] = base
    return spec_from_dict(data, kind)


def _print_status(st: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(st)
    else:
        print(format_status(st))


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except Exception as exc:
        why = storage_refusal(exc)  # a read-only storage: one line, not three tracebacks
        if why is None:
            raise
        raise ValueError(why) from None


def _run(args: argparse.Namespace) -> int:
    cmd = args.sweep_cmd
    if cmd in RUN_KINDS:
        with tracking(args.track, args.out):  # the workers this process starts inherit it
            return _run_sweep(args, cmd)
    storage = _storage(args, None if cmd in ("worker", "launch") else ".")
    if cmd == "worker":  # a worker spawned by `sweep lr --workers K` ends with its parent
        with tracking(args.track, None):
            return serve(storage, args.study, worker_index=args.worker_index, max_trials=args.max_trials,
                         fuse=args.fuse, progress=not args.quiet)

    if cmd == "launch":
        return _launch(args, storage)

    study, _ = open_study(storage, args.study)
    if cmd == "status":
        _print_status(status(study), args.json)
        return 0

    check_output(args.out, inputs=[("the study's storage", f) for f in storage.files])
    df = results_table(study, include_failed=args.all)
    path = write_table(df, args.out)
    summary = {"study": study.study_name, "rows": len(df), "out": str(path),
               "diverged": int(df["diverged"].sum()) if len(df) else 0}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {summary['rows']} rows ({summary['diverged']} diverged) to {path}", file=sys.stderr)
    return 0


def _write_best_config(study: Any, out: str | None, quiet: bool) -> str | None:
    """``OUT/best.yaml``: the best trial's training config (the tuned proxy), written
    whole or not at all; None without ``--out`` or without a finished trial."""
    if out is None:
        return None
    try:
        best = best_config(study)
    except ValueError as exc:
        print(f"mutransfer sweep multipliers: no best.yaml: {exc}", file=sys.stderr)
        return None
    path = Path(out) / "best.yaml"
    header = (f"# The tuned proxy: trial {best['trial']} of study {study.study_name}, held-out loss "
              f"{best['loss']:.6g}.\n"
              f"# Carry it to the big run: mutransfer transfer --proxy-config {path} ...\n")
    atomic_write_text(path, header + yaml.safe_dump(best["config"], sort_keys=False))
    if not quiet:
        print(f"best trial {best['trial']} (loss {best['loss']:.4f}) -> {path}; use it with "
              f"`mutransfer transfer --proxy-config {path}`", file=sys.stderr)
    return str(path)


def _run_sweep(args: argparse.Namespace, kind: str) -> int:
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers {args.workers} must be >= 1")
    if args.heartbeat < 1 or args.grace <= args.heartbeat:
        raise ValueError(f"--grace {args.grace} must exceed --heartbeat {args.heartbeat} (>= 1)")
    spec = _spec_from_args(args, kind)
    bounds = None
    if kind in ("lr", "scaling"):  # checked before any study exists
        bounds = Bounds(max_extend=DEFAULT_MAX_EXTEND if args.max_extend is None else args.max_extend,
                        batch_range=getattr(args, "batch_range", None), log2_lr_range=args.log2_lr_range)
    holdout = bool(getattr(args, "holdout", False))
    if getattr(args, "holdout_seeds", None) is not None and not holdout:
        raise ValueError(f"--holdout-seeds {args.holdout_seeds} only goes with --holdout (the held-out "
                         "audit's seeds); add --holdout or drop it")
    b_range = getattr(args, "batch_range", None)
    if b_range is not None and getattr(spec, "batch_sizes", None):
        lo, hi = b_range
        if not any(lo <= b <= hi for b in spec.batch_sizes):
            raise ValueError(f"--batch-range {lo},{hi} excludes every batch size of the grid "
                             f"({','.join(map(str, spec.batch_sizes))}): the grid could never be extended")
    audit_path = None
    if holdout:
        if args.prepare_only:
            raise ValueError("--holdout needs the finished sweep; it cannot go with --prepare-only")
        if args.audit_out is None and args.out is None:
            raise ValueError("--holdout writes AUDIT.json: give --out or --audit-out")
        check_holdout(spec)  # before the first trial, not after the whole sweep
        audit_path = Path(args.audit_out) if args.audit_out else Path(args.out) / "AUDIT.json"
    storage = _storage(args, None)

    check_output(args.out, directory=True)  # a re-run into the same --out resumes its study
    if audit_path is not None:  # never onto the study, the spec or the audit's own cache
        written = [("the study's storage", f) for f in storage.files]
        written.append(("the audit's run cache", audit_path.with_name("audit_runs.json")))
        if args.out is not None:
            written.append(("the sweep's spec copy", Path(args.out) / "sweep.yaml"))
        check_output(audit_path, inputs=[("the sweep spec", args.spec)], outputs=written,
                     flag="--audit-out")
    if args.prepare_only:
        plan = prepare(spec, storage, study_name=args.study, runner=args.runner or DEFAULT_RUNNER,
                       heartbeat_interval=args.heartbeat, grace_period=args.grace,
                       workers=args.workers or 1, fuse=args.fuse)
        print(storage.describe(), file=sys.stderr)
        print(f"study {plan.study_name}: {plan.total} trials planned, {plan.finished} finished, "
              f"{plan.enqueued} enqueued now; join with: {storage.join_command(plan.study_name)}",
              file=sys.stderr)
        return 0
    run_kw = dict(out=args.out, storage=storage, study_name=args.study, workers=args.workers,
                  device=args.device, runner=args.runner, quiet=args.quiet,
                  heartbeat_interval=args.heartbeat, grace_period=args.grace, fuse=args.fuse)
    bracket = None
    if bounds is not None:
        res, bracket = run_bracketed(spec, bounds, **run_kw)
    else:
        res = run_sweep(spec, **run_kw)
    if res.user_error is not None:  # every trial fails alike: name it, do not count failures
        raise ValueError(f"{res.user_error} ({res.counts.failed} trial(s) failed on it; fix it, then re-run "
                         "the same command to resume)")
    print(storage.describe(), file=sys.stderr)
    study, _ = open_study(storage, res.plan.study_name)
    st = status(study)
    st["storage"] = storage.masked
    st["wall_s"] = res.wall_s
    st["workers"] = res.workers
    if bracket is not None:
        st["bracketing"] = bracket.to_dict()
    if holdout and res.complete:
        audit = run_holdout(spec, results_table(study), out=audit_path, device=args.device,
                            runner=args.runner, quiet=args.quiet or args.json,
                            n_seeds=args.holdout_seeds or FRESH_SEEDS,
                            workers=int(res.workers or 1))
        st["audit"] = {"path": str(audit_path), **holdout_summary(audit)}
    if kind == "multipliers":
        st["best_config"] = _write_best_config(study, args.out, args.json)
    _print_status(st, args.json)
    if bracket is not None and not args.json:
        print("\n".join(bracket.lines()))
    if not res.complete:
        print(f"mutransfer sweep {kind}: {res.counts.failed} failed, {res.counts.pending} unfinished; "
              "re-run the same command to resume", file=sys.stderr)
        return 1
    return 0


def _launch(args: argparse.Namespace, storage: Any) -> int:
    """``sweep launch --slurm``: the job script of ``--workers`` workers joining the study,
    printed (``--dry-run``) or written to OUT/slurm/ and submitted with ``sbatch``."""
    if (args.launcher or "") != "slurm":
        raise ValueError("choose where the workers run: --slurm (or --launcher slurm)")
    track = None
    if args.track is not None:
        spec = parse_track(args.track, args.out)
        track = f"{spec.kind}:{spec.target}"
    where = storage_args(storage, args.storage_file)  # a secret never goes into the script
    study, _ = open_study(storage, args.study)  # the study must exist: fail here, not in 32 jobs
    out = Path(args.out).resolve()
    job = SlurmJob(study=study.study_name, workers=args.workers, storage_args=where,
                   gpus_per_worker=args.gpus_per_worker, cpus_per_worker=args.cpus_per_worker,
                   time=args.time, partition=args.partition, account=args.account,
                   max_parallel=args.max_parallel, log_dir=str(out / "slurm" / "logs"),
                   fuse=None if args.fuse is None else str(args.fuse), track=track,
                   extra=tuple(args.sbatch_arg))
    script = job_script(job)
    if args.dry_run:
        # SLURM opens each task's log before the task runs: a hand-submitted script needs
        # the folder already there
        Path(job.log_dir).mkdir(parents=True, exist_ok=True)
        print(script, end="")
        return 0
    path = out / "slurm" / f"{slug(job.study)}.sbatch"  # a study name is no path
    # a second array of the same study doubles the workers and the cluster bill
    job_id = submit_once(script, path, log_dir=job.log_dir, resubmit=args.resubmit,
                         already=f"study {job.study!r} was submitted from here already",
                         what=f"{job.workers} workers")
    print(f"submitted job {job_id}: {job.workers} workers of study {job.study} ({path}); logs in "
          f"{job.log_dir}; follow with `mutransfer sweep status` on the same storage", file=sys.stderr)
    return 0
