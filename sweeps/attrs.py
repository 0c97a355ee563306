"""Every user-attribute name a sweep writes into a study, in one place.

Study attr: :data:`STUDY_ATTR` (the :class:`sweeps.worker.SweepSettings`). Trial attrs are
written by :func:`sweeps.study.prepare` (point, key, group; :mod:`sweeps.extend` adds the
extension's axis and round), the worker that runs a trial
(owner, provenance, config, result) and the recovery sweeper (retries). The results table
(:mod:`sweeps.results`) and the dashboard read them back by these names.
"""

from __future__ import annotations

#: study user attr holding the sweep's settings (spec, runner, recovery, fuse)
STUDY_ATTR = "mutransfer_sweep"

# ---- set when a grid point is enqueued ------------------------------------------------
POINT = "point"
"""The grid point: {TrainConfig field: value}."""
POINT_KEY = "point_key"
"""Canonical JSON of the point (:func:`sweeps.spec_base.point_key`): its identity across retries."""
GROUP = "group"
"""The curve the point belongs to (the point without lr and seed)."""

EXTENDED_AXIS = "extended_axis"
"""Set on a point added beyond the original grid (:mod:`sweeps.extend`): "batch" or "lr"."""
EXTENDED_ROUND = "extended_round"
"""Which step beyond the original grid on its axis (1, 2, ...) added the point."""

# ---- set by the recovery sweeper on a re-enqueued trial -------------------------------
RETRIES = "retries"
RETRY_OF = "retry_of"
RETRY_REASON = "retry_reason"

# ---- set by the worker that holds a trial ----------------------------------------------
HOST = "host"
PID = "pid"
PID_START = "pid_start"
HEARTBEAT = "heartbeat"
"""Journal storages only: the owner's last heartbeat (unix time)."""
SAMPLER_SEED = "sampler_seed"
TRIAL_SEED = "trial_seed"
VERSIONS = "versions"
GIT_REVISION = "git_revision"
CONFIG = "config"
"""The trial's resolved TrainConfig (every field, when the trainer runs it)."""
FUSED_WITH = "fused_with"
"""Numbers of the trials of a fused run (itself included); absent on an unfused trial."""
DUPLICATE = "duplicate"
"""A grid point popped while an equal point was already COMPLETE: failed, not run."""

# ---- set when the trial is told --------------------------------------------------------
ROW = "row"
"""The runner's results-table row."""
DIVERGED = "diverged"
COMPILE_FALLBACK = "compile_fallback"
"""Set when a ``compile`` trial ran eager (dynamo's recompile limit, a graph break): the
reason (:mod:`mutransfer.training.compile_watch`); the row holds it too."""
TOLD_VALUE = "told_value"
"""The finite worst case told for a diverged trial."""
ERROR = "error"
TRACEBACK = "traceback"
