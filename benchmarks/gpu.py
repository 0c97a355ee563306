"""GPU figures in one prepared run (<= 8 minutes on one GPU): writes results/gpu.json.

1. MFU of gpt-40m with bf16 autocast and torch.compile through the Trainer
   (``benchmarks.trainer_throughput.cuda_figures``; MFU = 6N + 6LTC FLOPs/token × tokens/s
   over the data-sheet bf16 peak);
2. fused against sequential trials per hour at K = 16 and K = 64 on the ~3.3M-parameter
   proxy (``benchmarks.fused_sweep``'s CUDA measurement);
3. a two-width ``mutransfer sweep lr --device cuda`` smoke run (both parametrizations,
   3 LRs, short runs): it must finish with every trial complete;
4. ``mutransfer demo --size gpu`` cut short after a fixed wall time: how many of its
   trials finished, hence the demo's trials/hour and its projected full length;
5. only with ``--card-regret-minutes M``: the card-regret benchmark at its ``gpu`` size
   (proxy width 256, depth 2; target width 2048, depth 8, 2^26 tokens), starting no new run
   after M minutes and resuming from ``WORK/card_regret`` (``results/card_regret_gpu.json``).
   In full it is ~50 target runs of ~1.6e17 FLOPs each: hours of one GPU, not this budget.

    python -m benchmarks gpu        # or: python -m benchmarks.gpu [--demo-s 150]

On a machine without CUDA it refuses in one line and exits 2. Each part runs only while
the whole stays inside its time budget; skipped parts are named in the record.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "gpu.json"
BUDGET_S = 8 * 60
# Conservative worst-case wall times of each part (compile and cold starts included), so
# a part starts only when it can finish inside the budget.
PART_S = {"mfu": 120, "fused": 150, "sweep_smoke": 90, "demo": 60}


def unavailable() -> str | None:
    """Why this benchmark cannot run here (one line), or None when CUDA is available."""
    import torch

    if not torch.cuda.is_available():
        return "benchmarks gpu: no CUDA device is available on this machine (needs one GPU); nothing was run"
    return None


def _mfu() -> dict[str, Any]:
    from benchmarks.trainer_throughput import cuda_figures

    return cuda_figures(steps=30, batch=64)


def _fused() -> dict[str, Any]:
    from benchmarks.fused_sweep import CUDA_PROXY, _measure

    return {"proxy": CUDA_PROXY, **_measure("cuda", CUDA_PROXY, ks=(16, 64))}


def _cli(args: list[str], timeout: float) -> tuple[int, str, float]:
    """Run ``python -m mutransfer_cli ARGS`` in its own process group; kill the group on timeout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mutransfer_cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        code = 124
    return code, (out or "")[-2000:], time.perf_counter() - t0


def _status(storage: Path) -> dict[str, Any]:
    code, out, _ = _cli(["sweep", "status", "--storage", str(storage), "--json"], timeout=60)
    if code != 0:
        return {"error": out.strip().splitlines()[-1] if out.strip() else f"exit {code}"}
    try:
        return json.JSONDecoder().raw_decode(out[out.index("{"):])[0]
    except ValueError:
        return {"error": f"unreadable status: {out[:200]!r}"}


def _sweep_smoke(work: Path) -> dict[str, Any]:
    out = work / "sweep_smoke"
    code, tail, wall = _cli(["sweep", "lr", "--preset", "gpt-small", "--widths", "128,256",
                             "--parametrization", "sp,mup", "--log2-lr=-10:-6:2", "--steps", "100",
                             "--batch-size", "32", "--device", "cuda", "--out", str(out), "--quiet"],
                            timeout=PART_S["sweep_smoke"] - 10)
    st = _status(out)
    counts = st.get("counts", {})
    return {"exit_code": code, "wall_s": round(wall, 1), "n_trials_planned": 2 * 2 * 3,
            "counts": counts, "passed": code == 0 and counts.get("complete") == 2 * 2 * 3,
            "log_tail": tail[-600:]}


def _demo(work: Path, seconds: float) -> dict[str, Any]:
    out = work / "demo"
    code, tail, wall = _cli(["demo", "--size", "gpu", "--device", "cuda", "--out", str(out), "--quiet"],
                            timeout=seconds)
    st = _status(out / "sweep")
    done, total = st.get("counts", {}).get("complete"), st.get("total")
    rec: dict[str, Any] = {"cut_after_s": seconds, "exit_code": code, "wall_s": round(wall, 1),
                           "finished": code == 0, "trials_complete": done, "trials_total": total,
                           "log_tail": tail[-600:]}
    if isinstance(done, int) and done > 0:
        # The coordinate check runs first, so this under-states the sweep's own rate.
        rec["trials_per_hour"] = round(3600 * done / wall, 1)
        if isinstance(total, int):
            rec["projected_full_sweep_h"] = round(total / rec["trials_per_hour"], 2)
    return rec


def _card_regret(work: Path, minutes: float) -> dict[str, Any]:
    from benchmarks.card_regret import run as card_regret

    return card_regret("gpu", out=work / "card_regret", max_minutes=minutes)["figures"]


def run(demo_s: float = 150.0, work: str | os.PathLike[str] | None = None,
        card_regret_minutes: float = 0.0) -> dict[str, Any]:
    """Run every part that fits the budget (and the card regret when asked); write and return
    the record."""
    why = unavailable()
    if why:
        raise RuntimeError(why)
    from benchmarks._proxy import record_header
    from mutransfer._io import atomic_write_text

    t0 = time.perf_counter()
    workdir = Path(work or tempfile.mkdtemp(prefix="mutransfer-gpu-"))
    figures: dict[str, Any] = {}
    skipped: list[str] = []
    parts = [("mfu", _mfu), ("fused", _fused), ("sweep_smoke", lambda: _sweep_smoke(workdir)),
             ("demo", lambda: _demo(workdir, demo_s))]
    if card_regret_minutes > 0:  # its own budget, outside BUDGET_S
        parts.append(("card_regret", lambda: _card_regret(workdir, card_regret_minutes)))
    for name, fn in parts:
        need = PART_S.get(name, 0) + (demo_s if name == "demo" else 0)
        if name != "card_regret" and time.perf_counter() - t0 + need > BUDGET_S:
            skipped.append(name)
            continue
        t1 = time.perf_counter()
        print(f"[gpu] {name} ...", file=sys.stderr, flush=True)
        try:
            figures[name] = fn()
        except Exception as exc:  # one failing part must not lose the others' figures
            figures[name] = {"error": f"{type(exc).__name__}: {exc}"}
        figures[name]["part_wall_s"] = round(time.perf_counter() - t1, 1)
    fused = figures.get("fused", {})
    for k in (16, 64):
        if f"speedup_k{k}" in fused:
            figures[f"speedup_fused_k{k}"] = fused[f"speedup_k{k}"]
    if "mfu" in figures.get("mfu", {}):
        figures["mfu_gpt40m_bf16_compile"] = figures["mfu"]["mfu"]
    figures["wall_s"] = round(time.perf_counter() - t0, 1)
    record = {
        **record_header("gpu"),
        "setup": {"budget_s": BUDGET_S, "demo_cut_after_s": demo_s, "workdir": str(workdir),
                  "card_regret_minutes": card_regret_minutes},
        "figures": figures,
        "skipped": skipped,
        "targets": {"mfu_min": 0.40, "speedup_fused_k16_min": 3.0},
        "passed": (bool(figures.get("mfu_gpt40m_bf16_compile", 0) >= 0.40
                        and figures.get("speedup_fused_k16", 0) >= 3.0)
                   if "mfu_gpt40m_bf16_compile" in figures and "speedup_fused_k16" in figures else None),
    }
    atomic_write_text(RESULTS, json.dumps(record, indent=2, default=str) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--demo-s", type=float, default=150.0,
                        help="cut `demo --size gpu` after this many seconds (default 150)")
    parser.add_argument("--work", default=None, help="scratch directory (default: a new temp dir)")
    parser.add_argument("--card-regret-minutes", type=float, default=0.0,
                        help="also run the card-regret benchmark's gpu size for up to this many minutes "
                             "(default 0: not run)")
    a = parser.parse_args(argv)
    why = unavailable()
    if why:
        print(why, file=sys.stderr)
        return 2
    print(json.dumps(run(a.demo_s, a.work, a.card_regret_minutes)["figures"], indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
