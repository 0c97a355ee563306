"""The stages of ``mutransfer tune`` (:mod:`mutransfer_cli.tune` says what each does)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from analysis.optimum import OptimumFit
from mutransfer._io import atomic_write_text
from mutransfer.card.build import save_card
from mutransfer.card.make import TransferRequest, make_card
from mutransfer.card.proxy import optimum_from_scaling
from mutransfer.card.rules import pretraining_context
from mutransfer.card.target import model_fields, parse_overrides
from mutransfer.card.trust import objections
from mutransfer.models.presets import get_preset
from mutransfer.models.source import hf_shape, parse_model, valid_widths
from mutransfer.training.config import TrainConfig
from mutransfer.training.train import train
from mutransfer_cli import main as cli_main
from mutransfer_cli._demo_scaling import scaling_stage
from mutransfer_cli._demo_sizes import DemoSize, ScalingStage, model_kw
from mutransfer_cli._demo_stage import Clock, log
from sweeps.budget import CostModel, TunePlan, least_budget, plan_budget, refine_seed_s
from sweeps.extend import Bounds, run_bracketed
from sweeps.results import results_table, write_table
from sweeps.spec_kinds import LRSweep
from sweeps.study import default_workers
from sweeps.worker import open_study

#: Steps of the two probe runs at the base width (their difference is the per-step cost),
#: after a first run of the shortest length that loads the data and warms the allocator.
PROBE_STEPS = (8, 40)


def _proxy(args: argparse.Namespace) -> tuple[str, int, int, list[int], int | None]:
    """(model spec for the sweeps, base width, depth, valid widths, target context or None)."""
    if args.model:
        src = parse_model(args.model, args.head_rule)
        cfg = src.hf_config()
        width_t = hf_shape(cfg)[0]
        ctx = pretraining_context(cfg)[0]  # the card's rule (rules.target_context)
        widths = valid_widths(cfg, args.head_rule, upto=int(width_t))
        base = args.width or next((w for w in widths if w >= 64), widths[0])
        return src.spec(), int(base), int(args.depth or 2), widths, ctx
    cfg = get_preset(args.preset)
    step = getattr(cfg, "head_dim", 1) or 1
    top = max(args.target_width or cfg.width, cfg.width) * 8
    widths = [w for w in range(step, top + 1, step)]
    return args.preset, int(args.width or cfg.width), int(args.depth or cfg.depth), widths, None


def _flat(model: str, width: int, depth: int, extra: dict[str, Any], **kw: Any) -> dict[str, Any]:
    src = {"source": model} if model.startswith("hf:") else {"preset": model}
    return {**src, "width": width, "depth": depth, "parametrization": "mup", "base_width": width,
            "base_depth": depth, **extra, **kw}


#: Times each probe run is repeated after the warm-up; the cost model reads the fastest.
PROBE_REPEATS = 3


def probe(model: str, width0: int, width1: int, depth: int, extra: dict[str, Any], batch: int,
          seq_len: int, device: str, repeats: int = PROBE_REPEATS) -> CostModel:
    """Seconds per training token at two widths, from short runs (the setup measured apart:
    two lengths at the base width), each timed ``repeats`` times (:func:`cost_from_times`)."""
    times: dict[tuple[int, int, int], list[float]] = {}
    # a first run of the shortest length loads the data and warms the allocator (not kept);
    # batch 1 apart from batch ``batch`` separates the per-step cost from the per-token one
    runs = ((width0, batch, PROBE_STEPS[0]), (width0, batch, PROBE_STEPS[1]), (width0, 1, PROBE_STEPS[1]),
            (width1, batch, PROBE_STEPS[1]))
    for i, (w, b, steps) in enumerate([runs[0]] + list(runs) * repeats):
        cfg = TrainConfig.from_flat(_flat(model, w, depth, extra, steps=steps, batch_size=b, seq_len=seq_len,
                                          lr=2.0**-6, eval_every=steps, eval_sequences=8, device=device,
                                          threads=1 if device == "cpu" else None, base_width=min(w, width0)))
        t0 = time.perf_counter()
        train(cfg)
        if i:
            times.setdefault((w, b, steps), []).append(time.perf_counter() - t0)
    return cost_from_times(times, width0=width0, width1=width1, batch=batch, seq_len=seq_len)


def cost_from_times(times: dict[tuple[int, int, int], list[float]], *, width0: int, width1: int, batch: int,
                    seq_len: int) -> CostModel:
    """The cost model from the probe's wall times, ``(width, batch, steps) -> [seconds, ...]``.

    Each run's time is the fastest of its repeats: another process on the machine only ever
    adds time, so the minimum is the run's own cost (the reasoning of :mod:`timeit`), and one
    slow repeat no longer moves the plan. Then, with ``n0 < n1`` the probe's step counts:
    per step at ``batch`` = (t(n1) - t(n0)) / (n1 - n0); the setup = t(n0) - n0 · that;
    per step at batch 1 = (t1(n1) - setup) / n1; per token = the two steps' difference over
    ``(batch - 1) · seq_len``; the fixed per-step part = step(1) - seq_len · per token; the
    wider width's per token from its own run, never below the base's.
    """
    t = {k: min(v) for k, v in times.items()}
    n0, n1 = PROBE_STEPS
    step_b = max(1e-9, (t[(width0, batch, n1)] - t[(width0, batch, n0)]) / (n1 - n0))
    overhead = max(0.0, t[(width0, batch, n0)] - step_b * n0)
    step_1 = max(1e-9, (t[(width0, 1, n1)] - overhead) / n1)
    # step(b) = fixed + b * seq * s_token
    s0 = max(1e-12, (step_b - step_1) / ((batch - 1) * seq_len))
    fixed = max(0.0, step_1 - seq_len * s0)
    step_w1 = (t[(width1, batch, n1)] - overhead) / n1
    s1 = max(s0, (step_w1 - fixed) / (batch * seq_len))
    return CostModel(width0=width0, seconds_per_token0=s0, width1=width1, seconds_per_token1=s1,
                     overhead_s=overhead, seconds_per_step=fixed)


def _plan(args: argparse.Namespace, out: Path, device: str, workers: int, quiet: bool
          ) -> tuple[TunePlan, dict[str, Any]]:
    """The plan, reused from ``plan.json`` when the inputs are the same (a re-run resumes)."""
    model, base, depth, widths, ctx = _proxy(args)
    extra = parse_overrides(args.overrides)
    if args.model:  # every proxy run (probe, ladder, scaling, audit) narrows heads by the same rule
        extra["head_rule"] = args.head_rule
    seq_len = extra.pop("seq_len", 64)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"--set seq_len={seq_len!r} must be a whole number of tokens >= 1")
    # every --set field checked (name and type) before the probe trains anything
    TrainConfig.from_flat(_flat(model, base, depth, extra, seq_len=seq_len))
    inputs = {"model": model, "base_width": base, "depth": depth, "extra": extra, "seq_len": seq_len,
              "budget_s": args.budget, "workers": workers, "device": device, "target_tokens": args.tokens}
    arms, floors = (2 if getattr(args, "compare_sp", False) else 1), getattr(args, "plan_floors", None)
    if arms == 2:  # only when set, so a plan.json from before these options still resumes
        inputs["compare_sp"] = True
    if floors:
        inputs["plan_floors"] = list(floors)
    path = out / "plan.json"
    if path.exists():
        doc = json.loads(path.read_text())
        if doc.get("inputs") == json.loads(json.dumps(inputs)):
            log(quiet, f"[plan] resuming the plan in {path}")
            return TunePlan.from_dict(doc["plan"]), doc
    # the first doubling: the probe at the widest ladder width (8x) cost more than a 10-minute
    # budget on a Llama-3 vocabulary on CPU (its readout alone is 8x the base's), so the
    # cost of wider widths is extrapolated with the measured exponent, clipped to [0, 2]
    wider = min((w for w in widths if 2 * base <= w <= 8 * base), default=None)
    if wider is None:
        raise ValueError(f"no width of at least 2x the base width {base} fits this model")
    log(quiet, f"[plan] probing the cost of a run at widths {base} and {wider}")
    cost = probe(model, base, wider, depth, extra, 8, seq_len, device)
    kw = {"workers": workers, "base_width": base, "valid_widths": widths, "seq_len": seq_len,
          "max_tokens": args.tokens, "arms": arms, **dict(zip(("min_steps", "min_batch_steps"), floors or ()))}
    try:
        plan = plan_budget(cost, budget_s=args.budget, **kw)
    except ValueError as exc:
        # the demo (stretch_budget) runs on whatever machine it is given, a loaded one
        # included: the least plan that stands, over budget and said so, not an error
        need = least_budget(cost, budget_s=args.budget, **kw) if getattr(args, "stretch_budget", False) else None
        if need is None:
            raise
        plan = plan_budget(cost, budget_s=need, **kw)
        why = (f"the budget of {args.budget:.0f} s buys too little on this machine as probed ({exc}); planned "
               f"for {need} s instead, {need / args.budget:.2f}x over")
        log(quiet, f"[plan] {why}")
        plan = dataclasses.replace(plan, reasons={**plan.reasons, "budget": why})
    doc = {"inputs": inputs, "cost": dataclasses.asdict(cost), "plan": plan.to_dict(), "target_context": ctx}
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return plan, doc


def _size(plan: TunePlan, model: str, extra: dict[str, Any], centre: float, args: argparse.Namespace,
          depth: int) -> DemoSize:
    """The plan in the shape the demo's scaling stage reads."""
    sc = ScalingStage(batch_sizes=plan.scaling_batch_sizes, tokens=plan.scaling_tokens,
                      log2_lr_offsets=plan.scaling_offsets, check_width=plan.check_width, eval_sequences=128,
                      target_width=args.target_width or plan.base_width, target_depth=args.target_depth or depth,
                      target_seq_len=args.target_seq_len or plan.seq_len, max_extend=2, batch_range=(1, 64),
                      audit_seeds=plan.audit_seeds)
    return DemoSize(preset=model, widths=plan.widths, log2_lr_center=centre, log2_lr_offsets=plan.ladder_offsets,
                    sp_lr_width_exponent=0.0, seeds=plan.seeds, steps=plan.steps, batch_size=plan.batch_size,
                    seq_len=plan.seq_len, eval_sequences=128, coord_widths=plan.widths[:3], scaling=sc,
                    train_extra=tuple((k, v) for k, v in extra.items() if k != "depth") + (("depth", depth),))


def _lr_runs(out: Path, name: str, model: str, widths: tuple[int, ...], seeds: tuple[int, ...],
             log2_lrs: tuple[float, ...], plan: TunePlan, extra: dict[str, Any], depth: int, *, device: str,
             workers: int | None, quiet: bool, max_extend: int, parametrization: str = "mup") -> pd.DataFrame:
    """The LR grid at ``widths`` (μP unless ``parametrization``), widened past an edge
    optimum until bracketed."""
    base = {"steps": plan.steps, "batch_size": plan.batch_size, "seq_len": plan.seq_len,
            "base_width": plan.base_width, "eval_every": plan.steps, "eval_sequences": 128,
            "warmup_steps": max(1, plan.steps // 10), "schedule": "cosine", "lr_floor": 0.1,
            "threads": 1 if device == "cpu" else None, "depth": depth, **extra}
    spec = LRSweep(**model_kw(model), widths=widths, parametrizations=(parametrization,), seeds=seeds,
                   lrs=tuple(2.0**x for x in log2_lrs), base=base, name=name)
    sweep, _ = run_bracketed(spec, Bounds(max_extend=max_extend), out=out / "sweep", workers=workers,
                             device=device, quiet=quiet)
    study, _ = open_study(sweep.plan.storage, sweep.plan.study_name)
    return results_table(study)


@dataclasses.dataclass
class Tuned:
    """What :func:`tune` made, for a caller that reports on it (the demo): the exit status,
    the plan, ``tune.json``'s content, the ladder's table and fit, the coordinate checks,
    the scaling stage's result (its figures included) and the card (None where it stopped
    before them)."""

    code: int
    plan: TunePlan
    report: dict[str, Any]
    table: pd.DataFrame | None = None
    fit: OptimumFit | None = None
    coord: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    scaling: dict[str, Any] | None = None
    made: Any = None


def run_tune(args: argparse.Namespace) -> int:
    """Plan, check, search, ladder, scaling, card (or the reasons there is none)."""
    return tune(args).code


def tune(args: argparse.Namespace) -> Tuned:
    """:func:`run_tune`, returning what it made (:class:`Tuned`). ``args.compare_sp``: SP's
    coordinate check (not a gate) and SP's ladder beside μP's (the demo's comparison)."""
    t0 = time.perf_counter()
    out, quiet = Path(args.out), args.quiet
    compare_sp = bool(getattr(args, "compare_sp", False))
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    n_workers = args.workers or default_workers(device, 1 << 30)
    clock = Clock(quiet=quiet)
    with clock.stage("plan"):  # the probe runs train: piped, it says it is alive
        plan, doc = _plan(args, out, device, n_workers, quiet)
    model, depth, extra = doc["inputs"]["model"], doc["inputs"]["depth"], dict(doc["inputs"]["extra"])
    # a re-run resumes: the budget counts what the earlier runs spent, and the scaling sweep
    # starts with the seeds their second pass added, so it reaches the same card
    prev = _previous(out, doc["inputs"])
    t0 -= prev["wall_s"]
    for key, why in plan.reasons.items():
        log(quiet, f"[plan] {key}: {why}")
    est = plan.estimate_s
    log(quiet, f"[plan] estimated {sum(est.values()):.0f} s on {n_workers} worker(s) "
               f"({', '.join(f'{k} {v:.0f} s' for k, v in est.items())}) of a {args.budget:.0f} s budget")
    report: dict[str, Any] = {"plan": plan.to_dict(), "cost": doc["cost"], "inputs": doc["inputs"]}
    done = Tuned(code=1, plan=plan, report=report)

    arms = ("mup", "sp") if compare_sp else ("mup",)
    log(quiet, f"[1/5] coordinate check of {'muP and SP' if compare_sp else 'muP'} at widths "
               f"{list(plan.widths[:3])}")
    with clock.stage("coord_check"):
        for kind in arms:  # SP's is the comparison's (it should fail), not a gate
            cdir = out / ("coord_check" if kind == "mup" else "coord_check_sp")
            done.coord[kind] = _coord_check(cdir, kind, model, plan, depth, extra)
    coord = done.coord["mup"]
    report["coord_check"] = {"passed": coord.get("passed")}
    if compare_sp:
        report["coord_check_sp"] = {"passed": done.coord["sp"].get("passed")}
    if not coord.get("passed"):
        done.code = _refuse(out, report, [f"the coordinate check of muP failed at widths "
                                          f"{list(plan.widths[:3])} (see {out / 'coord_check'}): the "
                                          "parametrization is not width-stable on this model"], quiet, t0)
        return done

    log(quiet, f"[2/5] coarse LR search at width {plan.base_width}: 2^{plan.search_log2_lrs[0]:g}.."
               f"2^{plan.search_log2_lrs[-1]:g}, widened until bracketed (est {est['search']:.0f} s)")
    with clock.stage("search", parallel=n_workers, reports=True):
        found = _lr_runs(out, "tune-search", model, (plan.base_width,), (0,), plan.search_log2_lrs, plan, extra,
                         depth, device=device, workers=args.workers, quiet=quiet, max_extend=3)
        ok = found[~found["diverged"].astype(bool)]
        centre = round(4 * math.log2(float(ok.loc[ok["loss"].idxmin(), "lr"]))) / 4
    report["search"] = {"centre_log2_lr": centre, "n_runs": int(len(found))}

    log(quiet, f"[3/5] LR x width ladder: widths {list(plan.widths)}, {len(plan.seeds)} seeds, LRs 2^{centre:g} "
               f"+- {max(plan.ladder_offsets):g} octave"
               + (" (muP; SP beside it, centred at 2^centre x base/width)" if compare_sp else "")
               + f" (est {est['ladder']:.0f} s)")
    with clock.stage("ladder", parallel=n_workers, reports=True):
        table = _lr_runs(out, "tune-ladder", model, plan.widths, plan.seeds,
                         tuple(centre + o for o in plan.ladder_offsets), plan, extra, depth, device=device,
                         workers=args.workers, quiet=quiet, max_extend=2)
        if compare_sp:
            table = _with_sp(out, table, model, centre, plan, extra, depth, device=device,
                             workers=args.workers, quiet=quiet)
        write_table(table, out / "results.csv")
        fit = OptimumFit(x="lr", y="loss", group_by=("parametrization", "width"), n_boot=500).fit(table)
        drift = fit.drift("width", where={"parametrization": "mup"})
    done.table, done.fit = table, fit
    report["ladder"] = {"optimum_per_width": {str(int(k[1])): float(v) for k, v in fit.params_.items()
                                              if k[0] == "mup"},
                        "drift_octaves": drift.to_dict()}
    if compare_sp:
        report["ladder"]["sp_optimum_per_width"] = {str(int(k[1])): float(v) for k, v in fit.params_.items()
                                                    if k[0] == "sp"}
        report["ladder"]["sp_drift_octaves"] = fit.drift("width", where={"parametrization": "sp"}).to_dict()

    log(quiet, f"[4/5] scaling sweep: budgets {list(plan.scaling_tokens)} tokens, batches "
               f"{list(plan.scaling_batch_sizes)}, and the held-out audit (est {est['scaling']:.0f} s)")
    sz = _size(plan, model, extra, centre, args, depth)
    sz = dataclasses.replace(sz, scaling=dataclasses.replace(sz.scaling, seeds=tuple(range(prev["seeds"]))))
    # the scaling stage reads μP's group of the ladder's fit only (SP's rows change nothing there)
    scaling = scaling_stage(out, sz, "tune-scaling", fit, device=device, workers=args.workers,
                            n_workers=n_workers, quiet=quiet, clock=clock)
    done.scaling = scaling
    report["scaling"] = {k: scaling.get(k) for k in ("laws", "budget_optima", "error", "audit_path", "fit_path")}
    report["audit"] = (scaling.get("audit") or {}).get("passed")
    if not scaling.get("fit_path"):
        done.code = _refuse(out, report, [f"the scaling laws could not be fitted: {scaling.get('error')}"],
                            quiet, t0)
        return done

    log(quiet, "[5/5] the card")
    with clock.stage("card"):
        made = _card(args, plan, depth, extra, scaling, out)
    made, again, report["refine"] = _refine(args, out, plan, doc, sz, fit, made, scaling, depth, extra,
                                            device=device, n_workers=n_workers, quiet=quiet, clock=clock,
                                            t0=t0)
    if report["refine"]["rounds"]:
        done.scaling = scaling = {**again, "images": again.get("images") or scaling.get("images")}
        report["scaling"] = {k: scaling.get(k) for k in ("laws", "budget_optima", "error", "audit_path",
                                                         "fit_path")}
        report["audit"] = (scaling.get("audit") or {}).get("passed")
    done.made = made
    against = objections(made.card)
    report["card"] = {"warnings": made.warnings, "objections": against, "lr": made.plan.lr,
                      "batch_tokens": made.plan.batch_tokens, "steps": made.plan.steps,
                      "trust": made.card["trust"]["summary"]}
    report["stages"] = clock.stages
    if against:
        save_card(made, out / "card.rejected.yaml")
        done.code = _refuse(out, report, against, quiet, t0, made.card)
        return done
    (out / "card.rejected.yaml").unlink(missing_ok=True)  # a re-run that now stands behind it
    path = save_card(made, out / "card.yaml")
    report["wall_s"] = time.perf_counter() - t0
    _write_report(out, report, accepted=True)
    log(quiet, f"done in {report['wall_s']:.0f} s: wrote {path} (base LR {made.plan.lr:.4g}, "
               f"{made.plan.steps} steps of {made.plan.batch_tokens} tokens); {len(made.warnings)} warning(s); "
               f"see {out / 'report.md'}")
    done.code = 0
    return done


def _coord_check(cdir: Path, kind: str, model: str, plan: TunePlan, depth: int, extra: dict[str, Any]
                 ) -> dict[str, Any]:
    """``mutransfer coord-check`` of ``kind`` on the proxies' own models: their depth, head
    rule and data (an hf: config is otherwise built at its own depth, which no proxy trains
    at); its coord_check.json, or ``{"passed": False}`` when it could not run."""
    gate = ["--depths", str(depth)]
    if "head_rule" in extra:
        gate += ["--head-rule", str(extra["head_rule"])]
    if "data" in extra:
        gate += ["--data", str(extra["data"])]
    widths = ",".join(map(str, plan.widths[:3]))
    code = cli_main(["coord-check", "--model", model, "-p", kind, "--widths", widths,
                     "--steps", "4", "--n-seeds", "2", "--seq-len", str(min(plan.seq_len, 64)), *gate,
                     "--out", str(cdir), "--overwrite", "--quiet"])
    return json.loads((cdir / "coord_check.json").read_text()) if code in (0, 1) else {"passed": False}


def _with_sp(out: Path, table: pd.DataFrame, model: str, centre: float, plan: TunePlan, extra: dict[str, Any],
             depth: int, *, device: str, workers: int | None, quiet: bool) -> pd.DataFrame:
    """SP's ladder beside μP's, fairly: the same seeds, steps and grid shape (the ladder's
    offsets), centred where SP's optimum is expected to move (Adam's hidden LR as 1/width:
    2^centre · base/width), widened past an edge by the same rule; one study per width, as
    its grid moves. At the base width μP is SP bit for bit, so μP's runs there are filed
    under both arms (``shared_base``): the ratio there is exactly 1."""
    tables = []
    for w in plan.widths[1:]:
        move = -math.log2(w / plan.base_width)
        sp = _lr_runs(out, f"tune-ladder-sp-w{w}", model, (w,), plan.seeds,
                      tuple(centre + move + o for o in plan.ladder_offsets), plan, extra, depth,
                      device=device, workers=workers, quiet=quiet, max_extend=2, parametrization="sp")
        tables.append(sp)
    base = table[table["width"] == plan.base_width]
    table = table.assign(shared_base=table["width"] == plan.base_width)
    sp_base = base.assign(parametrization="sp", shared_base=True)
    return pd.concat([table, sp_base, *(t.assign(shared_base=False) for t in tables)], ignore_index=True)


def _previous(out: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """What an earlier run into ``out`` with the same ``inputs`` (the plan's) spent and
    chose: its wall seconds (all runs so far) and the scaling seeds its second pass reached
    (1 without one, or when the earlier run had other inputs)."""
    path = out / "tune.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    if doc.get("inputs") != json.loads(json.dumps(inputs)):
        return {"wall_s": 0.0, "seeds": 1}
    rounds = (doc.get("refine") or {}).get("rounds") or []
    return {"wall_s": float(doc.get("wall_s") or 0.0), "seeds": max([1] + [int(r["seeds"]) for r in rounds])}


def _card(args: argparse.Namespace, plan: TunePlan, depth: int, extra: dict[str, Any], scaling: dict[str, Any],
          out: Path) -> Any:
    """The card from the scaling stage's fit and audit (:func:`make_card`)."""
    # a preset proxy's model fields given with --set (head_dim, ...) are the proxy's, and so
    # the target's too, which starts from the proxy
    shape = {k: v for k, v in extra.items() if k in model_fields("gpt") - {"kind", "preset", "depth"}}
    target: dict[str, Any] = ({"model": args.model, "head_rule": args.head_rule} if args.model else
                              {"preset": args.preset, "proxy_overrides": shape,
                               "overrides": {"width": args.target_width, "depth": args.target_depth}})
    # the anchor: the scaling sweep's best config at its largest budget, measured with the
    # recipe the target runs (WSD at the budget), as the card-regret benchmark anchors its
    # card; the ladder's optima (another schedule) say how well the LR transfers in width
    anchor = optimum_from_scaling(json.loads(Path(scaling["fit_path"]).read_text()))
    return make_card(TransferRequest(
        lr=anchor["lr"], lr_interval=(anchor["lr_lo"], anchor["lr_hi"]),
        proxy_batch_tokens=anchor["batch_tokens"], proxy_tokens=anchor["tokens"],
        proxy_widths=tuple(plan.widths), **target, base_width=plan.base_width, base_depth=depth,
        seq_len=plan.seq_len, tokens=args.tokens, tokens_per_param=args.tokens_per_param,
        target_seq_len=args.target_seq_len, allow_vocab_change=args.allow_vocab_change,
        scaling_fit=scaling["fit_path"], audit=scaling.get("audit_path"), study="tune-ladder",
        storage=f"journal:{out / 'sweep' / 'optuna.journal'}"))


#: The second pass stops once the card's LR interval is this narrow (hi / lo).
REFINE_TARGET_FACTOR = 2.0


def _refine(args: argparse.Namespace, out: Path, plan: TunePlan, doc: dict[str, Any], sz: DemoSize, fit: Any,
            made: Any, scaling: dict[str, Any], depth: int, extra: dict[str, Any], *, device: str, n_workers: int,
            quiet: bool, clock: Clock, t0: float) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The second pass: while the card's LR interval is wider than
    :data:`REFINE_TARGET_FACTOR` and the budget left pays for it, add the measurement the
    card's own trust block ranks as narrowing the LR interval (``trust.options``, the same
    computation as its "narrows most"), one round at a time, and remake the card.

    The measurement ``tune`` can add in place is another seed of the scaling sweep (the
    study grows; the audit is redone at the refitted prediction); a larger budget or batch
    beyond the target's is left to the report's "to run". Each round records the factor the
    trust block predicted and the one measured after it."""
    rounds: list[dict[str, Any]] = []
    cost = CostModel(**doc["cost"])
    why = ""
    while True:
        factor = made.card["trust"]["intervals"]["lr"]["factor"]
        if factor is None:
            why = "the LR interval is open (an optimum at its grid's edge): another seed cannot close it"
            break
        if factor <= REFINE_TARGET_FACTOR:
            why = f"the LR interval is {factor:.3g}x, within {REFINE_TARGET_FACTOR:g}x"
            break
        seed = next((o for o in made.card["trust"].get("options") or [] if o.get("kind") == "seed"), None)
        if seed is None or seed.get("lr_factor") is None or seed["lr_factor"] >= factor:
            why = "no measurement tune can add narrows the LR interval"
            break
        need = refine_seed_s(cost, plan, n_workers)
        left = args.budget - (time.perf_counter() - t0)
        if need > left:
            why = (f"the LR interval is {factor:.3g}x; another seed of the scaling sweep would narrow it to about "
                   f"{seed['lr_factor']:.3g}x but costs about {need:.0f} s and {max(left, 0):.0f} s of the budget "
                   "are left")
            break
        seeds = tuple(range(seed["seeds"]))
        log(quiet, f"[5/5] second pass: LR interval {factor:.3g}x > {REFINE_TARGET_FACTOR:g}x; scaling seed "
                   f"{seeds[-1]} (predicted {seed['lr_factor']:.3g}x, est {need:.0f} s of {left:.0f} s left)")
        sz = dataclasses.replace(sz, scaling=dataclasses.replace(sz.scaling, seeds=seeds))
        t_round = time.perf_counter()
        again = scaling_stage(out, sz, "tune-scaling", fit, device=device, workers=args.workers,
                              n_workers=n_workers, quiet=quiet, clock=clock)
        again.pop("images", None)
        if not again.get("fit_path"):
            why = f"the refit with {len(seeds)} seeds failed: {again.get('error')}"
            break
        scaling = again
        with clock.stage("card"):
            made = _card(args, plan, depth, extra, scaling, out)
        rounds.append({"seeds": len(seeds), "factor_before": factor, "predicted": seed["lr_factor"],
                       "factor_after": made.card["trust"]["intervals"]["lr"]["factor"],
                       "lr": made.plan.lr, "wall_s": time.perf_counter() - t_round, "estimate_s": need})
    log(quiet, f"[5/5] second pass: {len(rounds)} round(s); stopped: {why}")
    return made, scaling, {"rounds": rounds, "stopped": why, "target_factor": REFINE_TARGET_FACTOR}


def _to_run(card: dict[str, Any] | None, reasons: list[str]) -> list[str]:
    """What to run next, from the card's own trust block and the reasons."""
    out = []
    best = ((card or {}).get("trust") or {}).get("narrows_most")
    if best:
        out.append(f"{best['measurement']}: narrows the LR interval to about {best['lr_factor']:.3g}x")
    if any("audit" in r for r in reasons):
        out.append("more seeds in the held-out audit, or a larger budget so the held-out budget is longer")
    if any("coordinate check" in r for r in reasons):  # no budget fixes a parametrization
        out.append("see which modules grow with width (coord_check/coord_check.json, `mutransfer coord-check "
                   "... --steps 8 --n-seeds 3` for a longer look), then check the parametrization layer by "
                   "layer with `mutransfer audit`; a larger --budget does not change this verdict")
        return out
    if not out:
        out.append("a larger --budget: longer scaling budgets move the laws' anchor closer to the target")
    return out


def _refuse(out: Path, report: dict[str, Any], reasons: list[str], quiet: bool, t0: float,
            card: dict[str, Any] | None = None) -> int:
    """No card: the report says why and what to run; exit status 1."""
    report["refused"] = reasons
    report["to_run"] = _to_run(card, reasons)
    report["wall_s"] = time.perf_counter() - t0
    _write_report(out, report, accepted=False)
    for r in reasons:
        print(f"mutransfer tune: objection: {r}", file=sys.stderr)
    for r in report["to_run"]:
        print(f"mutransfer tune: to run: {r}", file=sys.stderr)
    print(f"mutransfer tune: no card.yaml written (see {out / 'report.md'})", file=sys.stderr)
    return 1


def _write_report(out: Path, report: dict[str, Any], *, accepted: bool) -> None:
    atomic_write_text(out / "tune.json", json.dumps(report, indent=2, default=str) + "\n")
    lines = ["# mutransfer tune", "", f"Card: {'written (card.yaml)' if accepted else 'not written'}.", ""]
    for key, why in report["plan"].get("reasons", {}).items():
        lines.append(f"- plan, {key}: {why}")
    if report.get("ladder"):
        lines += ["", "## LR ladder (muP)", ""]
        lines += [f"- width {w}: optimum {v:.4g}" for w, v in report["ladder"]["optimum_per_width"].items()]
    if report.get("refine"):
        ref = report["refine"]
        lines += ["", "## Second pass", ""]
        lines += [f"- {r['seeds']} scaling seeds: LR interval {r['factor_before']:.3g}x -> {r['factor_after']:.3g}x "
                  f"(predicted {r['predicted']:.3g}x), {r['wall_s']:.0f} s" for r in ref["rounds"]]
        lines.append(f"- stopped: {ref['stopped']}")
    if report.get("card"):
        lines += ["", "## Card", ""] + [f"- {s}" for s in report["card"]["trust"]]
        lines += [f"- warning: {w}" for w in report["card"]["warnings"]]
    if report.get("refused"):
        lines += ["", "## Why no card", ""] + [f"- {r}" for r in report["refused"]]
        lines += ["", "## To run", ""] + [f"- {r}" for r in report["to_run"]]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
