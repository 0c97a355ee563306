"""Progress: a bar on a terminal; piped, a line every interval with trials done, the best
loss and an ETA (a real ``mutransfer sweep`` subprocess, its stderr read line by line as it
comes); ``--quiet`` silences it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeps.progress import PROGRESS_INTERVAL_ENV, Progress, fmt_duration, progress_interval

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^sweep lr: (\d+)/(\d+) trials, run \d+ fail \d+ div \d+, best (\S+), "
                  r"elapsed (\S+), ETA (\S+)$")


def _sweep(out: Path, interval: float, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), PROGRESS_INTERVAL_ENV: str(interval),
           "MUTRANSFER_SYNTHETIC_SLEEP": "0.5"}
    env.pop("MUTRANSFER_TRACK", None)
    argv = [sys.executable, "-m", "mutransfer_cli", "sweep", "lr", "--runner", "synthetic",
            "--widths", "32,64", "-p", "mup", "--lrs", "0.001,0.002,0.004", "--steps", "10",
            "--workers", "1", "--max-extend", "0", "--out", str(out), *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_piped_sweep_prints_a_line_every_interval_with_counts_best_and_eta(tmp_path) -> None:
    interval = 0.4
    p = _sweep(tmp_path / "d", interval)
    stamped = []
    assert p.stderr is not None
    for line in p.stderr:
        stamped.append((time.monotonic(), line.rstrip("\n")))
    assert p.wait(timeout=120) == 0
    lines = [(t, LINE.match(text)) for t, text in stamped if LINE.match(text)]
    # 6 trials of 0.5 s: ~3 s of sweep, so several lines at 0.4 s
    assert len(lines) >= 4, [x for _, x in stamped]
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:])]
    assert max(gaps) < interval * 3, gaps  # a steady cadence, not one line at the end
    done = [int(m.group(1)) for _, m in lines]
    assert done == sorted(done) and done[-1] >= 3 and {int(m.group(2)) for _, m in lines} == {6}
    later = [m for _, m in lines if int(m.group(1)) > 0]
    assert later and all(m.group(3) != "-" and float(m.group(3)) > 0 for m in later)  # best so far
    assert all(m.group(5) != "?" for m in later)  # an ETA once a trial is done


def test_quiet_silences_the_progress(tmp_path) -> None:
    p = _sweep(tmp_path / "d", 0.2, "--quiet")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0
    assert not [x for x in err.splitlines() if LINE.match(x)], err


def test_progress_interval_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, "2.5")
    assert progress_interval() == 2.5
    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, "0")
    with pytest.raises(ValueError, match=PROGRESS_INTERVAL_ENV):
        progress_interval()
    monkeypatch.delenv(PROGRESS_INTERVAL_ENV)
    assert progress_interval() <= 30


def test_eta_from_the_rate_since_the_start() -> None:
    import io

    bar = Progress(10, "x", initial=4, stream=io.StringIO(), interval=60)
    assert bar.eta_s() is None  # nothing done since the start: no rate yet
    bar._t0 -= 10.0  # 10 s ago
    bar.advance(2, loss=3.0)  # 2 done in 10 s -> 4 left take 20 s
    assert bar.eta_s() == pytest.approx(20.0, rel=0.05)
    assert bar.best == 3.0 and "6/10 trials" in bar.line() and "best 3.0000" in bar.line()
    bar.close()
    assert fmt_duration(3725) == "1h02m" and fmt_duration(65) == "1m05s" and fmt_duration(None) == "?"


def test_demo_stage_without_counts_says_it_is_still_running(monkeypatch, capsys) -> None:
    from mutransfer_cli._demo_stage import Clock

    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, "0.2")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    clock = Clock(quiet=False)
    with clock.stage("lr_fits"):
        time.sleep(1.0)
    err = capsys.readouterr().err.splitlines()
    assert len([x for x in err if x.startswith("lr_fits: still running, elapsed")]) >= 3
    quiet = Clock(quiet=True)
    with quiet.stage("lr_fits"):
        time.sleep(0.5)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("text", ["1e300", "86401", "inf", "nan", "-1", "abc", "1e-300", "0.01"])
def test_an_unbounded_progress_interval_is_refused_naming_the_variable(text, monkeypatch) -> None:
    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, text)
    with pytest.raises(ValueError, match=rf"\${PROGRESS_INTERVAL_ENV}=.*at most 86400"):
        progress_interval()
    monkeypatch.setenv(PROGRESS_INTERVAL_ENV, "86400")
    assert progress_interval() == 86400


def test_work_found_on_the_way_extends_the_total_so_done_never_reads_past_it() -> None:
    import io

    bar = Progress(4, "coord-check", unit="run", stream=io.StringIO(), interval=60)
    per_pass = bar.total

    def tick() -> None:  # the coordinate check's CLI: a lowered LR runs the check again
        if bar.done >= bar.total:
            bar.extend(per_pass)
        bar.advance()

    for _ in range(10):  # two passes and half of a third
        tick()
    assert (bar.done, bar.total) == (10, 12) and "10/12 runs" in bar.line()
    bar.extend(-3)  # never shrinks
    assert bar.total == 12
    bar.close()
