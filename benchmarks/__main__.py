"""Run the benchmarks and write benchmarks/results/SUMMARY.md.

    python -m benchmarks                 # every benchmark
    python -m benchmarks fit_speed ...   # only these
    python -m benchmarks --summary-only  # rebuild SUMMARY.md from the JSON files
    python -m benchmarks gpu             # the GPU figures (not in the default CPU list)
    python -m benchmarks gpu --dry-run   # every GPU part on CPU at a tiny size (< 60 s; CI runs it)
    python -m benchmarks step_counts     # kernels, host syncs, FLOPs, bytes per step, counted on CPU
    python -m benchmarks umup_fidelity   # u-μP as a peer (needs the optional unit_scaling)
    python -m benchmarks card_regret     # the card at an 8x wider, 4x deeper target (3-4 CPU-hours)
    python -m benchmarks beta2_halflife  # beta2 by token half-life against 0.95 (~15 CPU minutes)
    python -m benchmarks cli_audit       # every flag of every verb fed bad input: pass/vague/fail counts
    python -m benchmarks wd_horizon      # weight decay per step or per run, at 2 horizons (~12 CPU minutes)

Each benchmark module exposes ``run() -> dict`` and writes ``results/NAME.json``
(machine, date, versions, figures; ratios named ``speedup_*`` or ``ratio_*``). This
runner only orders them and summarizes the JSON files into one markdown table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from mutransfer._io import atomic_write_text

HERE = Path(__file__).parent
RESULTS = HERE / "results"
# Cheapest first, so a partial run still leaves useful numbers behind.
BENCHMARKS = ["fit_speed", "interval_coverage", "step_counts", "trainer_throughput", "hf_vs_builtin",
              "sweep_overhead", "fused_sweep",
              "hf_architectures", "hf_vanishing", "transfer_fidelity", "depth_fidelity", "horizon_shift",
              "tuned_multipliers", "mup_vs_sp", "readout_ladder",
              "width_depth", "cli_audit", "beta2_halflife", "wd_horizon"]
# Run only when named: they need hardware or an optional package this machine may lack (each
# says why in unavailable()). umup_fidelity needs Graphcore's unit_scaling (a peer, not a dependency);
# card_regret needs nothing but time (3-4 CPU-hours, resumable; --workers trains in parallel).
EXTRA = ["gpu", "umup_fidelity", "card_regret"]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def summary_row(name: str, data: dict[str, Any]) -> str:
    """One markdown row of SUMMARY.md. A record with a ``superseded`` note (it measures
    a setup that is no longer the default) shows the note before its figures and no
    verdict, so its headline is never read as the current answer."""
    figures = _flatten(data.get("figures", {}))
    keys = [k for k in figures if k.rsplit(".", 1)[-1].startswith(("speedup_", "ratio_", "drift_"))]
    keys += [k for k in figures if k not in keys][: max(0, 6 - len(keys))]
    shown = "; ".join(f"{k} = {_fmt(figures[k])}" for k in keys)
    machine = data.get("machine", {})
    where = f"{machine.get('device', machine.get('platform', '?'))}, {machine.get('cpu_count', '?')} CPU"
    verdict = {True: "yes", False: "no"}.get(data.get("passed"), "-")
    if data.get("superseded"):
        shown = f"**superseded**: {data['superseded']}. {shown}"
        verdict = "superseded"
    return f"| {name} | {data.get('date', '?')[:16]} | {where} | {shown} | {verdict} |"


def write_summary() -> Path:
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        try:
            rows.append(summary_row(path.stem, json.loads(path.read_text())))
        except (ValueError, OSError) as exc:
            rows.append(f"| {path.stem} | unreadable: {exc} | | | |")
    text = "\n".join([
        "# Benchmark results",
        "",
        "Written by `python -m benchmarks`; each row summarizes `results/NAME.json`.",
        "",
        "| benchmark | date (UTC) | machine | figures | target met |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])
    return atomic_write_text(RESULTS / "SUMMARY.md", text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["gpu"]:  # the device probe has flags of its own (--dry-run, --out, ...)
        from benchmarks.gpu import main as gpu_main

        return gpu_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*",
                        help=f"benchmarks to run (default: all of {BENCHMARKS}; also {EXTRA})")
    parser.add_argument("--summary-only", action="store_true", help="only rebuild SUMMARY.md")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS + EXTRA]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS + EXTRA)}",
              file=sys.stderr)
        return 2
    for name in args.names if not args.summary_only else []:
        if name in EXTRA:
            why = importlib.import_module(f"benchmarks.{name}").unavailable()
            if why:
                print(why, file=sys.stderr)
                return 2
    if not args.summary_only:
        for name in args.names or BENCHMARKS:
            try:
                module = importlib.import_module(f"benchmarks.{name}")
            except ModuleNotFoundError as exc:
                print(f"[skip] {name}: {exc}", file=sys.stderr)
                continue
            t0 = time.perf_counter()
            print(f"[run] {name}", file=sys.stderr, flush=True)
            result = module.run()
            print(f"[done] {name} in {time.perf_counter() - t0:.0f} s: "
                  f"{json.dumps(result.get('figures', {}), default=str)[:300]}", file=sys.stderr)
    path = write_summary()
    print(path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
