"""``mutransfer demo``: the whole workflow, end to end, on the embedded stdlib corpus.

1. coordinate check, SP against μP;
2. LR × width sweep (SP and μP side by side, >= 4 widths spanning >= 8x, the same seeds and
   the same grid shape around each arm's expected optimum; the base width, where μP is SP,
   trained once for both);
3. optimum per width and the drift of the optimum in octaves, with intervals; μP's best
   loss ÷ SP's at every width (lowest measured seed mean, seed-paired interval);
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
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from analysis.best_loss import paired_best_ratio
from analysis.optimum import OptimumFit
from analysis.plots import plot_lr_curves, plot_optimum_vs_width
from analysis.table import num
from mutransfer._io import atomic_write_text, check_output
from mutransfer.card.build import save_card
from mutransfer.card.make import TransferRequest, make_card
from mutransfer.card.request import RunChoices
from mutransfer.models.source import hf_proxy_config, parse_model
from mutransfer_cli import main as cli_main
from mutransfer_cli._common import add_track_flag, positive_int, print_json, tracking
from mutransfer_cli._demo_report import report_html, report_md
from mutransfer_cli._demo_scaling import holdout_summary, scaling_stage
from mutransfer_cli._demo_sizes import SIZES, DemoSize, ScalingStage, model_kw
from mutransfer_cli._demo_stage import Clock, log
from sweeps.progress import Progress
from sweeps.results import results_table, write_table
from sweeps.spec_kinds import LRSweep
from sweeps.extend import Bounds, run_bracketed
from sweeps.study import default_workers
from sweeps.worker import open_study

__all__ = ["run_demo"]

HELP = "all of it, end to end, on the embedded corpus: coord check, LR sweep, fits, card, report"


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
    add_track_flag(p)


def run(args: argparse.Namespace) -> int:
    # re-running into the same folder resumes its sweep (finished trials are kept) and
    # rebuilds the figures, table, card and report from it; a different size is refused
    check_output(args.out, directory=True)
    with tracking(args.track, args.out):  # every sweep trial and audit run is tracked
        summary = run_demo(Path(args.out), device=args.device, size=args.size, workers=args.workers,
                           quiet=args.quiet or args.json, model=args.model)
    if args.json:
        print_json(summary)
    return 0


def _hf_target_config(out: Path, model: str, sc: ScalingStage) -> Path:
    """The user's HF architecture at the target's width and depth (the proxy's own scaling
    rules), byte vocabulary as the demo's proxy trained on, context at least the target's:
    ``out/target_config.json``, the config the card is written for."""
    source = parse_model(model)
    cfg = hf_proxy_config(source.hf_config(), sc.target_width, sc.target_depth, source.head_rule)
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
    t0 = time.perf_counter()
    clock = Clock(quiet=quiet)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    size = size or ("gpu" if device.startswith("cuda") else "small")
    sz = _size(size, model)
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    n_workers = workers or default_workers(device, 1 << 30)
    coord = _coord_check(out, sz, quiet, clock)
    table, specs = _lr_sweep(out, sz, size, device=device, workers=workers, n_workers=n_workers,
                             quiet=quiet, clock=clock)
    log(quiet, "[3/7] optimum per width and drift of the optimum")
    with clock.stage("lr_fits"):
        fit = OptimumFit(x="lr", y="loss", group_by=("parametrization", "width"), n_boot=500).fit(table)
        drifts = {p: fit.drift("width", where={"parametrization": p}) for p in ("sp", "mup")}
    scaling = scaling_stage(out, sz, f"demo-{size}-scaling", fit, device=device, workers=workers, n_workers=n_workers,
                            quiet=quiet, clock=clock)
    card, card_warnings = _card(out, sz, specs[-1].study_name(), scaling, quiet, clock)
    log(quiet, "[7/7] plots and report")
    with clock.stage("plots_report"):
        images = _figures(out, fit)
        images.update(scaling.pop("images", {}))
    summary = _summary(size, device, sz, table, fit, drifts, coord, card, card_warnings, scaling, images)
    summary["stages"] = clock.stages
    summary["wall_s"] = time.perf_counter() - t0
    summary["cpu_s"] = sum(v["cpu_s"] for v in clock.stages.values())
    summary["idle_estimate_s"] = sum(v["idle_estimate_s"] for v in clock.stages.values())
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=float) + "\n")
    atomic_write_text(out / "report.md", report_md(summary))
    atomic_write_text(out / "report.html", report_html(summary))
    log(quiet, f"done in {summary['wall_s']:.0f} s ({summary['cpu_s']:.0f} CPU s, "
               f"~{summary['idle_estimate_s']:.0f} s on idle cores): drift SP "
               f"{summary['drift_octaves']['sp']:.2f} octaves, muP "
               f"{summary['drift_octaves']['mup']:.2f}; {summary['headline']}; card: {summary['card']['steps']} steps of "
               f"{summary['card']['batch_tokens']} tokens; see {out / 'report.md'}")
    return summary


def _size(size: str, model: str | None) -> DemoSize:
    """The size's ladder, with ``model`` (a preset or an hf: config) as its proxy if given."""
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose from {', '.join(SIZES)}")
    sz = SIZES[size]
    if model is not None:
        source = parse_model(model)
        if source.kind == "builder":
            raise ValueError(f"demo --model {model!r}: the demo's card needs a preset or an hf: config (a "
                             "builder has no full-size config to target); sweep it with `mutransfer sweep "
                             "lr --model` instead")
        sz = dataclasses.replace(sz, preset=source.ref if source.builtin else source.spec())
    return sz


def _coord_check(out: Path, sz: DemoSize, quiet: bool, clock: Clock) -> dict[str, Any]:
    """Stage 1: the coordinate check of SP and of μP (seeds 0 and 1), as ``coord-check`` runs it."""
    log(quiet, f"[1/7] coordinate check, SP vs muP, widths {list(sz.coord_widths)}")
    coord: dict[str, Any] = {}
    with clock.stage("coord_check", parallel=min(2, torch.get_num_threads()), reports=True), \
            Progress(2, "coord check", unit="parametrization", quiet=quiet) as bar:
        for kind in ("sp", "mup"):
            cdir = out / "coord_check" / kind
            widths = ",".join(map(str, sz.coord_widths))
            code = cli_main(["coord-check", "--model", sz.preset, "-p", kind, "--widths", widths,
                             "--steps", "4", "--n-seeds", "2", "--seq-len", str(min(sz.seq_len, 64)),
                             "--out", str(cdir), "--overwrite", "--quiet"])
            if code != 0:
                raise RuntimeError(f"coord-check {kind} failed with exit code {code}")
            coord[kind] = json.loads((cdir / "coord_check.json").read_text())
            bar.advance()
    return coord


def _lr_sweep(out: Path, sz: DemoSize, size: str, *, device: str, workers: int | None, n_workers: int,
              quiet: bool, clock: Clock) -> tuple[pd.DataFrame, list[LRSweep]]:
    """Stage 2: the LR x width sweep, SP and μP side by side; its table is ``out/results.csv``.

    Both arms get the same seeds and the same grid shape (:meth:`DemoSize.log2_lrs`). At the
    base width μP is SP to the last bit, so those runs are trained once (study ``-base``) and
    filed under both arms (``shared_base`` true): the ratio there is exactly 1. Above it SP
    has one study per width (its grid moves with its optimum), μP one for all widths. An
    optimum at its grid's edge gets more LRs past it, the same rule for both arms
    (:attr:`DemoSize.lr_max_extend`)."""
    base = {"steps": sz.steps, "batch_size": sz.batch_size, "seq_len": sz.seq_len,
            "base_width": sz.widths[0], "eval_every": sz.steps, "eval_sequences": sz.eval_sequences,
            "warmup_steps": max(1, sz.steps // 10), "schedule": "cosine", "lr_floor": 0.1,
            "threads": 1 if device == "cpu" else None}
    w0, wider = sz.widths[0], sz.widths[1:]

    def spec(p: str, widths: tuple[int, ...], name: str) -> LRSweep:
        return LRSweep(**model_kw(sz.preset), widths=widths, parametrizations=(p,), seeds=sz.seeds,
                       lrs=tuple(2.0**x for x in sz.log2_lrs(p, widths[0])), base=base,
                       name=f"demo-{size}-{name}")

    specs = [spec("sp", (w0,), "base"), *(spec("sp", (w,), f"sp-w{w}") for w in wider)]
    if wider:
        specs.append(spec("mup", wider, "mup"))
    n_trials = sum(len(sp.points()) for sp in specs)
    log(quiet, f"[2/7] LR sweep: {n_trials} trials ({len(sz.widths)} widths; SP and muP each "
               f"{len(sz.log2_lr_offsets)} LRs around their expected optimum x {len(sz.seeds)} seed(s), the "
               f"base width {w0} shared; {sz.steps} steps each; an optimum at a grid edge gets up to "
               f"{sz.lr_max_extend} more LRs past it) on {device}")
    tables = []
    with clock.stage("lr_sweep", parallel=n_workers, reports=True):
        for sp in specs:
            sweep, _ = run_bracketed(sp, Bounds(max_extend=sz.lr_max_extend), out=out / "sweep",
                                     workers=workers, device=device, quiet=quiet)
            study, _ = open_study(sweep.plan.storage, sweep.plan.study_name)
            tables.append(results_table(study))
    shared = tables[0].assign(shared_base=True)
    table = pd.concat([shared, shared.assign(parametrization="mup"), *tables[1:]], ignore_index=True)
    table["shared_base"] = table["shared_base"].fillna(False).astype(bool)
    write_table(table, out / "results.csv")
    return table, specs


def demo_request(out: Path, sz: DemoSize, study: str, scaling: dict[str, Any]) -> TransferRequest:
    """The demo's transfer, as a user would run ``mutransfer transfer`` on its files: the LR
    sweep's table, the target of ``sz`` (the user's architecture scaled to the target's shape
    for an ``hf:`` proxy), the scaling laws and the held-out audit when they were made."""
    sc = sz.scaling
    if sz.preset.startswith("hf:"):  # the user's architecture, scaled to the target's shape
        target: dict[str, Any] = {"model": f"hf:{_hf_target_config(out, sz.preset, sc)}",
                                  "target_seq_len": sc.target_seq_len}
    else:
        target = {"preset": sz.preset, "seq_len": sz.seq_len,
                  "overrides": {"width": sc.target_width, "depth": sc.target_depth, "seq_len": sc.target_seq_len}}
    fit = scaling.get("fit_path")
    return TransferRequest(
        results=str(out / "results.csv"), **target, parametrization="mup", base_width=sz.widths[0],
        tokens_per_param=sc.tokens_per_param, study=study,
        storage=f"journal:{out / 'sweep' / 'optuna.journal'}", scaling_fit=fit, audit=scaling.get("audit_path"),
        run=RunChoices() if fit else RunChoices(batch_sequences=sz.batch_size))  # no laws: the proxy's batch


def _card(out: Path, sz: DemoSize, study: str, scaling: dict[str, Any], quiet: bool,
          clock: Clock) -> tuple[dict[str, Any], list[str]]:
    """Stage 6: the card for the target, made by the one library call ``mutransfer
    transfer`` makes too (:func:`mutransfer.card.make.make_card` on :func:`demo_request`),
    from the scaling laws when they were fitted; returns the card and its warnings."""
    sc = sz.scaling
    log(quiet, f"[6/7] card for the target: {sc.target_depth} blocks of width {sc.target_width}, "
               f"context {sc.target_seq_len}, {sc.tokens_per_param:g} tokens per parameter")
    with clock.stage("card"):
        made = make_card(demo_request(out, sz, study, scaling))
        save_card(made, out / "card.yaml")
    return made.card, list(made.warnings)


def _figures(out: Path, fit: OptimumFit) -> dict[str, str]:
    """The coordinate checks' figures and the LR sweep's: caption -> path under ``out``."""
    figs = out / "figures"
    return {
        "coord check, SP": "coord_check/sp/coord_check.png",
        "coord check, muP": "coord_check/mup/coord_check.png",
        "loss vs LR, SP": str(plot_lr_curves(fit, figs / "lr_curves_sp.png",
                                             where={"parametrization": "sp"}).relative_to(out)),
        "loss vs LR, muP": str(plot_lr_curves(fit, figs / "lr_curves_mup.png",
                                              where={"parametrization": "mup"}).relative_to(out)),
        "optimal LR vs width": str(plot_optimum_vs_width(fit, figs / "optimum_vs_width.png",
                                                         by="parametrization").relative_to(out)),
    }


def headline(width: int, ratio: float, ci: list[float], n_seeds: int) -> str:
    """Which arm is better at the widest proxy, in one line: decided only when the
    seed-paired interval excludes 1."""
    pct = f"{100 * abs(ratio - 1):.2f}%"
    where = f"at width {width}, muP's best loss is {ratio:.4f}x SP's [{ci[0]:.4f}, {ci[1]:.4f}] ({n_seeds} seed(s), paired)"
    if ci[1] < 1.0:
        return f"{where}: muP is better by {pct}"
    if ci[0] > 1.0:
        return f"{where}: SP is better by {pct}"
    if ratio == 1.0:
        return f"{where}: the same"
    better = "muP" if ratio < 1.0 else "SP"
    return f"{where}: {better} is ahead by {pct}, within the seeds' interval (no winner resolved)"


def _summary(size: str, device: str, sz: DemoSize, table: pd.DataFrame, fit: OptimumFit, drifts: dict,
             coord: dict[str, Any], card: dict[str, Any], card_warnings: list[str], scaling: dict[str, Any],
             images: dict[str, str]) -> dict[str, Any]:
    """summary.json without the stages' times: the transfer check, the card, the scaling stage."""
    res = fit.results_
    widths = sorted(int(w) for w in res.loc[res["parametrization"] == "mup", "width"])
    widest = widths[-1]
    per_width = []
    for w in widths:
        row: dict[str, Any] = {"width": w}
        at_w = table[table["width"] == w]
        # The best loss as measured (lowest seed mean, never below the data), the same
        # estimator for both arms; the quadratic's vertex can undershoot every point.
        ratio = paired_best_ratio(at_w[at_w["parametrization"] == "mup"], at_w[at_w["parametrization"] == "sp"])
        for p, key in (("sp", "den"), ("mup", "num")):
            o = fit.group((p, w))
            row[p] = {"lr_opt": o.x_opt, "log2_lr_opt": o.log2_x_opt, "ci": [num(c) for c in o.ci],
                      "loss_opt": o.loss_opt, "at_edge": o.at_edge,
                      "best_loss": ratio[key]["best"], "best_lr": ratio[key]["lr"],
                      "best_at_edge": ratio[key]["at_edge"]}
        row["mup_over_sp"] = ratio["ratio"]
        row["mup_over_sp_ci"] = ratio["ci"]
        per_width.append(row)
    mup_best = [r["mup"]["best_loss"] for r in per_width]
    top = per_width[-1]
    proj_lr = (card.get("projected") or {}).get("lr") or {}
    lr_interval = proj_lr.get("interval")
    if lr_interval is None and "lo" in proj_lr:
        lr_interval = [proj_lr.get("lo"), proj_lr.get("hi")]
    return {
        "size": size, "device": device, "preset": sz.preset, "widths": list(widths),
        "ladder_ratio": widest / widths[0], "steps": sz.steps, "batch_size": sz.batch_size,
        "seq_len": sz.seq_len, "seeds": list(sz.seeds), "log2_lr_offsets": list(sz.log2_lr_offsets),
        "n_trials": int(len(table) - table["shared_base"].sum() / 2),
        "n_diverged": int(table["diverged"].sum()) if "diverged" in table else 0,
        "coord_check": {k: {"passed": v["passed"], "max_slope": v["worst"]["slope"]}
                        for k, v in coord.items()},
        "drift_octaves": {p: d.octaves for p, d in drifts.items()},
        "drift_ci": {p: [num(c) for c in d.ci] for p, d in drifts.items()},
        "drift_slope": {p: d.slope for p, d in drifts.items()},
        "optimum_at_edge": {p: d.any_at_edge for p, d in drifts.items()},
        "per_width": per_width,
        "mup_wider_is_better": all(b < a for a, b in zip(mup_best, mup_best[1:])),
        "mup_over_sp_measured_best_at_widest": top["mup_over_sp"],
        "mup_over_sp_measured_best_at_widest_ci": top["mup_over_sp_ci"],
        "headline": headline(widest, top["mup_over_sp"], top["mup_over_sp_ci"], len(sz.seeds)),
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
        "holdout": holdout_summary(scaling.get("audit") or {}),
        "scaling": scaling,
        "images": images,
    }
