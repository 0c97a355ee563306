"""Create or resume a sweep study, enqueue its grid, and run workers with one progress bar.

Resume is by construction: every grid point is enqueued as a WAITING trial with its
parameters fixed and a ``point_key`` user attr. Re-running the same command enqueues only
the points that have no COMPLETE/PRUNED/RUNNING/WAITING trial yet (failed ones are tried
again); a finished grid point is never repeated. Grid order is the spec's (deterministic).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mutransfer._io import atomic_write_text
from mutransfer.training.device import resolve_device
from sweeps import attrs
from sweeps.attrs import STUDY_ATTR
from sweeps.fusion import Fuse, check_fuse, check_spec_fusible
from sweeps.objective import dim_distribution
from sweeps.progress import Counts, StudyBar, study_counts
from sweeps.recovery import RequeueCallback, sweep_stale
from sweeps.resolve import check_trials
from sweeps.runners import DEFAULT_RUNNER, Runner, load_runner
from sweeps.spec import spec_from_dict
from sweeps.spec_base import SweepSpec, point_key, trusted
from sweeps.storage import Storage, study_names
from sweeps.worker import SweepSettings, open_study, spawn_workers, user_code_error, work

if TYPE_CHECKING:
    from sweeps.lifecycle import SweepStudy

# spec fields that may change between runs of one study (they only add or drop points)
_GROWABLE = {"widths", "depths", "parametrizations", "seeds", "lrs", "batch_sizes", "tokens",
             "weight_decays", "grid", "trials", "name", "log2_lr_min", "log2_lr_max", "log2_lr_step"}


@dataclass(frozen=True)
class Plan:
    storage: Storage
    """Where the study lives (the same object the caller passed or resolved)."""
    study_name: str
    total: int
    """Trials the spec asks for (points x trials per point)."""
    finished: int
    """Of those, already finished (complete or pruned) before this run."""
    enqueued: int
    """Trials enqueued by this call."""


def _check_compatible(old: dict[str, Any], new: SweepSettings, name: str) -> None:
    o, n = dict(old["spec"]), new.spec.to_dict()
    diff = sorted(k for k in set(o) | set(n) if k not in _GROWABLE and o.get(k) != n.get(k))
    if old.get("runner") != new.runner:
        diff.append("runner")
    from optuna.distributions import CategoricalDistribution

    with trusted():
        old_dims = dict(spec_from_dict(o).grid_dims())
    for dim, values in new.spec.grid_dims():
        if dim in old_dims:
            a, b = dim_distribution(dim, old_dims[dim]), dim_distribution(dim, values)
            if isinstance(a, CategoricalDistribution) and a != b:
                raise ValueError(f"study {name!r} cannot change the values of {dim} "
                                 f"({list(old_dims[dim])} -> {list(values)}); pass --study NEW_NAME")
    if diff:
        details = "; ".join(f"{k}: {o.get(k)!r} -> {n.get(k)!r}" for k in diff if k != "runner")
        raise ValueError(f"study {name!r} already exists with a different spec ({details or 'runner'}); "
                         "pass --study NEW_NAME or use another --out")


def prepare(
    spec: SweepSpec,
    storage: Storage | str,
    *,
    study_name: str | None = None,
    runner: str = DEFAULT_RUNNER,
    heartbeat_interval: int = 10,
    grace_period: int = 60,
    max_retries: int = 3,
    workers: int = 1,
    fuse: Fuse | str = None,
) -> Plan:
    """Create (or load) the study and enqueue the grid points it still needs. ``fuse`` is
    stored as the default for workers that join without one (:mod:`sweeps.fusion`).

    Creating the study and enqueuing its grid are one step under the storage's lock
    (:meth:`sweeps.storage.Storage.lock`): launches of the same sweep started at once join
    one study, and each grid point is enqueued once, whichever launch gets there first.

    Everything is checked before the storage is touched: the runner is registered, and the
    resolved trial config of every grid point is valid (:func:`sweeps.spec.check_trials`);
    bad input -> ValueError naming it, and no study is created."""
    import optuna
    from optuna.trial import TrialState

    from sweeps.lifecycle import SweepStudy  # subclasses optuna.Study: imports optuna

    storage = Storage.resolve(storage)
    fuse = check_fuse(fuse)
    check_spec_fusible(spec, fuse)
    storage.check_workers(workers)
    if heartbeat_interval < 1 or grace_period <= heartbeat_interval:
        raise ValueError(f"grace period {grace_period} s must exceed the heartbeat interval "
                         f"{heartbeat_interval} s (>= 1)")
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    load_runner(runner)
    check_trials(spec)
    settings = SweepSettings(spec=spec, runner=runner, heartbeat_interval=heartbeat_interval,
                             grace_period=grace_period, max_retries=max_retries, fuse=fuse)
    name = study_name or spec.study_name()
    if re.search(r"[\x00-\x1f\x7f]", name) or not name.strip():
        # a job script, a log line and `ps` show it: one line, printable
        raise ValueError(f"study name {name!r} must be printable text without newlines or control "
                         "characters")
    # Create-or-join and enqueue under the storage's lock: a second launch started at the
    # same time waits, then finds every point alive and enqueues none (exactly once).
    with storage.lock(name):
        opened = storage.open(heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                              stale_callback=RequeueCallback(max_retries))
        if name in study_names(opened):
            existing = opened.get_study_user_attrs(opened.get_study_id_from_name(name))
            if STUDY_ATTR not in existing:
                raise ValueError(f"study {name!r} exists in the storage but was not created by "
                                 "mutransfer sweep")
            _check_compatible(existing[STUDY_ATTR], settings, name)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        optuna.create_study(study_name=name, storage=opened, direction="minimize", load_if_exists=True)
        study = SweepStudy(name, storage)
        study.set_user_attr(STUDY_ATTR, settings.to_attr())
        sweep_stale(study, grace_period=grace_period, max_retries=max_retries)
        alive = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
        have: Counter[str] = Counter()
        finished: Counter[str] = Counter()
        for t in study.get_trials(deepcopy=False, states=alive):
            key = t.user_attrs.get(attrs.POINT_KEY)
            have[key] += 1
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
                finished[key] += 1
        per = spec.trials_per_point()
        points = spec.points()
        enqueued = 0
        n_finished = 0
        group_keys = spec.group_keys()
        for point in points:
            key = point_key(point)
            n_finished += min(per, finished[key])
            group = {k: point[k] for k in group_keys if k in point}
            for _ in range(per - have[key]):
                study.enqueue_trial(point, user_attrs={attrs.POINT: point, attrs.POINT_KEY: key,
                                                       attrs.GROUP: group})
                enqueued += 1
    return Plan(storage=storage, study_name=name, total=per * len(points),
                finished=n_finished, enqueued=enqueued)


@dataclass(frozen=True)
class SweepResult:
    plan: Plan
    counts: Counts
    workers: int
    wall_s: float
    worker_exit_codes: tuple[int, ...] = ()
    user_error: str | None = None
    """A failure of the user's code (a model builder) recorded by a failed trial: it fails
    every trial alike, so the workers stopped at it (:func:`sweeps.worker.user_code_error`)."""

    @property
    def complete(self) -> bool:
        return self.counts.pending == 0 and self.counts.done >= self.plan.total


def trainer_device(name: str = "auto") -> str | None:
    """The device a sweep lays its workers out for, from the device its trials name (the
    spec's ``device``, ``--set device=...`` or ``--device``): ``cuda`` for every CUDA
    spelling (``cuda``, ``cuda:N``) and for ``auto`` where it finds a GPU, so the sweep
    starts one worker per GPU, each pinned to its own (where it is ``cuda:0``: an index
    names the kind, not the card; ``CUDA_VISIBLE_DEVICES`` picks the cards), instead of
    one per CPU core all landing on GPU 0; None for anything else (CPU workers)."""
    if name == "auto":
        return "cuda" if resolve_device("auto").type == "cuda" else None
    return "cuda" if str(name).strip().split(":")[0].lower() == "cuda" else None


def worker_layout(spec: SweepSpec, device: str | None, workers: int | None, pending: int
                  ) -> tuple[str | None, int, list[str] | None]:
    """(device every trial trains on, worker count, GPU each worker is pinned to in turn)
    for a sweep: ``device`` (``--device``) or else the spec's own (:func:`trainer_device`),
    ``workers`` or :func:`default_workers` (one per GPU, or per core). ``--workers`` above
    the GPU count puts several workers on each GPU, round robin."""
    asked = device if device is not None else str(spec.base.get("device", "auto"))
    device = trainer_device(asked) or device
    n = workers or default_workers(device or "cpu", max(1, pending))
    gpus = _visible_gpus() if (device or "cpu").startswith("cuda") else None
    return device, n, gpus


def default_workers(device: str, pending: int) -> int:
    """CPU: one single-threaded worker per core; CUDA: one per GPU. Never more than the work."""
    if device.startswith("cuda"):
        try:
            import torch

            n = max(1, torch.cuda.device_count())
        except ImportError:
            n = 1
    else:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(n, pending))


def run_sweep(
    spec: SweepSpec,
    *,
    out: str | os.PathLike[str] | None = None,
    storage: Storage | str | None = None,
    study_name: str | None = None,
    workers: int | None = 1,
    device: str | None = None,
    runner: str | Runner | None = None,
    quiet: bool = True,
    heartbeat_interval: int = 10,
    grace_period: int = 60,
    max_retries: int = 3,
    poll_s: float = 1.0,
    fuse: Fuse | str = None,
) -> SweepResult:
    """Run (or resume) a sweep to the end: prepare the study, then run ``workers`` workers.

    ``storage``: a :class:`Storage`, or a ``--storage`` value resolved once here (None: the
    journal file in ``out``); every step of this process uses its one Optuna storage.

    ``workers == 1`` runs in this process (``runner`` may then be a callable); more start
    OS processes (``mutransfer sweep worker``) that share the storage, and ``runner`` must
    be an import path. ``device`` (cpu | cuda | ...) goes into every trial's config.
    ``fuse``: each worker trains up to K fusible trials as one batched model (an integer
    >= 1, or ``"auto"`` for :func:`mutransfer.training.fusion.choose_k`); None or 1: unfused.
    Results are the same either way (to float tolerance), only faster on small proxies.
    """
    t0 = time.perf_counter()
    fuse = check_fuse(fuse)
    where = Storage.resolve(storage, out)
    if callable(runner) and (workers or 2) > 1:
        raise ValueError("a runner given as a function needs --workers 1; pass an import path "
                         "('module:function') for several workers")
    runner_path = runner if isinstance(runner, str) else DEFAULT_RUNNER
    if not callable(runner):
        device = trainer_device(device if device is not None else str(spec.base.get("device", "auto"))) or device
    if device is not None:
        base = dict(spec.base)
        base["device"] = device
        spec = dataclasses.replace(spec, base=base)
    plan = prepare(spec, where, study_name=study_name, runner=runner_path,
                   heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                   max_retries=max_retries, workers=workers or 1, fuse=fuse)
    if out is not None:
        _write_spec(Path(out), spec)
    study, _ = open_study(where, plan.study_name)
    counts = study_counts(study)
    if workers is None and where.kind == "sqlite":
        workers = 1  # SQLite serializes writers: one worker (prepare checked a given number)
    device, n, gpus = worker_layout(spec, device, workers, counts.pending)
    # the study's trials, done or to do (a grown grid's earlier points count as done)
    total = max(plan.total, counts.done + counts.pending)
    bar = StudyBar(total, desc=f"sweep {plan.study_name}", quiet=quiet,
                   initial=min(counts.done, total), poll=lambda: study_counts(study))
    codes: list[int] = []
    try:
        if n == 1:
            def tick() -> None:
                bar.update(study_counts(study))

            work(where, plan.study_name, runner=runner if callable(runner) else None,
                 progress=not quiet and sys.stderr.isatty(), on_trial=tick, fuse=fuse or 1)
        else:
            procs = spawn_workers(where, plan.study_name, n, device=device or "cpu", gpus=gpus,
                                  log_dir=Path(out) / "logs" if out is not None else None,
                                  fuse=fuse or 1)
            try:
                _supervise(study, procs, bar, grace_period=grace_period, max_retries=max_retries,
                           poll_s=poll_s)
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
                for p in procs:
                    try:
                        codes.append(p.wait(timeout=30))
                    except Exception:
                        p.kill()
                        codes.append(p.wait())
        counts = study_counts(study)
        bar.update(counts)
    finally:
        bar.close()
    from optuna.trial import TrialState

    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,)) if counts.failed else []
    return SweepResult(plan=plan, counts=counts, workers=n, wall_s=time.perf_counter() - t0,
                       worker_exit_codes=tuple(codes), user_error=user_code_error(failed))


def _supervise(study: SweepStudy, procs: list[Any], bar: StudyBar, *, grace_period: int,
               max_retries: int, poll_s: float) -> None:
    """Poll the storage for the bar and fail+requeue trials of dead workers (a journal's:
    an RDB's heartbeat is swept by the workers, through Optuna)."""
    while any(p.poll() is None for p in procs):
        try:
            if study.location.journal:
                sweep_stale(study, grace_period=grace_period, max_retries=max_retries)
            bar.update(study_counts(study))
        except Exception:  # the bar never kills a sweep
            pass
        time.sleep(poll_s)


def _visible_gpus() -> list[str]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        return [g for g in env.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def _write_spec(out: Path, spec: SweepSpec) -> None:
    import yaml

    atomic_write_text(out / "sweep.yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False))
