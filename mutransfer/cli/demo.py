"""``mutransfer demo``: the whole workflow, end to end, on the embedded stdlib corpus.

1. coordinate check, SP against μP;
2. LR × width sweep (SP and μP side by side, >= 4 widths spanning >= 8x, 2 seeds);
3. optimum per width and the drift of the optimum in octaves, with intervals;
4. a transfer card for a target 16x wider than the widest proxy;
5. the plots, ``report.md``, ``report.html`` and ``summary.json``.

Re-running reuses finished trials (the sweep is an Optuna study in ``OUT/sweep``).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutransfer.cli._common import positive_int, print_json

HELP = "all of it, end to end, on the embedded corpus: coord check, LR sweep, fits, card, report"


@dataclass(frozen=True)
class DemoSize:
    """One ladder of proxies and the budget of each trial."""

    preset: str
    widths: tuple[int, ...]
    log2_lrs: tuple[float, ...]
    seeds: tuple[int, ...]
    steps: int
    batch_size: int
    seq_len: int
    coord_widths: tuple[int, ...]


SIZES: dict[str, DemoSize] = {
    # 2 CPU cores, <= 15 minutes: 2-block GPTs of width 32..256 (8x), 150 steps of 16x64
    # bytes. The LR grid is wide enough that SP's drifting optimum stays inside it.
    "small": DemoSize(preset="gpt-small", widths=(32, 64, 128, 256),
                      log2_lrs=tuple(float(x) for x in range(-10, -2)), seeds=(0, 1), steps=150,
                      batch_size=16, seq_len=64, coord_widths=(32, 64, 128, 256)),
    # A single GPU: 4-block GPTs of width 128..2048 (16x), 1000 steps of 64x256 bytes.
    "gpu": DemoSize(preset="gpt-small", widths=(128, 256, 512, 1024, 2048),
                    log2_lrs=tuple(float(x) for x in range(-14, -3)), seeds=(0, 1, 2), steps=1000,
                    batch_size=64, seq_len=256, coord_widths=(128, 256, 512, 1024)),
    # For tests: seconds, not minutes. Numbers are not meaningful at this size.
    "tiny": DemoSize(preset="gpt-small", widths=(32, 64, 128, 256), log2_lrs=(-9.0, -7.0, -5.0, -3.0),
                     seeds=(0,), steps=6, batch_size=4, seq_len=32, coord_widths=(32, 64, 128)),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | mps (default auto)")
    p.add_argument("--size", choices=sorted(SIZES), default=None,
                   help="ladder size: small (CPU), gpu; default: gpu when CUDA is available")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="sweep workers (default: one per CPU core, one per GPU)")
    p.add_argument("--json", action="store_true", help="print summary.json")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, flush=True)


def run(args: argparse.Namespace) -> int:
    summary = run_demo(Path(args.out), device=args.device, size=args.size, workers=args.workers,
                       quiet=args.quiet or args.json)
    if args.json:
        print_json(summary)
    return 0


def run_demo(out: Path, *, device: str = "auto", size: str | None = None, workers: int | None = None,
             quiet: bool = False) -> dict[str, Any]:
    """Run the demo into ``out``; returns the summary (also written as summary.json)."""
    import torch

    from mutransfer._io import atomic_write_text

    t0 = time.perf_counter()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    size = size or ("gpu" if device.startswith("cuda") else "small")
    if size not in SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose from {', '.join(SIZES)}")
    sz = SIZES[size]
    out.mkdir(parents=True, exist_ok=True)
    figs = out / "figures"
    figs.mkdir(exist_ok=True)

    # 1. coordinate check -------------------------------------------------------------
    _log(quiet, f"[1/5] coordinate check, SP vs muP, widths {list(sz.coord_widths)}")
    from mutransfer.cli import main as cli_main

    coord: dict[str, Any] = {}
    for kind in ("sp", "mup"):
        cdir = out / "coord_check" / kind
        code = cli_main(["coord-check", "-p", kind, "--widths", ",".join(map(str, sz.coord_widths)),
                         "--steps", "4", "--seeds", "2", "--seq-len", str(min(sz.seq_len, 64)),
                         "--out", str(cdir), "--quiet"])
        if code != 0:
            raise RuntimeError(f"coord-check {kind} failed with exit code {code}")
        coord[kind] = json.loads((cdir / "coord_check.json").read_text())

    # 2. LR x width sweep ---------------------------------------------------------------
    from sweeps import LRSweep, results_table, run_sweep, write_table
    from sweeps.worker import open_study

    base = {"steps": sz.steps, "batch_size": sz.batch_size, "seq_len": sz.seq_len,
            "base_width": sz.widths[0], "eval_every": sz.steps, "eval_batches": 8,
            "warmup_steps": max(1, sz.steps // 10), "schedule": "cosine", "lr_floor": 0.1,
            "threads": 1 if device == "cpu" else None}
    spec = LRSweep(preset=sz.preset, widths=sz.widths, parametrizations=("sp", "mup"), seeds=sz.seeds,
                   lrs=tuple(2.0**x for x in sz.log2_lrs), base=base, name=f"demo-{size}")
    n_trials = len(spec.points())
    _log(quiet, f"[2/5] LR sweep: {n_trials} trials ({len(sz.widths)} widths x {len(sz.log2_lrs)} LRs x "
                f"{len(sz.seeds)} seeds x SP/muP, {sz.steps} steps each) on {device}")
    sweep = run_sweep(spec, out=out / "sweep", workers=workers, device=device, quiet=quiet)
    study, _ = open_study(sweep.plan.storage_url, sweep.plan.study_name)
    table = results_table(study)
    write_table(table, out / "results.csv")

    # 3. optimum per width, drift -------------------------------------------------------
    _log(quiet, "[3/5] optimum per width and drift of the optimum")
    from analysis import OptimumFit, plot_lr_curves, plot_optimum_vs_width

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

    # 4. transfer card ------------------------------------------------------------------
    target_width = 16 * widest
    _log(quiet, f"[4/5] transfer card for width {target_width} (16x the widest proxy)")
    tokens = 20 * _n_params(sz.preset, target_width, sz.seq_len)  # Chinchilla's ~20 tokens/param
    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        code = cli_main(["transfer", "--results", str(out / "results.csv"), "--preset", sz.preset,
                         "--parametrization", "mup", "--base-width", str(sz.widths[0]),
                         "--target-width", str(target_width), "--tokens", str(float(tokens)),
                         "--seq-len", str(sz.seq_len), "--batch-size", str(sz.batch_size),
                         "--out", str(out / "card.yaml")])
    if code != 0:
        raise RuntimeError(f"transfer failed with exit code {code}")
    from mutransfer.card import load_card

    card = load_card(out / "card.yaml")

    # 5. plots and report ---------------------------------------------------------------
    _log(quiet, "[5/5] plots and report")
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
    per_width = []
    for w in widths:
        row: dict[str, Any] = {"width": w}
        for p in ("sp", "mup"):
            o = fit.group((p, w))
            row[p] = {"lr_opt": o.x_opt, "log2_lr_opt": o.log2_x_opt, "ci": [_num(c) for c in o.ci],
                      "loss_opt": o.loss_opt, "at_edge": o.at_edge}
        per_width.append(row)
    summary: dict[str, Any] = {
        "size": size, "device": device, "preset": sz.preset, "widths": list(widths),
        "ladder_ratio": widest / widths[0], "steps": sz.steps, "batch_size": sz.batch_size,
        "seq_len": sz.seq_len, "seeds": list(sz.seeds), "n_trials": int(len(table)),
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
        "target": card["target"], "card_lr": card["optimizer"]["lr"],
        "card_lr_interval": card["projected"]["lr"].get("interval"),
        "images": images, "wall_s": time.perf_counter() - t0,
    }
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=float) + "\n")
    md = _report_md(summary)
    atomic_write_text(out / "report.md", md)
    atomic_write_text(out / "report.html", _report_html(summary))
    _log(quiet, f"done in {summary['wall_s']:.0f} s: drift SP {summary['drift_octaves']['sp']:.2f} octaves, "
                f"muP {summary['drift_octaves']['mup']:.2f} octaves; see {out / 'report.md'}")
    return summary


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _n_params(preset: str, width: int, seq_len: int) -> int:
    import torch

    from mutransfer.models import GPT, get_preset

    with torch.device("meta"):
        return GPT(get_preset(preset).replace(width=width, seq_len=seq_len)).num_params()


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


def _report_md(s: dict[str, Any]) -> str:
    lines = [
        "# mutransfer demo", "",
        f"{s['n_trials']} proxy runs of the `{s['preset']}` GPT on the embedded stdlib corpus "
        f"({s['steps']} steps of {s['batch_size']}x{s['seq_len']} bytes, seeds {s['seeds']}, {s['device']}), "
        f"widths {s['widths']} ({s['ladder_ratio']:.0f}x). Loss is held-out nats per byte.", "",
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
        "## Projection for the big run", "",
        f"Target width {s['target']['width']}, {s['target']['n_params'] / 1e6:.1f}M parameters, "
        f"{s['target']['tokens']:.3g} tokens: base LR **{s['card_lr']:.4g}** "
        f"(interval {s['card_lr_interval']}); the full per-parameter table is in `card.yaml`. "
        "The batch stays the proxy's, where the LR was tuned: projecting the batch size needs a "
        "batch sweep (`mutransfer sweep batch`) and its power-law fit.", "",
        "## Figures", "",
    ]
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
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>mutransfer demo</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.2em .8em;"
        "border-bottom:1px solid #ccc}</style></head><body><h1>mutransfer demo</h1>"
        f"<p>{s['n_trials']} runs, widths {s['widths']}, {s['steps']} steps, {html.escape(s['device'])}.</p>"
        "<h2>Drift of the optimal learning rate</h2>"
        + table(["parametrization", "octaves", "95% interval"], drift_rows)
        + "<h2>Optimum per width</h2>" + table(HEAD, _rows(s))
        + f"<h2>Projection</h2><p>Target width {s['target']['width']}: base LR {s['card_lr']:.4g}.</p>"
        + "<h2>Figures</h2>" + imgs + "</body></html>\n"
    )
