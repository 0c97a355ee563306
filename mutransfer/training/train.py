"""The proxy trainer: one sweep trial is one call of :func:`train`.

``train(cfg)`` (a :class:`mutransfer.training.config.TrainConfig`, re-exported here; e.g.
``TrainConfig.from_flat({"lr": 1e-2})``) builds the proxy its ``model`` section names (a
preset with overrides, or its ``source``: a local ``hf:`` config or a ``module:function``
builder), parametrizes it (SP, μP, CompleteP or Muon; :mod:`mutransfer.parametrize.parametrization`),
trains it on step-indexed batches (:mod:`mutransfer.training.data`) with the parametrization's
param groups, a pure-function LR schedule (:mod:`mutransfer.training.schedules`) and the stabilizers
of :mod:`mutransfer.training.stabilizers`, and returns a :class:`TrainResult` whose ``to_row()`` is
one row of the results table (docs/architecture.md). See docs/trainer_contract.md.

The effective LR of every parameter at step t is ``lr × schedule(t) × lr_mult``
(:func:`mutransfer.training.optim.set_lr`). A step's data is a pure function of (seed, data step),
and everything else the run depends on is in the checkpoint, so a resumed run repeats
the uninterrupted one bit for bit on CPU. Divergence never raises: it ends the run with
``diverged=True`` and a finite worst-case loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from mutransfer.training.checkpoint import (
    save_checkpoint,
)
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import TokenDataset
from mutransfer.training.schedules import Schedule, ScheduleConfig, make_schedule
from mutransfer.training.train_result import TrainResult, write_metrics
from mutransfer.training.trainer import Callback, Trainer

__all__ = [
    "train",
    "WsdBranch",
    "train_wsd_branches",
    "wsd_branch_config",
    "wsd_stable_schedule",
    "wsd_trunk_config",
    "wsd_trunks",
]


# ---- entry points ------------------------------------------------------------------------


def train(cfg: TrainConfig, callback: Callback | None = None, progress: bool = False,
          data: TokenDataset | None = None) -> TrainResult:
    """Train one proxy run; see docs/trainer_contract.md.

    ``callback(step, metrics)`` is called after every evaluation with ``step``,
    ``val_loss``, ``train_loss``, ``tokens``, ``lr``, ``wall_s`` and ``trainer`` (the
    :class:`Trainer`, to read its history, not to change); returning True stops
    the run (``pruned=True``). Divergence ends the run with ``diverged=True`` and never
    raises. ``data`` replaces ``cfg.run.data`` with an already-open dataset.
    """
    return Trainer(cfg, callback=callback, progress=progress, data=data).run()


#: One WSD branch of :func:`wsd_trunks`: (fraction, length L, decay start D, warmup steps).
WsdBranch = tuple[float, int, int, int]


def wsd_trunks(cfg: TrainConfig, fractions: Sequence[float]) -> list[tuple[int, list[WsdBranch]]]:
    """The plan of :func:`train_wsd_branches`: its branches grouped into trunks.

    For each fraction f the branch length is L = max(1, round(f × steps)), its warmup is
    ``warmup_steps`` (None: round(0.1 × L)) and its cooldown starts at D = L −
    round(decay_fraction × L), exactly as a fresh WSD run of L steps would have them. Each
    branch's whole run, warmup included, must equal a fresh run of its length: branches with
    different warmups cannot share a trunk. Returns ``[(warmup, branches by D)]``, warmups
    ascending. Bad fractions, or a branch shorter than its warmup -> ValueError naming it.
    """
    if not fractions:
        raise ValueError("give at least one WSD branch fraction")
    for f in fractions:
        if not (isinstance(f, (int, float)) and 0 < f <= 1):
            raise ValueError(f"WSD branch fractions must be in (0, 1], got {f!r}")
    cfg = cfg.replace(schedule="wsd")
    plan: list[WsdBranch] = []
    for f in fractions:
        length = max(1, round(f * cfg.run.steps))
        sched = cfg.schedule_config(total_steps=length)
        warm = round(0.1 * length) if cfg.schedule.warmup_steps is None else cfg.schedule.warmup_steps
        if warm > length:
            raise ValueError(f"branch {f} has {length} steps, fewer than warmup_steps={warm}")
        start = make_schedule(dataclasses.replace(sched, warmup_steps=warm)).decay_start
        assert start is not None
        plan.append((f, length, start, warm))
    return [(warm, sorted((p for p in plan if p[3] == warm), key=lambda p: p[2]))
            for warm in sorted({p[3] for p in plan})]


def wsd_trunk_config(cfg: TrainConfig, warmup: int, branches: Sequence[WsdBranch]) -> TrainConfig:
    """The config a trunk of ``branches`` (one :func:`wsd_trunks` group) trains under: as
    long as its longest branch, no evaluation, checkpoint or output of its own."""
    return cfg.replace(schedule="wsd", steps=max(b[1] for b in branches), warmup_steps=warmup, eval_every=0,
                       checkpoint_every=0, out_dir=None)


def wsd_stable_schedule(warmup: int) -> Schedule:
    """A trunk's schedule: the WSD's stable phase (warmup, then constant; no cooldown)."""
    return make_schedule(ScheduleConfig(kind="constant", warmup_steps=warmup))


def wsd_branch_config(cfg: TrainConfig, warmup: int, length: int) -> TrainConfig:
    """The config of one branch: the fresh WSD run of ``length`` steps it equals (the
    ``config`` of its TrainResult)."""
    return cfg.replace(schedule="wsd", steps=length, warmup_steps=warmup)


def train_wsd_branches(cfg: TrainConfig, fractions: Sequence[float], callback: Callback | None = None,
                       progress: bool = False, data: TokenDataset | None = None) -> list[TrainResult]:
    """WSD branching: losses at several token budgets from one stable run.

    For each fraction f the branch length is L = round(f × steps) and its cooldown starts
    at D = L − round(decay_fraction × L), exactly as a fresh WSD run of L steps would have
    it (:func:`wsd_trunks`). One trunk trains at the stable LR; at each D its state is
    snapshotted (and saved as ``out_dir/wsd_stable_D.pt`` when out_dir is set), the cooldown
    to L runs, and the trunk resumes from the snapshot. Because the schedule is a pure
    function of the step and the data of (seed, step), each branch repeats the separate
    run of L steps (the same floats on CPU). Returns one TrainResult per fraction, in the
    order given. Fused over several configs: :func:`mutransfer.training.fused_wsd.train_fused_wsd_branches`.
    """
    trunks = wsd_trunks(cfg, fractions)
    cfg = cfg.replace(schedule="wsd")
    results: dict[float, TrainResult] = {}
    for warm, group in trunks:
        tcfg = wsd_trunk_config(cfg, warm, group)
        trainer = Trainer(tcfg, callback=None, progress=progress, data=data)
        stable = wsd_stable_schedule(warm)
        try:
            for k, (f, length, start, _) in enumerate(group):
                trainer.schedule, trainer.total_steps = stable, length
                trainer.callback = None
                if not trainer.run_until(start):  # the trunk diverged: so do the rest
                    for f_rest, *_ in group[k:]:
                        results[f_rest] = trainer.result()
                    break
                snap = trainer.snapshot()
                if cfg.output.out_dir:
                    save_checkpoint(Path(cfg.output.out_dir) / f"wsd_stable_{start}.pt", trainer.state_dict())
                bcfg = wsd_branch_config(cfg, warm, length)
                trainer.cfg = bcfg.replace(checkpoint_every=0, out_dir=None)
                trainer.schedule = make_schedule(bcfg.schedule_config())
                trainer.callback = callback
                trainer.run_until(length)
                if not trainer.diverged and not trainer.pruned and (
                        not trainer.evals or trainer.evals[-1][0] != trainer.step):
                    trainer._eval_and_callback()
                res = trainer.result()
                res.config = bcfg
                results[f] = res
                if cfg.output.out_dir:
                    name = f"metrics_branch_{length}.{cfg.output.metrics_format}"
                    write_metrics(res.history, Path(cfg.output.out_dir) / name, fmt=cfg.output.metrics_format)
                trainer.cfg = tcfg
                trainer.restore(snap)
                trainer.diverged = trainer.pruned = False
        finally:
            trainer.close()
    return [results[f] for f in fractions]
