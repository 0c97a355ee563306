"""One trial: take its grid point, resolve the config, run it, tell the study.

The value told to the sampler is the final held-out loss. A diverged trial (the trainer's
``diverged`` flag, or a non-finite loss from any runner) is told a finite worst-case value,
``max(ln(vocab), finite loss)``, and gets the user attr ``diverged=True``: TPE and GP treat
NaN as missing and keep sampling the divergent region.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sweeps.provenance import git_revision, hostname, package_versions, process_start_ticks
from sweeps.recovery import (
    ATTR_HOST,
    ATTR_PID,
    ATTR_PID_START,
    ATTR_POINT,
    Heartbeat,
)
from sweeps.runners import FusedRunner, Report, Runner
from sweeps.spec import SweepSpec

if TYPE_CHECKING:
    import optuna

OUTCOMES = ("complete", "diverged", "pruned", "failed", "lost")
#: user attr of a fused trial: the numbers of the trials of its fused run (itself included)
ATTR_FUSED_WITH = "fused_with"


def resolve_config(spec: SweepSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """TrainConfig overrides of one trial: preset + spec.base + the trial's parameters.

    The pseudo-field ``tokens`` becomes ``steps = round(tokens / (batch_size * seq_len))``.
    """
    cfg: dict[str, Any] = {"preset": spec.preset, **dict(spec.base), **dict(params)}
    tokens = cfg.pop("tokens", None)
    if tokens is not None:
        bs = cfg.get("batch_size") or _train_default("batch_size", 32)
        seq = cfg.get("seq_len") or _preset_attr(spec.preset, "seq_len", 64)
        steps = round(int(tokens) / (int(bs) * int(seq)))
        if steps < 1:
            raise ValueError(f"token budget {tokens} is below one step of {bs} x {seq} tokens")
        cfg["steps"] = steps
    return cfg


def full_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every TrainConfig field of ``config`` (defaults filled) when the trainer imports."""
    try:
        from mutransfer.train import TrainConfig  # type: ignore[import-not-found]

        return _jsonable(TrainConfig.from_overrides(None, config).to_dict())
    except Exception:
        return _jsonable(dict(config))


def _train_default(name: str, fallback: Any) -> Any:
    try:
        from mutransfer.train import TrainConfig  # type: ignore[import-not-found]

        for f in dataclasses.fields(TrainConfig):
            if f.name == name and f.default is not dataclasses.MISSING:
                return f.default
    except ImportError:
        pass
    return fallback


def _preset_attr(preset: str, name: str, fallback: Any) -> Any:
    try:
        from mutransfer.models import get_preset

        return getattr(get_preset(preset), name, fallback)
    except Exception:
        return fallback


def worst_case_loss(config: Mapping[str, Any], loss: float | None = None) -> float:
    """ln(vocab) of the preset, or the (finite) reported loss if larger."""
    vocab = _preset_attr(str(config.get("preset", "gpt-tiny")), "vocab_size", 256)
    worst = math.log(vocab if isinstance(vocab, int) and vocab > 1 else 256)
    if loss is not None and math.isfinite(loss):
        worst = max(worst, float(loss))
    return worst


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    try:  # numpy / torch scalars
        item = obj.item()
        if isinstance(item, (bool, int, float)):
            return item
    except AttributeError:
        pass
    return str(obj)


INT_FIELDS = frozenset({"width", "depth", "seed", "batch_size", "steps", "tokens", "head_dim", "seq_len",
                        "warmup_steps", "grad_accum", "eval_every", "eval_batches", "base_width",
                        "base_depth", "threads", "checkpoint_every"})


def dim_distribution(name: str, values: Sequence[Any]) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution a grid dimension is recorded under.

    Optuna demands one distribution class per parameter (and identical choices for a
    categorical) across a study, while a resumed study may grow its grid. So numbers get
    ranges (int fields an IntDistribution, lr a log FloatDistribution, other numbers a
    FloatDistribution), ``parametrization`` always the full choice set, booleans
    [False, True], and other values a categorical of the spec's values (fixed per study).
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from sweeps.spec import PARAMETRIZATIONS

    vals = list(values)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
    if name == "parametrization":
        return CategoricalDistribution(list(PARAMETRIZATIONS) + sorted(set(vals) - set(PARAMETRIZATIONS)))
    if vals and all(isinstance(v, bool) for v in vals):
        return CategoricalDistribution([False, True])
    if numeric and name in INT_FIELDS and all(float(v).is_integer() for v in vals):
        return IntDistribution(int(min(vals)), int(max(vals)))
    if numeric and vals:
        lo, hi = float(min(vals)), float(max(vals))
        return FloatDistribution(lo, hi, log=name == "lr" and lo > 0)
    return CategoricalDistribution(_categorical(vals))


def suggest_params(trial: optuna.Trial, spec: SweepSpec, point: Mapping[str, Any]) -> dict[str, Any]:
    """Record the grid point as the trial's parameters and sample the adaptive dimensions."""
    from optuna.distributions import FloatDistribution, IntDistribution

    dims = dict(spec.grid_dims())
    out: dict[str, Any] = {}
    for name, value in point.items():
        values = list(dims.get(name, ()))
        if value not in values:
            values.append(value)
        dist = dim_distribution(name, values)
        if isinstance(dist, IntDistribution):
            out[name] = trial.suggest_int(name, dist.low, dist.high)
        elif isinstance(dist, FloatDistribution):
            out[name] = trial.suggest_float(name, dist.low, dist.high, log=dist.log)
        else:
            out[name] = trial.suggest_categorical(name, list(dist.choices))
    for name, (lo, hi) in spec.search().items():
        out[name] = trial.suggest_float(name, lo, hi, log=True)
    return out


def _categorical(choices: list[Any]) -> list[Any]:
    ok = (type(None), bool, int, float, str)
    return [c if isinstance(c, ok) else str(c) for c in choices]


def _claim(storage: Any, tid: int) -> None:
    """Record this process as the trial's owner (the journal's dead-worker check reads it)."""
    pid = os.getpid()
    for k, v in ((ATTR_HOST, hostname()), (ATTR_PID, pid), (ATTR_PID_START, process_start_ticks(pid))):
        storage.set_trial_user_attr(tid, k, v)


def _start(study: optuna.Study, trial: optuna.Trial, spec: SweepSpec, *, sampler_seed: int,
           full: bool) -> dict[str, Any]:
    """Record the trial's parameters and provenance; returns its resolved config."""
    storage = study._storage
    tid = trial._trial_id
    point = dict(trial.user_attrs.get(ATTR_POINT, {}))
    params = suggest_params(trial, spec, point)
    config = resolve_config(spec, params)
    for k, v in (
        ("sampler_seed", sampler_seed),
        ("trial_seed", config.get("seed")),
        ("versions", package_versions()),
        ("git_revision", git_revision()),
        ("config", full_config(config) if full else _jsonable(config)),
    ):
        storage.set_trial_user_attr(tid, k, v)
    return config


def _reporter(trial: optuna.Trial) -> Report:
    """``report(step, val_loss) -> prune?`` for one trial (non-finite values are skipped)."""
    def report(step: int, value: float) -> bool:
        if not math.isfinite(value):
            return False
        trial.report(float(value), int(step))
        return bool(trial.should_prune())

    return report


def _fail_trial(study: optuna.Study, trial: optuna.Trial, exc: BaseException, tb: str) -> str:
    """Tell FAIL with the error recorded; returns "failed" (or "lost" if already finished)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = study._storage
    try:
        storage.set_trial_user_attr(trial._trial_id, "error", f"{type(exc).__name__}: {exc}")
        storage.set_trial_user_attr(trial._trial_id, "traceback", tb[-4000:])
        study.tell(trial, state=TrialState.FAIL)
    except UpdateFinishedTrialError:
        return "lost"
    return "failed"


def _finish(study: optuna.Study, trial: optuna.Trial, config: Mapping[str, Any], row: dict[str, Any]) -> str:
    """Store the row and tell the study: the value, a finite worst case when diverged, or
    PRUNED; returns one of :data:`OUTCOMES`."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = study._storage
    tid = trial._trial_id
    loss = row.get("loss")
    loss = float(loss) if isinstance(loss, (int, float)) else float("nan")
    diverged = bool(row.get("diverged")) or not math.isfinite(loss)
    row["diverged"] = diverged
    try:
        storage.set_trial_user_attr(tid, "row", row)
        storage.set_trial_user_attr(tid, "diverged", diverged)
        if diverged:
            value = worst_case_loss(config, loss if math.isfinite(loss) else None)
            storage.set_trial_user_attr(tid, "told_value", value)
            outcome, state, values = "diverged", TrialState.COMPLETE, value
        elif row.get("pruned"):
            outcome, state, values = "pruned", TrialState.PRUNED, None
        else:
            outcome, state, values = "complete", TrialState.COMPLETE, loss
        frozen = study.tell(trial, values, state=state, skip_if_finished=True)
    except UpdateFinishedTrialError:
        return "lost"
    return outcome if frozen.state == state and frozen.datetime_complete is not None else "lost"


def run_one(
    study: optuna.Study,
    trial: optuna.Trial,
    spec: SweepSpec,
    runner: Runner,
    *,
    journal: bool,
    heartbeat_interval: float,
    sampler_seed: int,
    progress: bool = False,
) -> str:
    """Run ``trial`` to the end and tell the study; returns one of :data:`OUTCOMES`."""
    from optuna.exceptions import UpdateFinishedTrialError

    storage = study._storage
    _claim(storage, trial._trial_id)
    try:
        with Heartbeat(study, trial._trial_id, heartbeat_interval, journal):
            config = _start(study, trial, spec, sampler_seed=sampler_seed, full=_is_train_runner(runner))
            kwargs = {"progress": True} if progress and _takes_progress(runner) else {}
            row = _jsonable(runner(dict(config), _reporter(trial), **kwargs))
    except UpdateFinishedTrialError:
        return "lost"  # another worker declared this one dead and re-enqueued it
    except Exception as exc:
        return _fail_trial(study, trial, exc, traceback.format_exc())
    return _finish(study, trial, config, row)


def run_group(
    study: optuna.Study,
    trials: Sequence[optuna.Trial],
    spec: SweepSpec,
    runner: FusedRunner,
    *,
    journal: bool,
    heartbeat_interval: float,
    sampler_seed: int,
) -> list[str]:
    """Run ``trials`` (RUNNING, popped together) as one fused call of ``runner`` and tell
    each its own result; returns one of :data:`OUTCOMES` per trial, in order.

    Every member is handled as :func:`run_one` handles a trial: the same user attrs (plus
    ``fused_with``, the numbers of the group's trials) and row, a diverged member told a
    finite worst case, a pruned member PRUNED, a failed one FAIL with its error. A member
    another worker declared dead (its trial finished elsewhere) is pruned out of the fused
    run at its next report and counted "lost"; the others go on. One heartbeat thread
    beats for all members until the last is told, so a SIGKILL leaves every untold member
    RUNNING for the stale-trial sweep to re-queue.
    """
    from optuna.exceptions import UpdateFinishedTrialError

    storage = study._storage
    outcomes: list[str | None] = [None] * len(trials)
    claimed = []
    for i, t in enumerate(trials):
        try:
            _claim(storage, t._trial_id)
            claimed.append(i)
        except UpdateFinishedTrialError:
            outcomes[i] = "lost"
    if not claimed:
        return [o or "lost" for o in outcomes]
    try:
        with Heartbeat(study, [trials[i]._trial_id for i in claimed], heartbeat_interval, journal):
            live: list[int] = []
            configs: list[dict[str, Any]] = []
            for i in claimed:
                try:
                    configs.append(_start(study, trials[i], spec, sampler_seed=sampler_seed,
                                          full=_is_train_runner(runner)))
                    # the one attr an unfused trial lacks: which trials shared its batched run
                    storage.set_trial_user_attr(trials[i]._trial_id, ATTR_FUSED_WITH,
                                                [trials[j].number for j in claimed])
                    live.append(i)
                except UpdateFinishedTrialError:
                    outcomes[i] = "lost"
                except Exception as exc:
                    outcomes[i] = _fail_trial(study, trials[i], exc, traceback.format_exc())
            lost: set[int] = set()

            def reporter(i: int) -> Report:
                inner = _reporter(trials[i])

                def report(step: int, value: float) -> bool:
                    try:
                        return inner(step, value)
                    except UpdateFinishedTrialError:  # failed elsewhere: drop it from the group
                        lost.add(i)
                        return True

                return report

            results: list[dict[str, Any] | Exception]
            tb = ""
            if live:
                try:
                    results = list(runner([dict(c) for c in configs], [reporter(i) for i in live]))
                    if len(results) != len(live):
                        raise RuntimeError(f"fused runner returned {len(results)} results for "
                                           f"{len(live)} trials")
                except Exception as exc:  # the whole fused call failed: fail every member
                    results, tb = [exc] * len(live), traceback.format_exc()
            for i, config, res in zip(live, configs, results if live else []):
                if i in lost:
                    outcomes[i] = "lost"
                elif isinstance(res, Exception):
                    member_tb = tb or "".join(traceback.format_exception(type(res), res, res.__traceback__))
                    outcomes[i] = _fail_trial(study, trials[i], res, member_tb)
                else:
                    outcomes[i] = _finish(study, trials[i], config, _jsonable(res))
    except UpdateFinishedTrialError:  # every member was finished elsewhere before the start
        pass
    return [o or "lost" for o in outcomes]


def _takes_progress(runner: Runner) -> bool:
    try:
        return "progress" in inspect.signature(runner).parameters
    except (TypeError, ValueError):
        return False


def _is_train_runner(runner: Runner | FusedRunner) -> bool:
    from sweeps.runners import train_fused_runner, train_runner

    return runner is train_runner or runner is train_fused_runner
