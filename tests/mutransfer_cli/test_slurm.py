"""The SLURM job script (``mutransfer_cli._slurm``): whatever a study name, an output folder
or an ``--sbatch-arg`` holds, the script runs exactly one worker command and nothing else.
The scripts are really run under bash; a file named by injected text must never appear."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mutransfer_cli._slurm import SlurmJob, job_script, time_minutes

ROOT = Path(__file__).resolve().parents[2]
SYN = "sweeps.runners:synthetic_runner"
#: Names that break out of an unquoted or badly quoted shell word; each names a file that
#: must never be created.
HOSTILE = ["$(touch PWNED_a)", "`touch PWNED_b`", "x; touch PWNED_c", "it's \"quoted\" $HOME",
           "a b\\ c ' ; touch PWNED_d #", "${IFS}touch${IFS}PWNED_e"]


def _cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MUTRANSFER_STORAGE", None)
    return subprocess.run([sys.executable, "-m", "mutransfer_cli", *argv], capture_output=True, text=True,
                          env=env, timeout=180, cwd=cwd)


def _pwned(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("PWNED*")]


def _sbatch_value(script: str, opt: str) -> str:
    """The value of ``#SBATCH --opt=...`` as sbatch reads it (double quotes, backslash escapes,
    the rules of POSIX shell words for ``"`` and ``\\``)."""
    line = next(x for x in script.splitlines() if x.startswith(f"#SBATCH --{opt}="))
    words = shlex.split(line[len("#SBATCH "):])
    assert len(words) == 1, line
    return words[0].split("=", 1)[1]


@pytest.mark.parametrize("study", HOSTILE)
def test_a_hostile_study_name_and_folders_reach_the_worker_verbatim_and_run_nothing(tmp_path, study) -> None:
    here = tmp_path / "cwd $(touch PWNED_cwd) 'q'"
    here.mkdir()
    logs = tmp_path / "logs `touch PWNED_log` \"dq\" \\ back"
    record = tmp_path / "argv.json"
    # a stand-in for python: records the argv the script execs it with
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    job = SlurmJob(study=study, workers=2,
                   storage_args=("--storage", f"journal:{tmp_path}/j $(touch PWNED_j)"),
                   log_dir=str(logs), track="tensorboard:/tmp/tb $(touch PWNED_t)", fuse="auto",
                   extra=("--comment=$(touch PWNED_x) 'y'",))
    script = job_script(job, python=str(fake), cwd=str(here))
    path = tmp_path / "job.sh"
    path.write_text(script)
    p = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                       env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"})
    assert p.returncode == 0, p.stderr
    assert _pwned(tmp_path, Path.cwd()) == []
    argv = json.loads(record.read_text())
    assert argv == ["-m", "mutransfer_cli", "sweep", "worker", "--storage",
                    f"journal:{tmp_path}/j $(touch PWNED_j)", "--study", study, "--worker-index", "1",
                    "--fuse", "auto", "--track", "tensorboard:/tmp/tb $(touch PWNED_t)"]
    assert logs.is_dir()  # the script makes its log folder (quoted)
    # sbatch reads the log path back whole, quotes and all
    assert _sbatch_value(script, "output") == f"{logs}/worker-%A_%a.log"
    # the comment line names the study as one shell word, on one line
    assert sum(1 for x in script.splitlines() if not x.startswith("#")) == 6


@pytest.mark.parametrize("field", ["study", "log_dir"])
def test_a_newline_in_a_name_written_into_the_script_is_refused(field) -> None:
    evil = "x\ntouch PWNED"
    job = SlurmJob(**{"study": "lr", "workers": 1, "storage_args": ("--storage", "j"), field: evil})
    with pytest.raises(ValueError, match="newline") as e:
        job_script(job, python=sys.executable, cwd="/tmp")
    assert len(str(e.value).splitlines()) == 1 and "\\n" in str(e.value)
    with pytest.raises(ValueError, match="working folder"):
        job_script(SlurmJob("lr", 1, ("--storage", "j")), python=sys.executable, cwd="/tmp/a\rb")


@pytest.mark.parametrize(("text", "minutes"), [("90", 90), ("90:30", 90.5), ("04:00:00", 240),
                                                ("2-00", 2880), ("1-02:30", 1590), ("1-00:00:30", 1440.5),
                                                ("365-00:00:00", 525600)])
def test_slurm_time_forms_in_minutes(text, minutes) -> None:
    assert time_minutes(text) == pytest.approx(minutes)


@pytest.mark.parametrize("text", ["-5", "0", "00:00:00", "abc", "366-00", "1e9", "4:00:00\n", "4h", ""])
def test_a_bad_or_unbounded_time_is_refused_naming_the_flag(text) -> None:
    with pytest.raises(ValueError, match="--time"):
        job_script(SlurmJob("lr", 1, ("--storage", "j"), time=text), python=sys.executable, cwd="/tmp")


@pytest.mark.parametrize("opt", ["--array=0-999", "-a=1", "--output=/tmp/x", "-o=x", "--error=y"])
def test_an_sbatch_arg_that_launch_sets_itself_is_refused(opt) -> None:
    with pytest.raises(ValueError, match="sets .* itself"):
        job_script(SlurmJob("lr", 1, ("--storage", "j"), extra=(opt,)), python=sys.executable, cwd="/tmp")


def test_launch_dry_run_script_runs_a_hostile_study_for_real_and_makes_its_log_folder(tmp_path) -> None:
    from sweeps.spec_kinds import LRSweep
    from sweeps.study import prepare

    study = "lr $(touch PWNED_s) `touch PWNED_b` 'q' \"d\""
    journal = tmp_path / "optuna.journal"
    prepare(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(2.0**-7,)), f"journal:{journal}",
            study_name=study, runner=SYN)
    out = tmp_path / "out $(touch PWNED_o) 'x'"
    p = _cli("sweep", "launch", "--slurm", "--storage", str(journal), "--workers", "1", "--gpus-per-worker",
             "0", "--time", "10", "--out", str(out), "--dry-run")
    assert p.returncode == 0, p.stderr
    assert (out / "slurm" / "logs").is_dir()  # a hand-submitted script has its log folder
    script = tmp_path / "job.sh"
    script.write_text(p.stdout)
    env = {k: v for k, v in os.environ.items() if k not in ("MUTRANSFER_STORAGE", "MUTRANSFER_PARENT_PID")}
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=180,
                         env={**env, "SLURM_ARRAY_TASK_ID": "0", "SLURM_CPUS_PER_TASK": "1"})
    assert run.returncode == 0, run.stderr
    assert _pwned(tmp_path) == []
    from optuna.trial import TrialState

    from sweeps.worker import open_study

    s, _ = open_study(f"journal:{journal}", study)
    assert [t.state for t in s.get_trials(deepcopy=False)] == [TrialState.COMPLETE]


def test_launch_refuses_a_study_whose_name_holds_a_newline_in_one_line(tmp_path) -> None:
    import optuna

    from sweeps.attrs import STUDY_ATTR
    from sweeps.spec_kinds import LRSweep
    from sweeps.study import prepare
    from sweeps.worker import open_study

    # a sweep's study copied under a name prepare refuses (an older version, or another
    # tool, made it): launch picks it as the storage's only study
    good = prepare(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(2.0**-7,)),
                   f"journal:{tmp_path / 'good.journal'}", study_name="lr", runner=SYN)
    settings = open_study(good.storage, "lr")[0].user_attrs[STUDY_ATTR]
    journal = tmp_path / "nl.journal"
    bad = optuna.create_study(study_name="x\ntouch PWNED", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))))
    bad.set_user_attr(STUDY_ATTR, settings)
    p = _cli("sweep", "launch", "--slurm", "--storage", str(journal), "--workers", "1", "--out",
             str(tmp_path), "--dry-run", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "newline" in p.stderr and p.stdout == ""
    # and the sweep that would make it refuses the name first
    p = _cli("sweep", "lr", "--storage", str(tmp_path / "b.journal"), "--study", "x\ntouch PWNED",
             "--widths", "32", "--prepare-only", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "study name" in p.stderr
    assert _pwned(tmp_path) == []


def test_a_second_launch_of_the_same_study_is_refused_unless_resubmit(tmp_path) -> None:
    from sweeps.spec_kinds import LRSweep
    from sweeps.study import prepare

    journal = tmp_path / "optuna.journal"
    prepare(LRSweep(widths=(32,), parametrizations=("mup",), lrs=(2.0**-7,)), f"journal:{journal}",
            study_name="lr", runner=SYN)
    # a stand-in for sbatch: records each submission, answers a job id as --parsable does
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch-calls"
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho \"$@\" >> {shlex.quote(str(calls))}\necho 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MUTRANSFER_STORAGE", None)
    argv = [sys.executable, "-m", "mutransfer_cli", "sweep", "launch", "--slurm", "--storage", str(journal),
            "--workers", "2", "--out", str(tmp_path)]

    def launch(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*argv, *extra], capture_output=True, text=True, env=env, timeout=120)

    p = launch()
    assert p.returncode == 0 and "submitted job 4242" in p.stderr, p.stderr
    assert (tmp_path / "slurm" / "lr.submitted").read_text().startswith("job 4242, 2 workers")
    p = launch()
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "study 'lr' was submitted from here already (job 4242" in p.stderr and "--resubmit" in p.stderr
    assert launch("--resubmit").returncode == 0
    assert len(calls.read_text().splitlines()) == 2  # the refused launch submitted nothing


def _exec_words(script: str) -> list[str]:
    """The words bash execs on the script's last command line."""
    line = next(x for x in script.splitlines() if x.startswith("exec "))
    return shlex.split(line)[1:]


def test_tune_slurm_submits_the_same_tune_minus_its_slurm_flags(tmp_path) -> None:
    out = tmp_path / "runs $(touch PWNED_o) 'tune'"
    tune = ["--preset", "llama-small", "--target-width", "64", "--target-depth", "4", "--tokens", "1e5",
            "--budget", "2h", "--out", str(out), "--set", "seq_len=16"]
    p = _cli("tune", *tune[:10], "--slurm", "--time=90", "--gpus", "2", "--sbatch-arg=--constraint=a100",
             "--dry-run", *tune[10:], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # the job runs tune with exactly the user's words, the SLURM ones taken out (both forms)
    assert _exec_words(p.stdout) == [sys.executable, "-m", "mutransfer_cli", "tune", *tune]
    assert "#SBATCH --gres=gpu:2" in p.stdout and "#SBATCH --time=90" in p.stdout
    assert "#SBATCH --requeue" in p.stdout and "#SBATCH --constraint=a100" in p.stdout
    assert _sbatch_value(p.stdout, "output") == f"{out}/slurm/logs/tune-%j.log"
    assert (out / "slurm" / "logs").is_dir()
    # no --time: the budget x 1.25 + 15 minutes (2 h -> 165 min); --workers gives the GPUs
    p = _cli("tune", *tune, "--workers", "4", "--slurm", "--dry-run", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "#SBATCH --time=0-02:45:00" in p.stdout and "#SBATCH --gres=gpu:4" in p.stdout
    p = _cli("tune", *tune, "--device", "cpu", "--slurm", "--dry-run", cwd=tmp_path)
    assert p.returncode == 0 and "--gres" not in p.stdout, p.stderr
    assert _pwned(tmp_path) == []


@pytest.mark.parametrize("extra, word", [(["--dry-run"], "--dry-run goes with --slurm"),
                                         (["--time", "90"], "--time goes with --slurm"),
                                         (["--slurm", "--sbatch-arg=--requeue"], "sets --requeue itself"),
                                         (["--slurm", "--device", "cpu", "--gpus", "2"], "--gpus 2 with --device cpu"),
                                         (["--slurm", "--time", "-5"], "--time '-5'")])
def test_tune_slurm_flags_out_of_place_are_one_line(tmp_path, extra, word) -> None:
    p = _cli("tune", "--preset", "llama-small", "--target-width", "64", "--target-depth", "4", "--tokens",
             "1e5", "--budget", "60s", "--out", str(tmp_path / "o"), *extra, cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert word in p.stderr
    assert not (tmp_path / "o" / "plan.json").exists()  # nothing ran


def test_the_tune_script_runs_its_argv_verbatim_under_bash(tmp_path) -> None:
    from mutransfer_cli._slurm import SlurmTune, tune_script

    record = tmp_path / "argv.json"
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    argv = ("--preset", "llama-small", "--out", *HOSTILE)
    script = tmp_path / "tune.sbatch"
    script.write_text(tune_script(SlurmTune(argv=argv, log_dir=str(tmp_path / "logs `touch PWNED_l`")),
                                  python=str(fake), cwd=str(tmp_path)))
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(record.read_text()) == ["-m", "mutransfer_cli", "tune", *argv]
    assert _pwned(tmp_path) == []
    with pytest.raises(ValueError, match="newline"):
        tune_script(SlurmTune(argv=("--out", "a\nb"), log_dir="l"))


def test_a_second_tune_submission_of_one_out_is_refused_unless_resubmit(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch-calls"
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho \"$@\" >> {shlex.quote(str(calls))}\necho 77\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    argv = [sys.executable, "-m", "mutransfer_cli", "tune", "--preset", "llama-small", "--target-width", "64",
            "--target-depth", "4", "--tokens", "1e5", "--budget", "1h", "--out", str(tmp_path / "t"), "--slurm"]

    def submit(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*argv, *extra], capture_output=True, text=True, env=env, timeout=120)

    p = submit()
    assert p.returncode == 0 and "submitted job 77" in p.stderr, p.stderr
    assert (tmp_path / "t" / "slurm" / "tune.submitted").read_text().startswith("job 77, 1 GPUs")
    assert "--requeue" in (tmp_path / "t" / "slurm" / "tune.sbatch").read_text()
    p = submit()
    assert p.returncode == 2 and "submitted already (job 77" in p.stderr and "--resubmit" in p.stderr
    assert submit("--resubmit").returncode == 0
    assert len(calls.read_text().splitlines()) == 2
