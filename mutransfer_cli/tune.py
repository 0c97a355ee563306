"""``mutransfer tune``: from a model and a compute budget to a card the tool stands behind.

One command places the proxy runs itself:

1. **plan** (:func:`sweeps.budget.plan_budget`): short probe runs (each 3 times, the
   fastest kept: load only adds time) measure the seconds per token at the base width and
   twice it; the budget is split over the stages and each
   stage's runs sized to fill its share; every choice is recorded with its reason
   (``plan.json``). A re-run with the same inputs reuses the plan and resumes the sweeps.
2. **coordinate check** of μP at the ladder's widths: a gate (a failure stops here).
3. **coarse LR search** at the base width (every 2 octaves, widened until bracketed): the
   centre of the ladder's grid, so no LR is copied by hand.
4. **LR x width ladder** (μP, 2 seeds, 3 LRs half an octave apart around the centre,
   widened past an edge optimum): μP's optimum and its drift.
5. **LR x batch x budget sweep** at the base width with its width check and the held-out
   audit (the demo's scaling stage): the η*(B, D) and B*(D) laws.
6. **card** (:func:`mutransfer.card.make.make_card`): written only when the audit passed
   and :func:`mutransfer.card.trust.objections` has nothing against it; otherwise the
   report names what is wrong and what to run, ``card.yaml`` is not written, and the exit
   status is 1.

``--slurm`` submits the same command as one requeueable SLURM job (``_slurm.tune_script``).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

from mutransfer._io import check_output
from mutransfer_cli._common import add_track_flag, key_value, positive_float, positive_int, tracking
from mutransfer_cli._slurm import SlurmTune, budget_time, submit_once, tune_script
from mutransfer_cli._tune_run import run_tune

HELP = "tune a proxy within a compute budget and write the card for the target (or say why not)"

#: Budget units: seconds, minutes, hours.
_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def budget_seconds(text: str) -> float:
    """``"60m"``, ``"1.5h"``, ``"900s"`` or ``"900"`` (seconds) -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(s|m|min|h)?\s*", str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"--budget takes a time like 60m, 1.5h or 900s, got {text!r}")
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not (math.isfinite(value) and 0 < value <= 30 * 86400):
        raise argparse.ArgumentTypeError(f"--budget must be between 0 and 30 days, got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    m = p.add_mutually_exclusive_group(required=True)
    m.add_argument("--model", metavar="hf:PATH", help="the full-size target as a local transformers "
                   "config.json: the proxies are it narrowed (--head-rule), the card is for it")
    m.add_argument("--preset", help="a built-in proxy (llama-small, gpt-tiny, ...); the target is it at "
                   "--target-width x --target-depth")
    p.add_argument("--head-rule", choices=("keep_head_dim", "keep_heads"), default="keep_head_dim",
                   help="with --model: how the proxies' heads follow width (keep_head_dim)")
    p.add_argument("--width", type=positive_int, default=None,
                   help="the base width of the proxies (default: the preset's, or the smallest width of "
                   "--model's config at or above 64)")
    p.add_argument("--depth", type=positive_int, default=None,
                   help="the proxies' depth (default: the preset's; --model: 2)")
    p.add_argument("--set", dest="overrides", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="a proxy training field for every run (repeatable): data=tokens.bin, seq_len=N, ...")
    t = p.add_argument_group("target")
    t.add_argument("--target-width", type=positive_int, default=None, help="with --preset: the target's width")
    t.add_argument("--target-depth", type=positive_int, default=None, help="with --preset: the target's depth")
    t.add_argument("--target-seq-len", type=positive_int, default=None,
                   help="the target's context (default: the config's pretraining context, else the proxy's)")
    b = t.add_mutually_exclusive_group(required=True)
    b.add_argument("--tokens", type=positive_float, help="the target's training tokens")
    b.add_argument("--tokens-per-param", type=positive_float, help="the target's tokens per parameter")
    t.add_argument("--allow-vocab-change", action="store_true",
                   help="accept a target vocabulary other than the proxies' data's (recorded in the card)")
    r = p.add_argument_group("budget and workers")
    r.add_argument("--budget", type=budget_seconds, required=True,
                   help="wall time for the whole tune on these workers: 60m, 1.5h, 900s")
    r.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    r.add_argument("--workers", type=positive_int, default=None,
                   help="sweep workers (default: one per CPU core, one per GPU)")
    p.add_argument("--out", required=True, help="output folder (re-running it resumes)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    add_track_flag(p)
    add_slurm_arguments(p)


def add_slurm_arguments(p: argparse.ArgumentParser) -> None:
    """``--slurm`` and its job's options: they say where tune runs, not what it does, so
    they are taken out of the argv the job runs (:func:`tune_argv`)."""
    s = p.add_argument_group("on SLURM (the whole tune as one requeueable job on one node)")
    s.add_argument("--slurm", action="store_true",
                   help="submit this tune as a SLURM job (OUT/slurm/tune.sbatch) instead of running it")
    s.add_argument("--dry-run", action="store_true", help="with --slurm: print the script, submit nothing")
    s.add_argument("--gpus", type=positive_int_or_zero, default=None,
                   help="with --slurm: GPUs of the job, one sweep worker each (default: --workers, "
                   "else 1; 0 with --device cpu)")
    s.add_argument("--cpus", type=positive_int, default=8, help="with --slurm: CPU cores (default 8)")
    s.add_argument("--time", default=None,
                   help="with --slurm: the job's wall-clock limit (default: --budget x 1.25 + 15m)")
    s.add_argument("--partition", default=None, help="with --slurm: the partition")
    s.add_argument("--account", default=None, help="with --slurm: the account")
    s.add_argument("--sbatch-arg", action="append", default=[], metavar="--OPT=VALUE",
                   help="with --slurm: one more #SBATCH option (repeatable)")
    s.add_argument("--resubmit", action="store_true",
                   help="with --slurm: submit again although this --out was submitted already")


#: tune's flags that only say how to submit it: (flag, takes a value).
SLURM_FLAGS = {"--slurm": False, "--dry-run": False, "--gpus": True, "--cpus": True, "--time": True,
               "--partition": True, "--account": True, "--sbatch-arg": True, "--resubmit": False}


def positive_int_or_zero(text: str) -> int:
    """An integer >= 0 (argparse type), e.g. ``--gpus 0`` for a CPU job."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if not 0 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 1024, got {text!r}")
    return value


def tune_argv(argv: list[str]) -> list[str]:
    """``argv`` (the command line after the program name) without the verb and the SLURM flags,
    in either form (``--time 90`` or ``--time=90``): what the job runs."""
    out, rest = [], list(argv)
    verb_seen = False
    while rest:
        a = rest.pop(0)
        if not verb_seen and a == "tune":
            verb_seen = True
            continue
        name = a.split("=", 1)[0]
        if name in SLURM_FLAGS:
            if SLURM_FLAGS[name] and "=" not in a and rest:
                rest.pop(0)
            continue
        out.append(a)
    return out


def run(args: argparse.Namespace) -> int:
    check_output(args.out, directory=True)
    if args.preset and (args.target_width is None or args.target_depth is None):
        raise ValueError("--preset needs the target's --target-width and --target-depth")
    if args.model and (args.target_width or args.target_depth):
        raise ValueError("--model names the whole target; drop --target-width/--target-depth")
    if args.slurm:
        return _submit(args)
    slurm_only = [f for f in ("dry_run", "resubmit") if getattr(args, f)]
    slurm_only += [f for f in ("gpus", "time", "partition", "account") if getattr(args, f) is not None]
    slurm_only += ["sbatch_arg"] if args.sbatch_arg else []
    if slurm_only:
        raise ValueError(f"--{slurm_only[0].replace('_', '-')} goes with --slurm")
    with tracking(args.track, args.out):  # every ladder, scaling and audit run is tracked
        return run_tune(args)


def _submit(args: argparse.Namespace) -> int:
    """``tune --slurm``: the job script printed (``--dry-run``) or written to OUT/slurm/ and
    submitted; a second submission of the same --out is refused unless ``--resubmit``."""
    cpu = str(args.device).strip().lower() == "cpu"
    gpus = args.gpus if args.gpus is not None else (0 if cpu else (args.workers or 1))
    if cpu and gpus:
        raise ValueError(f"--gpus {gpus} with --device cpu: pass --gpus 0, or --device cuda")
    out = Path(args.out).resolve()
    job = SlurmTune(argv=tuple(tune_argv(getattr(args, "raw_argv", None) or sys.argv[1:])),
                    log_dir=str(out / "slurm" / "logs"), gpus=gpus, cpus=args.cpus,
                    time=args.time or budget_time(args.budget), partition=args.partition,
                    account=args.account, extra=tuple(args.sbatch_arg))
    script = tune_script(job)
    if args.dry_run:
        Path(job.log_dir).mkdir(parents=True, exist_ok=True)  # SLURM opens the log before the job runs
        print(script, end="")
        return 0
    path = out / "slurm" / "tune.sbatch"
    # two drivers on one --out would race on its plan and studies
    job_id = submit_once(script, path, log_dir=job.log_dir, resubmit=args.resubmit,
                         already="this --out was submitted already", what=f"{gpus} GPUs")
    print(f"submitted job {job_id}: mutransfer tune on {gpus} GPU(s) ({path}); log in {job.log_dir}; "
          f"re-submitting resumes (--resubmit)", file=sys.stderr)
    return 0
