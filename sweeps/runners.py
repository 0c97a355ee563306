"""Trial runners: ``run_trial(config, report) -> row``.

A runner trains one configuration and returns one results-table row (docs/architecture.md). It calls
``report(step, val_loss)`` after each evaluation; when that returns True the runner stops
early (pruning) and sets ``row["pruned"] = True``. Divergence never raises: the row has
``diverged=True`` and a finite worst-case ``loss``.

A *fused* runner ``run_trials(configs, reports) -> rows`` trains several configurations
at once (``--fuse K``); it returns one entry per config, in order: the row the unfused
runner would return, or the exception that member failed with. A runner names its fused
variant in :data:`FUSED_RUNNERS` (or by a ``fused`` attribute); :func:`fused_runner_for`
finds it.

Workers load a runner by name or import path from the registry (:data:`RUNNERS` and the
``mutransfer.runners`` entry points), so any process on any machine can run the study and
nobody who can write the study can make the workers import anything else.
:func:`train_runner` (the default) calls ``mutransfer.training.train``;
:func:`synthetic_runner` is an analytic stand-in for tests and overhead benchmarks.
"""

from __future__ import annotations

import importlib
import math
import os
import time
from collections.abc import Callable
from typing import Any

from mutransfer.training.tracking import env_spec, run_name, tracked
from sweeps.resolve import to_train_config

# mutransfer.training.train and mutransfer.training.fused are imported inside the runners that train: they
# import torch, which a worker of the synthetic runner (and the study's parent) never needs.

Report = Callable[[int, float], bool]
Runner = Callable[[dict[str, Any], Report], dict[str, Any]]
#: ``run_trials(configs, reports) -> [row | exception per config]``.
FusedRunner = Callable[[list[dict[str, Any]], list[Report]], "list[dict[str, Any] | Exception]"]

DEFAULT_RUNNER = "sweeps.runners:train_runner"
SYNTHETIC_RUNNER = "sweeps.runners:synthetic_runner"


#: Runners a study may name. A study's runner is loaded by every worker that joins it, so
#: it cannot be an arbitrary import path (whoever can write the study would pick the code
#: every worker runs): only these, and those installed packages declare under the
#: ``mutransfer.runners`` entry-point group (``name = "package.module:function"``).
RUNNERS: dict[str, str] = {
    "train": DEFAULT_RUNNER,
    "synthetic": SYNTHETIC_RUNNER,
    "synthetic-scaling": "sweeps.runners:synthetic_scaling_runner",
    "synthetic-tau": "sweeps.runners:synthetic_tau_runner",
}
ENTRY_POINT_GROUP = "mutransfer.runners"


def registered_runners() -> dict[str, str]:
    """Name -> import path of every registered runner (built-in, then entry points)."""
    out = dict(RUNNERS)
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            out.setdefault(ep.name, ep.value)
    except Exception:  # broken package metadata never hides the built-ins
        pass
    return out


def load_runner(path: str) -> Runner:
    """Import a registered runner, by name (``"synthetic"``) or by its import path
    (``"sweeps.runners:synthetic_runner"``); anything else -> ValueError naming it."""
    known = registered_runners()
    if path in known:
        path = known[path]
    elif path not in known.values():
        raise ValueError(f"runner {path!r} is not registered; choose from "
                         f"{', '.join(f'{k} ({v})' for k, v in known.items())} or register one "
                         f"under the {ENTRY_POINT_GROUP!r} entry-point group")
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"runner {path!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import runner module {module_name!r}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"runner {path!r} is not a callable")
    return fn  # type: ignore[no-any-return]


def train_runner(config: dict[str, Any], report: Report, *, progress: bool = False) -> dict[str, Any]:
    """Train ``config`` (TrainConfig fields) with ``mutransfer.training.train`` and return its row.
    With ``$MUTRANSFER_TRACK`` set (``--track``), the run is tracked (:func:`_tracking`)."""
    from mutransfer.training.train import train  # lazy: torch

    config = dict(config)
    branches = config.pop("wsd_branches", None)
    cfg = to_train_config(config)
    if branches is not None:
        return _train_wsd_row(cfg, branches, report, progress=progress, config=config)
    callback, tracker = _tracking(_train_callback(report), config, report)
    result = None
    try:
        result = train(cfg, callback=callback, progress=progress)
    finally:
        if tracker is not None:
            tracker.finish(result)
    return _train_row(result)


def _tracking(callback: Any, config: dict[str, Any], report: Report) -> tuple[Any, Any]:
    """``callback`` wrapped to log this trial to ``$MUTRANSFER_TRACK``'s tracker
    (:mod:`mutransfer.training.tracking`), and the tracker to finish; unchanged and None when unset.
    The run is named by the trial's grid point (``report.point``, set by the worker; with
    the LR added when an adaptive sampler chose it), and carries its config, point and
    trial number."""
    spec = env_spec()
    if spec is None:
        return callback, None
    point = dict(getattr(report, "point", None) or {})
    if not point:  # not from a study (the held-out audit's runs): the usual swept fields
        point = {k: config[k] for k in ("parametrization", "width", "depth", "batch_size", "steps",
                                        "seed") if config.get(k) is not None}
    if "lr" not in point and config.get("lr") is not None:
        point["lr"] = config["lr"]
    trial = getattr(report, "trial", None)
    return tracked(callback, spec, run_name(point), {**config, "point": point, "trial": trial}, trial=trial)


def _train_wsd_row(cfg: Any, fractions: Any, report: Report, *, progress: bool = False,
                   config: dict[str, Any] | None = None) -> dict[str, Any]:
    """One trial, several token budgets: WSD branches at ``fractions`` of ``cfg.steps``
    (:func:`mutransfer.training.train.train_wsd_branches`); the row is :func:`_wsd_row`'s. With
    ``config`` (the trial's), tracked as :func:`train_runner` tracks."""
    from mutransfer.training.train import train_wsd_branches  # lazy: torch

    fracs = _wsd_fractions(fractions)
    c0 = time.process_time()
    callback, tracker = (_tracking(_wsd_callback(report), {**config, "wsd_branches": fracs}, report)
                         if config is not None else (_wsd_callback(report), None))
    results = None
    try:
        results = train_wsd_branches(cfg, fracs, callback=callback, progress=progress)
    finally:
        if tracker is not None:
            tracker.finish(results or ())
    return _wsd_row(fracs, results, time.process_time() - c0)


def _wsd_fractions(fractions: Any) -> list[float]:
    """A config's ``wsd_branches`` as floats (checked in (0, 1] by the trainer)."""
    if isinstance(fractions, (str, bytes)) or not hasattr(fractions, "__iter__"):
        raise ValueError(f"wsd_branches {fractions!r} must be a list of fractions in (0, 1]")
    return [float(f) for f in fractions]


def _wsd_callback(report: Report) -> Callable[[int, dict[str, Any]], bool]:
    """The callback of a WSD trial: branches restart from the trunk, so report only steps
    past the last one reported; the study sees one increasing curve (the longest branch's
    end included)."""
    inner = _train_callback(report)
    last = [0]

    def callback(step: int, metrics: dict[str, Any]) -> bool:
        if step <= last[0]:
            return False
        last[0] = step
        return inner(step, metrics)

    return callback


def _wsd_row(fracs: list[float], results: list[Any], cpu_s: float) -> dict[str, Any]:
    """The row of a WSD trial: the longest branch's (its loss is the value told to the
    study) with ``branches``, every branch's own row (``wsd_fraction``) in the order of
    ``fracs``; the results table (:mod:`sweeps.results`) has one row per branch. ``cpu_s``:
    the CPU seconds of the whole trial (shared by its branches)."""
    rows = []
    for f, r in zip(fracs, results):
        row = _train_row(r)
        row["wsd_fraction"] = f
        row["cpu_s"] = cpu_s
        rows.append(row)
    longest = max(range(len(fracs)), key=lambda i: (fracs[i], i))
    top = dict(rows[longest])
    top["branches"] = rows
    return top


def _train_callback(report: Report) -> Callable[[int, dict[str, Any]], bool]:
    """The trainer's callback for one trial: report the held-out loss after each eval."""
    def callback(step: int, metrics: dict[str, Any]) -> bool:
        val = metrics.get("val_loss")
        if val is None:
            return False
        return bool(report(int(step), float(val)))

    return callback


def _train_row(result: Any) -> dict[str, Any]:
    """The results-table row of a TrainResult (fused or not: the same keys)."""
    row = dict(result.to_row())
    row["pruned"] = bool(getattr(result, "pruned", False))
    row.setdefault("diverged", bool(getattr(result, "diverged", False)))
    return row


def train_fused_runner(configs: list[dict[str, Any]], reports: list[Report]
                       ) -> list[dict[str, Any] | Exception]:
    """Train ``configs`` fused, one row per config (the row :func:`train_runner` returns
    for it): :func:`mutransfer.training.fused.train_fused`, and for configs with ``wsd_branches``
    :func:`mutransfer.training.fused_wsd.train_fused_wsd_branches` (configs fuse when their fusion keys
    and their branch lists agree; the row is :func:`_wsd_row`'s, with ``cpu_s`` the fused
    group's CPU seconds divided by its size, one member's share).

    The configs are partitioned by :func:`mutransfer.training.fusion.partition` (all of them in one
    group when their fusion keys agree, as the worker arranges); a config that cannot run
    fused, or is alone in its group, goes through the unfused trainer. A sub-group that
    raises fails only its own members (their entry is the exception).
    """
    from mutransfer.training.fused import train_fused  # lazy: torch
    from mutransfer.training.fused_wsd import train_fused_wsd_branches  # lazy: torch
    from mutransfer.training.fusion import partition, unsupported_reason  # lazy: torch
    from mutransfer.training.train import train  # lazy: torch

    if len(configs) != len(reports):
        raise ValueError(f"got {len(reports)} report functions for {len(configs)} configs")
    out: list[dict[str, Any] | Exception | None] = [None] * len(configs)
    trackers: dict[int, Any] = {}

    def cb(i: int, wsd: bool = False) -> Any:
        """Member i's callback, tracked as :func:`train_runner` tracks it."""
        inner = _wsd_callback(reports[i]) if wsd else _train_callback(reports[i])
        wrapped, trackers[i] = _tracking(inner, dict(configs[i]), reports[i])
        return wrapped

    def finish(i: int, result: Any) -> None:
        tracker = trackers.pop(i, None)
        if tracker is not None:
            tracker.finish(result)

    # by branch list (None: no branches): (index, TrainConfig) of each member
    by_branches: dict[tuple[float, ...] | None, list[tuple[int, Any]]] = {}
    for i, c in enumerate(configs):
        c = dict(c)
        branches = c.pop("wsd_branches", None)
        try:  # a member whose config is bad fails alone
            key = None if branches is None else tuple(_wsd_fractions(branches))
            by_branches.setdefault(key, []).append((i, to_train_config(c)))
        except Exception as exc:
            out[i] = exc
    for fracs, members in by_branches.items():
        cfgs = [cfg for _, cfg in members]
        for group in partition(cfgs, k=len(cfgs)):
            idx = [members[j][0] for j in group]
            group_cfgs = [cfgs[j] for j in group]
            try:
                if fracs is None and len(group) == 1 and unsupported_reason(group_cfgs[0]) is not None:
                    r = train(group_cfgs[0], callback=cb(idx[0]))
                    finish(idx[0], r)
                    out[idx[0]] = _train_row(r)
                elif fracs is None:
                    results = train_fused(group_cfgs, callback=[cb(i) for i in idx])
                    for i, r in zip(idx, results):
                        finish(i, r)
                        out[i] = _train_row(r)
                elif len(group) == 1:
                    member = {k: v for k, v in configs[idx[0]].items() if k != "wsd_branches"}
                    out[idx[0]] = _train_wsd_row(group_cfgs[0], list(fracs), reports[idx[0]], config=member)
                else:
                    c0 = time.process_time()
                    callbacks = [cb(i, wsd=True) for i in idx]
                    branch_results = train_fused_wsd_branches(group_cfgs, list(fracs), callback=callbacks)
                    cpu = (time.process_time() - c0) / len(group)
                    for i, res in zip(idx, branch_results):
                        finish(i, res)
                        out[i] = _wsd_row(list(fracs), res, cpu)
            except Exception as exc:
                for i in idx:
                    out[i] = exc
    for i in list(trackers):  # members that failed: close their runs
        finish(i, None)
    return [r if r is not None else RuntimeError("no result") for r in out]


def synthetic_runner(config: dict[str, Any], report: Report) -> dict[str, Any]:
    """An analytic loss surface with muP-like behaviour (no torch, microseconds per trial).

    loss = 1 + 0.05 (log2 lr - opt)^2 + 8 / sqrt(width); the optimum opt is -7 under
    mup/completep/muon and -7 - log2(width / 64) under sp; lr above opt + 4 diverges.
    ``MUTRANSFER_SYNTHETIC_SLEEP`` (seconds, default 0) is spread over the trial's steps,
    so tests can land a kill mid-trial.
    """
    t0 = time.perf_counter()
    width = int(config.get("width") or 64)
    lr = float(config.get("lr") or 1e-3)
    steps = int(config.get("steps") or 10)
    bs = int(config.get("batch_size") or 8)
    seq = int(config.get("seq_len") or 64)
    p = str(config.get("parametrization") or "mup")
    seed = int(config.get("seed") or 0)
    opt = -7.0 if p != "sp" else -7.0 - math.log2(width / 64)
    x = math.log2(lr) - opt
    final = 1.0 + 0.05 * x * x + 8.0 / math.sqrt(width) + 1e-3 * seed
    diverged = x > 4.0
    sleep = float(os.environ.get("MUTRANSFER_SYNTHETIC_SLEEP", "0") or 0)
    n_evals = min(steps, 5)
    pruned = False
    loss = final
    for i in range(1, n_evals + 1):
        if sleep:
            time.sleep(sleep / n_evals)
        step = round(i * steps / n_evals)
        loss = final + (math.log(256) - final) * (1 - i / n_evals) ** 2
        if diverged and i >= 2:
            loss = float("nan")
            break
        if report(step, loss):
            pruned = True
            break
    worst = math.log(256)
    return {
        "parametrization": p, "width": width, "depth": int(config.get("depth") or 2),
        "n_params": 12 * width * width * 2, "n_params_nonembed": 12 * width * width * 2 - 256 * width,
        "tokens": steps * bs * seq, "steps": steps, "batch_size": bs, "seq_len": seq,
        "batch_tokens": bs * seq, "lr": lr, "seed": seed,
        "loss": worst if diverged else loss, "train_loss": worst if diverged else loss,
        "gns": float("nan"), "wall_s": time.perf_counter() - t0,
        "diverged": diverged, "pruned": pruned,
    }


#: The known laws of :func:`synthetic_scaling_runner` (batch and budget in tokens):
#: eta*(B, D) = lr_coef · B^lr_exp_batch · D^lr_exp_tokens, B*(D) = batch_coef · D^batch_exp_tokens.
SYNTHETIC_LAWS: dict[str, float] = {"lr_coef": 1e-3, "lr_exp_batch": 0.5, "lr_exp_tokens": -0.1,
                                    "batch_coef": 15.0, "batch_exp_tokens": 0.4}


def synthetic_scaling_loss(lr: float, batch_tokens: float, tokens: float) -> float:
    """The analytic loss surface of :func:`synthetic_scaling_runner`:
    ``1 + 50 D^-0.3 + 0.02 log2(lr/eta*)^2 + 0.01 log2(B/B*)^2`` with the laws of
    :data:`SYNTHETIC_LAWS` (quadratic in log2 lr and log2 B, so a fit recovers them)."""
    k = SYNTHETIC_LAWS
    eta = k["lr_coef"] * batch_tokens ** k["lr_exp_batch"] * tokens ** k["lr_exp_tokens"]
    bstar = k["batch_coef"] * tokens ** k["batch_exp_tokens"]
    return (1.0 + 50.0 * tokens**-0.3 + 0.02 * math.log2(lr / eta) ** 2
            + 0.01 * math.log2(batch_tokens / bstar) ** 2)


#: The AdamW timescale at which :func:`synthetic_tau_loss` is lowest, at every budget.
SYNTHETIC_TAU = 1.0


def synthetic_tau_loss(lr: float, batch_tokens: float, tokens: float, weight_decay: float) -> float:
    """:func:`synthetic_scaling_loss` plus ``0.02 log2(tau/tau*)^2`` with the AdamW timescale
    ``tau = B/(lr·lambda·D)`` (coupled decay) and tau* = :data:`SYNTHETIC_TAU`: quadratic in
    log2 lr and log2 lambda, so the LR re-optimised per lambda gives a profile quadratic in
    log2 tau with its vertex at tau*. No weight decay: no decay term (tau infinite)."""
    base = synthetic_scaling_loss(lr, batch_tokens, tokens)
    if weight_decay <= 0:
        return base
    return base + 0.02 * math.log2(batch_tokens / (lr * weight_decay * tokens) / SYNTHETIC_TAU) ** 2


def synthetic_tau_runner(config: dict[str, Any], report: Report) -> dict[str, Any]:
    """:func:`synthetic_scaling_runner` on :func:`synthetic_tau_loss`: a stand-in for the
    trainer in tests of the scaling sweep's weight-decay axis and of the tau* fit."""
    lam = float(config.get("weight_decay") or 0.0)
    return synthetic_scaling_runner(config, report,
                                    loss_fn=lambda lr, b, d: synthetic_tau_loss(lr, b, d, lam))


def synthetic_scaling_runner(config: dict[str, Any], report: Report,
                             loss_fn: Callable[[float, float, float], float] | None = None) -> dict[str, Any]:
    """:func:`synthetic_scaling_loss` (or ``loss_fn(lr, batch_tokens, tokens)``) for a
    config, with its WSD branches (``wsd_branches``) as :func:`train_runner` gives them: a
    stand-in for the trainer in tests of the scaling sweep, its results table, its fits
    and the held-out audit (microseconds)."""
    loss_fn = loss_fn or synthetic_scaling_loss
    steps = int(config.get("steps") or 10)
    bs = int(config.get("batch_size") or 8)
    seq = int(config.get("seq_len") or 64)
    lr = float(config.get("lr") or 1e-3)
    fractions = config.get("wsd_branches") or [1.0]
    rows = []
    for f in fractions:
        n = max(1, round(float(f) * steps))
        tokens = n * bs * seq
        loss = loss_fn(lr, bs * seq, tokens)
        bstar = SYNTHETIC_LAWS["batch_coef"] * tokens ** SYNTHETIC_LAWS["batch_exp_tokens"]
        rows.append({"parametrization": str(config.get("parametrization") or "mup"),
                     "width": int(config.get("width") or 64), "depth": int(config.get("depth") or 2),
                     "n_params": 100_000, "tokens": tokens, "steps": n, "batch_size": bs, "seq_len": seq,
                     "batch_tokens": bs * seq, "lr": lr, "seed": int(config.get("seed") or 0),
                     "loss": loss, "train_loss": loss, "gns": bstar / seq, "wall_s": 0.0, "diverged": False,
                     "pruned": False, "weight_decay": float(config.get("weight_decay") or 0.0),
                     "wsd_fraction": float(f)})
    report(rows[-1]["steps"], rows[-1]["loss"])
    top = dict(rows[-1])
    if "wsd_branches" in config:
        top["branches"] = rows
    return top


def synthetic_fused_runner(configs: list[dict[str, Any]], reports: list[Report]
                           ) -> list[dict[str, Any] | Exception]:
    """:func:`synthetic_runner` over several configs, one after the other (the fused path's
    machinery without torch: tests, overhead benchmarks)."""
    out: list[dict[str, Any] | Exception] = []
    for config, report in zip(configs, reports, strict=True):
        try:
            out.append(synthetic_runner(config, report))
        except Exception as exc:
            out.append(exc)
    return out


#: A runner's fused variant (``--fuse K`` needs one).
FUSED_RUNNERS: dict[Callable[..., Any], FusedRunner] = {
    train_runner: train_fused_runner,
    synthetic_runner: synthetic_fused_runner,
}


def fused_runner_for(runner: Runner) -> FusedRunner | None:
    """The fused variant of ``runner`` (:data:`FUSED_RUNNERS`, or its ``fused``
    attribute), or None when it has none."""
    fused = FUSED_RUNNERS.get(runner)
    if fused is None:
        fused = getattr(runner, "fused", None)
    return fused if callable(fused) else None
