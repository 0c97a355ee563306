"""Every long verb piped to a file talks: coord-check and train on a deliberately slowed
tiny model (each forward sleeps) print a progress line at least every progress interval
(here 0.5 s standing in for the default 20 s), through the one helper
(:func:`mutransfer_cli._common.progress`, :class:`sweeps.progress.Progress`). Before it,
coord-check's bar was a no-op off a terminal and ``train`` printed only its summary."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 0.5
#: The longest silence allowed: the interval plus the CLI's own start (imports, reading
#: the corpus) on a loaded 2-core machine; the slowed work itself lasts ~10 s.
MAX_GAP_S = 6.0
SLOW = '''
import os, time
from mutransfer.models.gpt import GPT, GPTConfig


class Slow(GPT):
    def forward(self, idx, *args, **kwargs):
        time.sleep(float(os.environ["SLOW_FORWARD_S"]))
        return super().forward(idx, *args, **kwargs)


def build(width, depth):
    return Slow(GPTConfig(width=width, depth=depth, head_dim=16, vocab_size=256, seq_len=32))
'''
VERBS = {
    "coord-check": ["coord-check", "--model", "slowmod:build", "--widths", "32,64", "--steps", "2",
                    "--n-seeds", "1", "--batch-size", "2", "--seq-len", "32", "--lr", "0.01", "--no-plot"],
    "train": ["train", "--model", "slowmod:build", "--set", "width=32", "--set", "depth=1",
              "--set", "steps=12", "--set", "seq_len=32", "--set", "batch_size=2", "--set", "eval_every=4"],
}


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_verb_piped_is_never_silent_for_long(verb: str, tmp_path) -> None:
    (tmp_path / "slowmod.py").write_text(SLOW)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "PYTHONUNBUFFERED": "1",
           "MUTRANSFER_PROGRESS_INTERVAL": str(INTERVAL), "SLOW_FORWARD_S": "0.4"}
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "mutransfer_cli", *VERBS[verb], "--out", str(tmp_path / "out")]
    p = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         cwd=tmp_path)
    assert p.stdout is not None
    stamped = [(t0, "<start>")] + [(time.monotonic(), line.rstrip("\n")) for line in p.stdout]
    code = p.wait(timeout=120)
    text = "\n".join(x for _, x in stamped[-15:])
    assert code == 0, text
    assert stamped[-1][0] - t0 > 3 * MAX_GAP_S / 2, f"the slowed run was too quick to test: {text}"
    gaps = [(b - a, y) for (a, _), (b, y) in zip(stamped, stamped[1:])]
    worst = max(gaps)
    assert worst[0] < MAX_GAP_S, f"silent for {worst[0]:.1f} s before {worst[1]!r}\n{text}"
    progress = [x for _, x in stamped if x.startswith(f"{verb.split('-')[0]}")]
    assert len(progress) >= 4, text  # lines with counts, elapsed and ETA while it ran
    assert any("elapsed" in x and "ETA" in x for x in progress), text
