"""``mutransfer sweep launch --slurm``: a SLURM job array of sweep workers, one per GPU.

The study must exist (``mutransfer sweep KIND ... --prepare-only``, which enqueues its grid).
The job script is a plain ``sbatch`` script, readable and printable (``--dry-run``); each
array task runs ``mutransfer sweep worker --study S --worker-index $SLURM_ARRAY_TASK_ID``
against the study's storage, so the array shares the grid: a task killed mid-trial leaves
its trial RUNNING, and another worker retries it once its heartbeat is stale.

The storage URL never enters the script or any argv: a URL holding a password must come
from ``--storage-file FILE`` (chmod 600, read by each worker), which is what the script
names; a journal file or a password-less URL is named as is.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweeps.storage import Storage


@dataclass(frozen=True)
class SlurmJob:
    """What the job script asks SLURM for and what each array task runs."""

    study: str
    """The study every worker joins."""
    workers: int
    """Array tasks, one worker each."""
    storage_args: tuple[str, ...]
    """How a worker finds the storage: ``--storage-file FILE`` or ``--storage URL`` (no secret)."""
    gpus_per_worker: int = 1
    """GPUs per task (``--gres=gpu:N``); 0 for CPU workers."""
    cpus_per_worker: int = 4
    """CPU cores per task."""
    time: str | None = None
    """Wall-clock limit per task (``--time``), e.g. ``04:00:00``; None: the partition's."""
    partition: str | None = None
    """SLURM partition; None: the cluster's default."""
    account: str | None = None
    """SLURM account; None: the user's default."""
    max_parallel: int | None = None
    """At most this many tasks at once (``--array=0-N%M``)."""
    log_dir: str = "slurm-logs"
    """Where each task's log goes (``worker-JOB_TASK.log``)."""
    fuse: str | None = None
    """``--fuse`` for every worker (None: the study's)."""
    track: str | None = None
    """``--track`` for every worker (None: untracked)."""
    extra: tuple[str, ...] = ()
    """More ``#SBATCH`` options, as given (e.g. ``--constraint=a100``)."""


_SAFE_OPT = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(=[^\n]*)?$")


def storage_args(storage: Storage, storage_file: str | None) -> tuple[str, ...]:
    """The worker's storage flags for a job script. A URL with a secret that did not come
    from ``--storage-file`` is refused: it would be written into the script."""
    if storage_file is not None:
        return ("--storage-file", str(Path(storage_file).resolve()))
    if storage.url != storage.masked:
        raise ValueError("the storage URL holds a password, which would be written into the job script; "
                         "put it in a file only you can read (chmod 600) and pass --storage-file FILE")
    return ("--storage", storage.url)


def job_script(job: SlurmJob, *, python: str | None = None, cwd: str | None = None) -> str:
    """The ``sbatch`` script of ``job`` (bash; the ``#SBATCH`` lines are comments to bash,
    so the script also runs as is, one worker, outside SLURM)."""
    if job.workers < 1:
        raise ValueError(f"--workers {job.workers} must be >= 1")
    for opt in job.extra:
        if not _SAFE_OPT.match(opt):
            raise ValueError(f"--sbatch-arg {opt!r} must look like --option or --option=value")
    q = shlex.quote
    python = python or sys.executable
    cwd = cwd or os.getcwd()
    root = str(Path(__file__).resolve().parent.parent)
    array = f"0-{job.workers - 1}" + (f"%{job.max_parallel}" if job.max_parallel else "")
    lines = [
        "#!/bin/bash",
        f"# {job.workers} mutransfer sweep worker(s) of study {job.study}, one per array task.",
        "# Written by `mutransfer sweep launch --slurm`; submit with `sbatch THIS_FILE`.",
        ("# The storage URL is not in this file: each worker reads it from its --storage-file."
         if "--storage-file" in job.storage_args else "# The storage holds no secret: it is named as is."),
        f"#SBATCH --job-name={_slug('mutransfer-' + job.study)}",
        f"#SBATCH --array={array}",
        f"#SBATCH --cpus-per-task={job.cpus_per_worker}",
        f"#SBATCH --output={job.log_dir}/worker-%A_%a.log",
    ]
    if job.gpus_per_worker:
        lines.append(f"#SBATCH --gres=gpu:{job.gpus_per_worker}")
    for opt, value in (("time", job.time), ("partition", job.partition), ("account", job.account)):
        if value is not None:
            if not re.fullmatch(r"[A-Za-z0-9_.:,+-]+", value):
                raise ValueError(f"--{opt} {value!r} has characters SLURM does not take")
            lines.append(f"#SBATCH --{opt}={value}")
    lines += [f"#SBATCH {opt}" for opt in job.extra]
    worker = [python, "-m", "mutransfer_cli", "sweep", "worker", *job.storage_args, "--study", job.study]
    tail = ['--worker-index "${SLURM_ARRAY_TASK_ID:-0}"']
    if job.fuse is not None:
        tail.append(f"--fuse {q(job.fuse)}")
    if job.track is not None:
        tail.append(f"--track {q(job.track)}")
    lines += [
        "set -euo pipefail",
        f"cd {q(cwd)}",
        f'export PYTHONPATH={q(root)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
        "# one GPU per task: SLURM sets CUDA_VISIBLE_DEVICES to the task's own",
        "exec " + " ".join(q(a) for a in worker) + " " + " ".join(tail),
        "",
    ]
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:64]


def sbatch_path() -> str:
    """The ``sbatch`` command; none on PATH: ValueError, one line."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise ValueError("sbatch is not on PATH: run this on a SLURM login node, or pass --dry-run "
                         "to print the job script")
    return sbatch


def submit(script: Path) -> str:
    """``sbatch --parsable SCRIPT``; returns the job id."""
    p = subprocess.run([sbatch_path(), "--parsable", str(script)], capture_output=True, text=True)
    if p.returncode != 0:
        raise ValueError(f"sbatch failed (exit {p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout.strip().split(";", 1)[0]
