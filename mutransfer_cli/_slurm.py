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

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mutransfer._io import atomic_write_text

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


_SAFE_OPT = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(=[^\x00-\x1f\x7f]*)?$")
#: ``#SBATCH`` options that ``launch`` sets itself: the array is ``--workers`` (and
#: ``--max-parallel``), the log files are ``--out``'s.
_OWN_OPTS = {"--array": "--workers/--max-parallel", "-a": "--workers/--max-parallel",
             "--output": "--out", "-o": "--out", "--error": "--out", "-e": "--out"}
#: The longest ``--time`` taken: a year (SLURM's own ceiling is the partition's MaxTime).
MAX_TIME_MINUTES = 365 * 24 * 60
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_text(what: str, value: str) -> str:
    """``value`` unless it holds a newline or another control character (it would become
    a line of its own in the job script): ValueError naming ``what``."""
    if _CONTROL.search(value):
        raise ValueError(f"{what} {value!r} holds a newline or another control character, which "
                         "would become a line of the job script; rename it")
    return value


def time_minutes(text: str) -> float:
    """SLURM's ``--time`` forms (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``) in minutes; anything else, zero, or over :data:`MAX_TIME_MINUTES`:
    ValueError naming ``--time``."""
    m = re.fullmatch(r"(?:(\d{1,4})-)?(\d{1,6})(?::(\d{1,2}))?(?::(\d{1,2}))?", text.strip())
    bad = ValueError(f"--time {text!r} must be a positive SLURM time limit, e.g. 90 (minutes), "
                     "04:00:00 or 2-00:00:00, at most 365 days")
    if m is None:
        raise bad
    days, a, b, c = m.groups()
    parts = [int(a)] + [int(x) for x in (b, c) if x is not None]
    if days is not None:  # D-HH[:MM[:SS]]
        h, mi, se = (parts + [0, 0])[:3]
        minutes = int(days) * 1440 + h * 60 + mi + se / 60
    elif len(parts) == 3:  # HH:MM:SS
        minutes = parts[0] * 60 + parts[1] + parts[2] / 60
    else:  # MM or MM:SS
        minutes = parts[0] + (parts[1] / 60 if len(parts) == 2 else 0)
    if not 0 < minutes <= MAX_TIME_MINUTES:
        raise bad
    return minutes


def sbatch_quote(value: str) -> str:
    """``value`` as one ``#SBATCH`` argument: double-quoted, ``"`` and ``\\`` escaped (sbatch's
    own parser of those lines; bash never reads them: they are comments)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def storage_args(storage: Storage, storage_file: str | None) -> tuple[str, ...]:
    """The worker's storage flags for a job script. A URL with a secret that did not come
    from ``--storage-file`` is refused: it would be written into the script."""
    if storage_file is not None:
        return ("--storage-file", str(Path(storage_file).resolve()))
    if storage.url != storage.masked:
        raise ValueError("the storage URL holds a password, which would be written into the job script; "
                         "put it in a file only you can read (chmod 600) and pass --storage-file FILE")
    return ("--storage", storage.url)


def sbatch_options(*, cpus: int, gpus: int, time: str | None, partition: str | None, account: str | None,
                   extra: tuple[str, ...], own: dict[str, str]) -> list[str]:
    """The ``#SBATCH`` lines every job script shares, each value checked: ``own`` maps the
    options the caller sets itself to the flag that sets them (refused in ``extra``)."""
    for opt in extra:
        if not _SAFE_OPT.match(opt):
            raise ValueError(f"--sbatch-arg {opt!r} must look like --option or --option=value")
        name = opt.split("=", 1)[0]
        if name in own:
            raise ValueError(f"--sbatch-arg {opt!r}: mutransfer sets {name} itself (from "
                             f"{own[name]}); drop it")
    if time is not None:
        time_minutes(time)
    lines = [f"#SBATCH --cpus-per-task={cpus}"]
    if gpus:
        lines.append(f"#SBATCH --gres=gpu:{gpus}")
    for opt, value in (("time", time), ("partition", partition), ("account", account)):
        if value is not None:
            if not re.fullmatch(r"[A-Za-z0-9_.:,+-]+", value):
                raise ValueError(f"--{opt} {value!r} has characters SLURM does not take")
            lines.append(f"#SBATCH --{opt}={value}")
    return lines + [f"#SBATCH {opt}" for opt in extra]


def _environment(cwd: str) -> list[str]:
    """The script's shell set-up: strict mode, the working folder, this checkout first on
    PYTHONPATH, one BLAS thread per allotted core."""
    root = check_text("mutransfer's folder", str(Path(__file__).resolve().parent.parent))
    q = shlex.quote
    return ["set -euo pipefail",
            f"cd {q(check_text('working folder', cwd))}",
            f'export PYTHONPATH={q(root)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
            'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"']


def job_script(job: SlurmJob, *, python: str | None = None, cwd: str | None = None) -> str:
    """The ``sbatch`` script of ``job`` (bash; the ``#SBATCH`` lines are comments to bash,
    so the script also runs as is, one worker, outside SLURM)."""
    if job.workers < 1:
        raise ValueError(f"--workers {job.workers} must be >= 1")
    check_text("study name", job.study)
    check_text("log folder", job.log_dir)
    q = shlex.quote
    python = check_text("python", python or sys.executable)
    array = f"0-{job.workers - 1}" + (f"%{job.max_parallel}" if job.max_parallel else "")
    lines = [
        "#!/bin/bash",
        f"# {job.workers} mutransfer sweep worker(s) of study {q(job.study)}, one per array task.",
        "# Written by `mutransfer sweep launch --slurm`; submit with `sbatch THIS_FILE`.",
        ("# The storage URL is not in this file: each worker reads it from its --storage-file."
         if "--storage-file" in job.storage_args else "# The storage holds no secret: it is named as is."),
        f"#SBATCH --job-name={slug('mutransfer-' + job.study)}",
        f"#SBATCH --array={array}",
        f"#SBATCH --output={sbatch_quote(job.log_dir + '/worker-%A_%a.log')}",
        *sbatch_options(cpus=job.cpus_per_worker, gpus=job.gpus_per_worker, time=job.time,
                        partition=job.partition, account=job.account, extra=job.extra, own=_OWN_OPTS),
    ]
    worker = [python, "-m", "mutransfer_cli", "sweep", "worker", *job.storage_args, "--study", job.study]
    tail = ['--worker-index "${SLURM_ARRAY_TASK_ID:-0}"']
    if job.fuse is not None:
        tail.append(f"--fuse {q(job.fuse)}")
    if job.track is not None:
        tail.append(f"--track {q(job.track)}")
    lines += [
        *_environment(cwd or os.getcwd())[:2],
        f"mkdir -p -- {q(job.log_dir)}  # SLURM needs it before the task starts: `launch` made it",
        *_environment(cwd or os.getcwd())[2:],
        "# one GPU per task: SLURM sets CUDA_VISIBLE_DEVICES to the task's own",
        "exec " + " ".join(q(a) for a in worker) + " " + " ".join(tail),
        "",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class SlurmTune:
    """``mutransfer tune --slurm``: the whole tune as one job on one node. Its stages depend
    on each other's results, so one driver runs them, with its sweep workers beside it
    (one per GPU of the job); a re-run resumes, so the job is requeueable."""

    argv: tuple[str, ...]
    """tune's own arguments, the SLURM flags taken out."""
    log_dir: str
    """Where the job's log goes (``tune-JOB.log``)."""
    gpus: int = 1
    """GPUs of the job (``--gres=gpu:N``): tune runs one sweep worker per GPU; 0 for CPU."""
    cpus: int = 8
    """CPU cores of the job."""
    time: str | None = None
    """Wall-clock limit (``--time``); None: from tune's ``--budget``."""
    partition: str | None = None
    """SLURM partition; None: the cluster's default."""
    account: str | None = None
    """SLURM account; None: the user's default."""
    extra: tuple[str, ...] = ()
    """More ``#SBATCH`` options, as given."""


#: ``#SBATCH`` options that ``tune --slurm`` sets itself.
_TUNE_OWN = {"--output": "--out", "-o": "--out", "--error": "--out", "-e": "--out",
             "--requeue": "tune --slurm (always requeueable)", "--array": "tune --slurm (one job)",
             "-a": "tune --slurm (one job)"}


def budget_time(budget_s: float) -> str:
    """The job's ``--time`` for a tune of ``budget_s`` seconds: the budget x 1.25 + 15 min.
    The plan fills the budget with runs; the coordinate check, fits and audit bookkeeping come
    on top (about 45 s on 2 CPU cores), and a loaded node overruns the probe's estimate."""
    minutes = math.ceil(budget_s * 1.25 / 60 + 15)
    if minutes > MAX_TIME_MINUTES:
        raise ValueError(f"--budget {budget_s:g} s gives a job longer than a year; pass --time")
    return f"{minutes // 1440}-{minutes % 1440 // 60:02d}:{minutes % 60:02d}:00"


def tune_script(job: SlurmTune, *, python: str | None = None, cwd: str | None = None) -> str:
    """The ``sbatch`` script running ``mutransfer tune`` once with ``job.argv`` (also runs as
    is outside SLURM, like :func:`job_script`)."""
    check_text("log folder", job.log_dir)
    for a in job.argv:
        check_text("tune argument", a)
    q = shlex.quote
    python = check_text("python", python or sys.executable)
    lines = [
        "#!/bin/bash",
        "# mutransfer tune as one job: the driver and one sweep worker per GPU on one node.",
        "# Written by `mutransfer tune --slurm`; submit with `sbatch THIS_FILE`. Requeueable:",
        "# a re-run of tune with the same --out resumes its plan and its studies.",
        "#SBATCH --job-name=mutransfer-tune",
        f"#SBATCH --output={sbatch_quote(job.log_dir + '/tune-%j.log')}",
        "#SBATCH --requeue",
        *sbatch_options(cpus=job.cpus, gpus=job.gpus, time=job.time, partition=job.partition,
                        account=job.account, extra=job.extra, own=_TUNE_OWN),
        *_environment(cwd or os.getcwd()),
        "exec " + " ".join(q(a) for a in (python, "-m", "mutransfer_cli", "tune", *job.argv)),
        "",
    ]
    return "\n".join(lines)


def slug(text: str) -> str:
    """``text`` as a file or job name: letters, digits, `_.-`, at most 64 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:64]


def sbatch_path() -> str:
    """The ``sbatch`` command; none on PATH: ValueError, one line."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise ValueError("sbatch is not on PATH: run this on a SLURM login node, or pass --dry-run "
                         "to print the job script")
    return sbatch


def submit_once(script: str, path: Path, *, log_dir: str, resubmit: bool, already: str, what: str) -> str:
    """Write ``script`` to ``path`` and submit it; ``path.submitted`` records the job (id,
    ``what``, time). A second submission from the same place is refused in one line (it
    would double the jobs and the bill, or race two drivers on one folder) unless
    ``resubmit``. ``already`` opens the refusal (what was submitted already)."""
    sbatch_path()  # before anything is written
    record = path.with_suffix(".submitted")
    if record.is_file() and not resubmit:
        raise ValueError(f"{already} ({record.read_text().strip()}; {record}); check it with squeue, or pass "
                         "--resubmit to submit again")
    Path(log_dir).mkdir(parents=True, exist_ok=True)  # SLURM opens the log before the job runs
    atomic_write_text(path, script)
    job_id = submit(path)
    atomic_write_text(record, f"job {job_id}, {what}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    return job_id


def submit(script: Path) -> str:
    """``sbatch --parsable SCRIPT``; returns the job id."""
    p = subprocess.run([sbatch_path(), "--parsable", str(script)], capture_output=True, text=True)
    if p.returncode != 0:
        raise ValueError(f"sbatch failed (exit {p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout.strip().split(";", 1)[0]
