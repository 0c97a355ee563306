"""``mutransfer demo``: ``mutransfer tune`` on the embedded stdlib corpus, with SP beside μP.

The demo is :func:`mutransfer_cli._tune_run.tune` with a budget (the size's, or
``--budget``) and ``compare_sp``: the plan measures what a run costs and sizes every stage
to the budget (``plan.json``, each choice with its reason), then

1. the coordinate check, μP (the gate) and SP;
2. the coarse LR search at the base width, which centres the ladder;
3. the LR x width ladder, SP and μP side by side (the same seeds, steps and grid shape,
   SP's grid centred where its optimum moves, the base width trained once for both);
   the optimum per width, its drift in octaves, μP's best loss ÷ SP's per width;
4. the scaling sweep (token budget D as WSD branches × batch B × LRs), the η*(B, D) and
   B*(D) laws, the critical batch two ways and the held-out audit;
5. the card for the size's target, weighed against the published laws, written only when
   tune stands behind it (else ``card.rejected.yaml`` and the reasons; the demo still
   exits 0, its report carrying the verdict, where ``tune`` exits 1);
6. the plots, ``report.md``, ``report.html`` and ``summary.json`` (with the wall and CPU
   time of every stage).

Re-running into the same folder resumes (tune's plan, studies and audit cache).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch

from analysis.best_loss import paired_best_ratio
from analysis.optimum import OptimumFit
from analysis.plots import plot_lr_curves, plot_optimum_vs_width
from analysis.table import num
from mutransfer._io import atomic_write_text, check_output
from mutransfer.card.make import TransferRequest
from mutransfer.card.request import RunChoices
from mutransfer.card.trust import published_lr_gap
from mutransfer.models.source import hf_proxy_config, parse_model
from mutransfer_cli._common import add_track_flag, positive_int, print_json, tracking
from mutransfer_cli._demo_report import report_html, report_md
from mutransfer_cli._demo_scaling import holdout_summary
from mutransfer_cli._demo_sizes import SIZES, DemoSize, ScalingStage
from mutransfer_cli._demo_stage import Clock, log
from mutransfer_cli._tune_run import Tuned, tune
from mutransfer_cli.tune import budget_seconds

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
    p.add_argument("--budget", type=budget_seconds, default=None,
                   help="wall time for the whole demo, as tune's --budget (default: the size's, "
                        + ", ".join(f"{k} {v.budget_s:g} s" for k, v in sorted(SIZES.items())) + ")")
    p.add_argument("--json", action="store_true", help="print summary.json")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    add_track_flag(p)


def run(args: argparse.Namespace) -> int:
    # re-running into the same folder resumes its sweeps (finished trials are kept) and
    # rebuilds the figures, table, card and report from them
    check_output(args.out, directory=True)
    with tracking(args.track, args.out):  # every sweep trial and audit run is tracked
        summary = run_demo(Path(args.out), device=args.device, size=args.size, workers=args.workers,
                           quiet=args.quiet or args.json, model=args.model, budget=args.budget)
    if args.json:
        print_json(summary)
    # the demo's job is its report, which carries the verdict: a card tune does not stand
    # behind is card.rejected.yaml and its reasons, not a failed demo (tune itself exits 1)
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
             quiet: bool = False, model: str | None = None, budget: float | None = None) -> dict[str, Any]:
    """Run the demo into ``out``; returns the summary (also written as summary.json).
    ``model``: the proxy instead of the size's preset, a preset name or ``hf:PATH``;
    ``budget``: wall seconds instead of the size's."""
    t0 = time.perf_counter()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    size = size or ("gpu" if device.startswith("cuda") else "small")
    sz = _size(size, model)
    out.mkdir(parents=True, exist_ok=True)
    done = tune(tune_args(out, sz, device=device, workers=workers, quiet=quiet, budget=budget))
    if done.table is None or done.fit is None:  # the gate failed: nothing to compare or project
        raise RuntimeError(f"the demo stopped before its ladder: {'; '.join(done.report.get('refused', []))}")
    clock = Clock(quiet=quiet)
    log(quiet, "[report] plots, report.md, report.html and summary.json")
    with clock.stage("plots_report"):
        fit = done.fit
        drifts = {p: fit.drift("width", where={"parametrization": p}) for p in ("sp", "mup")}
        images = _figures(out, fit)
        images.update((done.scaling or {}).get("images") or {})
    summary = _summary(size, device, sz, done, drifts, images)
    stages = {**done.report.get("stages", {}), **clock.stages}
    summary["stages"] = stages
    summary["wall_s"] = time.perf_counter() - t0
    summary["cpu_s"] = sum(v["cpu_s"] for v in stages.values())
    summary["idle_estimate_s"] = sum(v["idle_estimate_s"] for v in stages.values())
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=float) + "\n")
    atomic_write_text(out / "report.md", report_md(summary))
    atomic_write_text(out / "report.html", report_html(summary))
    c = summary["card"]
    log(quiet, f"done in {summary['wall_s']:.0f} s ({summary['cpu_s']:.0f} CPU s, "
               f"~{summary['idle_estimate_s']:.0f} s on idle cores): drift SP "
               f"{summary['drift_octaves']['sp']:.2f} octaves, muP "
               f"{summary['drift_octaves']['mup']:.2f}; {summary['headline']}; "
               + (f"card: {c['steps']} steps of {c['batch_tokens']} tokens" if c["written"] else
                  "no card.yaml (card.rejected.yaml): " + "; ".join(c["objections"]))
               + f"; see {out / 'report.md'}")
    return summary


def tune_args(out: Path, sz: DemoSize, *, device: str, workers: int | None, quiet: bool,
              budget: float | None) -> argparse.Namespace:
    """The ``mutransfer tune`` command the demo is, as its parsed arguments: the size's proxy
    (its base width, depth and context), its target at the size's tokens per parameter, the
    budget, and SP beside μP. An ``hf:`` proxy's target is the user's architecture at the
    target's shape (:func:`_hf_target_config`), which tune narrows to the proxies."""
    sc = sz.scaling
    hf = sz.preset.startswith("hf:")
    source = parse_model(sz.preset) if hf else None
    return argparse.Namespace(
        model=f"hf:{_hf_target_config(out, sz.preset, sc)}" if hf else None, preset=None if hf else sz.preset,
        head_rule=source.head_rule if source is not None else "keep_head_dim", width=sz.widths[0],
        depth=2 if hf else None, overrides=[("seq_len", str(sz.seq_len))],
        target_width=None if hf else sc.target_width, target_depth=None if hf else sc.target_depth,
        target_seq_len=sc.target_seq_len, tokens=None, tokens_per_param=sc.tokens_per_param,
        allow_vocab_change=False, budget=float(budget or sz.budget_s), device=device, workers=workers,
        out=str(out), quiet=quiet, compare_sp=True, plan_floors=sz.plan_floors,
        stretch_budget=True)


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


def _figures(out: Path, fit: OptimumFit) -> dict[str, str]:
    """The coordinate checks' figures and the LR sweep's: caption -> path under ``out``."""
    figs = out / "figures"
    return {
        "coord check, SP": "coord_check_sp/coord_check.png",
        "coord check, muP": "coord_check/coord_check.png",
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


def _summary(size: str, device: str, sz: DemoSize, done: Tuned, drifts: dict,
             images: dict[str, str]) -> dict[str, Any]:
    """summary.json without the stages' times: the plan, the transfer check, the card (or
    why tune did not stand behind it), the scaling stage."""
    table, fit, plan = done.table, done.fit, done.plan
    assert table is not None and fit is not None
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
    rep = done.report
    made = done.made
    card = made.card if made is not None else {}
    scaling = {k: v for k, v in (done.scaling or {}).items() if k != "images"}
    proj_lr = (card.get("projected") or {}).get("lr") or {}
    lr_interval = proj_lr.get("interval")
    if lr_interval is None and "lo" in proj_lr:
        lr_interval = [proj_lr.get("lo"), proj_lr.get("hi")]
    written = done.code == 0
    c: dict[str, Any] = {"written": written, "path": "card.yaml" if written else
                         ("card.rejected.yaml" if made is not None else None),
                         "objections": list(rep.get("refused") or []) if not written else [],
                         "to_run": list(rep.get("to_run") or []) if not written else []}
    if card:
        c.update({"batch_tokens": card["batch"]["tokens"], "batch_sequences": card["batch"]["sequences"],
                  "steps": card["schedule"]["total_steps"], "lr": card["optimizer"]["lr"],
                  "weight_decay": card["optimizer"]["weight_decay"],
                  "warmup_tokens": card["schedule"]["warmup_tokens"],
                  "warmup_steps": card["schedule"]["warmup_steps"],
                  "decay_fraction": card["schedule"].get("decay_fraction"),
                  "tau": card["optimizer"].get("tau"), "audit_passed": card["audit"].get("passed"),
                  "warnings": list(made.warnings), "published_lr": _published(card)})
    return {
        "size": size, "device": device, "preset": sz.preset, "widths": list(widths),
        "ladder_ratio": widest / widths[0], "steps": plan.steps, "batch_size": plan.batch_size,
        "seq_len": plan.seq_len, "seeds": list(plan.seeds), "log2_lr_offsets": list(plan.ladder_offsets),
        "budget_s": rep["inputs"]["budget_s"], "plan": plan.to_dict(),
        "search_centre_log2_lr": (rep.get("search") or {}).get("centre_log2_lr"),
        "n_trials": int(len(table) - table["shared_base"].sum() / 2),
        "n_diverged": int(table["diverged"].sum()) if "diverged" in table else 0,
        "coord_check": {k: {"passed": v.get("passed"), "max_slope": (v.get("worst") or {}).get("slope")}
                        for k, v in sorted(done.coord.items(), key=lambda kv: kv[0] != "sp")},
        "drift_octaves": {p: d.octaves for p, d in drifts.items()},
        "drift_ci": {p: [num(x) for x in d.ci] for p, d in drifts.items()},
        "drift_slope": {p: d.slope for p, d in drifts.items()},
        "optimum_at_edge": {p: d.any_at_edge for p, d in drifts.items()},
        "per_width": per_width,
        "mup_wider_is_better": all(b < a for a, b in zip(mup_best, mup_best[1:])),
        "mup_over_sp_measured_best_at_widest": top["mup_over_sp"],
        "mup_over_sp_measured_best_at_widest_ci": top["mup_over_sp_ci"],
        "headline": headline(widest, top["mup_over_sp"], top["mup_over_sp_ci"], len(plan.seeds)),
        "target": card.get("target") or {}, "card_lr": c.get("lr"), "card_lr_interval": lr_interval,
        "trust": (card.get("trust") or {}).get("summary", []),
        "card": c,
        "holdout": holdout_summary((done.scaling or {}).get("audit") or {}),
        "scaling": scaling,
        "refine": rep.get("refine"),
        "images": images,
    }


def _published(card: dict[str, Any]) -> dict[str, Any] | None:
    """The card's hidden-matrix Adam LR beside the published LRs at the target
    (``projected.baselines`` deepseek and step_law, read at the hidden matrices as the
    trust block reads them): the ratio to the nearer, and whether it is within 3x."""
    gap = published_lr_gap(card)
    if gap is None:
        return None
    hidden, lo, hi, side, factor = gap
    return {"hidden_lr": hidden, "published": [lo, hi], "side": side, "factor": factor,
            "within_3x": factor <= 3.0}
