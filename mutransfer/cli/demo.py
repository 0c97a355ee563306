"""``mutransfer demo``: the whole workflow, end to end, on the embedded stdlib corpus.

1. coordinate check, SP against μP;
2. LR × width sweep (SP and μP side by side, >= 4 widths spanning >= 8x; μP with 2 seeds);
3. optimum per width and the drift of the optimum in octaves, with intervals;
4. the scaling sweep at the base width (token budget D as WSD branches × batch B × an
   LR grid around the optimum, plus a check at one wider width), every run logging its
   gradient noise scale;
5. the η*(B, D) and B*(D) laws, the critical batch two ways (steps-to-target S–E fit
   and the measured GNS), and the held-out audit (fit without the largest budget, then
   without the largest batch; train the predicted config there);
6. a v2 card a person would launch for the target: a 24-layer model at the projected
   batch in tokens, steps, LR, weight decay and warmup;
7. the plots, ``report.md``, ``report.html`` and ``summary.json`` (with the wall and CPU
   time of every stage).

Re-running reuses finished trials (the sweeps are Optuna studies in ``OUT/sweep`` and
``OUT/scaling``; the audit's runs are cached in ``OUT/audit_runs.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import html
import io
import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutransfer.cli._common import positive_int, print_json

HELP = "all of it, end to end, on the embedded corpus: coord check, LR sweep, fits, card, report"


@dataclass(frozen=True)
class ScalingStage:
    """The scaling sweep of the demo and the target its card is for."""

    batch_sizes: tuple[int, ...]
    """Batch sizes B in sequences (>= 4 over >= 8x, so the audit can hold one out)."""
    tokens: tuple[int, ...]
    """Token budgets D (>= 4 over >= 8x): the largest is trained, the others are WSD branches."""
    log2_lr_offsets: tuple[float, ...]
    """LR grid in octaves around the LR sweep's μP optimum, moved as sqrt(B)."""
    check_width: int
    """The wider width the scaling optimum is checked at (at the middle batch)."""
    eval_sequences: int
    """Held-out sequences per evaluation, at every batch."""
    target_width: int
    target_depth: int
    target_seq_len: int
    tokens_per_param: float = 20.0
    """Chinchilla's ~20 tokens per parameter (Hoffmann et al. 2022)."""
    check_batch_sizes: tuple[int, ...] | None = None
    """Batches of the wider check (None: the middle batch)."""
    max_extend: int = 2
    """An optimum (best batch of a budget, best LR of a cell) at the edge of its grid gets up
    to this many grid points past that edge, until bracketed (:mod:`sweeps.extend`)."""
    batch_range: tuple[int, int] | None = None
    """Batches (sequences) the extension may add (None: as the budgets and grad_accum allow)."""


@dataclass(frozen=True)
class DemoSize:
    """One ladder of proxies and the budget of each trial."""

    preset: str
    widths: tuple[int, ...]
    sp_log2_lrs: tuple[float, ...]
    """SP's LR grid: wide, since SP's optimum drifts with width."""
    mup_log2_lrs: tuple[float, ...]
    """μP's LR grid: around its width-independent optimum."""
    sp_seeds: tuple[int, ...]
    """SP's drift is ~10x its interval with one seed: a second buys little evidence."""
    seeds: tuple[int, ...]
    """μP's seeds: its drift of a fraction of an octave needs them."""
    steps: int
    batch_size: int
    seq_len: int
    coord_widths: tuple[int, ...]
    scaling: ScalingStage


SIZES: dict[str, DemoSize] = {
    # 2 CPU cores, <= 15 minutes: 2-block Llamas (SwiGLU, RMSNorm, RoPE) of width 32..256
    # (8x), 125 steps of 16x64 bytes; SP's grid reaches down to its optimum at width 256,
    # μP's is centred on its own (~2^-5.5 at every width). The scaling stage: width 32
    # (check at 64, batch 16), B = 4..32 sequences (256..2048 tokens), D = 2^15..2^18
    # tokens, 7 LRs half an octave apart; the extension may add batches down to 1 sequence
    # (B* sat at 2 on a first run: batch 1 accumulates 1 micro-batch, no GNS for that row).
    # Measured at 150 steps, μP 2^-8..2^-3 and the check at batch 8: 1125 s, too long.
    "small": DemoSize(preset="llama-small", widths=(32, 64, 128, 256),
                      sp_log2_lrs=tuple(float(x) for x in range(-10, -3)),
                      mup_log2_lrs=tuple(float(x) for x in range(-7, -2)), sp_seeds=(0,), seeds=(0, 1),
                      steps=125, batch_size=16, seq_len=64, coord_widths=(32, 64, 128, 256),
                      scaling=ScalingStage(batch_sizes=(4, 8, 16, 32), tokens=(2**15, 2**16, 2**17, 2**18),
                                           log2_lr_offsets=(-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5),
                                           check_width=64, eval_sequences=256, target_width=2048,
                                           target_depth=24, target_seq_len=1024,
                                           check_batch_sizes=(16,), max_extend=2, batch_range=(1, 64))),
    # A single GPU: Llamas of width 128..2048 (16x), 1000 steps of 64x256 bytes.
    "gpu": DemoSize(preset="llama-small", widths=(128, 256, 512, 1024, 2048),
                    sp_log2_lrs=tuple(float(x) for x in range(-14, -3)),
                    mup_log2_lrs=tuple(float(x) for x in range(-14, -3)), sp_seeds=(0, 1, 2),
                    seeds=(0, 1, 2), steps=1000, batch_size=64, seq_len=256,
                    coord_widths=(128, 256, 512, 1024),
                    scaling=ScalingStage(batch_sizes=(16, 32, 64, 128), tokens=(2**21, 2**22, 2**23, 2**24),
                                         log2_lr_offsets=(-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5),
                                         check_width=256, eval_sequences=512, target_width=8192,
                                         target_depth=48, target_seq_len=4096)),
    # For tests: seconds, not minutes. Numbers are not meaningful at this size.
    "tiny": DemoSize(preset="llama-small", widths=(32, 64, 128, 256), sp_log2_lrs=(-9.0, -7.0, -5.0, -3.0),
                     mup_log2_lrs=(-9.0, -7.0, -5.0, -3.0), sp_seeds=(0,), seeds=(0,), steps=6,
                     batch_size=4, seq_len=32, coord_widths=(32, 64, 128),
                     scaling=ScalingStage(batch_sizes=(2, 4, 8, 16), tokens=(512, 1024, 2048, 4096),
                                          log2_lr_offsets=(-1.0, 0.0, 1.0), check_width=64,
                                          eval_sequences=8, target_width=512, target_depth=24,
                                          target_seq_len=256, max_extend=1)),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | mps (default auto)")
    p.add_argument("--size", choices=sorted(SIZES), default=None,
                   help="ladder size: small (CPU), gpu; default: gpu when CUDA is available")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="sweep workers (default: one per CPU core, one per GPU)")
    p.add_argument("--model", default=None,
                   help="the proxy: a preset name or hf:PATH (a local transformers config.json; the card "
                        "then targets the same architecture at the target's width and depth); default: "
                        "the size's Llama-shaped preset")
    p.add_argument("--json", action="store_true", help="print summary.json")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, flush=True)


def run(args: argparse.Namespace) -> int:
    from mutransfer._io import check_output

    # re-running into the same folder resumes its sweep (finished trials are kept) and
    # rebuilds the figures, table, card and report from it; a different size is refused
    check_output(args.out, directory=True)
    summary = run_demo(Path(args.out), device=args.device, size=args.size, workers=args.workers,
                       quiet=args.quiet or args.json, model=args.model)
    if args.json:
        print_json(summary)
    return 0


class _Clock:
    """Wall and CPU seconds of each stage (CPU: this process and its finished workers).

    On a machine shared with other work the wall time says little; ``idle_estimate_s``
    (CPU seconds / the processes that ran in parallel) is what the stage would take on
    idle cores, an upper bound as far as contention also inflates CPU time."""

    def __init__(self) -> None:
        self.stages: dict[str, dict[str, float]] = {}

    @staticmethod
    def cpu() -> float:
        import resource

        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    @contextlib.contextmanager
    def stage(self, name: str, parallel: int = 1) -> Iterator[None]:
        w0, c0 = time.perf_counter(), self.cpu()
        try:
            yield
        finally:
            wall, cpu = time.perf_counter() - w0, self.cpu() - c0
            self.stages[name] = {"wall_s": wall, "cpu_s": cpu, "parallel": parallel,
                                 "idle_estimate_s": cpu / max(1, parallel)}


def _model_kw(model: str) -> dict[str, str]:
    """A sweep spec's model fields: a preset by name, an ``hf:`` config as ``model``."""
    return {"model": model} if model.startswith("hf:") else {"preset": model}


def _hf_target_config(out: Path, model: str, sc: ScalingStage) -> Path:
    """The user's HF architecture at the target's width and depth (the proxy's own scaling
    rules), byte vocabulary as the demo's proxy trained on, context at least the target's:
    ``out/target_config.json``, the config the card is written for."""
    import json

    from mutransfer._io import atomic_write_text
    from mutransfer.models import hf_proxy_config, load_hf_config, parse_model

    source = parse_model(model)
    cfg = hf_proxy_config(load_hf_config(source.ref), sc.target_width, sc.target_depth, source.head_rule)
    cfg.vocab_size = 256
    if getattr(cfg, "max_position_embeddings", None) is not None:
        cfg.max_position_embeddings = max(int(cfg.max_position_embeddings), sc.target_seq_len)
    path = out / "target_config.json"
    atomic_write_text(path, json.dumps(cfg.to_dict(), indent=1, default=str))
    return path


def run_demo(out: Path, *, device: str = "auto", size: str | None = None, workers: int | None = None,
             quiet: bool = False, model: str | None = None) -> dict[str, Any]:
    """Run the demo into ``out``; returns the summary (also written as summary.json).
    ``model``: the proxy instead of the size's preset, a preset name or ``hf:PATH``."""
    import torch

    from mutransfer._io import atomic_write_text

    t0 = time.perf_counter()
    clock = _Clock()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    size = size or ("gpu" if device.startswith("cuda") else "small")
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose from {', '.join(SIZES)}")
    sz = SIZES[size]
    if model is not None:
        from mutransfer.models import parse_model

        source = parse_model(model)
        if source.kind == "builder":
            raise ValueError(f"demo --model {model!r}: the demo's card needs a preset or an hf: config (a "
                             "builder has no full-size config to target); sweep it with `mutransfer sweep "
                             "lr --model` instead")
        sz = dataclasses.replace(sz, preset=source.ref if source.builtin else source.spec())
    out.mkdir(parents=True, exist_ok=True)
    figs = out / "figures"
    figs.mkdir(exist_ok=True)
    from sweeps.study import default_workers

    n_workers = workers or default_workers(device, 1 << 30)

    # 1. coordinate check -------------------------------------------------------------
    _log(quiet, f"[1/7] coordinate check, SP vs muP, widths {list(sz.coord_widths)}")
    from mutransfer.cli import main as cli_main

    coord: dict[str, Any] = {}
    with clock.stage("coord_check", parallel=min(2, torch.get_num_threads())):
        for kind in ("sp", "mup"):
            cdir = out / "coord_check" / kind
            widths = ",".join(map(str, sz.coord_widths))
            code = cli_main(["coord-check", "--model", sz.preset, "-p", kind, "--widths", widths,
                             "--steps", "4", "--n-seeds", "2", "--seq-len", str(min(sz.seq_len, 64)),
                             "--out", str(cdir), "--overwrite", "--quiet"])
            if code != 0:
                raise RuntimeError(f"coord-check {kind} failed with exit code {code}")
            coord[kind] = json.loads((cdir / "coord_check.json").read_text())

    # 2. LR x width sweep ---------------------------------------------------------------
    import pandas as pd

    from sweeps import LRSweep, results_table, run_sweep, write_table
    from sweeps.worker import open_study

    base = {"steps": sz.steps, "batch_size": sz.batch_size, "seq_len": sz.seq_len,
            "base_width": sz.widths[0], "eval_every": sz.steps, "eval_batches": 8,
            "warmup_steps": max(1, sz.steps // 10), "schedule": "cosine", "lr_floor": 0.1,
            "threads": 1 if device == "cpu" else None}
    specs = [LRSweep(**_model_kw(sz.preset), widths=sz.widths, parametrizations=(p,), seeds=seeds,
                     lrs=tuple(2.0**x for x in grid), base=base, name=f"demo-{size}-{p}")
             for p, grid, seeds in (("sp", sz.sp_log2_lrs, sz.sp_seeds), ("mup", sz.mup_log2_lrs, sz.seeds))]
    n_trials = sum(len(sp.points()) for sp in specs)
    _log(quiet, f"[2/7] LR sweep: {n_trials} trials ({len(sz.widths)} widths; SP {len(sz.sp_log2_lrs)} LRs x "
                f"{len(sz.sp_seeds)} seed(s), muP {len(sz.mup_log2_lrs)} LRs x {len(sz.seeds)} seeds; "
                f"{sz.steps} steps each) on {device}")
    tables = []
    with clock.stage("lr_sweep", parallel=n_workers):
        for spec in specs:
            sweep = run_sweep(spec, out=out / "sweep", workers=workers, device=device, quiet=quiet)
            study, _ = open_study(sweep.plan.storage, sweep.plan.study_name)
            tables.append(results_table(study))
    table = pd.concat(tables, ignore_index=True)
    write_table(table, out / "results.csv")

    # 3. optimum per width, drift -------------------------------------------------------
    _log(quiet, "[3/7] optimum per width and drift of the optimum")
    from analysis import OptimumFit, plot_lr_curves, plot_optimum_vs_width

    with clock.stage("lr_fits"):
        fit = OptimumFit(x="lr", y="loss", group_by=("parametrization", "width"), n_boot=500).fit(table)
        drifts = {p: fit.drift("width", where={"parametrization": p}) for p in ("sp", "mup")}
    res = fit.results_
    best = {p: {int(r["width"]): float(r["loss_opt"]) for _, r in res[res["parametrization"] == p].iterrows()}
            for p in ("sp", "mup")}
    widths = sorted(best["mup"])
    mup_best = [best["mup"][w] for w in widths]
    wider_is_better = all(b < a for a, b in zip(mup_best, mup_best[1:]))
    widest = widths[-1]
    mup_vs_sp_widest = best["mup"][widest] / best["sp"][widest]

    # 4. scaling sweep ------------------------------------------------------------------
    scaling = _scaling_stage(out, sz, size, fit, device=device, workers=workers, n_workers=n_workers,
                             quiet=quiet, clock=clock)

    # 6. the card for the target --------------------------------------------------------
    sc = sz.scaling
    _log(quiet, f"[6/7] card for the target: {sc.target_depth} blocks of width {sc.target_width}, "
                f"context {sc.target_seq_len}, {sc.tokens_per_param:g} tokens per parameter")
    if sz.preset.startswith("hf:"):  # the user's architecture, scaled to the target's shape
        target = ["--model", f"hf:{_hf_target_config(out, sz.preset, sc)}",
                  "--seq-len", str(sc.target_seq_len)]
    else:
        target = ["--preset", sz.preset, "--seq-len", str(sz.seq_len), "--set", f"width={sc.target_width}",
                  "--set", f"depth={sc.target_depth}", "--set", f"seq_len={sc.target_seq_len}"]
    argv = ["transfer", "--results", str(out / "results.csv"), *target,
            "--parametrization", "mup", "--base-width", str(sz.widths[0]),
            "--tokens-per-param", str(sc.tokens_per_param),
            "--study", specs[1].study_name(), "--storage", f"journal:{out / 'sweep' / 'optuna.journal'}",
            "--out", str(out / "card.yaml")]
    if scaling.get("fit_path"):
        argv += ["--scaling-fit", scaling["fit_path"]]
    else:  # no laws: the proxy's batch, as before the scaling stage
        argv += ["--batch-size", str(sz.batch_size)]
    if scaling.get("audit_path"):
        argv += ["--audit", scaling["audit_path"]]
    err = io.StringIO()
    quiet_out = contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext()
    with clock.stage("card"), quiet_out, contextlib.redirect_stderr(err):
        code = cli_main(argv)
    if code != 0:
        raise RuntimeError(f"transfer failed with exit code {code}: {err.getvalue().strip()}")
    card_warnings = [line.split("warning: ", 1)[1] for line in err.getvalue().splitlines()
                     if "warning: " in line]
    from mutransfer.card import load_card

    card = load_card(out / "card.yaml")

    # 7. plots and report ---------------------------------------------------------------
    _log(quiet, "[7/7] plots and report")
    with clock.stage("plots_report"):
        images = {
            "coord check, SP": "coord_check/sp/coord_check.png",
            "coord check, muP": "coord_check/mup/coord_check.png",
            "loss vs LR, SP": str(plot_lr_curves(fit, figs / "lr_curves_sp.png",
                                                 where={"parametrization": "sp"}).relative_to(out)),
            "loss vs LR, muP": str(plot_lr_curves(fit, figs / "lr_curves_mup.png",
                                                  where={"parametrization": "mup"}).relative_to(out)),
            "optimal LR vs width": str(plot_optimum_vs_width(fit, figs / "optimum_vs_width.png",
                                                             by="parametrization").relative_to(out)),
        }
        images.update(scaling.pop("images", {}))
    per_width = []
    for w in widths:
        row: dict[str, Any] = {"width": w}
        for p in ("sp", "mup"):
            o = fit.group((p, w))
            row[p] = {"lr_opt": o.x_opt, "log2_lr_opt": o.log2_x_opt, "ci": [_num(c) for c in o.ci],
                      "loss_opt": o.loss_opt, "at_edge": o.at_edge}
        per_width.append(row)
    proj_lr = (card.get("projected") or {}).get("lr") or {}
    lr_interval = proj_lr.get("interval")
    if lr_interval is None and "lo" in proj_lr:
        lr_interval = [proj_lr.get("lo"), proj_lr.get("hi")]
    audit = scaling.get("audit") or {}
    summary: dict[str, Any] = {
        "size": size, "device": device, "preset": sz.preset, "widths": list(widths),
        "ladder_ratio": widest / widths[0], "steps": sz.steps, "batch_size": sz.batch_size,
        "seq_len": sz.seq_len, "seeds": list(sz.seeds), "sp_seeds": list(sz.sp_seeds),
        "n_trials": int(len(table)),
        "n_diverged": int(table["diverged"].sum()) if "diverged" in table else 0,
        "coord_check": {k: {"passed": v["passed"], "max_slope": v["worst"]["slope"]}
                        for k, v in coord.items()},
        "drift_octaves": {p: d.octaves for p, d in drifts.items()},
        "drift_ci": {p: [_num(c) for c in d.ci] for p, d in drifts.items()},
        "drift_slope": {p: d.slope for p, d in drifts.items()},
        "optimum_at_edge": {p: d.any_at_edge for p, d in drifts.items()},
        "per_width": per_width,
        "mup_wider_is_better": wider_is_better,
        "mup_over_sp_best_loss_at_widest": mup_vs_sp_widest,
        "target": card["target"], "card_lr": card["optimizer"]["lr"], "card_lr_interval": lr_interval,
        "trust": (card.get("trust") or {}).get("summary", []),
        "card": {"batch_tokens": card["batch"]["tokens"], "batch_sequences": card["batch"]["sequences"],
                 "steps": card["schedule"]["total_steps"], "lr": card["optimizer"]["lr"],
                 "weight_decay": card["optimizer"]["weight_decay"],
                 "warmup_tokens": card["schedule"]["warmup_tokens"],
                 "warmup_steps": card["schedule"]["warmup_steps"],
                 "decay_fraction": card["schedule"].get("decay_fraction"),
                 "tau": card["optimizer"].get("tau"), "audit_passed": card["audit"].get("passed"),
                 "warnings": card_warnings},
        "holdout": _holdout_summary(audit),
        "scaling": scaling,
        "images": images,
    }
    summary["stages"] = clock.stages
    summary["wall_s"] = time.perf_counter() - t0
    summary["cpu_s"] = sum(v["cpu_s"] for v in clock.stages.values())
    summary["idle_estimate_s"] = sum(v["idle_estimate_s"] for v in clock.stages.values())
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=float) + "\n")
    md = _report_md(summary)
    atomic_write_text(out / "report.md", md)
    atomic_write_text(out / "report.html", _report_html(summary))
    _log(quiet, f"done in {summary['wall_s']:.0f} s ({summary['cpu_s']:.0f} CPU s, "
                f"~{summary['idle_estimate_s']:.0f} s on idle cores): drift SP "
                f"{summary['drift_octaves']['sp']:.2f} octaves, muP "
                f"{summary['drift_octaves']['mup']:.2f}; card: {summary['card']['steps']} steps of "
                f"{summary['card']['batch_tokens']} tokens; see {out / 'report.md'}")
    return summary


def _holdout_summary(audit: Mapping[str, Any]) -> dict[str, Any]:
    """Ours on the held-out budget (the extrapolation the card makes) at the top level,
    both axes under ``by_axis``."""
    by_axis = {}
    for r in audit.get("holdout", []):
        if r.get("method") == "ours":
            by_axis[r["axis"]] = {k: r.get(k) for k in ("lr_ratio", "batch_ratio", "loss_gap")}
    top = by_axis.get("tokens", {"lr_ratio": None, "batch_ratio": None, "loss_gap": None})
    return {**top, "axis": "tokens", "by_axis": by_axis, "passed": audit.get("passed"),
            "criteria": audit.get("criteria")}


def _scaling_stage(out: Path, sz: DemoSize, size: str, fit: Any, *, device: str, workers: int | None,
                   n_workers: int, quiet: bool, clock: _Clock) -> dict[str, Any]:
    """Stages 4 and 5: the scaling sweep, its laws, the critical batch and the audit."""
    from analysis import ScalingLawFit
    from mutransfer._io import atomic_write_text
    from sweeps import results_table, write_table
    from sweeps.audit import audit_rows, run_holdout_audit
    from sweeps.extend import Bounds, run_bracketed
    from sweeps.spec import ScalingSweep
    from sweeps.worker import open_study

    sc = sz.scaling
    width = sz.widths[0]
    centre = fit.group(("mup", width))
    # a quarter-octave grid point, so a re-run (same optimum) resumes the same study
    lr_center = 2.0 ** (round(4 * centre.log2_x_opt) / 4)
    spec = ScalingSweep(**_model_kw(sz.preset), width=width, check_width=sc.check_width,
                        check_batch_sizes=sc.check_batch_sizes,
                        batch_sizes=sc.batch_sizes, tokens=sc.tokens, seeds=(0,), lr_center=lr_center,
                        lr_center_batch=sz.batch_size, log2_lr_offsets=sc.log2_lr_offsets,
                        eval_sequences=sc.eval_sequences,
                        base={"seq_len": sz.seq_len, "threads": 1 if device == "cpu" else None},
                        name=f"demo-{size}-scaling")
    n = len(spec.points())
    _log(quiet, f"[4/7] scaling sweep: {n} trials at width {width} (+ {sc.check_width}): budgets "
                f"{[f'{t:.3g}' for t in spec.budgets()]} tokens as WSD branches, batches "
                f"{list(sc.batch_sizes)} "
                f"x {sz.seq_len} tokens, {len(sc.log2_lr_offsets)} LRs around 2^{math.log2(lr_center):.2f} "
                f"(x sqrt(B/{sz.batch_size}))")
    bounds = Bounds(max_extend=sc.max_extend, batch_range=sc.batch_range)
    with clock.stage("scaling_sweep", parallel=n_workers):
        # an optimum at its grid's edge gets more grid (batch and LR), within the bounds
        sweep, bracket = run_bracketed(spec, bounds, out=out / "scaling", workers=workers, device=device,
                                       quiet=quiet)
    study, _ = open_study(sweep.plan.storage, sweep.plan.study_name)
    table = results_table(study)
    batches = sorted({int(b) for b in table.loc[table["width"] == width, "batch_size"]})
    write_table(table, out / "scaling_results.csv")
    trials = table.drop_duplicates("trial")
    cost = {str(int(b)): float(g["cpu_s"].mean()) for b, g in trials.groupby("batch_size")} \
        if "cpu_s" in trials.columns else {}
    info: dict[str, Any] = {
        "width": width, "check_width": sc.check_width, "budgets": list(spec.budgets()),
        "check_batch_tokens": sorted({p["batch_size"] * sz.seq_len for p in spec.points()
                                      if p.get("width") == sc.check_width}),
        "batch_sizes": batches, "batch_tokens": [b * sz.seq_len for b in batches],
        "bracketing": bracket.to_dict() if bracket is not None else None,
        "lr_center": lr_center, "lr_center_batch": sz.batch_size,
        "log2_lr_offsets": list(sc.log2_lr_offsets), "n_trials": int(len(trials)), "n_rows": int(len(table)),
        "n_diverged": int(table["diverged"].sum()), "weight_decay": spec.base.get("weight_decay"),
        "study": spec.study_name(), "cpu_s_per_trial_by_batch": cost,
        "cpu_s_trials": float(trials["cpu_s"].sum()) if "cpu_s" in trials.columns else None,
        "images": {},
    }

    if bracket is not None:
        for line in bracket.lines():
            _log(quiet, f"      {line}")
    _log(quiet, "[5/7] eta*(B, D) and B*(D) laws, critical batch two ways, held-out audit")
    rows = audit_rows(table, spec)
    try:
        with clock.stage("scaling_fit"):
            t_fit = time.perf_counter()
            sfit = ScalingLawFit(n_boot=1000).fit(rows)
            info["fit_s"] = time.perf_counter() - t_fit
        doc = sfit.to_dict()
        doc["results"] = str(out / "scaling_results.csv")
        atomic_write_text(out / "scaling_fit.json", json.dumps(doc, indent=2) + "\n")
        info["fit_path"] = str(out / "scaling_fit.json")
        info["laws"] = {"lr": doc["lr"]["law"], "batch": doc["batch"]["law"],
                        "lr_exponents": doc["lr"]["exponents"], "lr_ci": doc["lr"]["ci"],
                        "batch_exponent": doc["batch"]["exponents"]["tokens"],
                        "batch_ci": doc["batch"]["ci"]["tokens"], "tau": doc["tau"]["value"],
                        "tau_ci": doc["tau"]["ci"], "warnings": doc.get("warnings", [])}
        info["cells"] = doc.get("cells", [])
        info["budget_optima"] = doc.get("budgets", [])
        from analysis.scaling_plots import plot_scaling

        info["images"]["eta*(B, D) and B*(D) with bootstrap bands"] = str(
            plot_scaling(sfit.curves_(), out / "figures" / "scaling_laws.png").relative_to(out))
    except ValueError as exc:
        info["error"] = f"scaling fit: {exc}"
        _log(quiet, f"      the scaling fit failed: {exc}")
        return info
    try:
        info["critical_batch"], image = _critical_batch(rows, sfit, sz.seq_len, out)
        info["images"]["critical batch: S-E fit vs measured GNS"] = image
    except ValueError as exc:
        info["critical_batch"] = {"error": str(exc)}
    info["width_check"] = _width_check(table, spec)
    try:
        with clock.stage("holdout_audit"):
            audit = run_holdout_audit(spec, table, out=out / "AUDIT.json", device=device, quiet=quiet)
        info["audit"] = audit
        info["audit_path"] = str(out / "AUDIT.json")
    except ValueError as exc:
        info["error"] = f"held-out audit: {exc}"
        _log(quiet, f"      the held-out audit failed: {exc}")
    return info


def _critical_batch(rows: Any, sfit: Any, seq_len: int, out: Path) -> tuple[dict[str, Any], str]:
    """The critical batch two ways on the same runs, in sequences: the S–E fit on the
    steps each batch needs to reach a target loss (McCandlish et al. 2018, eq. 2.11;
    steps from the best-LR loss at every budget, interpolated), and the measured GNS
    B_simple of those best-LR runs."""
    import pandas as pd

    from analysis import CriticalBatchFit, steps_to_target
    from analysis.scaling_plots import critical_batch_comparison, plot_critical_batch_comparison

    cells = sfit.cells_.copy()
    cells["batch_size"] = cells["batch_tokens"] / seq_len
    cells["step"] = cells["tokens"] / cells["batch_tokens"]
    # the target: the worst batch's best loss at the largest budget, so every batch reaches it
    last = cells[cells["tokens"] == cells["tokens"].max()]
    target = float(last["loss_opt"].max())
    reach = steps_to_target(cells.rename(columns={"loss_opt": "loss"}), target, step="step", loss="loss",
                            group_by=("batch_size",))
    # a batch already below the target at its smallest budget has no bracketed crossing
    first = cells.sort_values("tokens").groupby("batch_size")["loss_opt"].first()
    reach = reach[reach["batch_size"].map(lambda b: first[b] > target)]
    cbs = CriticalBatchFit(batch="batch_size", n_boot=1000).fit(reach)
    ok = rows[~rows["diverged"].astype(bool)]
    best = ok.loc[ok.groupby(["batch_tokens", "tokens"])["loss"].idxmin()]
    comp = critical_batch_comparison(pd.DataFrame(best), cbs, batch="batch_size")
    path = plot_critical_batch_comparison(comp, out / "figures" / "critical_batch.png")
    doc = {"target_loss": target, "b_crit_sequences": comp.b_crit,
           "b_crit_ci_sequences": list(comp.b_crit_ci) if comp.b_crit_ci else None,
           "b_simple_sequences": comp.b_simple, "b_simple_range_sequences": list(comp.b_simple_range),
           "b_crit_tokens": comp.b_crit * seq_len, "b_simple_tokens": comp.b_simple * seq_len,
           "ratio": comp.ratio, "n_batches": int(len(reach)),
           "steps_to_target": {str(float(b)): float(s)
                               for b, s in zip(reach["batch_size"], reach["steps_to_target"])}}
    return doc, str(path.relative_to(out))


def _width_check(table: Any, spec: Any) -> list[dict[str, Any]]:
    """μP at the scaling level: the LR optimum per budget at the base width and the
    wider check width, at the check's batch (quadratic vertex, as the fits use)."""
    from analysis import OptimumFit

    ok = table[table["batch_size"].isin(set(p["batch_size"] for p in spec.points()
                                                if p.get("width") == spec.check_width))]
    try:
        f = OptimumFit(x="lr", y="loss", group_by=("width", "tokens"), n_boot=0).fit(ok)
    except ValueError:
        return []
    out = []
    for d in spec.budgets():
        try:
            a, b = f.group((spec.width, d)), f.group((spec.check_width, d))
        except (KeyError, ValueError):
            continue
        out.append({"tokens": d, "lr_base": a.x_opt, "lr_check": b.x_opt, "ratio": b.x_opt / a.x_opt,
                    "loss_base": a.loss_opt, "loss_check": b.loss_opt})
    return out


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _fmt_ci(ci: list[float | None]) -> str:
    lo, hi = ci
    return f"[{'-inf' if lo is None else f'{lo:.2f}'}, {'inf' if hi is None else f'{hi:.2f}'}]"


def _rows(s: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in s["per_width"]:
        cells = [str(r["width"])]
        for p in ("sp", "mup"):
            o = r[p]
            edge = " (edge)" if o["at_edge"] else ""
            cells += [f"2^{o['log2_lr_opt']:.2f}{edge}", f"{o['loss_opt']:.3f}"]
        rows.append(cells)
    return rows


HEAD = ["width", "SP optimal LR", "SP best loss", "muP optimal LR", "muP best loss"]


def _g(x: Any, fmt: str = ".4g") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _pair(p: Any, fmt: str = ".3g") -> str:
    return "-" if not p else f"[{_g(p[0], fmt)}, {_g(p[1], fmt)}]"


def _sections(s: dict[str, Any]) -> list[tuple[str, list[str], list[str], list[list[str]]]]:
    """The report's scaling, audit, card and timing sections: (title, paragraphs, table
    head, table rows), rendered by both the Markdown and the HTML report."""
    sc, out = s["scaling"], []
    budgets = ", ".join(f"{t:.3g}" for t in sc["budgets"])
    intro = [f"{sc['n_trials']} runs at width {sc['width']} (and {sc['check_width']} at batch "
             f"{sc['check_batch_tokens']} tokens), "
             f"each training the largest of the budgets D = {budgets} tokens with a WSD schedule whose "
             f"branches cool down at every smaller one ({sc['n_rows']} results rows, {sc['n_diverged']} "
             f"diverged); batches {sc['batch_tokens']} tokens; {len(sc['log2_lr_offsets'])} LRs half an "
             f"octave apart around the LR sweep's μP optimum 2^{math.log2(sc['lr_center']):.2f} "
             f"(at {sc['lr_center_batch']} sequences, moved as sqrt(B)); AdamW weight decay "
             f"{sc['weight_decay']}; every run logs its gradient noise scale."]
    br = sc.get("bracketing")
    if br and br.get("budgets"):
        ok_b = sum(1 for r in br["budgets"] if r["batch"]["bracketed"])
        ok_lr = sum(1 for r in br["budgets"] if r["lr"]["bracketed"])
        n = len(br["budgets"])
        intro.append(f"Grids extended past every edge optimum ({br['extended_trials']} runs added, at most "
                     f"{br['max_extend']} points per grid): B* bracketed at {ok_b} of {n} budgets, every "
                     f"batch's η* at {ok_lr} of {n}." + (" Stopped: " + "; ".join(br["stopped"]) + "."
                                                          if br["stopped"] else ""))
    if "error" in sc:
        intro.append(f"**{sc['error']}**")
    laws = sc.get("laws")
    rows: list[list[str]] = []
    if laws:
        e = laws["lr_exponents"]
        rows = [["η*(B, D)", laws["lr"],
                 f"B: {_g(e['batch_tokens'], '.3f')} {_pair(laws['lr_ci']['batch_tokens'])}; "
                 f"D: {_g(e['tokens'], '.3f')} {_pair(laws['lr_ci']['tokens'])}"],
                ["B*(D)", laws["batch"], f"D: {_g(laws['batch_exponent'], '.3f')} {_pair(laws['batch_ci'])}"],
                ["τ = B/(η·λ·D)", f"{_g(laws['tau'], '.3g')}", f"{_pair(laws['tau_ci'])}"]]
        intro.append(f"Fitted with 1000 bootstrap resamples in {sc.get('fit_s', 0):.1f} s (90% intervals). "
                     + " ".join(laws.get("warnings", [])))
    out.append(("What μP does not fix: the LR and batch laws", intro,
                ["law", "fit", "exponents [90% CI]"], rows))
    cb = sc.get("critical_batch") or {}
    if cb and "error" not in cb:
        out.append(("Critical batch, two ways on the same runs", [
            f"Steps to reach the loss {cb['target_loss']:.4f} (each batch's best LR, interpolated between "
            f"budgets) fitted with S = S_min + E_min/B (McCandlish et al. 2018) against the measured "
            f"gradient noise scale B_simple of the best-LR runs: B_simple / B_crit = {cb['ratio']:.2g}."],
            ["estimate", "sequences", "tokens", "interval (sequences)"],
            [["B_crit (S–E fit)", _g(cb["b_crit_sequences"], ".3g"), _g(cb["b_crit_tokens"], ".4g"),
              _pair(cb["b_crit_ci_sequences"])],
             ["B_simple (GNS, median)", _g(cb["b_simple_sequences"], ".3g"), _g(cb["b_simple_tokens"], ".4g"),
              _pair(cb["b_simple_range_sequences"])]]))
    elif cb:
        out.append(("Critical batch, two ways on the same runs", [f"not fitted: {cb['error']}"], [], []))
    wc = sc.get("width_check") or []
    if wc:
        out.append((f"Width check: the scaling optimum at width {sc['check_width']}", [
            "μP should keep η* fixed across width at every budget (ratio near 1)."],
            ["tokens", f"η* width {sc['width']}", f"η* width {sc['check_width']}", "ratio"],
            [[f"{r['tokens']:.3g}", _g(r["lr_base"]), _g(r["lr_check"]), _g(r["ratio"], ".3f")]
             for r in wc]))
    h = s["holdout"]
    audit_rows = (sc.get("audit") or {}).get("holdout", [])
    if audit_rows:
        crit = h.get("criteria") or {}
        out.append(("Held-out audit", [
            "Fit on all but the largest budget (axis tokens), then on all but the largest batch "
            "(axis batch_tokens); predict the optimum there; train our predicted config at the held-out "
            "point; loss gap = its loss / the best measured run there − 1. Target: LR within "
            f"{crit.get('lr_ratio', 1.3)}× and loss within {100 * crit.get('loss_gap', 0.0025):.2f}%: "
            f"**{'passed' if h.get('passed') else 'not met' if h.get('passed') is False else 'n/a'}**."],
            ["axis", "method", "pred LR", "meas LR", "LR ratio", "pred batch", "meas batch", "batch ratio",
             "loss gap"],
            [[r["axis"], r["method"], _g(r.get("pred_lr")), _g(r.get("meas_lr")),
              _g(r.get("lr_ratio"), ".3f"),
              _g(r.get("pred_batch_tokens"), ".4g"), _g(r.get("meas_batch_tokens"), ".4g"),
              _g(r.get("batch_ratio"), ".3f"),
              "-" if r.get("loss_gap") is None else f"{100 * r['loss_gap']:+.3f}%"] for r in audit_rows]))
    c, t = s["card"], s["target"]
    out.append(("The card for the big run", [
        f"Target: {t.get('depth')} blocks of width {t.get('width')}, context {t.get('seq_len')}, "
        f"{t['n_params'] / 1e6:.1f}M parameters, {t['tokens']:.3g} tokens "
        f"({t.get('tokens_per_param', 0):.0f} per parameter). The per-parameter table is in `card.yaml`.",
        *(f"- warning: {w}" for w in c.get("warnings", []))],
        ["batch (tokens)", "batch (sequences)", "steps", "base LR", "weight decay", "warmup (tokens)",
         "warmup (steps)", "WSD decay fraction"],
        [[_g(c["batch_tokens"], ".6g"), str(c["batch_sequences"]), str(c["steps"]), _g(c["lr"]),
          _g(c["weight_decay"]), _g(c["warmup_tokens"], ".4g"), str(c["warmup_steps"]),
          _g(c.get("decay_fraction"), ".3g")]]))
    st = s["stages"]
    out.append(("Time", [
        f"Wall {s['wall_s']:.0f} s, CPU {s['cpu_s']:.0f} s; on idle cores about {s['idle_estimate_s']:.0f} s "
        "(each stage's CPU seconds over the processes that ran it in parallel)."],
        ["stage", "wall (s)", "CPU (s)", "parallel", "idle estimate (s)"],
        [[k, f"{v['wall_s']:.1f}", f"{v['cpu_s']:.1f}", str(v["parallel"]), f"{v['idle_estimate_s']:.1f}"]
         for k, v in st.items()]))
    return out


def _report_md(s: dict[str, Any]) -> str:
    lines = [
        "# mutransfer demo", "",
        f"{s['n_trials']} proxy runs of the `{s['preset']}` model on the embedded stdlib corpus "
        f"({s['steps']} steps of {s['batch_size']}x{s['seq_len']} bytes, μP seeds {s['seeds']}, SP seeds "
        f"{s['sp_seeds']}, {s['device']}), widths {s['widths']} ({s['ladder_ratio']:.0f}x). Loss is held-out "
        "nats per byte.", "",
        *(["## How far to trust the card", "", *(f"- {line}" for line in s.get("trust", [])),
           *(f"- warning: {w}" for w in s["card"].get("warnings", [])), ""] if s.get("trust") else []),
        "## Does the optimal learning rate transfer?", "",
        "| parametrization | drift of the optimum (octaves) | 95% interval "
        "| slope of log2 LR* vs log2 width |",
        "|---|---|---|---|",
    ]
    for p, name in (("sp", "SP"), ("mup", "muP")):
        slope = s["drift_slope"][p]
        lines.append(f"| {name} | {s['drift_octaves'][p]:.2f} | {_fmt_ci(s['drift_ci'][p])} | "
                     f"{'-' if slope is None else f'{slope:.2f}'} |")
    lines += ["", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in _rows(s)]
    lines += [
        "", f"muP wider-is-better (best loss falls with width): **{s['mup_wider_is_better']}**; "
        f"muP best / SP best at the widest proxy: {s['mup_over_sp_best_loss_at_widest']:.4f}.", "",
        "## Coordinate check", "",
        *(f"- {k}: {'passed' if v['passed'] else 'FAILED'} (largest slope {v['max_slope']:.2f})"
          for k, v in s["coord_check"].items()), "",
    ]
    for title, paras, head, rows in _sections(s):
        lines += [f"## {title}", ""]
        for p in paras:
            lines += [p, ""]
        if head:
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(r) + " |" for r in rows]
            lines.append("")
    lines += ["## Figures", ""]
    lines += [f"![{k}]({v})" for k, v in s["images"].items()]
    return "\n".join(lines) + "\n"


def _report_html(s: dict[str, Any]) -> str:
    def table(head: list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f"<table><tr>{th}</tr>{trs}</table>"

    drift_rows = [[name, f"{s['drift_octaves'][p]:.2f}", _fmt_ci(s["drift_ci"][p])]
                  for p, name in (("sp", "SP"), ("mup", "muP"))]
    imgs = "".join(f"<figure><img src='{html.escape(v)}' style='max-width:100%'><figcaption>"
                   f"{html.escape(k)}</figcaption></figure>" for k, v in s["images"].items())
    sections = "".join(
        f"<h2>{html.escape(title)}</h2>" + "".join(f"<p>{html.escape(p)}</p>" for p in paras)
        + (table(head, rows) if head else "")
        for title, paras, head, rows in _sections(s))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>mutransfer demo</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.2em .8em;"
        "border-bottom:1px solid #ccc}</style></head><body><h1>mutransfer demo</h1>"
        f"<p>{s['n_trials']} runs, widths {s['widths']}, {s['steps']} steps, {html.escape(s['device'])}.</p>"
        "<h2>Drift of the optimal learning rate</h2>"
        + table(["parametrization", "octaves", "95% interval"], drift_rows)
        + "<h2>Optimum per width</h2>" + table(HEAD, _rows(s))
        + sections + "<h2>Figures</h2>" + imgs + "</body></html>\n"
    )
