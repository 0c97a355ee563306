"""Workers: processes that take WAITING trials from a study until none is left.

A worker needs only the storage URL and the study name: the spec, the runner and the
recovery settings live in the study's user attrs (written by :func:`sweeps.study.prepare`).
So ``mutransfer sweep worker --study lr`` (the storage URL in ``$MUTRANSFER_STORAGE`` or
``--storage-file``) joins a study from any machine; spawned workers run :func:`main`
(``python -m sweeps``), the same :func:`work` without the CLI above this package.

Loop: sweep stale trials (dead workers) -> claim a group of WAITING trials (atomic in the
storage; :func:`sweeps.fusion.claim_group`) -> run it -> tell
(:func:`sweeps.lifecycle.run_group`). Unfused, a group is one trial; with ``fuse``
(``--fuse K``, or the study's setting) it is up to K trials that train as one batched model
with the runner's fused variant, each member told its own result. With nothing waiting, a
worker stays while other trials are RUNNING (one of them may die and be re-enqueued), then
exits.

Many machines (PostgreSQL + a SLURM array)::

    # the URL holds a password: keep it out of argv (``ps`` shows argv to every user)
    export MUTRANSFER_STORAGE=postgresql://user:pw@db/sweeps   # or --storage-file F (chmod 600)
    # once, on the login node: create the study and enqueue the grid, run no trial here
    mutransfer sweep lr SPEC.yaml --prepare-only
    # sbatch --array=0-31 --gres=gpu:1 job.sh, where job.sh runs
    mutransfer sweep worker --study lr --worker-index $SLURM_ARRAY_TASK_ID

(A Kubernetes Job with ``parallelism: 32`` runs the same worker command.) Every worker
leaves when the grid is done; a killed one's trial is retried by the others after the
heartbeat grace period (``--grace``). Workers started by :func:`spawn_workers` get the URL
in their environment, never on their command line, and die with the process that started
them (``PR_SET_PDEATHSIG`` on Linux, a parent-pid check elsewhere).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeps import attrs
from sweeps.attrs import STUDY_ATTR
from sweeps.fusion import Fuse, check_fuse, check_spec_fusible, claim_group, is_fused
from sweeps.progress import StudyBar, study_counts
from sweeps.recovery import RequeueCallback, sweep_stale
from sweeps.runners import DEFAULT_RUNNER, Runner, fused_runner_for, load_runner
from sweeps.spec import spec_from_dict
from sweeps.spec_base import SweepSpec, trusted
from sweeps.storage import Storage, default_study_name

if TYPE_CHECKING:
    import optuna

    from sweeps.lifecycle import SweepStudy

#: set by :func:`spawn_workers`: the pid a worker must outlive no longer than
PARENT_ENV = "MUTRANSFER_PARENT_PID"


@dataclass(frozen=True)
class SweepSettings:
    """What every worker of a study must agree on (stored as a study user attr)."""

    spec: SweepSpec
    runner: str = DEFAULT_RUNNER
    heartbeat_interval: int = 10
    grace_period: int = 60
    max_retries: int = 3
    fuse: Fuse = None
    """Default members per fused group for workers that pass no ``fuse`` (None: unfused).
    It changes throughput only, never a result, so a resumed study may change it."""

    def to_attr(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "runner": self.runner,
                "heartbeat_interval": self.heartbeat_interval,
                "grace_period": self.grace_period, "max_retries": self.max_retries,
                "fuse": self.fuse}

    @classmethod
    def from_attr(cls, d: dict[str, Any]) -> SweepSettings:
        with trusted():
            spec = spec_from_dict(d["spec"])
        return cls(spec=spec, runner=d["runner"],
                   heartbeat_interval=int(d["heartbeat_interval"]),
                   grace_period=int(d["grace_period"]), max_retries=int(d["max_retries"]),
                   fuse=check_fuse(d.get("fuse")))  # absent in studies made before --fuse


def make_sampler(spec: SweepSpec, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    if spec.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    if spec.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=4)
    # grid: every parameter is fixed by the enqueued point; the sampler is never asked
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    import optuna

    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=1)
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1)
    return optuna.pruners.NopPruner()  # divergence: the trainer stops diverged runs itself


def open_study(storage: Storage | str, study_name: str | None, *, worker_index: int = 0,
               ) -> tuple[SweepStudy, SweepSettings]:
    """Load an existing sweep study (``study_name`` None: the storage's only one) with the
    sampler and pruner its spec asks for, on this process's Optuna storage (opened once,
    with the study's heartbeat settings)."""
    from sweeps.lifecycle import SweepStudy  # subclasses optuna.Study: imports optuna

    storage = Storage.resolve(storage)
    probe = storage.open(create=False)  # whatever this process holds already, else a plain open
    study_name = default_study_name(probe, study_name)
    study_attrs = probe.get_study_user_attrs(probe.get_study_id_from_name(study_name))
    if STUDY_ATTR not in study_attrs:
        raise ValueError(f"study {study_name!r} was not created by mutransfer sweep")
    settings = SweepSettings.from_attr(study_attrs[STUDY_ATTR])
    storage.open(heartbeat_interval=settings.heartbeat_interval, grace_period=settings.grace_period,
                 stale_callback=RequeueCallback(settings.max_retries))
    seed = settings.spec.sampler_seed + worker_index
    study = SweepStudy(study_name, storage, sampler=make_sampler(settings.spec, seed),
                       pruner=make_pruner(settings.spec))
    return study, settings


def _has_complete_twin(study: SweepStudy, trial: optuna.Trial, spec: SweepSpec) -> bool:
    """Grid sweeps: is this point already finished or running in another trial? Launches
    enqueue each point once (:func:`sweeps.study.prepare` holds the storage's lock); this
    guards studies enqueued twice by an older version, so no point is trained twice."""
    from optuna.trial import TrialState

    if spec.adaptive:
        return False
    key = trial.user_attrs.get(attrs.POINT_KEY)
    if key is None:
        return False
    return any(t.user_attrs.get(attrs.POINT_KEY) == key and t.number != trial.number
               for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                                   TrialState.RUNNING)))


@dataclass
class WorkerReport:
    outcomes: Counter[str] = field(default_factory=Counter)
    swept: list[int] = field(default_factory=list)
    user_error: str | None = None
    """The failure of the user's code (a model builder) that stopped this worker, if any
    (:func:`user_code_error`)."""


def user_code_error(trials: Iterable[Any]) -> str | None:
    """The first recorded failure of the user's code (:class:`mutransfer.contain.UserCodeError`)
    among ``trials``: it fails every trial alike, so it is named, not counted."""
    prefix = "UserCodeError: "
    for t in trials:
        err = str(t.user_attrs.get(attrs.ERROR) or "")
        if err.startswith(prefix):
            return err[len(prefix):].splitlines()[0] if err[len(prefix):] else "the user's code failed"
    return None


def work(
    storage: Storage | str,
    study_name: str | None,
    *,
    worker_index: int = 0,
    runner: Runner | str | None = None,
    max_trials: int | None = None,
    poll_s: float = 0.5,
    progress: bool = False,
    wait_for_running: bool = True,
    on_trial: Callable[[], None] | None = None,
    fuse: Fuse | str = None,
) -> WorkerReport:
    """Run trials of ``study_name`` until no trial is waiting (or running, if waiting).

    ``fuse``: members per fused group (an integer >= 1 or ``"auto"``; 1 runs unfused);
    None takes the study's setting (:attr:`SweepSettings.fuse`). ``max_trials`` counts
    trials, each member of a fused group as one.
    """
    from optuna.trial import TrialState

    from sweeps.lifecycle import run_group  # imports optuna

    fuse = check_fuse(fuse)
    study, settings = open_study(storage, study_name, worker_index=worker_index)
    if fuse is None:
        fuse = settings.fuse
    check_spec_fusible(settings.spec, fuse)
    fn = load_runner(runner or settings.runner) if not callable(runner) else runner
    fused_fn = fused_runner_for(fn) if is_fused(fuse) else None
    if is_fused(fuse) and fused_fn is None:
        raise ValueError(f"fuse {fuse!r} needs a runner with a fused variant; "
                         f"{getattr(fn, '__name__', fn)!r} has none (run with fuse 1)")
    rep = WorkerReport()
    done = 0
    seed = settings.spec.sampler_seed + worker_index
    while max_trials is None or done < max_trials:
        if orphaned():
            break
        rep.swept += sweep_stale(study, grace_period=settings.grace_period,
                                 max_retries=settings.max_retries)
        limit = None if max_trials is None else max_trials - done
        trials = claim_group(study, settings.spec, fuse if fused_fn is not None else 1, limit)
        if not trials:
            running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if running and wait_for_running:
                time.sleep(poll_s)
                continue
            break
        todo = []
        for trial in trials:
            if _has_complete_twin(study, trial, settings.spec):
                trial.set_user_attr(attrs.DUPLICATE, True)
                study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                rep.outcomes["duplicate"] += 1
            else:
                todo.append(trial)
        if not todo:
            continue
        outcomes = run_group(study, todo, settings.spec, fn, fused_runner=fused_fn,
                             heartbeat_interval=settings.heartbeat_interval, sampler_seed=seed,
                             progress=progress)
        rep.outcomes.update(outcomes)
        done += len(todo)
        if on_trial is not None:
            on_trial()
        rep.user_error = user_code_error(todo)
        if rep.user_error is not None:  # every later trial would fail alike: stop here
            break
    return rep


def worker_command(study_name: str, worker_index: int, fuse: Fuse = None) -> list[str]:
    """argv of a worker process; the storage URL travels in its environment
    (:meth:`sweeps.storage.Storage.worker_env`). It runs ``python -m sweeps`` (:func:`main`),
    this package's own entry: sweeps never starts the CLI that sits above it."""
    cmd = [sys.executable, "-m", "sweeps", "--study", study_name, "--worker-index", str(worker_index)]
    if fuse is not None:
        cmd += ["--fuse", str(fuse)]
    return cmd


def main(argv: Sequence[str] | None = None) -> int:
    """A spawned worker (``python -m sweeps``, :func:`worker_command`): the storage from
    ``$MUTRANSFER_STORAGE``, then :func:`work` until no trial is left. Users joining from
    another machine run ``mutransfer sweep worker``, which calls the same :func:`work`."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m sweeps", description=main.__doc__)
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--worker-index", type=int, default=0, help="offsets the sampler seed")
    p.add_argument("--fuse", default=None, help="K or auto (default: the study's)")
    args = p.parse_args(argv)
    fuse: Fuse = None if args.fuse is None else ("auto" if args.fuse == "auto" else int(args.fuse))
    return serve(Storage.from_user(None), args.study, worker_index=args.worker_index, fuse=fuse)


def serve(storage: Storage | str, study_name: str | None, *, worker_index: int = 0,
          max_trials: int | None = None, fuse: Fuse = None, progress: bool = False) -> int:
    """One worker process's life, spawned or started by hand (``mutransfer sweep worker``):
    die with a spawning parent, :func:`work` until no trial is left, print the outcomes.
    ``progress``: the whole study's progress on stderr (:class:`sweeps.progress.StudyBar`;
    in a SLURM task's log, a line every progress interval)."""
    die_with_parent()
    bar = None
    if progress:
        study, _ = open_study(storage, study_name, worker_index=worker_index)
        counts = study_counts(study)
        bar = StudyBar(counts.done + counts.pending, f"worker {worker_index}: study {study.study_name}",
                       initial=counts.done, poll=lambda: study_counts(study))
        bar.update(counts)
    try:
        rep = work(storage, study_name, worker_index=worker_index, max_trials=max_trials, fuse=fuse)
    finally:
        if bar is not None:
            bar.close()
    print(", ".join(f"{k} {v}" for k, v in sorted(rep.outcomes.items())) or "no trial to run",
          file=sys.stderr)
    if rep.user_error is not None:
        print(f"worker {worker_index}: error: {rep.user_error}", file=sys.stderr)
        return 2
    return 0


def orphaned() -> bool:
    """Was this worker started by :func:`spawn_workers` of a process that is gone?"""
    parent = os.environ.get(PARENT_ENV)
    return bool(parent) and parent.isdigit() and os.getppid() != int(parent)


def die_with_parent() -> None:
    """For a worker started by :func:`spawn_workers` (:data:`PARENT_ENV` set), on Linux:
    ask the kernel to SIGTERM this process when its parent dies (even by SIGKILL), so no
    orphaned worker keeps training; then check the parent did not die already. Elsewhere
    the worker loop checks :func:`orphaned` between groups. A worker started by hand
    (``nohup``, a SLURM job) is left alone."""
    if not os.environ.get(PARENT_ENV):  # started by hand (nohup, SLURM): outlives its shell
        return
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if orphaned():
        raise SystemExit(1)


def worker_pin(k: int, device: str, gpus: Sequence[str] | None) -> dict[str, str]:
    """Environment that places worker ``k``: on CPU one thread (one worker per core measured
    faster than one multi-threaded worker); on CUDA GPU ``k mod #GPUs`` alone, so every
    CUDA spelling of the trials' device (``cuda``, ``cuda:0``) is that worker's own GPU."""
    if device == "cpu":
        return {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if device.startswith("cuda") and gpus:
        return {"CUDA_VISIBLE_DEVICES": str(gpus[k % len(gpus)])}
    return {}


def spawn_workers(
    storage: Storage | str,
    study_name: str,
    n: int,
    *,
    device: str = "cpu",
    gpus: Sequence[str] | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    extra_env: dict[str, str] | None = None,
    fuse: Fuse | str = None,
) -> list[subprocess.Popen[bytes]]:
    """Start ``n`` worker processes. On CPU each is single-threaded (one per core measured
    faster than one multi-threaded worker); on CUDA worker k sees GPU k mod #GPUs.
    ``fuse`` is passed on (None: the study's setting). The storage URL (it may hold a
    password) goes in each worker's environment (:meth:`Storage.worker_env`), not its argv;
    a worker dies with the thread that started it."""
    fuse = check_fuse(fuse)
    where = Storage.resolve(storage).worker_env()
    procs = []
    root = str(Path(__file__).resolve().parent.parent)
    for k in range(n):
        env = dict(os.environ)
        env.update(extra_env or {})
        env.update(where)
        env[PARENT_ENV] = str(os.getpid())
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else root
        for key, value in worker_pin(k, device, gpus).items():
            if device == "cpu":  # a thread count the caller set stays
                env.setdefault(key, value)
            else:
                env[key] = value
        out: Any = subprocess.DEVNULL
        if log_dir is not None:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            out = open(Path(log_dir) / f"worker-{k}.log", "ab")  # noqa: SIM115 - closed by the child's exit
        procs.append(subprocess.Popen(worker_command(study_name, k, fuse), env=env,
                                      stdout=out, stderr=subprocess.STDOUT if out is not subprocess.DEVNULL
                                      else subprocess.DEVNULL))
        if out is not subprocess.DEVNULL:
            out.close()
    return procs
