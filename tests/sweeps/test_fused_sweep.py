"""``--fuse K``: sweeps whose workers train several trials as one batched model.

Real journal storage and the real trainer (gpt-tiny, a few steps on CPU): a fused sweep
must export the same results table as the unfused sweep of the same spec, member by member
(losses to float tolerance), with divergence and pruning told per trial; a SIGKILLed fused
worker loses none of its trials.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections import Counter
from typing import Any

import pandas as pd
import pytest

import mutransfer.training.fused  # noqa: E402,F401  (an import error fails, never skips)
import mutransfer_cli
from sweeps.results import results_table
from sweeps.spec_base import point_key
from sweeps.spec_kinds import LRSweep
from sweeps.storage import Storage
from sweeps.study import prepare, run_sweep
from sweeps.worker import open_study, spawn_workers

BASE = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_sequences": 8}
LRS = (2.0**-8, 2.0**-6, 2.0**-4)
KEY = ["width", "lr", "seed"]
# the trainer's wall clock and throughput differ between a fused and an unfused run
TIMING = {"wall_s", "tokens_per_s"}


def _spec(**kw: Any) -> LRSweep:
    kw.setdefault("widths", (32, 64))
    kw.setdefault("parametrizations", ("mup",))
    kw.setdefault("lrs", LRS)
    kw.setdefault("base", BASE)
    return LRSweep(**kw)


@pytest.fixture
def fused_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the train_fused calls made in this process."""

    sizes: list[int] = []
    real = mutransfer.training.fused.train_fused

    def spy(configs: Any, **kw: Any) -> Any:
        sizes.append(len(configs))
        return real(configs, **kw)

    monkeypatch.setattr(mutransfer.training.fused, "train_fused", spy)
    return sizes


def _table(url: Storage | str) -> pd.DataFrame:
    study, _ = open_study(url, None)
    return results_table(study).sort_values(KEY).reset_index(drop=True)


def _assert_same_table(fused: pd.DataFrame, plain: pd.DataFrame) -> float:
    """Same columns, same rows, same values (losses to float tolerance); returns the largest
    absolute loss difference."""
    assert list(fused.columns) == list(plain.columns)
    assert len(fused) == len(plain)
    for col in fused.columns:
        if col in TIMING or col == "trial":
            continue
        a, b = fused[col], plain[col]
        if pd.api.types.is_float_dtype(a) and pd.api.types.is_float_dtype(b):
            both_nan = a.isna() & b.isna()
            assert ((a - b).abs() <= 1e-5 * b.abs().clip(lower=1.0) + 1e-7)[~both_nan].all(), col
        else:
            assert a.tolist() == b.tolist(), col
    return float(max((fused[c] - plain[c]).abs().max() for c in ("loss", "train_loss")))


def test_fused_lr_sweep_exports_the_unfused_table(tmp_path, fused_calls) -> None:
    spec = _spec()
    plain = run_sweep(spec, out=tmp_path / "plain", device="cpu")
    assert plain.complete and fused_calls == []
    fused = run_sweep(spec, out=tmp_path / "fused", device="cpu", fuse=4)
    assert fused.complete and fused.counts.complete == 6
    # two widths cannot share a batched model: one group of 3 per width, K=4 not reached
    assert fused_calls == [3, 3]
    a, b = _table(fused.plan.storage), _table(plain.plan.storage)
    assert _assert_same_table(a, b) < 1e-5
    assert a["loss"].map(math.isfinite).all() and not a["diverged"].any()

    fs, _ = open_study(fused.plan.storage, None)
    ps, _ = open_study(plain.plan.storage, None)
    by_key = {t.user_attrs["point_key"]: t for t in ps.trials}
    for t in fs.trials:
        u = by_key[t.user_attrs["point_key"]]
        # the same attrs (plus fused_with) and the same curve told to the pruner
        assert set(t.user_attrs) - set(u.user_attrs) == {"fused_with"}
        assert len(t.user_attrs["fused_with"]) == 3 and t.number in t.user_attrs["fused_with"]
        assert t.user_attrs["config"] == u.user_attrs["config"]
        assert t.intermediate_values.keys() == u.intermediate_values.keys() == {3, 6}
        for step, v in t.intermediate_values.items():
            assert v == pytest.approx(u.intermediate_values[step], rel=1e-5)

    # resume: the same command enqueues and runs nothing
    again = run_sweep(spec, out=tmp_path / "fused", device="cpu", fuse=4)
    assert again.plan.enqueued == 0 and again.plan.finished == 6 and fused_calls == [3, 3]
    assert len(fs.get_trials()) == 6


class _PruneLR:
    """A pruner that stops exactly the trials at ``lr`` (deterministic, unlike the median
    pruner, whose decisions depend on which trials finished first)."""

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def prune(self, study: Any, trial: Any) -> bool:
        return bool(trial.params.get("lr") == self.lr)


def test_a_diverging_and_a_pruned_member_leave_the_others_alone(tmp_path, monkeypatch, fused_calls) -> None:
    import sweeps.worker

    monkeypatch.setattr(sweeps.worker, "make_pruner", lambda spec: _PruneLR(2.0**-6))
    # 2^3 diverges within 6 steps; 2^-6 is pruned at its first evaluation (step 3)
    spec = _spec(widths=(32,), lrs=(2.0**-8, 2.0**-6, 2.0**-4, 2.0**3))
    fused = run_sweep(spec, out=tmp_path / "fused", device="cpu", fuse=4)
    plain = run_sweep(spec, out=tmp_path / "plain", device="cpu")
    assert fused_calls == [4]
    for res in (fused, plain):
        c = res.counts
        assert (c.complete, c.diverged, c.pruned) == (3, 1, 1) and res.complete
    a, b = _table(fused.plan.storage), _table(plain.plan.storage)
    _assert_same_table(a, b)
    assert a["diverged"].tolist() == [False, False, False, True]
    assert a["state"].tolist() == ["COMPLETE", "PRUNED", "COMPLETE", "COMPLETE"]
    study, _ = open_study(fused.plan.storage, None)
    t = {tr.params["lr"]: tr for tr in study.trials}
    div = t[2.0**3]
    assert div.user_attrs["diverged"] and math.isfinite(div.value)
    assert div.value == div.user_attrs["told_value"] >= math.log(256)
    assert t[2.0**-6].user_attrs["row"]["pruned"] and t[2.0**-6].user_attrs["row"]["steps_done"] == 3
    for lr in (2.0**-8, 2.0**-4):
        assert not t[lr].user_attrs["diverged"] and t[lr].user_attrs["row"]["steps_done"] == 6


def _main(*argv: str) -> int:
    return mutransfer_cli.main(["sweep", *argv])


@pytest.mark.parametrize("value", ["0", "-2", "x", "1.5"])
def test_bad_fuse_exits_2_naming_the_value(tmp_path, capsys, monkeypatch, value) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))
    assert _main("lr", "--widths", "32", "--fuse", value, "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert f"fuse {value!r}" in err and "--fuse" in err
    assert not (tmp_path / "o").exists()
    assert _main("worker", "--storage", str(tmp_path), "--fuse", value) == 2
    assert f"fuse {value!r}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=f"fuse {value!r}"):
        run_sweep(_spec(), out=tmp_path / "p", fuse=value)


def test_fuse_is_a_study_default_for_joining_workers(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))
    syn = ["--runner", "sweeps.runners:synthetic_runner"]
    assert _main("lr", "--widths", "32", "-p", "mup", "--lrs", "0.001,0.01,0.1", "--out", str(tmp_path),
                 "--fuse", "auto", "--prepare-only", *syn) == 0
    capsys.readouterr()
    assert _main("worker", "--storage", str(tmp_path)) == 0
    assert "complete 3" in capsys.readouterr().err
    study, settings = open_study(f"journal:{tmp_path / 'optuna.journal'}", None)
    assert settings.fuse == "auto"
    assert [len(t.user_attrs["fused_with"]) for t in study.trials] == [3, 3, 3]


def test_a_runner_without_a_fused_variant_is_refused(tmp_path) -> None:
    def plain(config: dict[str, Any], report: Any) -> dict[str, Any]:
        return {"loss": 1.0}

    with pytest.raises(ValueError, match="fused variant"):
        run_sweep(_spec(widths=(32,)), out=tmp_path, runner=plain, fuse=2)


SLEEP_S = 0.4  # per member: the synthetic fused runner runs its members one after another


@pytest.mark.slow
def test_a_sigkilled_fused_worker_loses_no_trial(tmp_path) -> None:
    """Kill a worker while it holds a fused group of 3 RUNNING trials: all 3 are failed
    and re-queued, the other worker finishes the grid, each point completes exactly once."""
    from optuna.trial import TrialState

    syn = "sweeps.runners:synthetic_runner"
    # 3 widths: 3 groups of 3, so both workers get a group even if one starts late
    spec = LRSweep(widths=(32, 64, 128), parametrizations=("mup",), lrs=(2.0**-9, 2.0**-7, 2.0**-5))
    url = f"journal:{tmp_path / 'optuna.journal'}"
    assert prepare(spec, url, runner=syn, heartbeat_interval=1, grace_period=60, fuse=3).enqueued == 9
    procs = spawn_workers(url, "lr", 2, extra_env={"MUTRANSFER_SYNTHETIC_SLEEP": str(SLEEP_S)})
    study, _ = open_study(url, "lr")
    held: list[int] = []
    victim = None
    try:
        deadline = time.time() + 60
        while victim is None and time.time() < deadline:
            by_pid: dict[int, list[int]] = {}
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                if "fused_with" in t.user_attrs:
                    by_pid.setdefault(int(t.user_attrs["pid"]), []).append(t.number)
            # the first worker seen holding a whole group is the victim
            victim = next((p for p in procs if len(by_pid.get(p.pid, [])) == 3), None)
            if victim is not None:
                held = by_pid[victim.pid]
            time.sleep(0.05)
        assert victim is not None, "no worker was seen holding a fused group"
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        assert [p.wait(timeout=90) for p in procs if p is not victim] == [0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    trials = study.get_trials(deepcopy=False)
    states = Counter(t.state for t in trials)
    assert states[TrialState.RUNNING] == 0 and states[TrialState.WAITING] == 0
    complete = Counter(t.user_attrs["point_key"] for t in trials if t.state == TrialState.COMPLETE)
    assert complete == Counter({point_key(p): 1 for p in spec.points()})
    # the kill lands mid-run (a group sleeps 3 x SLEEP_S): the held trials are failed and
    # each retried once, to completion; none is lost, none runs twice
    failed = {t.number for t in trials if t.number in held and t.state == TrialState.FAIL}
    retried = Counter(t.user_attrs.get("retry_of") for t in trials if t.state == TrialState.COMPLETE)
    assert failed == set(held)
    assert all(retried[n] == 1 for n in held)
    assert prepare(spec, url, runner=syn, heartbeat_interval=1, grace_period=60).enqueued == 0


def test_a_member_failed_elsewhere_is_lost_and_the_others_finish(tmp_path) -> None:
    """Another worker's stale sweep fails one member mid-run (as after a missed heartbeat):
    that member is dropped from the fused run and not told again; the others complete."""
    from optuna.trial import TrialState

    from sweeps.worker import work

    url = f"journal:{tmp_path / 'optuna.journal'}"
    prepare(_spec(widths=(32,)), url, runner="sweeps.runners:synthetic_runner")
    other, _ = open_study(url, None)  # "another worker's" handle on the study

    def fused(configs: list[dict[str, Any]], reports: list[Any]) -> list[Any]:
        victim = min(t.number for t in other.get_trials(states=(TrialState.RUNNING,)))
        assert other.fail(victim)
        rows = []
        for config, report in zip(configs, reports, strict=True):
            pruned = report(1, 3.0)  # the victim's report finds its trial finished
            rows.append({"loss": 2.0, "lr": config["lr"], "pruned": pruned})
        return rows

    def runner(config: dict[str, Any], report: Any) -> dict[str, Any]:
        raise AssertionError("a fused group of 3 never runs unfused")

    runner.fused = fused  # type: ignore[attr-defined]
    rep = work(url, None, runner=runner, fuse=3)
    assert rep.outcomes == Counter({"lost": 1, "complete": 2})
    states = [t.state for t in open_study(url, None)[0].trials]
    assert states == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]


def test_a_fused_trial_config_is_resolved_once(tmp_path, fused_calls, monkeypatch) -> None:
    """validation, the claim (fusion key), the trial's provenance attrs and the
    fused runner share one TrainConfig per trial instead of resolving it up to 4 times."""
    from mutransfer.training.config import TrainConfig
    from sweeps.resolve import _to_train_config, to_train_config

    _to_train_config.cache_clear()
    resolved: list[dict[str, Any]] = []
    real = TrainConfig.from_overrides.__func__  # type: ignore[attr-defined]

    def counting(cls: Any, base: Any = None, overrides: Any = None) -> Any:
        resolved.append(dict(overrides or {}))
        return real(cls, base, overrides)

    monkeypatch.setattr(TrainConfig, "from_overrides", classmethod(counting))
    spec = _spec(widths=(32,))
    fused = run_sweep(spec, out=tmp_path / "fused", device="cpu", fuse=4)
    assert fused.complete and fused_calls == [3]
    lrs = sorted(c["lr"] for c in resolved)
    assert lrs == sorted(LRS), resolved  # one resolution per trial, no more
    # the memo tells apart values that are equal but of another type
    assert to_train_config({"qk_norm": True}).model.qk_norm is True
    with pytest.raises(ValueError, match="'qk_norm' expects bool"):
        to_train_config({"qk_norm": 1})


@pytest.fixture
def fused_wsd_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(members, batch size) of the train_fused_wsd_branches calls made in this process."""
    import mutransfer.training.fused_wsd

    calls: list[tuple[int, int]] = []
    real = mutransfer.training.fused_wsd.train_fused_wsd_branches

    def spy(configs: Any, fractions: Any, **kw: Any) -> Any:
        calls.append((len(configs), configs[0].run.batch_size))
        return real(configs, fractions, **kw)

    monkeypatch.setattr(mutransfer.training.fused_wsd, "train_fused_wsd_branches", spy)
    return calls


def test_fused_scaling_sweep_exports_the_unfused_table(tmp_path, fused_wsd_calls) -> None:
    """A scaling sweep's trials are WSD trunks with a branch per budget: trials at one batch
    fuse (other LRs), trials at other batches never do, and the table (a row per branch)
    is the unfused one exactly, bar the CPU seconds (a fused member's is its group's share)."""
    from sweeps.spec_scaling import ScalingSweep

    spec = ScalingSweep(preset="gpt-tiny", width=32, batch_sizes=(2, 4, 8), tokens=(256, 512, 1024),
                        lr_center=0.01, log2_lr_offsets=(-1.0, 1.0), eval_sequences=8,
                        base={"seq_len": 16, "threads": 1})
    plain = run_sweep(spec, out=tmp_path / "plain", device="cpu")
    assert plain.complete and fused_wsd_calls == []
    fused = run_sweep(spec, out=tmp_path / "fused", device="cpu", fuse=4)
    assert fused.complete and fused.counts.complete == 6
    assert sorted(fused_wsd_calls) == [(2, 2), (2, 4), (2, 8)]  # one group of 2 LRs per batch
    key = ["batch_size", "lr", "tokens"]
    a = _table(fused.plan.storage).sort_values(key).reset_index(drop=True)
    b = _table(plain.plan.storage).sort_values(key).reset_index(drop=True)
    assert len(a) == 18 and sorted(set(a["tokens"])) == [256, 512, 1024]
    assert list(a.columns) == list(b.columns)
    for col in set(a.columns) - TIMING - {"trial", "cpu_s"}:
        assert a[col].fillna(-1).tolist() == b[col].fillna(-1).tolist(), col
    assert a["loss"].map(math.isfinite).all() and not a["diverged"].any()
    assert (a["cpu_s"] > 0).all()


def test_wsd_branches_and_batch_are_part_of_the_fusion_key() -> None:
    from sweeps.fusion import point_fusion_key

    spec = _spec(widths=(32,))
    key = point_fusion_key(spec, {"width": 32, "lr": 1e-3, "wsd_branches": [0.5, 1.0]})
    assert key is not None
    assert point_fusion_key(spec, {"width": 32, "lr": 1e-2, "wsd_branches": [0.5, 1]}) == key  # lr fuses
    assert point_fusion_key(spec, {"width": 32, "lr": 1e-3, "wsd_branches": [0.25, 1.0]}) != key
    assert point_fusion_key(spec, {"width": 32, "lr": 1e-3}) != key
    assert point_fusion_key(spec, {"width": 32, "lr": 1e-3, "wsd_branches": [0.5, 1.0],
                                   "batch_size": 8}) != key
