"""WSD branching of a fused group: :func:`mutransfer.training.train.train_wsd_branches` for K trials
at once, each trained as one member of a :class:`mutransfer.training.fused.FusedGroup`.

A scaling sweep trains each (LR, batch) trial as one stable trunk with a cooldown branch at
every token budget. Trials that differ only in per-member fields (LR, seed, weight decay,
...) share the trunk's step count, batch and model shape, so their trunks can run fused:
the group follows the unfused plan (:func:`mutransfer.training.train.wsd_trunks`) step for step.

- the trunk runs every member at its stable schedule (warmup, then constant);
- at a branch's decay start each member's Trainer is snapshotted
  (:meth:`Trainer.snapshot` copies its rows out of the stack), every member cools down on
  its own branch schedule, is evaluated, and its branch result recorded;
- every member is restored from its snapshot (:meth:`Trainer.restore` writes into its rows
  of the stack) and the members that left the stack during the cooldown, diverged or
  pruned, come back (:meth:`FusedGroup.readmit`) with their flags reset, as the unfused
  trunk continues after a branch whatever the branch did;
- a member that diverges in the trunk gets that diverged result for its remaining
  branches of the trunk (as unfused).

Members whose plans differ (another ``warmup_steps`` or ``decay_fraction``) train in
separate fused groups. Each member's branch results equal its unfused
``train_wsd_branches`` run: the same floats on CPU in our tests
(tests/mutransfer/training/test_fused_wsd.py), float tolerance on CUDA (see :mod:`mutransfer.training.fused`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mutransfer.training.checkpoint import save_checkpoint
from mutransfer.training.config import TrainConfig
from mutransfer.training.data import TokenDataset
from mutransfer.training.fused import FusedCallback, FusedGroup, member_callbacks, open_data
from mutransfer.training.fusion import check_fusible
from mutransfer.training.schedules import make_schedule
from mutransfer.training.train import (
    WsdBranch,
    wsd_branch_config,
    wsd_stable_schedule,
    wsd_trunk_config,
    wsd_trunks,
)
from mutransfer.training.train_result import TrainResult, write_metrics
from mutransfer.training.trainer import Callback

__all__ = ["train_fused_wsd_branches"]


def train_fused_wsd_branches(
    configs: Sequence[TrainConfig],
    fractions: Sequence[float],
    *,
    callback: FusedCallback | Sequence[Callback | None] | None = None,
    data: TokenDataset | None = None,
) -> list[list[TrainResult]]:
    """:func:`mutransfer.training.train.train_wsd_branches` of every config, fused: per config one
    TrainResult per fraction, in the order of ``fractions``, equal to its unfused run.

    Args:
        configs: fusible trials (:func:`mutransfer.training.fusion.check_fusible`: ValueError names
            the first field that differs); all of them in one group per plan (configs with
            other warmups or decay fractions form their own groups).
        fractions: the branches' fractions of ``steps``, each in (0, 1] (ValueError else).
        callback: as for :func:`mutransfer.training.fused.train_fused`; called after every
            evaluation of a branch (never in a trunk), True prunes that member's branch.
        data: an open dataset to use instead of loading ``configs[0].data``.
    """
    configs = [c.replace(schedule="wsd") for c in configs]
    check_fusible(configs)
    callbacks = member_callbacks(callback, len(configs))
    plans = [wsd_trunks(c, fractions) for c in configs]
    data = data if data is not None else open_data(configs[0])
    results: list[dict[float, TrainResult]] = [{} for _ in configs]
    by_plan: dict[tuple[tuple[int, tuple[WsdBranch, ...]], ...], list[int]] = {}
    for i, plan in enumerate(plans):
        by_plan.setdefault(tuple((warm, tuple(b)) for warm, b in plan), []).append(i)
    for idx in by_plan.values():
        for warm, branches in plans[idx[0]]:
            out = _fused_trunk([configs[i] for i in idx], warm, branches, [callbacks[i] for i in idx], data)
            for i, res in zip(idx, out):
                results[i].update(res)
    return [[r[f] for f in fractions] for r in results]


def _fused_trunk(configs: list[TrainConfig], warm: int, branches: list[WsdBranch],
                 callbacks: list[Callback | None], data: TokenDataset) -> list[dict[float, TrainResult]]:
    """One trunk of the plan (branches sorted by decay start) for every config as one fused
    group; per config its branches' results by fraction. The loop body is
    :func:`mutransfer.training.train.train_wsd_branches`'s, member by member."""
    tcfgs = [wsd_trunk_config(c, warm, branches) for c in configs]
    group = FusedGroup(tcfgs, data=data)
    stable = wsd_stable_schedule(warm)
    results: list[dict[float, TrainResult]] = [{} for _ in configs]
    trunk = list(group.members)  # members still on the trunk (not diverged in it)
    try:
        for k, (f, length, start, _) in enumerate(branches):
            for m in trunk:
                m.trainer.schedule, m.trainer.total_steps, m.trainer.callback = stable, length, None
            group.run_until(start)
            for m in trunk:
                if m not in group.alive:  # diverged in the trunk: so do its remaining branches
                    for f_rest, *_ in branches[k:]:
                        results[m.index][f_rest] = m.trainer.result()
            trunk = list(group.alive)
            if not trunk:
                break
            snaps = [m.trainer.snapshot() for m in trunk]
            bcfgs = [wsd_branch_config(configs[m.index], warm, length) for m in trunk]
            for m, snap, bcfg in zip(trunk, snaps, bcfgs):
                out_dir = bcfg.output.out_dir
                if out_dir:
                    state = {**m.trainer.state_dict(), "model": snap["model"]}  # rows, not the stack
                    save_checkpoint(Path(out_dir) / f"wsd_stable_{start}.pt", state)
                m.trainer.cfg = bcfg.replace(checkpoint_every=0, out_dir=None)
                m.trainer.schedule = make_schedule(bcfg.schedule_config())
                m.trainer.callback = callbacks[m.index]
            group.run_until(length)
            # the unfused loop evaluates the branch's end when no evaluation landed on it
            # (outside its denormal-flushing loop; so here)
            due = [j for j, m in enumerate(group.alive)
                   if not m.trainer.evals or m.trainer.evals[-1][0] != m.trainer.step]
            if due:
                vals = group.evaluate()
                for j in due:
                    group.alive[j].trainer.record_eval(vals[j])
            for m, snap, bcfg in zip(trunk, snaps, bcfgs):
                res = m.trainer.result()
                res.config = bcfg
                results[m.index][f] = res
                out_dir, fmt = bcfg.output.out_dir, bcfg.output.metrics_format
                if out_dir:
                    write_metrics(res.history, Path(out_dir) / f"metrics_branch_{length}.{fmt}", fmt=fmt)
                m.trainer.cfg = tcfgs[m.index]
                m.trainer.restore(snap)
                m.trainer.diverged = m.trainer.pruned = False
            group.readmit(trunk)
    finally:
        for m in group.members:
            m.trainer.close()
    return results
