"""The held-out check of a scaling sweep's fit: does the fitted law predict a point it
has not seen? (Not the μP-implementation audit, :mod:`mutransfer.checks.audit`.)

For each axis, ``tokens`` and then ``batch_tokens``, :func:`analysis.holdout_audit` fits
eta*(B, D) and B*(D) on every row but those at the largest value of the axis, predicts the
optimum at the held-out point and sets it beside the measured one (ours and each textbook
baseline). Here our predicted config (:func:`heldout_point`) is then *trained* at the
held-out point with the same recipe as the sweep's runs (trainer, warmup in tokens,
held-out set size), and ``loss_gap`` (``loss / best - 1``, :func:`analysis.fill_loss_gap`)
says how much worse it is than the best config the sweep measured there.

The gap is measured on **fresh seeds**, paired: the sweep's seeds *chose* the best grid
config, so its loss on those seeds is the minimum of several noisy runs and sits below
what that config really gives (the winner's curse; on the demo's CPU proxies the spread
between neighbouring grid LRs is 0.3-2%, several times the 0.25% criterion). Both the
predicted config and the chosen best config are therefore trained again on seeds the
sweep never used (:func:`fresh_seeds`), with the same init and data order for both, and
``loss_gap`` compares their seed means; ``loss_gap_se`` is its standard error over those
seeds and ``best_loss_selection`` the chosen config's loss on the sweep's own seeds.

The result, written as ``AUDIT.json`` (``mutransfer transfer --audit``)::

    {"holdout": [row, ...],            # analysis.holdout_audit rows, loss_gap filled
     "passed": bool | None,            # ours within the criteria on every axis
     "criteria": {"lr_ratio": 1.3, "loss_gap": 0.0025},
     "runs": [{"axis", "method", "config", "best_config", "tokens", "batch_tokens",
               "predicted_batch_tokens", "loss", "losses", "best_loss", "best_losses",
               "best_loss_selection", "loss_gap_se", "seeds", "cpu_s"}, ...],
     "study": ..., "width": ..., "seq_len": ..., "seeds": [fresh seeds]}

Trained configs are cached in ``audit_runs.json`` beside ``AUDIT.json``, so re-running the
check (or the demo) trains nothing twice. Both file names, and the card's ``audit`` block
that records the result, keep their names: they are the files' and the card's contract.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import pickle
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.holdout import AUDIT_CRITERIA, audit_verdict, fill_loss_gap, holdout_audit
from analysis.scaling_fit import ScalingLawFit
from mutransfer._io import atomic_write_text, plain
from sweeps.progress import Progress
from sweeps.runners import DEFAULT_RUNNER, fused_runner_for, load_runner
from sweeps.spec_base import PSEUDO_FIELDS, model_fields, point_key
from sweeps.spec_scaling import ScalingSweep

if TYPE_CHECKING:
    import pandas as pd


AXES: tuple[str, ...] = ("tokens", "batch_tokens")
OURS = "ours"
#: Fresh seeds per axis: two give the gap a standard error.
FRESH_SEEDS = 2


def fit_rows(table: pd.DataFrame, spec: ScalingSweep) -> pd.DataFrame:
    """The rows the held-out check fits: the base width's finished rows (the wider check is not
    part of the fit; it checks the transfer of the fitted optimum across width)."""
    df = table
    if "width" in df.columns and spec.width is not None:
        df = df[df["width"] == spec.width]
    if "state" in df.columns:
        df = df[df["state"] == "COMPLETE"]
    if df.empty:
        raise ValueError("the scaling sweep has no finished rows at its base width to check")
    return df.reset_index(drop=True)


def heldout_point(rows: pd.DataFrame, axis: str, row: Mapping[str, Any],
                  fit_kwargs: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The config ours predicts at the held-out point: ``{"tokens", "batch_tokens", "lr"}``.

    ``tokens`` axis: the largest budget D_h, the batch B*(D_h) of the law fitted without
    D_h, and its eta*(B*, D_h) -- the whole prediction, both laws at once (the row's
    ``pred_lr`` is eta* at the measured best batch, to isolate the LR law; the run uses
    the predicted batch). ``batch_tokens`` axis: the largest batch B_h at the largest
    budget, with the row's ``pred_lr`` = eta*(B_h, D_max) of the law fitted without B_h.
    """
    if axis not in AXES:
        raise ValueError(f"held-out axis {axis!r} must be one of {', '.join(AXES)}")
    d_max = float(rows["tokens"].max())
    if axis == "batch_tokens":
        return {"tokens": d_max, "batch_tokens": float(rows["batch_tokens"].max()),
                "lr": float(row["pred_lr"])}

    train = rows[rows["tokens"] < d_max]
    fit = ScalingLawFit(n_boot=0).fit(train, **dict(fit_kwargs or {}))
    batch = float(fit.predict_batch(d_max)[0])
    return {"tokens": d_max, "batch_tokens": batch, "lr": float(fit.predict_lr(batch, d_max)[0])}


def best_measured_config(rows: pd.DataFrame, axis: str, point: Mapping[str, float]) -> dict[str, float]:
    """The measured config with the lowest seed-mean loss at the held-out point (for
    ``tokens``: every batch at the largest budget; for ``batch_tokens``: the largest batch
    at the largest budget): ``{"batch_tokens", "lr", "loss"}``."""
    ok = rows[~rows["diverged"].astype(bool)] if "diverged" in rows.columns else rows
    at = ok[_close(ok["tokens"], point["tokens"])]
    if axis == "batch_tokens":
        at = at[_close(at["batch_tokens"], point["batch_tokens"])]
    if at.empty:
        raise ValueError(f"no finished run at the held-out point {dict(point)}")
    mean = at.groupby(["batch_tokens", "lr"])["loss"].mean()
    (batch, lr), loss = mean.idxmin(), mean.min()
    return {"batch_tokens": float(batch), "lr": float(lr), "loss": float(loss)}


def fresh_seeds(spec: ScalingSweep, n: int = FRESH_SEEDS) -> tuple[int, ...]:
    """``n`` seeds the sweep never trained: the ones after its largest."""
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"fresh seeds {n!r} must be an integer >= 1")
    top = max(int(s) for s in spec.seeds)
    return tuple(range(top + 1, top + 1 + n))


def _close(col: Any, value: float, rtol: float = 0.02) -> Any:
    return (col.astype(float) - value).abs() <= rtol * abs(value)


def predicted_config(spec: ScalingSweep, lr: float, batch_tokens: float, tokens: float,
                     seed: int, device: str | None = None) -> dict[str, Any]:
    """The TrainConfig overrides of the predicted config: the sweep's recipe (base,
    warmup in tokens, held-out set size) at ``lr``, the batch rounded to whole
    sequences (accumulated as the sweep does that batch: :meth:`ScalingSweep.grad_accum_for`)
    and ``tokens`` rounded to whole steps."""
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"predicted LR {lr!r} must be a positive finite number")
    if not (batch_tokens > 0 and math.isfinite(batch_tokens)):
        raise ValueError(f"predicted batch {batch_tokens!r} tokens must be positive and finite")
    seq = spec.seq_len()
    b = max(1, round(batch_tokens / seq))
    steps = round(tokens / (b * seq))
    if steps < 1:
        raise ValueError(f"token budget {tokens:.0f} is below one batch of {b} x {seq} tokens")
    cfg: dict[str, Any] = {**model_fields(spec),
                           **{k: v for k, v in spec.base.items() if k not in PSEUDO_FIELDS}}
    if spec.width is not None:
        cfg["width"] = spec.width
    cfg.update(parametrization=spec.parametrization, lr=float(lr), batch_size=b, steps=steps,
               seed=int(seed), warmup_steps=min(spec.warmup_steps(b), steps),
               grad_accum=spec.grad_accum_for(b),
               eval_sequences=spec.eval_sequences)
    if device is not None:
        cfg["device"] = device
    return cfg


def _load_cache(path: Path | None) -> dict[str, Any]:
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def check_holdout(spec: ScalingSweep) -> None:
    """Before the first trial: the held-out check refits without the largest budget and
    without the largest batch, so each axis needs 4 distinct values (3 to fit, 1 held out).
    One ValueError naming the flag, instead of one after the whole sweep has trained."""
    for flag, values in (("--tokens", spec.tokens), ("--batch-sizes", spec.batch_sizes)):
        if len(set(values)) < 4:
            raise ValueError(f"--holdout needs at least 4 distinct {flag} (3 to fit, 1 held out), got "
                             f"{','.join(str(v) for v in sorted(set(values)))}")


def run_holdout(
    spec: ScalingSweep,
    table: pd.DataFrame,
    *,
    out: str | Path | None = None,
    device: str | None = None,
    runner: Callable[..., dict[str, Any]] | str | None = None,
    quiet: bool = True,
    fit_kwargs: Mapping[str, Any] | None = None,
    n_seeds: int = FRESH_SEEDS,
    workers: int = 1,
) -> dict[str, Any]:
    """Check the fit of ``table`` (the sweep's results table) on both axes; returns the AUDIT dict
    (and writes it to ``out`` when given). At each held-out point ours and the best measured
    config are trained on ``n_seeds`` fresh seeds (:func:`fresh_seeds`), fused into batched
    runs where the runner has a fused variant and shared among ``workers`` processes where
    the runner pickles (a runner path, or a module-level function). The baselines'
    held-out errors are their LR and batch ratios (their ``loss_gap`` stays None: training
    each of them would cost five more runs per axis)."""

    fn = load_runner(runner or DEFAULT_RUNNER) if not callable(runner) else runner
    rows = fit_rows(table, spec)
    out_path = Path(out) if out is not None else None
    cache_path = out_path.with_name("audit_runs.json") if out_path is not None else None
    cache = _load_cache(cache_path)
    seeds = fresh_seeds(spec, n_seeds)
    seq = spec.seq_len()
    plans = []
    for axis in AXES:
        audited = holdout_audit(rows, axis=axis, fit_kwargs=fit_kwargs)
        ours = next((r for r in audited if r.get("method") == OURS), None)
        if ours is None:
            raise ValueError(f"the held-out {axis} check has no row for our fit")
        point = heldout_point(rows, axis, ours, fit_kwargs)
        best = best_measured_config(rows, axis, point)
        pred_cfgs = [predicted_config(spec, point["lr"], point["batch_tokens"], point["tokens"], s, device)
                     for s in seeds]
        best_cfgs = [predicted_config(spec, best["lr"], best["batch_tokens"], point["tokens"], s, device)
                     for s in seeds]
        plans.append((axis, audited, point, best, pred_cfgs, best_cfgs))
    by_axis = {axis: [*p, *b] for axis, _, _, _, p, b in plans}
    _train_missing(by_axis, fn, cache, cache_path, seq, quiet, workers)
    table_rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for axis, audited, point, best, pred_cfgs, best_cfgs in plans:
        pred_l = [float(cache[point_key(c)]["loss"]) for c in pred_cfgs]
        best_l = [float(cache[point_key(c)]["loss"]) for c in best_cfgs]
        loss, best_loss = sum(pred_l) / len(seeds), sum(best_l) / len(seeds)
        gaps = [p / b - 1.0 for p, b in zip(pred_l, best_l)]
        se = statistics.stdev(gaps) / math.sqrt(len(gaps)) if len(gaps) > 1 else None
        filled = fill_loss_gap(audited, {OURS: loss}, best_loss)
        for r in filled:
            if r.get("method") == OURS:
                r["loss_gap_se"] = se
        table_rows += filled
        shown = ("lr", "batch_size", "steps", "width", "warmup_steps")
        config, bcfg = pred_cfgs[-1], best_cfgs[-1]
        runs.append({"axis": axis, "method": OURS,
                     "config": {k: config[k] for k in shown if k in config},
                     "best_config": {k: bcfg[k] for k in shown if k in bcfg},
                     "tokens": config["steps"] * config["batch_size"] * seq,
                     "batch_tokens": config["batch_size"] * seq,
                     "predicted_batch_tokens": point["batch_tokens"],
                     "loss": loss, "losses": pred_l, "best_loss": best_loss, "best_losses": best_l,
                     "best_loss_selection": best["loss"], "loss_gap_se": se, "seeds": list(seeds),
                     "cpu_s": sum(float(cache[point_key(c)].get("cpu_s", 0.0)) for c in pred_cfgs)})
    result = {"holdout": [plain(r, nonfinite_to_none=True) for r in table_rows],
             "passed": audit_verdict(table_rows), "criteria": dict(AUDIT_CRITERIA),
             "runs": plain(runs, nonfinite_to_none=True), "study": spec.study_name(),
             "width": spec.width, "seq_len": seq, "seeds": list(seeds)}
    if out_path is not None:
        atomic_write_text(out_path, json.dumps(result, indent=2) + "\n")
    return result


def _train_missing(by_axis: Mapping[str, Sequence[dict[str, Any]]], fn: Callable[..., dict[str, Any]],
                   cache: dict[str, Any], cache_path: Path | None, seq: int, quiet: bool,
                   workers: int) -> None:
    """Train every config not in ``cache`` and cache its loss (``audit_runs.json`` written at
    once). With ``workers`` > 1 and a runner that pickles, each axis's configs are cut into
    ``workers`` jobs, run in spawned processes longest first (by steps), so the cores share
    the expensive axis; else one job per axis, one after another. A job is one fused run
    when ``fn`` has a fused variant (its configs share a shape)."""
    todo: dict[str, tuple[str, dict[str, Any]]] = {}
    for axis, configs in by_axis.items():
        for c in configs:
            key = point_key(c)
            if key not in cache and key not in todo:
                todo[key] = (axis, dict(c))
    if not todo:
        return
    if not quiet:
        for axis, c in todo.values():
            print(f"held-out {axis}: training lr={c['lr']:.4g} batch={c['batch_size']}x{seq} "
                  f"steps={c['steps']} seed={c['seed']}", flush=True)
    parallel = workers > 1 and _picklable(fn)
    jobs: list[list[str]] = []
    for axis in by_axis:
        keys = [k for k, (a, _) in todo.items() if a == axis]
        n = min(len(keys), workers) if parallel else 1
        jobs += [keys[i::n] for i in range(n) if keys[i::n]]
    jobs.sort(key=lambda ks: -sum(int(todo[k][1].get("steps") or 0) for k in ks))
    with Progress(len(todo), "held-out audit", unit="run", quiet=quiet) as bar:
        def finished(got: list[Any]) -> None:
            losses = [float(r["loss"]) for r in got if isinstance(r, dict) and not r.get("diverged")
                      and isinstance(r.get("loss"), (int, float))]
            bar.set(done=bar.done + len(got), best=min(losses) if losses else None)

        if parallel and len(jobs) > 1:
            ctx = mp.get_context("spawn")  # a fresh interpreter: no forked torch threads
            with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
                futs = [pool.submit(_train_job, fn, [todo[k][1] for k in ks]) for ks in jobs]
                for f in as_completed(futs):
                    finished(f.result()[0])
                done = [f.result() for f in futs]
        else:
            done = []
            for ks in jobs:
                done.append(_train_job(fn, [todo[k][1] for k in ks]))
                finished(done[-1][0])
    for ks, (got, cpu) in zip(jobs, done):
        for key, row in zip(ks, got):
            axis, c = todo[key]
            if isinstance(row, Exception):
                raise ValueError(f"a held-out {axis} run failed (lr {c['lr']:.4g}, batch "
                                 f"{c['batch_size']}): {row}") from row
            loss = float(row["loss"])
            if bool(row.get("diverged")) or not math.isfinite(loss):
                raise ValueError(f"a held-out {axis} run diverged (lr {c['lr']:.4g}, "
                                 f"batch {c['batch_size']})")
            cache[key] = {"loss": loss, "gns": plain(row.get("gns"), nonfinite_to_none=True),
                          "cpu_s": cpu / len(ks)}
    if cache_path is not None:
        atomic_write_text(cache_path, json.dumps(cache, indent=1, sort_keys=True) + "\n")


def _train_job(fn: Callable[..., dict[str, Any]], configs: list[dict[str, Any]]) -> tuple[list[Any], float]:
    """Rows of ``configs`` (one fused run when ``fn`` has a fused variant) and their CPU seconds."""
    c0 = time.process_time()
    fused = fused_runner_for(fn) if len(configs) > 1 else None
    if fused is not None:
        got = list(fused(configs, [_no_report] * len(configs)))
    else:
        got = [fn(c, _no_report) for c in configs]
    return got, time.process_time() - c0


def _no_report(step: int, value: float) -> bool:
    return False


def _picklable(fn: Any) -> bool:
    try:
        pickle.dumps(fn)
    except Exception:
        return False
    return True


def holdout_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """Ours per axis of a :func:`run_holdout` result: ``{axis: {lr_ratio, batch_ratio,
    loss_gap, loss_gap_se}}`` and ``passed``."""
    out: dict[str, Any] = {"passed": result.get("passed")}
    for r in result.get("holdout", []):
        if r.get("method") == OURS:
            out[str(r.get("axis"))] = {k: r.get(k) for k in ("lr_ratio", "batch_ratio", "loss_gap",
                                                              "loss_gap_se")}
    return out
