"""``--track``: a tiny real ``sweep lr`` writes one TensorBoard / offline W&B run per trial;
the files are read back (tensorboard's EventAccumulator; the W&B run's ``.wandb`` record
log) and their values equal the trainer's history, re-run from each trial's stored config
(CPU training is deterministic), and the study's own told losses."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mutransfer_cli
from mutransfer.training.tracking import TRACK_ENV, group_labels, run_name

pytest.importorskip("tensorboard", reason="pip install 'mutransfer[track]'")
pytest.importorskip("wandb", reason="pip install 'mutransfer[track]'")

ROOT = Path(__file__).resolve().parents[2]
LRS = (2.0**-8, 2.0**-6)
WIDTH = 128  # twice the base width: muP gives the hidden and output groups their own LRs


def _sweep(out: Path, track: str, monkeypatch) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))
    argv = ["sweep", "lr", "--preset", "gpt-tiny", "--widths", str(WIDTH), "-p", "mup",
            "--lrs", ",".join(map(str, LRS)), "--steps", "6", "--batch-size", "4",
            "--set", "eval_every=3", "--set", "eval_sequences=8", "--set", "grad_accum=2",
            "--set", "base_width=64", "--device", "cpu", "--workers", "1", "--max-extend", "0",
            "--out", str(out), "--quiet", "--json", "--track", track]
    assert mutransfer_cli.main(argv) == 0
    assert TRACK_ENV not in os.environ  # the next command in this process is not tracked


def _trials(out: Path) -> list:
    from optuna.trial import TrialState

    from sweeps.worker import open_study

    study, _ = open_study(f"journal:{out / 'optuna.journal'}", "lr")
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(trials) == len(LRS)
    return trials


def _rerun(trial):
    """The trainer of the trial's config, run again: its history is the oracle."""
    from mutransfer.training.trainer import Trainer
    from sweeps.resolve import to_train_config

    config = dict(trial.user_attrs["config"])
    trainer = Trainer(to_train_config(config))
    trainer.group_lrs = {}  # step -> the LR each param group's optimizer held for that step
    for step in range(1, trainer.total_steps + 1):
        assert trainer.run_until(step)
        trainer.group_lrs[step] = [g["lr"] for g in trainer.opt.param_groups]
    trainer.close()
    return trainer


def _expected(trainer) -> dict[str, dict[int, float]]:
    """tag -> {step: value} the tracker must have logged, from the trainer itself."""
    groups = list(trainer.opt.param_groups)
    labels = group_labels(groups)
    exp: dict[str, dict[int, float]] = {"loss/train": {}, "grad_norm": {}, "gns": {}, "lr/base": {}}
    for lab in labels:
        exp[f"lr/{lab}"] = {}
    for rec in trainer.history:
        s = rec["step"]
        exp["loss/train"][s] = rec["loss"]
        exp["grad_norm"][s] = rec["grad_norm"]
        exp["lr/base"][s] = rec["lr"]
        if rec["gns"] is not None:
            exp["gns"][s] = rec["gns"]
    for step, lrs in trainer.group_lrs.items():
        for lab, lr in zip(labels, lrs):
            exp[f"lr/{lab}"][step] = lr
    exp["loss/val"] = {s: v for s, v in trainer.evals}
    return exp


def test_sweep_lr_track_tensorboard_one_run_per_trial_equal_to_the_history(tmp_path, monkeypatch) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv(TRACK_ENV, "")
    monkeypatch.delenv(TRACK_ENV)
    out = tmp_path / "tb"
    _sweep(out, "tensorboard", monkeypatch)
    trials = _trials(out)
    runs = sorted(p.name for p in (out / "tensorboard").iterdir())
    assert runs == sorted(run_name(t.user_attrs["point"]) for t in trials)  # one run per trial, by its point
    for t in trials:
        ea = EventAccumulator(str(out / "tensorboard" / run_name(t.user_attrs["point"])),
                              size_guidance={"scalars": 0, "tensors": 0})
        ea.Reload()
        trainer = _rerun(t)
        exp = _expected(trainer)
        labels = group_labels(list(trainer.opt.param_groups))
        assert {"hidden", "output"} <= set(labels)
        hidden, output = exp["lr/hidden"][3], exp["lr/output"][3]
        assert hidden < exp["lr/base"][3] * 0.75 and output != hidden  # muP at 2x: groups differ
        for tag, want in exp.items():
            got = {e.step: e.value for e in ea.Scalars(tag)}
            assert sorted(got) == sorted(want), tag
            for s, v in want.items():  # event files hold float32
                assert got[s] == pytest.approx(float(np.float32(v)), rel=1e-6, abs=0), (tag, s)
        # the trial's own held-out loss, as the study was told it
        assert ea.Scalars("loss/val")[-1].value == pytest.approx(float(np.float32(t.value)), rel=1e-6)
        text = ea.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
        cfg = json.loads(text.strip("`\n"))
        assert cfg["lr"] == t.params["lr"] and cfg["trial"] == t.number and cfg["width"] == WIDTH


def _wandb_records(path: Path):
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then
    LevelDB-log records (crc32c, length, type) in 32 KiB blocks, each a protobuf Record."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind in (1, 4):  # FULL, LAST
            rec = pb.Record()
            rec.ParseFromString(buf + chunk if kind == 4 else chunk)
            buf = b""
            yield rec
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk


def test_sweep_lr_track_wandb_offline_runs_equal_to_the_history(tmp_path, monkeypatch) -> None:
    for var in (TRACK_ENV, "WANDB_MODE", "WANDB_DIR"):  # unset here, restored after the test
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    # anything that tried the network would meet a closed local port
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    out = tmp_path / "wb"
    _sweep(out, "wandb:mt-test", monkeypatch)
    assert os.environ.get("WANDB_MODE") == "offline"  # set because it was unset
    trials = _trials(out)
    files = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == len(trials)  # one offline run per trial, none online
    by_name = {}
    for f in files:
        recs = list(_wandb_records(f))
        run = next(r.run for r in recs if r.WhichOneof("record_type") == "run")
        assert run.project == "mt-test"
        config = {i.key: json.loads(i.value_json) for i in run.config.update}
        history: dict[str, dict[int, float]] = {}
        for r in recs:
            if r.WhichOneof("record_type") == "history":
                row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
                for k, v in row.items() if "_step" in row else ():  # the rest: W&B's own
                    if not k.startswith("_"):
                        history.setdefault(k, {})[int(row["_step"])] = v
        by_name[run.display_name] = (config, history)
    assert sorted(by_name) == sorted(run_name(t.user_attrs["point"]) for t in trials)
    for t in trials:
        config, history = by_name[run_name(t.user_attrs["point"])]
        assert config["lr"] == t.params["lr"] and config["trial"] == t.number
        exp = _expected(_rerun(t))
        for tag, want in exp.items():
            assert sorted(history[tag]) == sorted(want), tag
            for s, v in want.items():  # JSON doubles: equal to the last bit but for the LR ratio
                assert history[tag][s] == pytest.approx(v, rel=1e-12), (tag, s)
        assert history["loss/train"] == {r: v for r, v in exp["loss/train"].items()}  # exactly
        assert history["loss/val"][6] == t.value


def test_track_without_the_package_is_one_clear_line(tmp_path) -> None:
    code = ("import sys; sys.modules['wandb'] = None; import mutransfer_cli; "
            f"sys.exit(mutransfer_cli.main(['train', '--set', 'steps=1', '--out', {str(tmp_path / 'o')!r}, "
            "'--track', 'wandb']))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(TRACK_ENV, None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "wandb" in lines[0] and "pip install 'mutransfer[track]'" in lines[0]
    assert not (tmp_path / "o" / "result.json").exists()


@pytest.mark.parametrize("bad", ["mlflow", "tensorboard:", "wandb:no/slash"])
def test_track_rejects_bad_targets(bad: str) -> None:
    from mutransfer.training.tracking import parse_track

    with pytest.raises(ValueError, match="--track"):
        parse_track(bad)


def test_run_names_are_the_grid_point() -> None:
    assert run_name({"width": 64, "lr": 2.0**-8, "parametrization": "mup"}) == \
        "lr=0.003906,parametrization=mup,width=64"
    assert "/" not in run_name({"model": "hf:/a/b"})


def test_train_track_tensorboard_logs_the_run_as_its_result_json(tmp_path, monkeypatch) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run1"
    argv = ["train", "--preset", "gpt-tiny", "--set", "steps=8", "--set", "batch_size=4",
            "--set", "eval_every=4", "--set", "eval_sequences=8", "--set", "threads=1",
            "--out", str(out), "--quiet", "--track", f"tensorboard:{tmp_path / 'tb'}"]
    assert mutransfer_cli.main(argv) == 0
    result = json.loads((out / "result.json").read_text())
    history = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    ea = EventAccumulator(str(tmp_path / "tb" / "run1"), size_guidance={"scalars": 0})
    ea.Reload()
    assert [(e.step, e.value) for e in ea.Scalars("loss/val")] == \
        [(s, pytest.approx(float(np.float32(v)), rel=1e-6)) for s, v in result["evals"]]
    assert [(e.step, e.value) for e in ea.Scalars("loss/train")] == \
        [(h["step"], pytest.approx(float(np.float32(h["loss"])), rel=1e-6)) for h in history]


PLANTED = "PlantedPw4711"


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.parametrize("track", ["wandb", "tensorboard"])
def test_a_password_in_the_storage_url_on_the_command_line_is_in_no_file_the_run_writes(
        tmp_path, track) -> None:
    # W&B records the argv; with --workers 1 the trial runs in the process whose argv holds
    # the URL, and `sweep worker` started by hand has it too
    url = f"sqlite:///{tmp_path / 'db.sqlite'}?password={PLANTED}"
    env = {k: v for k, v in os.environ.items() if k not in (TRACK_ENV, "MUTRANSFER_STORAGE", "WANDB_DIR")}
    env.update(PYTHONPATH=str(ROOT), WANDB_MODE="offline", WANDB_BASE_URL="http://127.0.0.1:9",
               HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    base = ["sweep", "lr", "--preset", "gpt-tiny", "--widths", "32", "-p", "mup", "--lrs", "0.01",
            "--steps", "2", "--batch-size", "2", "--set", "eval_sequences=4", "--device", "cpu",
            "--max-extend", "0", "--storage", url, "--out", str(tmp_path / "o"), "--quiet"]
    runs = [[*base, "--workers", "1", "--track", track]]
    if track == "wandb":
        runs += [[("0.01,0.02" if a == "0.01" else a) for a in base] + ["--prepare-only"],
                 ["sweep", "worker", "--storage", url, "--quiet", "--track", f"wandb:mt-{track}"]]
    for argv in runs:
        p = subprocess.run([sys.executable, "-m", "mutransfer_cli", *argv], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=300)
        assert p.returncode == 0, p.stderr
        assert PLANTED not in p.stdout + p.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "db.sqlite"]
    kinds = {"wandb": ".wandb", "tensorboard": "events.out.tfevents"}
    assert sum(kinds[track] in p.name for p in written) == len(runs) - (track == "wandb")
    assert _files_holding(tmp_path, PLANTED) == []


def _lr_sweep(tmp_path: Path, *extra: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in (TRACK_ENV, "MUTRANSFER_STORAGE")}
    base.update({"PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", **(env or {})})
    argv = ["sweep", "lr", "--preset", "gpt-tiny", "--widths", "32", "-p", "mup", "--lrs", "0.01,0.02",
            "--steps", "2", "--batch-size", "2", "--set", "eval_sequences=4", "--device", "cpu",
            "--max-extend", "0", "--out", str(tmp_path / "o"), "--quiet", *extra]
    return subprocess.run([sys.executable, "-m", "mutransfer_cli", *argv], capture_output=True, text=True,
                          env=base, cwd=tmp_path, timeout=300)


@pytest.mark.parametrize("value", ["{not json", '{"kind": "mlflow", "target": "x"}', "[1, 2]"])
def test_a_malformed_track_variable_is_one_line_naming_it_before_any_trial(tmp_path, value) -> None:
    p = _lr_sweep(tmp_path, "--workers", "1", env={TRACK_ENV: value})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"${TRACK_ENV}=" in p.stderr
    assert not (tmp_path / "o" / "optuna.journal").exists()  # no trial ran


def test_a_broken_tracker_package_is_one_line_and_the_sweep_stops(tmp_path) -> None:
    # an install whose import fails: every trial would fail alike
    fake = tmp_path / "site" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('broken wandb install')\n")
    p = _lr_sweep(tmp_path, "--workers", "1", "--track", "wandb",
                  env={"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{ROOT}"})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert ("--track wandb: the tracker could not start a run (RuntimeError: broken wandb install)"
            in p.stderr)
    assert "1 trial(s) failed on it" in p.stderr  # the worker stopped at the first
