"""Card regret: is the card right at a model larger than its proxy?

A user's workflow, end to end, through the library's public API: the scaling sweep at the
proxy's width (:class:`sweeps.ScalingSweep`, its grid extended until the optima are
bracketed, :func:`sweeps.extend.run_bracketed`), the laws eta*(B, D) and B*(D)
(:class:`analysis.ScalingLawFit`), and the card that ``mutransfer transfer`` writes
(:func:`mutransfer.card.plan.plan_run` and :func:`mutransfer.card.build.build_card`) for a target
8x wider, 4x deeper (CompleteP's depth rules, the proxy tuned under them at its own depth)
and trained on 8x the proxy's largest token budget. Then, at the target, direct
measurement independent of the card: at each of the size's target batches, an LR scan in
half octaves on 2 seeds, started at the proxy optimum moved by the square-root rule and
widened until its best LR is interior (:func:`benchmarks._proxy.bracket_scans`). The
card's own batch and LR are trained as the card gives them.

Regret, seed by seed = a config's loss ÷ the best loss measured with the same seed over
the scan and every rule's config; reported as the mean over seeds with the per-seed range.
Each rule's config (LR, batch) is trained at the target with 2 seeds beside the card's:

* ``mup_unchanged``: μP with the proxy's best LR and batch, unchanged;
* ``sp_proxy_lr``: standard parametrization at the LR an SP proxy of the proxy's shape
  found best (its own LR scan), at the proxy's batch;
* ``deepseek``: DeepSeek LLM's eta(C) and B(C), C = 6·N·D (Bi et al. 2024);
* ``step_law``: Step Law's eta(N, D) and B(D) (Li et al. 2025).

Everything else is one fixed recipe in every target run (weight decay 0.1, warmup 1% of
the tokens, WSD decay over the last 20%, the one held-out set), so the runs differ only in
the two values the card projects; the card's own weight decay and schedule are recorded. The
published laws give an absolute LR; it is taken as the base LR of the μP/CompleteP target,
the role it plays in the card's ``projected.baselines``.

The decision: the card and the scan's 3 best configs trained again on 12 fresh seeds,
paired; R = card ÷ the best of them with a 90% paired-bootstrap interval
(:func:`paired_ratio`); the card is proven when R's upper bound is at most 1.005.
:func:`card_parts` splits the card's regret into its LR part and its batch part, and costs
the LR error's width/depth and batch/budget pieces (:func:`lr_error_split`).

Sizes (``--size``): ``cpu`` keeps every ratio of the design (8x width, 4x depth, 8x
tokens) at tiny shapes: proxy llama-small of width 32 and depth 2 (head 16), context 16,
budgets 2^11..2^14 tokens, batches 1..32 sequences, 3 seeds, checked at width 64; target
width 256, depth 8, 2^17 tokens, scanned at batches 4..32 (a target run takes 90-170
CPU-s; the whole size 3-4 CPU-hours, ``--workers`` trains target runs in parallel).
``cpu_small`` is the first CPU size (width 16, depth 1; its record measured with per-batch
held-out sets), ``tiny`` runs every stage in minutes for tests, and ``gpu`` is the
design's size (proxy width 256, depth 2, context 256): hours of one GPU (``python -m
benchmarks.gpu --card-regret-minutes M`` runs it there, resumable).

    python -m benchmarks.card_regret [--size cpu] [--out runs/card_regret_cpu] [--max-minutes 60]

Writes ``results/card_regret.json``. Every finished run is kept (the sweep's study in
``OUT/scaling``, the other runs in ``OUT/trials.jsonl``), so a re-run resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "card_regret.json"
#: Octaves of the target's LR scan around the projected optimum: 7 points over +-1.5.
LR_OFFSETS = (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5)
SEEDS = (0, 1)
RATIOS = {"width": 8, "depth": 4, "tokens": 8}


@dataclass(frozen=True)
class Size:
    """One proxy, its scaling sweep, the target's scan, and the device it runs on."""

    preset: str
    width: int
    """The proxy's (base) width; the target's is ``RATIOS['width']`` times it."""
    depth: int
    """The proxy's depth; the target's is ``RATIOS['depth']`` times it."""
    head_dim: int
    seq_len: int
    tokens: tuple[int, ...]
    """The proxy's token budgets (WSD branches of the largest); the target trains 8x the largest."""
    batch_sizes: tuple[int, ...]
    """The proxy's batch grid in sequences (extended past an edge optimum)."""
    lr_center: float
    """Centre of the proxy's LR grid at ``batch_sizes[0]`` (moved as sqrt(B))."""
    eval_sequences: int
    device: str
    threads: int | None
    max_extend: int = 2
    check_width: int | None = None
    proxy_seeds: tuple[int, ...] = (0,)
    """Seeds of the proxy's scaling sweep."""
    target_batches: tuple[int, ...] | None = None
    """The target scan's batches in sequences (None: the proxy's largest, 2x and 4x it)."""
    decision_seeds: tuple[int, ...] = ()
    """Fresh seeds (none used elsewhere) on which the card and the scan's best configs are
    trained again, paired, to decide R = card ÷ best (empty: no decision stage)."""
    decision_top: int = 3
    """How many of the scan's best configs (by seed-mean loss) enter the decision."""


SIZES: dict[str, Size] = {
    # The decisive CPU size (3-4 CPU-hours): proxy w32 d2 at context 16 over budgets
    # 2^11..2^14 and batches 1..32, 3 seeds, checked at width 64; target w256 d8 on 2^17
    # tokens, scanned at batches 4..32 (2 seeds, LR grids bracketed), then the card and the
    # scan's top 3 trained again on 12 fresh seeds.
    "cpu": Size(preset="llama-small", width=32, depth=2, head_dim=16, seq_len=16,
                tokens=(2**11, 2**12, 2**13, 2**14), batch_sizes=(1, 2, 4, 8, 16, 32), lr_center=2.0**-6.5,
                eval_sequences=256, device="cpu", threads=1, check_width=64, proxy_seeds=(0, 1, 2),
                target_batches=(4, 8, 16, 32), decision_seeds=tuple(range(100, 112))),
    # The first CPU size (width 16, depth 1; its record is results/card_regret_cpu_small.json, measured
    # with the per-batch held-out sets).
    "cpu_small": Size(preset="llama-small", width=16, depth=1, head_dim=16, seq_len=16,
                      tokens=(2**11, 2**12, 2**13, 2**14), batch_sizes=(1, 2, 4, 8), lr_center=2.0**-6.5,
                      eval_sequences=256, device="cpu", threads=1),
    # For tests: every stage in a minute or two; the numbers mean nothing.
    "tiny": Size(preset="llama-small", width=8, depth=1, head_dim=8, seq_len=8, tokens=(256, 512, 1024),
                 batch_sizes=(1, 2, 4), lr_center=2.0**-5, eval_sequences=16, device="cpu", threads=1,
                 max_extend=1, target_batches=(2, 4), decision_seeds=(100, 101, 102), decision_top=2),
    "gpu": Size(preset="llama-small", width=256, depth=2, head_dim=64, seq_len=256,
                tokens=(2**20, 2**21, 2**22, 2**23), batch_sizes=(4, 8, 16, 32), lr_center=2.0**-7,
                eval_sequences=1024, device="cuda", threads=None),
}


def unavailable() -> str | None:
    """Nothing is missing on any machine (it is only long: ``python -m benchmarks`` runs it
    when named)."""
    return None


def _model(sz: Size, width: int, depth: int) -> dict[str, Any]:
    return {"preset": sz.preset, "width": width, "depth": depth, "head_dim": sz.head_dim,
            "seq_len": sz.seq_len}


# ------------------------------------------------------------------ the proxy, as a user sweeps it
def proxy_stage(sz: Size, out: Path) -> dict[str, Any]:
    """The scaling sweep at the proxy width, bracketed, and its fitted laws."""
    from analysis.scaling_fit import ScalingLawFit
    from sweeps.extend import Bounds, run_bracketed
    from sweeps.holdout import fit_rows
    from sweeps.results import results_table
    from sweeps.spec_scaling import ScalingSweep
    from sweeps.worker import open_study

    spec = ScalingSweep(preset=sz.preset, width=sz.width, batch_sizes=sz.batch_sizes, tokens=sz.tokens,
                        seeds=sz.proxy_seeds, parametrization="completep", lr_center=sz.lr_center,
                        lr_center_batch=sz.batch_sizes[0], eval_sequences=sz.eval_sequences,
                        check_width=sz.check_width,
                        base={"seq_len": sz.seq_len, "depth": sz.depth, "head_dim": sz.head_dim,
                              "base_depth": sz.depth, "threads": sz.threads},
                        name="card-regret-proxy")
    bounds = Bounds(max_extend=sz.max_extend, batch_range=(1, 8 * max(sz.batch_sizes)))
    sweep, bracket = run_bracketed(spec, bounds, out=out / "scaling", workers=1, device=sz.device, quiet=True)
    study, _ = open_study(sweep.plan.storage, sweep.plan.study_name)
    table = results_table(study)
    rows = fit_rows(table, spec)
    fit = ScalingLawFit(n_boot=1000).fit(rows)
    doc = fit.to_dict()
    trials = table.drop_duplicates("trial")
    return {"spec": spec, "doc": doc, "rows": rows,
            "bracketing": bracket.to_dict() if bracket is not None else None,
            "n_trials": int(len(trials)),
            "cpu_s": float(trials["cpu_s"].sum()) if "cpu_s" in trials.columns else None}


def proxy_optimum(doc: dict[str, Any]) -> dict[str, float]:
    """The proxy's best config at its largest budget
    (:func:`mutransfer.card.proxy.optimum_from_scaling`)."""
    from mutransfer.card.proxy import optimum_from_scaling

    return optimum_from_scaling(doc)


# ------------------------------------------------------------------ the card, as `transfer` writes it
def write_card(sz: Size, doc: dict[str, Any], opt: dict[str, float], out: Path) -> dict[str, Any]:
    """The card for the target, made by the one library call every caller makes
    (:func:`mutransfer.card.make.make_card`: every transfer rule, the plan, the warnings and
    the trust block), from :func:`card_request`."""
    from mutransfer.card.build import save_card
    from mutransfer.card.make import make_card

    made = make_card(card_request(sz, doc, opt))
    save_card(made, out / "card.yaml")
    return {"card": made.card, "plan": made.plan, "laws": made.laws, "n_params": made.n_params,
            "n_nonembed": made.n_params_nonembed, "tokens": made.tokens, "width": made.width,
            "depth": made.depth}


def card_request(sz: Size, doc: dict[str, Any], opt: dict[str, float]) -> Any:
    """The benchmark's transfer as a :class:`mutransfer.card.make.TransferRequest`: the
    proxy's best LR (with its interval) at its batch and largest budget, a CompleteP proxy of
    the size's own shape, and a target :data:`RATIOS` wider, deeper and longer-trained."""
    from analysis.scaling_fit import ScalingLawFit
    from mutransfer.card.make import TransferRequest
    from mutransfer.card.request import RunChoices
    return TransferRequest(
        lr=opt["lr"], lr_interval=(opt["lr_lo"], opt["lr_hi"]), proxy_batch_tokens=opt["batch_tokens"],
        proxy_tokens=opt["tokens"], preset=sz.preset, parametrization="completep",
        proxy_overrides={"width": sz.width, "depth": sz.depth, "head_dim": sz.head_dim, "seq_len": sz.seq_len},
        base_width=sz.width, base_depth=sz.depth, seq_len=sz.seq_len,
        overrides={"width": RATIOS["width"] * sz.width, "depth": RATIOS["depth"] * sz.depth},
        tokens=float(RATIOS["tokens"] * max(sz.tokens)),
        scaling_fit=ScalingLawFit.from_dict(doc, "the proxy's scaling fit"),
        run=RunChoices(decay_shape="linear"))


# ------------------------------------------------------------------ runs
def _train_point(flat: dict[str, Any]) -> dict[str, Any]:
    """One run in a worker process: the loss row of :meth:`Runner.loss`."""
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.train import train

    t0, c0 = time.perf_counter(), time.process_time()
    res = train(TrainConfig.from_flat(flat))
    return {"loss": float(res.loss), "diverged": bool(res.diverged), "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0}


class Runner:
    """Trains one config at the proxy's or the target's shape, cached in a TrialLog;
    :meth:`prefetch` trains a list of them in ``workers`` processes first."""

    def __init__(self, sz: Size, out: Path, deadline: float, workers: int = 1) -> None:
        from benchmarks._proxy import TrialLog

        self.sz, self.trials, self.deadline = sz, TrialLog(out / "trials.jsonl"), deadline
        self.skipped, self.workers = 0, max(1, int(workers))

    def trials_loss(self, pt: tuple[int, float], seed: int, common: dict[str, Any]) -> float | None:
        """The cached target loss of a scan point (batch, lr) at ``seed`` (None: not run)."""
        return self.loss(where="target", parametrization="completep", lr=pt[1], batch=pt[0], seed=seed,
                         cached_only=True, **common)

    def _point(self, *, where: str, parametrization: str, lr: float, batch: int, tokens: float, seed: int,
               width: int, depth: int, weight_decay: float, warmup_tokens: float, decay_fraction: float
               ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the run's cache key, its TrainConfig fields)."""
        sz = self.sz
        steps = max(1, round(tokens / (batch * sz.seq_len)))
        point = {"where": where, "p": parametrization, "lr": float(f"{lr:.6g}"), "batch": int(batch),
                 "steps": steps, "seed": int(seed), "width": width, "depth": depth,
                 "wd": float(f"{weight_decay:.6g}"), "warmup_tokens": round(warmup_tokens),
                 "decay": float(f"{decay_fraction:.4g}")}
        flat = {**_model(sz, width, depth), "base_width": sz.width, "base_depth": sz.depth,
                "parametrization": parametrization, "lr": point["lr"], "batch_size": batch, "steps": steps,
                "seed": seed, "schedule": "wsd", "decay_fraction": decay_fraction,
                "warmup_steps": min(steps - 1, round(warmup_tokens / (batch * sz.seq_len))),
                "weight_decay": weight_decay, "wd_mode": "coupled", "eval_every": 0,
                "eval_sequences": sz.eval_sequences, "threads": sz.threads, "device": sz.device}
        return point, flat

    def _record(self, point: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
        from benchmarks._proxy import log

        row = self.trials.add(point, values)
        log(f"  {point['where']} {point['p']} lr {point['lr']:.4g} batch {point['batch']} "
            f"seed {point['seed']}: {row['loss']:.4f} in {row['wall_s']:.0f} s")
        return row

    def prefetch(self, runs: list[dict[str, Any]]) -> None:
        """Train the uncached runs among ``runs`` (keyword dicts of :meth:`loss`) in
        ``workers`` spawned processes, longest first; a no-op with one worker (then
        :meth:`loss` trains each in turn). Runs not started by the deadline are skipped."""
        if self.workers < 2:
            return
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        todo: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        for kw in runs:
            point, flat = self._point(**kw)
            if self.trials.get(point) is None:
                todo.setdefault(self.trials.key(point), (point, flat))
        if not todo:
            return
        order = sorted(todo.values(), key=lambda pf: -pf[0]["steps"])
        with ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn")) as pool:
            futs = {}
            for point, flat in order:
                if time.time() > self.deadline:
                    self.skipped += 1
                    continue
                futs[pool.submit(_train_point, flat)] = point
            for f in as_completed(futs):
                self._record(futs[f], f.result())

    def loss(self, *, where: str, parametrization: str, lr: float, batch: int, tokens: float, seed: int,
             width: int, depth: int, weight_decay: float, warmup_tokens: float, decay_fraction: float,
             cached_only: bool = False) -> float | None:
        """The held-out loss (None: not run, past the deadline, or not cached with ``cached_only``)."""
        point, flat = self._point(where=where, parametrization=parametrization, lr=lr, batch=batch,
                                  tokens=tokens, seed=seed, width=width, depth=depth,
                                  weight_decay=weight_decay, warmup_tokens=warmup_tokens,
                                  decay_fraction=decay_fraction)
        row = self.trials.get(point)
        if row is None and cached_only:
            return None
        if row is None:
            if time.time() > self.deadline:
                self.skipped += 1
                return None
            row = self._record(point, _train_point(flat))
        return float(row["loss"])


def _mean(xs: list[float | None]) -> float | None:
    ok = [x for x in xs if x is not None]
    return sum(ok) / len(ok) if len(ok) == len(xs) and ok else None


def lr_error_split(runner: Runner, sz: Size, best_b: dict[str, Any], law_lr: dict[str, Any],
                   common: dict[str, Any]) -> dict[str, Any] | None:
    """The card's LR error at the target's best batch B*, in two parts, each in octaves with
    its interval: the batch/budget move (the law's eta*(B*, D_t) against the proxy's own shape
    trained at B* and D_t, scanned here) and the width/depth move (that proxy-shape optimum
    against the target's). Their sum is the whole error. Intervals combine the optima's
    bootstrap intervals (the law's own band is in ``law_lr_by_batch``)."""
    import pandas as pd

    from analysis.optimum import OptimumFit
    from benchmarks._proxy import bracket_scan

    b = int(best_b["batch_size"])
    lo_hi = best_b["lr_ci"]
    c = round(2 * math.log2(best_b["lr_opt"])) / 2
    kw = {**common, "width": sz.width, "depth": sz.depth}

    def at(t: float) -> list[float]:
        v = [runner.loss(where="proxy_shape", parametrization="completep", lr=float(f"{2.0**t:.6g}"),
                         batch=b, seed=s, **kw) for s in SEEDS]
        return [x if x is not None else math.inf for x in v]

    start = [c - 1, c - 0.5, c, c + 0.5, c + 1]
    runner.prefetch([{"where": "proxy_shape", "parametrization": "completep", "lr": float(f"{2.0**t:.6g}"),
                      "batch": b, "seed": s, **kw} for t in start for s in SEEDS])
    scan = bracket_scan(at, start, lo=c - 5, hi=c + 5, step=0.5)
    rows = [{"lr": float(f"{2.0**t:.6g}"), "seed": s, "loss": runner.loss(
        where="proxy_shape", parametrization="completep", lr=float(f"{2.0**t:.6g}"), batch=b, seed=s, **kw)}
        for t in scan for s in SEEDS]
    df = pd.DataFrame([r for r in rows if r["loss"] is not None and math.isfinite(r["loss"])])
    if df.empty or df["lr"].nunique() < 3:  # runs skipped past the deadline: no split
        return None
    o = OptimumFit(x="lr", y="loss", group_by=(), n_boot=500).fit(df).optima_[0]
    p_lo, p_hi = o.ci
    law = law_lr[str(b)]["lr_law"]
    t_opt = best_b["lr_opt"]

    def octaves(num: float | None, den: float | None) -> float | None:
        return math.log2(num / den) if num and den and math.isfinite(num) and math.isfinite(den) else None

    return {"batch_size": b, "lr_law": law, "lr_proxy_shape": o.x_opt, "lr_proxy_shape_ci": [p_lo, p_hi],
            "lr_target": t_opt, "lr_target_ci": lo_hi,
            "proxy_shape_scan": {str(k): v for k, v in sorted(scan.items())},
            "batch_budget": {"octaves": octaves(law, o.x_opt),
                             "interval": [octaves(law, p_hi), octaves(law, p_lo)]},
            "width_depth": {"octaves": octaves(o.x_opt, t_opt),
                            "interval": [octaves(p_lo, lo_hi[1]), octaves(p_hi, lo_hi[0])]},
            "total_octaves": octaves(law, t_opt)}


def card_parts(record: dict[str, Any]) -> dict[str, Any] | None:
    """What each part of the card costs, on the scan's seeds.

    R_card = (card ÷ the best scanned LR at the card's batch) × (that ÷ the best measured):
    the LR part and the batch part, each a per-seed ratio averaged over the seeds. The LR
    part's error in octaves at the card's batch is split as :func:`lr_error_split` splits
    it at the best batch (width/depth move, batch/budget move), and each piece is costed
    on the quadratic fitted to the card batch's LR scan: loss(eta_opt · 2^octaves) ÷ loss_opt.
    None when the card's batch was not scanned."""
    import pandas as pd

    from analysis.optimum import OptimumFit

    card = record["regret"]["card"]
    b = int(card["batch_sequences"])
    rows = [r for r in record["scan"] if r["batch_size"] == b]
    seeds = [int(s) for s in record["setup"]["seeds"]]
    best = record["best_by_seed"]
    if not rows or any(str(s) not in best and s not in best for s in seeds):
        return None

    def best_of(s: int) -> float:
        return float((best.get(str(s)) or best[s])["loss"])  # type: ignore[index]

    at_b = {s: min(r["losses"][i] for r in rows if r["losses"][i] is not None) for i, s in enumerate(seeds)}
    lr_part = [card["losses"][i] / at_b[s] for i, s in enumerate(seeds) if card["losses"][i] is not None]
    batch_part = [at_b[s] / best_of(s) for s in seeds]
    if not lr_part:  # the card's own runs were skipped past the deadline
        return None
    df = pd.DataFrame([{"lr": r["lr"], "seed": s, "loss": r["losses"][i]} for r in rows
                       for i, s in enumerate(seeds) if r["losses"][i] is not None])
    fit = OptimumFit(x="lr", y="loss", group_by=(), n_boot=0).fit(df)
    o = fit.optima_[0]
    split = record.get("lr_error_split") or {}

    def cost(octaves: float | None) -> float | None:
        if octaves is None or o.coef is None:
            return None
        return float(fit.predict(o.x_opt * 2.0 ** octaves, o.key)[0] / o.loss_opt)

    total = math.log2(card["lr"] / o.x_opt)
    return {
        "card_batch": b, "lr_opt_at_card_batch": o.x_opt, "loss_opt_at_card_batch": o.loss_opt,
        "lr_part": sum(lr_part) / len(lr_part), "batch_part": sum(batch_part) / len(batch_part),
        "lr_error_octaves_at_card_batch": total, "lr_error_cost": cost(total),
        "width_depth_octaves": (split.get("width_depth") or {}).get("octaves"),
        "width_depth_cost": cost((split.get("width_depth") or {}).get("octaves")),
        "batch_budget_octaves": (split.get("batch_budget") or {}).get("octaves"),
        "batch_budget_cost": cost((split.get("batch_budget") or {}).get("octaves")),
        "note": "lr_part × batch_part = the card's regret on the scan's seeds; the octave costs read "
                "the fitted LR curve at the card's batch",
    }


def paired_ratio(card: list[float], others: list[list[float]], level: float = 0.9, n_boot: int = 4000,
                 seed: int = 0) -> dict[str, Any]:
    """R = mean(card) ÷ min over ``others`` of their means, on seeds shared by all (paired:
    ``card[i]`` and ``others[k][i]`` are the same seed), with a paired-bootstrap interval:
    resample the seeds (the same draw for every config), recompute R. The min over the
    others is retaken in every replicate, so the interval carries the choice of the best."""
    import numpy as np

    c = np.asarray(card, dtype=float)
    o = np.asarray(others, dtype=float)
    if o.ndim != 2 or o.shape[1] != c.size or c.size < 2:
        raise ValueError(f"paired_ratio needs >= 2 seeds shared by every config, got {c.size} and {o.shape}")
    r = float(c.mean() / o.mean(axis=1).min())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, c.size, size=(n_boot, c.size))
    boot = c[idx].mean(axis=1) / o[:, idx].mean(axis=2).min(axis=0)
    q = (1.0 - level) / 2.0
    return {"ratio": r, "ci": [float(np.quantile(boot, q)), float(np.quantile(boot, 1.0 - q))],
            "level": level, "n_seeds": int(c.size), "n_boot": n_boot,
            "per_seed": [float(x) for x in c / o.min(axis=0)]}


def run(size: str = "cpu", out: str | os.PathLike[str] | None = None, max_minutes: float = 60.0,
        write: bool = True, until: str | None = None, workers: int = 1) -> dict[str, Any]:
    """The whole benchmark (``until="scan"``: stop after the proxy sweep and the target's
    scan, which do not depend on the card, and return what was measured; nothing written).
    ``workers`` processes train the target's runs (each single-threaded)."""
    import torch

    from analysis.baselines import deepseek_llm, step_law
    from analysis.optimum import OptimumFit
    from benchmarks._proxy import bracket_scan, bracket_scans, finite_or_none, log, record_header
    from mutransfer._io import atomic_write_text

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {', '.join(SIZES)}")
    sz = SIZES[size]
    if sz.threads:
        torch.set_num_threads(sz.threads)
    t0 = time.perf_counter()
    out = Path(out or Path("runs") / f"card_regret_{size}")
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + 60.0 * max_minutes

    # 1. the proxy's scaling sweep and laws
    log(f"[card_regret] proxy scaling sweep: width {sz.width}, depth {sz.depth}, budgets {list(sz.tokens)}, "
        f"seeds {list(sz.proxy_seeds)}")
    px = proxy_stage(sz, out)
    doc = px["doc"]
    atomic_write_text(out / "scaling_fit.json", json.dumps(doc, indent=2, default=float) + "\n")
    opt = proxy_optimum(doc)
    W, D = RATIOS["width"] * sz.width, RATIOS["depth"] * sz.depth
    T = float(RATIOS["tokens"] * max(sz.tokens))
    seq = sz.seq_len
    runner = Runner(sz, out, deadline, workers)
    # Everything but LR and batch is held at one recipe in every target run: the card's
    # warmup tokens, decay fraction and weight decay follow from the laws, which the scan
    # must not depend on, so the scan and every config use the recipe below, and the card
    # is judged on its LR and batch (its own weight decay and schedule are recorded).
    lam = float(px["spec"].base.get("weight_decay", 0.1))
    common = {"tokens": T, "width": W, "depth": D, "weight_decay": lam,
              "warmup_tokens": 0.01 * T, "decay_fraction": 0.2}
    b_p = max(1, round(opt["batch_tokens"] / seq))

    # 2. the direct scan at the target, independent of the card: each batch's LR grid starts
    # at the proxy optimum moved by the square-root rule and is widened (half octaves) until
    # its best LR is bracketed, on every seed
    b_max = int(px["rows"]["batch_size"].max())
    batches = list(sz.target_batches or (b_max, 2 * b_max, 4 * b_max))

    def target(p: str, lr: float, b: int, s: int) -> float | None:
        return runner.loss(where="target", parametrization=p, lr=lr, batch=b, seed=s, **common)

    def start_at(b: int) -> float:
        return round(2 * (math.log2(opt["lr"]) + 0.5 * math.log2(b * seq / opt["batch_tokens"]))) / 2

    def scan_at(b: int, t: float) -> list[float]:
        v = [target("completep", float(f"{2.0**t:.6g}"), b, s) for s in SEEDS]
        return [x if x is not None else math.inf for x in v]

    def fetch(need: list[tuple[int, float]]) -> None:  # one round of every batch's scan, in parallel
        runner.prefetch([{"where": "target", "parametrization": "completep", "lr": float(f"{2.0**t:.6g}"),
                          "batch": b, "seed": s, **common} for b, t in need for s in SEEDS])

    centre = {b: start_at(b) for b in batches}
    scans: dict[int, dict[float, float]] = bracket_scans(  # type: ignore[assignment]
        scan_at, {b: [c - 1, c - 0.5, c, c + 0.5, c + 1] for b, c in centre.items()},
        lo={b: c - 5 for b, c in centre.items()}, hi={b: c + 5 for b, c in centre.items()}, step=0.5,
        fetch=fetch)
    scan_pts = [(b, float(f"{2.0**t:.6g}")) for b in batches for t in sorted(scans[b])]
    if until == "scan":
        return {"proxy": px, "optimum": opt, "scans": scans, "wall_s": time.perf_counter() - t0}

    # 3. the card, as `transfer` writes it
    cw = write_card(sz, doc, opt, out)
    plan, laws = cw["plan"], cw["laws"]
    log(f"[card_regret] card: lr {plan.lr:.4g}, batch {plan.batch_sequences} x {seq}, {plan.steps} steps, "
        f"wd {plan.weight_decay:.4g}; proxy optimum lr {opt['lr']:.4g} at batch {opt['batch_tokens']:g} "
        "tokens")

    # 4. the SP proxy's own LR optimum (same shape, the proxy's batch and largest budget)
    lam_p = float(px["spec"].base.get("weight_decay", 0.1))
    warm_p = float(px["spec"].warmup_steps(b_p) * b_p * seq)

    def sp_at(t: float) -> list[float]:
        v = [runner.loss(where="proxy", parametrization="sp", lr=2.0**t, batch=b_p, tokens=opt["tokens"],
                         seed=0, width=sz.width, depth=sz.depth, weight_decay=lam_p, warmup_tokens=warm_p,
                         decay_fraction=0.2)]
        return [x if x is not None else math.inf for x in v]

    t_c = round(2 * math.log2(opt["lr"])) / 2
    sp_scan = bracket_scan(sp_at, [t_c - 1, t_c - 0.5, t_c, t_c + 0.5, t_c + 1], lo=t_c - 4, hi=t_c + 4,
                           step=0.5)
    sp_lr = 2.0 ** min(sp_scan, key=sp_scan.__getitem__)

    # 5. the configs each rule gives at the target, on the scan's seeds
    def seqs(batch_tokens: float) -> int:
        return max(1, round(batch_tokens / seq))

    ds = deepseek_llm(6.0 * cw["n_nonembed"] * T)
    sl = step_law(cw["n_nonembed"], T)
    configs = {
        "card": ("completep", float(f"{plan.lr:.6g}"), plan.batch_sequences),
        "mup_unchanged": ("completep", float(f"{opt['lr']:.6g}"), b_p),
        "sp_proxy_lr": ("sp", float(f"{sp_lr:.6g}"), b_p),
        "deepseek": ("completep", float(f"{float(ds['lr']):.6g}"), seqs(float(ds["batch_tokens"]))),
        "step_law": ("completep", float(f"{float(sl['lr']):.6g}"), seqs(float(sl["batch_tokens"]))),
    }
    runner.prefetch([{"where": "target", "parametrization": p, "lr": lr, "batch": b, "seed": s, **common}
                     for p, lr, b in configs.values() for s in SEEDS])
    for s in SEEDS:
        for p, lr, b in sorted(configs.values(), key=lambda c: -c[2]):  # few steps first
            target(p, lr, b, s)
    losses = {n: [target(p, lr, b, s) for s in SEEDS] for n, (p, lr, b) in configs.items()}
    scan: list[dict[str, Any]] = []
    for b, lr in scan_pts:
        ls = [target("completep", lr, b, s) for s in SEEDS]
        scan.append({"batch_size": b, "batch_tokens": b * seq, "lr": lr, "losses": ls, "loss": _mean(ls)})

    # 6. regret on the scan's seeds: each config's loss over the best loss measured with the
    # same seed (over the scan and every rule's config), then the mean over the seeds
    points = [{**r, "rule": None} for r in scan]
    points += [{"batch_size": b, "batch_tokens": b * seq, "lr": lr, "losses": losses[n],
                "loss": _mean(losses[n]), "rule": n, "parametrization": p}
               for n, (p, lr, b) in configs.items()]
    best_by_seed: dict[int, dict[str, Any]] = {}
    for i, s in enumerate(SEEDS):
        have = [r for r in points if r["losses"][i] is not None]
        if have:
            r = min(have, key=lambda r: r["losses"][i])
            best_by_seed[s] = {"loss": r["losses"][i], "batch_size": r["batch_size"], "lr": r["lr"],
                               "rule": r["rule"], "n_points": len(have)}
    complete = [r for r in points if r["loss"] is not None]
    best = min(complete, key=lambda r: r["loss"]) if complete else None  # best seed mean (all seeds)
    per_batch: list[dict[str, Any]] = []
    import pandas as pd

    df = pd.DataFrame([{"batch_size": r["batch_size"], "lr": r["lr"], "seed": s, "loss": v}
                       for r in scan for s, v in zip(SEEDS, r["losses"], strict=True) if v is not None])
    if len(df):  # per batch, the seeds that ran its whole LR grid (a cut run leaves one partial)
        n_lr = df.groupby("batch_size")["lr"].transform("nunique")
        n_seed_lr = df.groupby(["batch_size", "seed"])["lr"].transform("nunique")
        df = df[(n_seed_lr == n_lr) & (n_lr >= 3)]
    if len(df):
        fit = OptimumFit(x="lr", y="loss", group_by=("batch_size",), n_boot=500).fit(df)
        for b in batches:
            sub = df[df["batch_size"] == b]
            if sub.empty:
                continue
            o = fit.group(b)
            per_batch.append({"batch_size": b, "lr_opt": o.x_opt, "lr_ci": [finite_or_none(c) for c in o.ci],
                              "loss_opt": o.loss_opt, "at_edge": o.at_edge, "edge": o.edge,
                              "seeds": sorted(int(x) for x in sub["seed"].unique()),
                              "best_grid_loss": float(sub.groupby("lr")["loss"].mean().min())})
    best_b = min(per_batch, key=lambda r: r["best_grid_loss"]) if per_batch else None
    table: dict[str, Any] = {}
    for name, (p, lr, b) in configs.items():
        ls = losses[name]
        ok = [(s, v) for s, v in zip(SEEDS, ls, strict=True) if v is not None and s in best_by_seed]
        per_seed = {str(s): v / best_by_seed[s]["loss"] for s, v in ok}
        row: dict[str, Any] = {"parametrization": p, "lr": lr, "batch_sequences": b, "batch_tokens": b * seq,
                               "losses": ls, "seeds": [s for s, _ in ok]}
        if per_seed:
            row["ratio_loss"] = sum(per_seed.values()) / len(per_seed)
            row["ratio_loss_per_seed"] = per_seed
            row["ratio_loss_range"] = [min(per_seed.values()), max(per_seed.values())]
        if best_b is not None:
            row["ratio_lr"] = lr / best_b["lr_opt"]
            ci = best_b["lr_ci"]
            row["ratio_lr_ci"] = [lr / ci[1] if ci[1] else None, lr / ci[0] if ci[0] else None]
            row["ratio_batch"] = b / best_b["batch_size"]
        table[name] = row

    # 7. the decision: the card and the scan's best configs (by seed mean) trained again on
    # fresh seeds, paired; R = card ÷ the best of them, with a paired-bootstrap interval.
    # The rules' configs join after them (what a cut by the deadline drops first).
    decision: dict[str, Any] | None = None
    if sz.decision_seeds:
        ranked = sorted((r for r in scan if r["loss"] is not None), key=lambda r: r["loss"])
        top = [(r["batch_size"], r["lr"]) for r in ranked[: sz.decision_top]]
        members = {"card": configs["card"], **{f"scan_{i + 1}": ("completep", lr, b)
                                               for i, (b, lr) in enumerate(top)}}
        extra = {n: c for n, c in configs.items() if n != "card"}
        fresh: dict[str, list[float | None]] = {}
        for group in (members, extra):
            runner.prefetch([{"where": "target", "parametrization": p, "lr": lr, "batch": b, "seed": s,
                              **common} for p, lr, b in group.values() for s in sz.decision_seeds])
            for n, (p, lr, b) in group.items():
                fresh[n] = [target(p, lr, b, s) for s in sz.decision_seeds]
        have = [i for i, _ in enumerate(sz.decision_seeds)
                if all(fresh[n][i] is not None for n in members)]
        if len(have) >= 2:
            pick = [[fresh[n][i] for i in have] for n in members if n != "card"]
            decision = {"seeds": [sz.decision_seeds[i] for i in have], "members": {
                n: {"parametrization": p, "lr": lr, "batch_sequences": b,
                    "mean_loss": _mean([fresh[n][i] for i in have])}
                for n, (p, lr, b) in {**members, **extra}.items()}}
            decision["card"] = paired_ratio([fresh["card"][i] for i in have], pick)
            for n in extra:
                if all(fresh[n][i] is not None for i in have):
                    decision[n] = paired_ratio([fresh[n][i] for i in have], pick)
            decision["proven"] = decision["card"]["ci"][1] <= 1.005
    card_row = table["card"]
    others = [table[n].get("ratio_loss") for n in table if n != "card"]
    card_ok = card_row.get("ratio_loss") is not None and card_row["ratio_loss"] <= 1.005
    beats = card_row.get("ratio_loss") is not None and all(o is not None and card_row["ratio_loss"] < o
                                                           for o in others)
    if decision is not None:  # the decisive comparison, on fresh seeds
        card_ok = decision["proven"]
        beats = all(decision[n]["ratio"] > decision["card"]["ratio"] for n in configs
                    if n != "card" and n in decision)
    # the card's LR law at each scanned batch: eta*(B, D) moved from the proxy's optimum,
    # beside the measured optimum there (the LR error's two parts: the width/depth move at
    # the proxy's batch and budget, and the batch/budget move)
    law_lr: dict[str, Any] = {}
    for r in per_batch:
        b = r["batch_size"]
        b_law = laws.lr_batch(b * seq, T)  # as the card: the law held past the saturation batch
        ratio, r_lo, r_hi = laws.lr_ratio((opt["batch_tokens"], b_law), (opt["tokens"], T))
        law = opt["lr"] * ratio
        law_lr[str(b)] = {"lr_law": law, "lr_law_interval": [opt["lr_lo"] * r_lo, opt["lr_hi"] * r_hi],
                          "lr_measured": r["lr_opt"], "lr_measured_ci": r["lr_ci"],
                          "error_octaves": math.log2(law / r["lr_opt"])}
    split = lr_error_split(runner, sz, best_b, law_lr, common) if best_b is not None else None
    best_batch = best_b["batch_size"] if best_b else None
    noise = None
    if best is not None:
        noise = (max(best["losses"]) - min(best["losses"])) / best["loss"]
    figures = {
        "ratio_loss_card": card_row.get("ratio_loss"),
        **{f"ratio_loss_{n}": table[n].get("ratio_loss") for n in table if n != "card"},
        "ratio_lr_card": card_row.get("ratio_lr"), "ratio_batch_card": card_row.get("ratio_batch"),
        "lr_error_octaves_at_best_batch": (law_lr.get(str(best_batch)) or {}).get("error_octaves"),
        "lr_error_split_octaves": None if split is None else {
            k: split[k]["octaves"] for k in ("batch_budget", "width_depth")},
        "decision_R_card": None if decision is None else decision["card"]["ratio"],
        "decision_R_card_ci": None if decision is None else decision["card"]["ci"],
        **({f"decision_R_{n}": decision[n]["ratio"] for n in configs if n != "card" and n in decision}
           if decision else {}),
        "card_within_0.5pct": card_ok, "card_beats_every_baseline": beats,
        "best_loss_by_seed": {str(s): v["loss"] for s, v in best_by_seed.items()},
        "seed_spread_of_best": noise,
        "proxy_batch_bracketed": (px["bracketing"] or {}).get("bracketed", {}).get("batch"),
        "card_batch_source": plan.projected["batch_tokens"]["source"],
        "runs_skipped_past_deadline": runner.skipped,
        "wall_s": time.perf_counter() - t0,
    }
    trials = list(runner.trials.rows.values())
    record = {
        **record_header("card_regret"),
        "passed": bool(card_ok and beats) if card_row.get("ratio_loss") is not None else None,
        "setup": {
            "size": size, "proxy": asdict(sz), "ratios": RATIOS, "seeds": list(SEEDS),
            "proxy_parametrization": "completep (μP in width; CompleteP's depth rules, equal to μP at the "
                                     "proxy's own depth)",
            "target": {"width": W, "depth": D, "tokens": T, "seq_len": seq, "n_params": cw["n_params"],
                       "n_params_nonembed": cw["n_nonembed"]},
            "target_batches": batches, "target_scan_start": "the proxy optimum moved by sqrt(B/B_p), "
            "+-1 octave in half octaves, widened until bracketed",
            "held_fixed": {k: common[k] for k in ("weight_decay", "warmup_tokens", "decay_fraction")},
            "note": "cpu size: tiny models and budgets (see the module docstring); the ratios are the "
                    "design's, the absolute sizes are not",
        },
        "proxy": {"optimum": opt, "bracketing": px["bracketing"], "n_trials": px["n_trials"],
                  "cpu_s": px["cpu_s"], "laws": {"lr": doc["lr"]["law"], "batch": doc["batch"]["law"],
                                                 "lr_ci": doc["lr"]["ci"], "batch_ci": doc["batch"]["ci"]},
                  "sp_lr_scan": {str(k): v for k, v in sorted(sp_scan.items())}, "sp_lr_opt": sp_lr},
        "card": {"lr": plan.lr, "lr_interval": plan.projected["lr"]["interval"],
                 "batch_sequences": plan.batch_sequences, "batch_tokens": plan.batch_tokens,
                 "batch_source": plan.projected["batch_tokens"]["source"], "steps": plan.steps,
                 "weight_decay": plan.weight_decay, "warmup_tokens": plan.warmup_tokens,
                 "decay_fraction": plan.decay_fraction, "warnings": cw["card"]["projected"]["warnings"],
                 "trust": cw["card"]["trust"], "projected": plan.projected},
        "regret": table, "decision": decision, "law_lr_by_batch": law_lr, "lr_error_split": split,
        "best_by_seed": best_by_seed,
        "best_seed_mean": best, "per_batch": per_batch, "scan": scan,
        "cost": {"target_runs": sum(1 for r in trials if r["where"] == "target"),
                 "target_cpu_s": sum(r["cpu_s"] for r in trials if r["where"] == "target"),
                 "sp_proxy_cpu_s": sum(r["cpu_s"] for r in trials if r["where"] == "proxy")},
        "figures": figures,
    }
    record["card_parts"] = card_parts(record)
    if write:
        atomic_write_text(RESULTS if size == "cpu" else RESULTS.with_name(f"card_regret_{size}.json"),
                          json.dumps(record, indent=2, default=float) + "\n")
    return record


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu")
    parser.add_argument("--out", default=None, help="run dir (default runs/card_regret_SIZE)")
    parser.add_argument("--max-minutes", type=float, default=60.0,
                        help="start no new run after this many minutes (the record says what was skipped)")
    parser.add_argument("--until", choices=("scan",), default=None,
                        help="stop after the proxy sweep and the target's scan (both card-independent)")
    parser.add_argument("--workers", type=int, default=1, help="processes training the target's runs")
    a = parser.parse_args()
    res = run(a.size, a.out, a.max_minutes, until=a.until, workers=a.workers)
    print(json.dumps(res.get("figures", {"wall_s": res.get("wall_s")}), indent=2, default=float))
