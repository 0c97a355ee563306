"""The demo's report: summary.json rendered as report.md and report.html (the same
sections, tables and figures in both)."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any


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
            cells += [f"2^{o['log2_lr_opt']:.2f}{edge}", f"{o['best_loss']:.4f}"
                      + (" (edge)" if o["best_at_edge"] else "")]
        lo, hi = r["mup_over_sp_ci"]
        cells.append(f"{r['mup_over_sp']:.4f} [{lo:.4f}, {hi:.4f}]")
        rows.append(cells)
    return rows


HEAD = ["width", "SP optimal LR", "SP best loss", "muP optimal LR", "muP best loss", "muP / SP [95%, paired]"]


def _g(x: Any, fmt: str = ".4g") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _pair(p: Any, fmt: str = ".3g") -> str:
    if not p:
        return "-"
    lo, hi = ("unbounded" if v is None else _g(v, fmt) for v in p[:2])
    return f"[{lo}, {hi}]"


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
            "(axis batch_tokens); predict the optimum there; train our predicted config and the best "
            f"config the sweep measured there again, on seeds the sweep never used ({h.get('seeds')}); "
            "loss gap = the prediction's mean loss / the measured best's − 1 (± its standard error "
            "over those seeds). The sweep's own seed chose the best, so its loss there is the luckiest "
            "of several runs and is not the yardstick. Target: LR within "
            f"{crit.get('lr_ratio', 1.3)}× and loss within {100 * crit.get('loss_gap', 0.0025):.2f}%: "
            f"**{'passed' if h.get('passed') else 'not met' if h.get('passed') is False else 'n/a'}**."],
            ["axis", "method", "pred LR", "meas LR", "LR ratio", "pred batch", "meas batch", "batch ratio",
             "loss gap"],
            [[r["axis"], r["method"], _g(r.get("pred_lr")), _g(r.get("meas_lr")),
              _g(r.get("lr_ratio"), ".3f"),
              _g(r.get("pred_batch_tokens"), ".4g"), _g(r.get("meas_batch_tokens"), ".4g"),
              _g(r.get("batch_ratio"), ".3f"),
              _gap(r)] for r in audit_rows]))
    c, t = s["card"], s["target"]
    if "lr" in c:
        out.append(("The card for the big run", [
        f"Target: {t.get('depth')} blocks of width {t.get('width')}, context {t.get('seq_len')}, "
        f"{t['n_params'] / 1e6:.1f}M parameters, {t['tokens']:.3g} tokens "
            f"({t.get('tokens_per_param', 0):.0f} per parameter). The per-parameter table is in "
            f"`{c['path']}`.",
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


def _verdict(s: dict[str, Any]) -> list[str]:
    """Whether tune stood behind the card, the card's LR beside the published LRs, and how
    the budget was planned and spent."""
    c = s["card"]
    lines = ["## The card: written or refused", ""]
    if c["written"]:
        lines.append("`card.yaml` written: the held-out audit passed and nothing in the card contradicts "
                     "its own intervals or the published LRs beyond what its data demand.")
    else:
        lines.append(f"No `card.yaml`: tune does not stand behind this card (`{c['path']}` keeps it to "
                     "read).")
        lines += [f"- objection: {r}" for r in c["objections"]]
        lines += [f"- to run: {r}" for r in c["to_run"]]
    pub = c.get("published_lr")
    if pub:
        where = "inside their range" if pub["factor"] <= 1.0 else f"{pub['factor']:.3g}x {pub['side']} them"
        lines += ["", f"Hidden matrices' Adam LR {pub['hidden_lr']:.3g} against the published LRs at the "
                  f"target ({pub['published'][0]:.3g}-{pub['published'][1]:.3g}: DeepSeek LLM, Step Law): "
                  + where
                  + (" (within 3x)." if pub["within_3x"] else
                     "; the trust block above gives the data's interval, the laws' prior and the weight.")]
    plan = s.get("plan") or {}
    lines += ["", f"## How tune spent the {s['budget_s']:.0f} s budget", ""]
    lines += [f"- {k}: {why}" for k, why in (plan.get("reasons") or {}).items()]
    est = plan.get("estimate_s") or {}
    if est:
        lines.append("- estimated: " + ", ".join(f"{k} {v:.0f} s" for k, v in est.items()))
    ref = s.get("refine") or {}
    if ref.get("stopped"):
        lines.append(f"- second pass: {len(ref.get('rounds') or [])} round(s); stopped: {ref['stopped']}")
    return lines + [""]


def report_md(s: dict[str, Any]) -> str:
    lines = [
        "# mutransfer demo", "",
        f"{s['n_trials']} proxy runs of the `{s['preset']}` model on the embedded stdlib corpus "
        f"({s['steps']} steps of {s['batch_size']}x{s['seq_len']} bytes, SP and μP on seeds {s['seeds']}, "
        f"{s['device']}), widths {s['widths']} ({s['ladder_ratio']:.0f}x). Loss is held-out "
        "nats per byte.", "", f"**{s['headline'][0].upper()}{s['headline'][1:]}.**", "",
        *(["## How far to trust the card", "", *(f"- {line}" for line in s.get("trust", [])),
           *(f"- warning: {w}" for w in s["card"].get("warnings", [])), ""] if s.get("trust") else []),
        *_verdict(s),
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
        "", f"Each arm's LRs: {len(s['log2_lr_offsets'])} points at {s['log2_lr_offsets']} octaves around its "
        "expected optimum at that width (the same grid shape for both; the base width's runs are one set, "
        "μP being SP there). Optimal LR: the quadratic fit's; best loss: the lowest measured seed-mean loss "
        "(never below the data), its ratio's interval from resampling the shared seeds, paired.", "",
        f"muP wider-is-better (best loss falls with width): **{s['mup_wider_is_better']}**.", "",
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


def report_html(s: dict[str, Any]) -> str:
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
        f"<p><b>{html.escape(s['headline'][0].upper() + s['headline'][1:])}.</b></p>"
        "<h2>Drift of the optimal learning rate</h2>"
        + table(["parametrization", "octaves", "95% interval"], drift_rows)
        + "<h2>Optimum per width</h2>" + table(HEAD, _rows(s))
        + sections + "<h2>Figures</h2>" + imgs + "</body></html>\n"
    )


def _gap(row: Mapping[str, Any]) -> str:
    if row.get("loss_gap") is None:
        return "-"
    se = row.get("loss_gap_se")
    return f"{100 * row['loss_gap']:+.3f}%" + ("" if se is None else f" ± {100 * se:.3f}%")
