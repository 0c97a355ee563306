"""The demo piped to a file is never silent: every stage prints progress (the sweeps and the
audit with trials done, the best loss and an ETA; the others a still-running line) at the
progress interval, here 1 s so the test sees the cadence at the tiny size; ``--track`` writes
one TensorBoard run per trained trial."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 1.0


@pytest.mark.slow
def test_demo_piped_prints_progress_with_an_eta_through_every_stage(tmp_path) -> None:
    pytest.importorskip("tensorboard", reason="pip install 'mutransfer[track]'")
    out = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MUTRANSFER_PROGRESS_INTERVAL": str(INTERVAL),
           "PYTHONUNBUFFERED": "1"}
    env.pop("MUTRANSFER_TRACK", None)
    p = subprocess.Popen([sys.executable, "-m", "mutransfer_cli", "demo", "--size", "tiny", "--workers", "1",
                          "--out", str(out), "--track", "tensorboard"], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.stdout is not None
    stamped = [(time.monotonic(), line.rstrip("\n")) for line in p.stdout]
    assert p.wait(timeout=600) == 0, "\n".join(x for _, x in stamped[-20:])
    text = [x for _, x in stamped]
    for k in range(1, 6):  # tune's five stages, then the demo's report
        assert any(x.startswith(f"[{k}/5]") for x in text), k
    assert any(x.startswith("[report]") for x in text)
    gaps = [(b - a, y) for (a, _), (b, y) in zip(stamped, stamped[1:])]
    worst = max(gaps)
    # a line at least every interval while a stage runs; the glue between stages (reading
    # tables, writing files) adds a few seconds at most on a loaded machine
    assert worst[0] < 3 * INTERVAL + 5, worst
    eta = re.compile(r"^(sweep tune-(search|ladder|ladder-sp-w\d+|scaling)|held-out audit): \d+/\d+ "
                     r"(trial|run)s, .*best \S+, elapsed \S+, ETA \S+$")
    kinds = {m.group(1) for m in map(eta.match, text) if m}
    # a short stage (SP's study at one width, the search) can end inside one interval (a stage
    # shorter than the interval owes no line; the gap check above holds every stage to it)
    assert kinds >= {"sweep tune-ladder", "sweep tune-scaling"}, kinds
    assert any(re.search(r"ETA \d", x) for x in text)  # an ETA with a figure, not only '?'
    import json

    s = json.loads((out / "summary.json").read_text())
    runs = [d for d in (out / "tensorboard").iterdir() if any(d.glob("events.out.tfevents.*"))]
    # every sweep trial and audit run is one run; the coordinate check trains no tracked run
    assert len(runs) >= s["n_trials"] + s["scaling"]["n_trials"]
