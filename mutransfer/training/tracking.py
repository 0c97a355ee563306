"""Experiment tracking, opt-in: one TensorBoard run or W&B run per training run.

``--track tensorboard[:DIR]`` or ``--track wandb[:PROJECT]`` (``train``, every ``sweep``
kind, ``demo``) wraps the trainer's callback (:data:`mutransfer.training.trainer.Callback`) in a
:class:`TrackingCallback`. At each evaluation (the cadence the trainer already calls its
callback) it logs every history record since the last one, per step: the training loss
(``loss/train``), the LR of every param group (``lr/<group>``, the group's role, e.g.
``lr/hidden``; ``lr/base`` is the schedule's base LR), the gradient norm, the gradient
noise scale, spikes and skipped steps (``events/spike``, ``events/skip``: 1 at the step)
and rollbacks (``events/rollback``: the step rolled back to); then the held-out loss
(``loss/val``). :meth:`TrackingCallback.finish` logs what is left when the run ends
(diverged or pruned runs end between evaluations) and closes the run.

W&B runs offline unless the user's environment says otherwise (``WANDB_MODE`` is set to
``offline`` when unset), so nothing needs the network; ``wandb sync`` uploads later. The
packages are optional (``pip install 'mutransfer[track]'``); without them ``--track``
fails at once with one line saying so.

A sweep's workers find the target in :data:`TRACK_ENV` (set by the CLI, inherited by the
workers it spawns; a SLURM job script passes ``--track`` to each worker).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from mutransfer.contain import UserCodeError
from mutransfer.redact import redact, redact_argv, redact_text

#: The tracking target of this process and the workers it starts (:meth:`TrackSpec.to_env`).
TRACK_ENV = "MUTRANSFER_TRACK"
#: The extra that installs the trackers.
EXTRA = "pip install 'mutransfer[track]'"
DEFAULT_PROJECT = "mutransfer"
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


@dataclass(frozen=True)
class TrackSpec:
    """Where runs are tracked (parsed from ``--track``)."""

    kind: Literal["tensorboard", "wandb"]
    """``tensorboard`` (event files) or ``wandb`` (a W&B run, offline by default)."""
    target: str
    """TensorBoard: the log directory (one subdirectory per run); W&B: the project."""
    dir: str | None = None
    """W&B only: where its ``wandb/`` folder of runs goes (None: ``$WANDB_DIR`` or the
    working directory)."""

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> TrackSpec:
        try:
            d = json.loads(text)
            spec = cls(kind=d["kind"], target=str(d["target"]), dir=d.get("dir"))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise UserCodeError(f"${TRACK_ENV}={text!r} is not a tracking target (set by --track)") from None
        if spec.kind not in _PACKAGES:
            raise UserCodeError(f"${TRACK_ENV}={text!r}: unknown tracker {spec.kind!r}")
        return spec


def parse_track(text: str, out: str | os.PathLike[str] | None = None) -> TrackSpec:
    """``tensorboard[:DIR]`` or ``wandb[:PROJECT]``; DIR defaults to ``OUT/tensorboard``
    (``./tensorboard`` without ``out``) and is made absolute, PROJECT to ``mutransfer``,
    and W&B's files go under ``out`` when given. Bad text, or a tracker whose package is
    not installed: ValueError naming it."""
    kind, sep, target = text.partition(":")
    kind = kind.strip().lower()
    if kind not in _PACKAGES:
        raise ValueError(f"--track {text!r}: choose tensorboard[:DIR] or wandb[:PROJECT]")
    if sep and not target.strip():
        raise ValueError(f"--track {text!r}: empty {'DIR' if kind == 'tensorboard' else 'PROJECT'} after ':'")
    check_installed(kind)
    if kind == "tensorboard":
        logdir = Path(target) if target else Path(out or ".") / "tensorboard"
        return TrackSpec("tensorboard", str(logdir.resolve()))
    project = target.strip() or DEFAULT_PROJECT
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", project):
        raise ValueError(f"--track {text!r}: a W&B project name is letters, digits, '_', '-' and '.'")
    return TrackSpec("wandb", project, dir=str(Path(out).resolve()) if out is not None else None)


def check_installed(kind: str) -> None:
    """ValueError in one line when the package of tracker ``kind`` is missing."""
    pkg = _PACKAGES[kind]
    try:
        found = importlib.util.find_spec(pkg) is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        found = False
    if not found:
        raise ValueError(f"--track {kind} needs the {pkg} package, which is not installed: {EXTRA}")


def env_spec() -> TrackSpec | None:
    """The tracking target in :data:`TRACK_ENV`, or None."""
    text = os.environ.get(TRACK_ENV, "").strip()
    return TrackSpec.from_env(text) if text else None


def run_name(point: Mapping[str, Any]) -> str:
    """A run's name from its grid point: ``lr=0.0039,parametrization=mup,width=64``
    (sorted keys, numbers in 4 significant digits, no '/')."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    text = ",".join(f"{k}={fmt(v)}" for k, v in sorted(point.items()))
    return text.replace("/", "_").replace(os.sep, "_") or "run"


class Run(Protocol):
    """One tracked run: scalars by step, then close."""

    def log(self, step: int, values: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardRun:
    """Event files in ``logdir/name`` (``name+trialN`` when that folder is taken, e.g. by
    a retried trial), with the config as the text summary ``config``."""

    def __init__(self, logdir: str | os.PathLike[str], name: str, config: Mapping[str, Any],
                 trial: int | None = None) -> None:
        check_installed("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        path = Path(logdir) / name
        if path.exists() and any(path.iterdir()):
            path = Path(logdir) / (f"{name}+trial{trial}" if trial is not None else f"{name}+{os.getpid()}")
        self.path = path
        self.writer = SummaryWriter(log_dir=str(path))
        text = json.dumps(redact(dict(config))[0], indent=1, sort_keys=True, default=str, allow_nan=True)
        self.writer.add_text("config", f"```\n{text}\n```", 0)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        self.writer.close()


class WandbRun:
    """A W&B run (offline unless ``$WANDB_MODE`` says otherwise) with the config."""

    def __init__(self, project: str, name: str, config: Mapping[str, Any], dir: str | None = None) -> None:
        check_installed("wandb")
        os.environ.setdefault("WANDB_MODE", "offline")  # the user's own setting wins
        import wandb

        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
        # W&B records sys.argv in the run's files (and uploads them on sync): a storage URL
        # typed on the command line holds its password there
        with _redacted_argv():
            self.run = wandb.init(project=project, name=name, config=redact(dict(config))[0], dir=dir,
                                  reinit="create_new",
                                  settings=wandb.Settings(silent=True, console="off"))
        self.path = Path(self.run.dir).parent  # the run's folder (offline-run-...)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        with _redacted_argv():
            self.run.finish()


@contextlib.contextmanager
def _redacted_argv() -> Iterator[None]:
    """``sys.argv`` without secrets (:func:`mutransfer.redact.redact_argv`) while a tracker
    reads it."""
    saved = sys.argv
    sys.argv = [*saved[:1], *redact_argv(saved[1:])]
    try:
        yield
    finally:
        sys.argv = saved


def open_run(spec: TrackSpec, name: str, config: Mapping[str, Any], trial: int | None = None) -> Run:
    """A run of ``spec``'s tracker named ``name`` carrying ``config``."""
    if spec.kind == "tensorboard":
        return TensorBoardRun(spec.target, name, config, trial=trial)
    return WandbRun(spec.target, name, config, dir=spec.dir)


def group_labels(groups: list[dict[str, Any]]) -> list[str]:
    """A label per param group: its role (``hidden``, ``output``, ...), then the optimizer
    and the group's index where roles repeat."""
    def role(g: dict[str, Any]) -> str:
        return str(g.get("role") or "group")

    labels = [role(g) for g in groups]
    if len(set(labels)) < len(labels):
        labels = [f"{role(g)}.{g.get('optimizer', '')}".rstrip(".") for g in groups]
    if len(set(labels)) < len(labels):
        labels = [f"{lab}.{i}" for i, lab in enumerate(labels)]
    return labels


class TrackingCallback:
    """The trainer's callback that logs to ``run``, then calls ``inner`` (whose answer,
    stop or go, it returns). Needs the trainer in the callback's metrics (``trainer``,
    :meth:`mutransfer.training.trainer.Trainer.record_eval`); without it only the held-out loss is
    logged. Logged steps only go forward: a WSD trial's branches restart from the trunk,
    and a step already logged is not logged again."""

    def __init__(self, run: Run, inner: Any = None) -> None:
        self.run, self.inner = run, inner
        self.last_step = 0
        self.last_eval = -1
        self.n_rollbacks = 0
        self._scales: tuple[list[str], list[float]] | None = None

    def _group_scales(self, trainer: Any) -> tuple[list[str], list[float]]:
        """Each group's LR over the base LR: set_lr gives a group ``base_lr × schedule ×
        lr_mult`` while a record's ``lr`` is ``optim.lr × schedule``."""
        if self._scales is None:
            if not hasattr(trainer, "opt"):  # a finished result: the groups are unknown
                return [], []
            groups = list(trainer.opt.param_groups)
            base = float(trainer.cfg.optim.lr)
            scales = [float(g.get("base_lr", g["lr"])) * float(g.get("lr_mult", 1.0)) / base for g in groups]
            self._scales = (group_labels(groups), scales)
        return self._scales

    def log_trainer(self, trainer: Any) -> None:
        """Log the history records past the last logged step, and new rollbacks."""
        labels, scales = self._group_scales(trainer)
        for rec in trainer.history:
            step = int(rec["step"])
            if step <= self.last_step:
                continue
            values: dict[str, float] = {"loss/train": float(rec["loss"]), "lr/base": float(rec["lr"]),
                                        "tokens": float(rec.get("tokens") or 0)}
            for lab, s in zip(labels, scales):
                values[f"lr/{lab}"] = float(rec["lr"]) * s
            for key in ("grad_norm", "gns", "max_attn_logit"):
                if rec.get(key) is not None:
                    values[key] = float(rec[key])
            if rec.get("spike"):
                values["events/spike"] = 1.0
            if rec.get("skipped"):
                values["events/skip"] = 1.0
            self.run.log(step, values)
            self.last_step = step
        for spike_step, to_step in list(trainer.rollbacks)[self.n_rollbacks:]:
            self.run.log(int(spike_step), {"events/rollback": float(to_step)})
        self.n_rollbacks = len(trainer.rollbacks)

    def log_eval(self, step: int, val: float) -> None:
        if step > self.last_eval:
            self.run.log(int(step), {"loss/val": float(val)})
            self.last_eval = step

    def __call__(self, step: int, metrics: dict[str, Any]) -> bool:
        trainer = metrics.get("trainer")
        try:
            if trainer is not None:
                self.log_trainer(trainer)
            if metrics.get("val_loss") is not None:
                self.log_eval(step, metrics["val_loss"])
        except Exception as exc:  # tracking never ends a run: say so once and go on
            _warn_once(exc)
        return bool(self.inner(step, metrics)) if self.inner is not None else False

    def finish(self, results: Any = ()) -> None:
        """Log what the callbacks did not see (the records and evals after the last
        evaluation of a run that diverged or was pruned), from its TrainResult(s); close."""
        try:
            for r in results if isinstance(results, (list, tuple)) else [results]:
                if r is None:
                    continue
                self.log_trainer(_ResultView(r))
                for step, val in r.evals:
                    self.log_eval(step, val)
        finally:
            self.run.close()


class _ResultView:
    """A TrainResult seen as the trainer :meth:`TrackingCallback.log_trainer` reads."""

    def __init__(self, result: Any) -> None:
        self.history = result.history
        self.rollbacks = result.rollbacks


_WARNED: list[bool] = []


def _warn_once(exc: Exception) -> None:
    if not _WARNED:
        _WARNED.append(True)
        print(f"mutransfer: tracking failed, the run goes on untracked from here: {exc}", file=sys.stderr)


def tracked(callback: Any, spec: TrackSpec | None, name: str, config: Mapping[str, Any],
            trial: int | None = None) -> tuple[Any, TrackingCallback | None]:
    """``(callback, tracker)``: the callback wrapped to log to a new run of ``spec``
    (``tracker`` is its :class:`TrackingCallback`, to :meth:`~TrackingCallback.finish`),
    or ``(callback, None)`` when ``spec`` is None."""
    if spec is None:
        return callback, None
    try:
        run = open_run(spec, name, config, trial=trial)
    except Exception as exc:  # a broken install, a bad folder: every run would fail alike
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UserCodeError(f"--track {spec.kind}: the tracker could not start a run ({type(exc).__name__}"
                            f"{': ' + redact_text(first) if first else ''}); fix it, or run without --track"
                            ) from None
    cb = TrackingCallback(run, callback)
    return cb, cb
