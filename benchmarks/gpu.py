"""The prepared device probe: every GPU figure in one run of under 10 minutes on one GPU,
and the same parts on CPU at a tiny size in under a minute (``--dry-run``, which CI runs).

Parts (each writes its figures into one record, ``OUT/gpu.json``; OUT is an output folder
outside the repo, ``--out``, default ``./gpu-probe``):

1. ``counts``: per training step of gpt-40m under bf16 autocast through the Trainer,
   aten kernels and host syncs (:mod:`benchmarks._counting`) on a plain step and on a
   logging step, on the device itself;
2. ``mfu``: tokens/s and MFU of gpt-40m, bf16, eager and ``torch.compile``, batch 16 and
   64, timed over steady-state steps (compilation and the first steps apart); MFU = (6N +
   6LTC) FLOPs/token × tokens/s over the data-sheet dense bf16 peak (H100 SXM 989 TF/s,
   H100 PCIe 756; the card's name says which);
3. ``fused``: fused against sequential trials per hour at K = 16 and 64 on the ~3.3M
   parameter proxy (``benchmarks.fused_sweep``);
4. ``fuse_auto``: ``--fuse auto``'s K for gpt-40m at the data's vocabulary before a fused
   group and after it (memory released between groups: the two must agree);
5. ``sweep_smoke``: a real fused ``mutransfer sweep lr --fuse auto`` on the device (two
   widths, both parametrizations, 3 LRs): every trial complete, none failed;
6. ``demo``: ``mutransfer demo`` cut after a fixed time: trials finished over all of its
   studies, hence trials/hour and the projected full length.

With ``--card-regret-minutes M`` the card-regret benchmark's ``gpu`` size also runs (its own
budget). Each part starts only while the whole fits the budget; skipped parts are named.

    python -m benchmarks gpu [--out DIR]        # on a GPU
    python -m benchmarks gpu --dry-run          # anywhere: every part on CPU, tiny, < 60 s

Without ``--dry-run`` on a machine without CUDA it refuses in one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("gpu-probe")
BUDGET_S = 10 * 60
# Worst-case wall times of each part (compile and cold starts included), so a part starts
# only when it can still finish inside the budget; their sum with the demo's cut fits it.
PART_S = {"counts": 40, "mfu": 170, "fused": 150, "fuse_auto": 30, "sweep_smoke": 90, "demo": 20}
DEMO_S = 90.0
# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' data sheets; the first name found
# in the card's name wins (so "H100 PCIe" before "H100").
PEAK_BF16 = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "GH200": 989e12, "A100": 312e12,
             "L4": 121e12, "A10": 125e12, "4090": 165e12}


@dataclass(frozen=True)
class Size:
    """What each part trains, on which device."""

    device: str
    model: dict[str, Any]
    """Flat TrainConfig fields of the counted and timed model."""
    batches: tuple[int, ...]
    timed_steps: int
    fused_proxy: dict[str, Any]
    fused_ks: tuple[int, ...]
    sweep_args: tuple[str, ...]
    demo_args: tuple[str, ...]
    demo_s: float
    compile_backend: str | None = None
    """None: torch.compile's default (inductor); the dry run uses ``eager`` (same graphs and
    guards, no C++ build)."""
    extra: dict[str, Any] = field(default_factory=dict)


GPU = Size(device="cuda", model=dict(preset="gpt-40m", dtype="bf16", data_max_bytes=20_000_000),
           batches=(16, 64), timed_steps=20,
           fused_proxy=dict(preset="gpt-small", width=256, depth=4, head_dim=32, seq_len=128, batch_size=32,
                            steps=40, eval_every=0, eval_sequences=128),
           fused_ks=(16, 64),
           sweep_args=("--preset", "gpt-small", "--widths", "128,256", "--parametrization", "sp,mup",
                       "--log2-lr=-10:-6:2", "--steps", "100", "--batch-size", "32", "--device", "cuda",
                       "--fuse", "auto"),
           demo_args=("--size", "gpu", "--device", "cuda"), demo_s=DEMO_S)
TINY_MODEL = dict(preset="gpt-tiny", width=32, depth=2, head_dim=16, seq_len=32, dtype="bf16",
                  data_max_bytes=300_000, eval_sequences=8)
DRY = Size(device="cpu", model=TINY_MODEL, batches=(2, 4), timed_steps=2,
           fused_proxy=dict(preset="gpt-tiny", width=64, depth=1, head_dim=16, seq_len=16, batch_size=4, steps=3,
                            eval_every=0, eval_sequences=8),
           fused_ks=(2,),
           sweep_args=("--preset", "gpt-tiny", "--widths", "16,32", "--parametrization", "sp,mup",
                       "--log2-lr=-10:-6:2", "--steps", "3", "--batch-size", "2", "--device", "cpu",
                       "--fuse", "auto", "--set", "seq_len=16", "--set", "eval_sequences=4",
                       "--set", "data_max_bytes=300000", "--workers", "1"),
           demo_args=("--size", "tiny", "--device", "cpu"), demo_s=12.0, compile_backend="eager")


def unavailable() -> str | None:
    """Why this benchmark cannot run here (one line), or None when CUDA is available."""
    import torch

    if not torch.cuda.is_available():
        return ("benchmarks gpu: no CUDA device is available on this machine (needs one GPU; "
                "--dry-run runs every part on CPU); nothing was run")
    return None


def _peak(name: str) -> float | None:
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _trainer(size: Size, batch: int, **kw: Any) -> Any:
    from mutransfer.training.config import TrainConfig
    from mutransfer.training.trainer import Trainer

    flat = {**size.model, "batch_size": batch, "steps": 10_000, "lr": 1e-3, "device": size.device,
            "eval_every": 0, "max_logit_every": 10, **kw}
    return Trainer(TrainConfig.from_flat(flat))


def _counts(size: Size) -> dict[str, Any]:
    """Kernels and host syncs per step on the device (steps 1-10: 1-8 plain, 9 logging)."""
    from benchmarks._counting import StepCounter, optimizer_host_tensors
    from benchmarks.step_counts import per_step

    t = _trainer(size, size.batches[0])
    t.run_until(1)
    opt_host = optimizer_host_tensors(t.opt)

    def host(x: Any) -> bool:  # a CPU tensor in a CUDA run is read without a device sync
        return opt_host(x) or (size.device != "cpu" and x.device.type == "cpu")

    steps = per_step(lambda: t.run_until(11), t, StepCounter(host=host))
    plain = steps[:8]
    return {"kernels_plain": int(statistics.median(s["kernels"] for s in plain)),
            "host_syncs_plain": max(s["host_syncs"] for s in plain),
            "host_syncs_logging": steps[8]["host_syncs"], "sync_sites_logging": steps[8]["sync_sites"]}


def _mfu(size: Size) -> dict[str, Any]:
    """Tokens/s and MFU, eager and compiled, per batch, over steady-state steps."""
    import torch

    import mutransfer.training.compile_watch as compile_watch  # lazy: torch

    out: dict[str, Any] = {}
    backend = compile_watch.BACKEND
    if size.compile_backend is not None:
        compile_watch.BACKEND = size.compile_backend
    try:
        for batch in size.batches:
            for compiled in (False, True):
                t = _trainer(size, batch, compile=compiled, max_logit_every=0)
                t.run_until(3)  # compilation and warm-up apart
                _sync(size.device)
                t0 = time.perf_counter()
                t.run_until(3 + size.timed_steps)
                _sync(size.device)
                dt = time.perf_counter() - t0
                tps = size.timed_steps * batch * t.seq_len / dt
                fpt = t.raw_model.flops_per_token()
                name = torch.cuda.get_device_name() if size.device.startswith("cuda") else "cpu"
                peak = _peak(name)
                key = f"b{batch}_{'compiled' if compiled else 'eager'}"
                out[key] = {"tokens_per_s": round(tps, 1), "tflops": round(tps * fpt / 1e12, 3),
                            "mfu": round(tps * fpt / peak, 4) if peak else None,
                            "final_loss": t.history[-1]["loss"]}
                if compiled:  # None: every step ran a compiled graph
                    out[key]["compile_fallback"] = t.compile_watch.fallback if t.compile_watch else None
                out["device_name"], out["peak_bf16_tflops"] = name, peak and peak / 1e12
                del t
    finally:
        compile_watch.BACKEND = backend
    return out


def _fused(size: Size) -> dict[str, Any]:
    from benchmarks.fused_sweep import _measure

    return {"proxy": size.fused_proxy, **_measure(size.device, size.fused_proxy, ks=size.fused_ks)}


def _fuse_auto(size: Size) -> dict[str, Any]:
    """``--fuse auto``'s K before a fused group and after it (the group's memory released)."""
    import torch

    from mutransfer.training.config import TrainConfig
    from mutransfer.training.fused import open_data, train_fused
    from mutransfer.training.fusion import choose_k, member_bytes

    cfg = TrainConfig.from_flat(dict(size.model, batch_size=size.batches[0], steps=2, eval_every=0,
                                     device=size.device))
    data = open_data(cfg)
    before = choose_k(cfg, vocab_size=data.vocab_size)
    events: list[dict[str, Any]] = []
    k = min(before, 4)
    train_fused([cfg.replace(lr=1e-3 * 2 ** i) for i in range(k)], k=k, data=data, events=events)
    after = choose_k(cfg, vocab_size=data.vocab_size)
    rec: dict[str, Any] = {"k_before": before, "k_after": after, "group_trained": k, "events": events,
                           "member_bytes": member_bytes(cfg, data.vocab_size), "vocab_size": data.vocab_size}
    if size.device.startswith("cuda"):
        rec["free_gib_after"] = round(torch.cuda.mem_get_info()[0] / 2**30, 2)
    rec["passed"] = after == before
    return rec


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


def storage_status(where: Path) -> dict[str, Any]:
    """Counts of every study in the sweep storage at ``where`` (a demo writes several), and
    their sums; ``{"error": ...}`` when there is none to read."""
    from sweeps.results import status
    from sweeps.storage import Storage, study_names
    from sweeps.worker import open_study

    try:
        storage = Storage.resolve(str(where))
        missing = [str(f) for f in storage.files if not Path(f).exists()]
        if missing:  # opening it would create it
            return {"error": f"no sweep storage at {', '.join(missing)}"}
        names = study_names(storage.open())
        studies = {n: status(open_study(storage, n)[0]) for n in names}
    except Exception as exc:  # a cut run may have left no storage yet
        return {"error": f"{type(exc).__name__}: {exc}"}
    keys = ("complete", "diverged", "pruned", "failed", "running", "waiting", "done")
    counts = {k: sum(int(s["counts"].get(k, 0)) for s in studies.values()) for k in keys}
    totals = [s["total"] for s in studies.values()]
    return {"studies": {n: {"total": s["total"], "counts": s["counts"]} for n, s in studies.items()},
            "counts": counts, "total": sum(totals) if all(isinstance(t, int) for t in totals) else None}


def _sweep_smoke(size: Size, out: Path) -> dict[str, Any]:
    where = out / "sweep_smoke"
    code, tail, wall = _cli(["sweep", "lr", *size.sweep_args, "--out", str(where), "--quiet"],
                            timeout=PART_S["sweep_smoke"] - 10)
    st = storage_status(where)
    c, planned = st.get("counts", {}), 2 * 2 * 3
    # Edge extension may add LRs past the grid's ends: at least the planned trials, all done.
    return {"exit_code": code, "wall_s": round(wall, 1), "n_trials_planned": planned, "counts": c,
            "passed": bool(code == 0 and c.get("complete", 0) + c.get("diverged", 0) >= planned
                           and c.get("failed", 0) == 0 and c.get("waiting", 0) == 0 and c.get("running", 0) == 0),
            "log_tail": tail[-600:]}


def _demo(size: Size, out: Path) -> dict[str, Any]:
    where = out / "demo"
    code, tail, wall = _cli(["demo", *size.demo_args, "--out", str(where), "--quiet"], timeout=size.demo_s)
    st = storage_status(where / "sweep")
    done, total = st.get("counts", {}).get("done"), st.get("total")
    rec: dict[str, Any] = {"cut_after_s": size.demo_s, "exit_code": code, "wall_s": round(wall, 1),
                           "finished": code == 0, "trials_done": done, "trials_total": total,
                           "studies": sorted(st.get("studies", {})), "status_error": st.get("error"),
                           "log_tail": tail[-600:]}
    if isinstance(done, int) and done > 0:
        # The coordinate check runs first, so this under-states the sweep's own rate.
        rec["trials_per_hour"] = round(3600 * done / wall, 1)
        if isinstance(total, int):
            rec["projected_full_sweep_h"] = round(total / rec["trials_per_hour"], 2)
    return rec


def _card_regret(out: Path, minutes: float) -> dict[str, Any]:
    from benchmarks.card_regret import run as card_regret

    return card_regret("gpu", out=out / "card_regret", max_minutes=minutes)["figures"]


def run(out: str | os.PathLike[str] = DEFAULT_OUT, *, dry_run: bool = False, demo_s: float | None = None,
        card_regret_minutes: float = 0.0) -> dict[str, Any]:
    """Run every part that fits the budget; write ``OUT/gpu.json`` and return the record."""
    if not dry_run:
        why = unavailable()
        if why:
            raise RuntimeError(why)
    from benchmarks._proxy import record_header
    from mutransfer._io import atomic_write_text

    size = DRY if dry_run else GPU
    if demo_s is not None:
        size = Size(**{**size.__dict__, "demo_s": demo_s})
    outdir = Path(out).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    figures: dict[str, Any] = {}
    skipped: list[str] = []
    parts = [("counts", lambda: _counts(size)), ("mfu", lambda: _mfu(size)), ("fused", lambda: _fused(size)),
             ("fuse_auto", lambda: _fuse_auto(size)), ("sweep_smoke", lambda: _sweep_smoke(size, outdir)),
             ("demo", lambda: _demo(size, outdir))]
    if card_regret_minutes > 0:  # its own budget, outside BUDGET_S
        parts.append(("card_regret", lambda: _card_regret(outdir, card_regret_minutes)))
    for name, fn in parts:
        need = PART_S.get(name, 0) + (size.demo_s if name == "demo" else 0)
        if name != "card_regret" and not dry_run and time.perf_counter() - t0 + need > BUDGET_S:
            skipped.append(name)
            continue
        t1 = time.perf_counter()
        print(f"[gpu{' dry-run' if dry_run else ''}] {name} ...", file=sys.stderr, flush=True)
        try:
            figures[name] = fn()
        except Exception as exc:  # one failing part must not lose the others' figures
            figures[name] = {"error": f"{type(exc).__name__}: {exc}"}
        figures[name]["part_wall_s"] = round(time.perf_counter() - t1, 1)
    fused = figures.get("fused", {})
    for k in size.fused_ks:
        if f"speedup_k{k}" in fused:
            figures[f"speedup_fused_k{k}"] = fused[f"speedup_k{k}"]
    mfu = figures.get("mfu", {}).get(f"b{size.batches[-1]}_compiled", {})
    if mfu.get("mfu") is not None:
        figures["mfu_gpt40m_bf16_compile"] = mfu["mfu"]
    figures["wall_s"] = round(time.perf_counter() - t0, 1)
    errors = sorted(n for n, f in figures.items() if isinstance(f, dict) and "error" in f)
    record = {
        **record_header("gpu"),
        "dry_run": dry_run,
        "setup": {"budget_s": BUDGET_S, "part_s": PART_S, "device": size.device, "model": size.model,
                  "demo_cut_after_s": size.demo_s, "out": str(outdir),
                  "card_regret_minutes": card_regret_minutes},
        "figures": figures,
        "skipped": skipped,
        "errors": errors,
        "targets": {"mfu_min": 0.40, "speedup_fused_k16_min": 3.0, "host_syncs_plain": 0},
        "passed": (None if dry_run or "mfu_gpt40m_bf16_compile" not in figures
                   or "speedup_fused_k16" not in figures else
                   bool(figures["mfu_gpt40m_bf16_compile"] >= 0.40 and figures["speedup_fused_k16"] >= 3.0)),
    }
    atomic_write_text(outdir / "gpu.json", json.dumps(record, indent=2, default=str) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help=f"output folder for gpu.json and the parts' runs (default: ./{DEFAULT_OUT})")
    parser.add_argument("--dry-run", action="store_true",
                        help="run every part on CPU at a tiny size (under a minute; needs no GPU)")
    parser.add_argument("--demo-s", type=float, default=None,
                        help=f"cut the demo after this many seconds (default {DEMO_S:g}; dry run {DRY.demo_s:g})")
    parser.add_argument("--card-regret-minutes", type=float, default=0.0,
                        help="also run the card-regret benchmark's gpu size for up to this many minutes "
                             "(default 0: not run)")
    a = parser.parse_args(argv)
    if not a.dry_run:
        why = unavailable()
        if why:
            print(why, file=sys.stderr)
            return 2
    rec = run(a.out, dry_run=a.dry_run, demo_s=a.demo_s, card_regret_minutes=a.card_regret_minutes)
    print(json.dumps(rec["figures"], indent=2, default=str))
    return 1 if rec["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
