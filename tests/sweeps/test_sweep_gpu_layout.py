"""Every spelling of a CUDA device gives one worker per GPU, each pinned to its own: the
spec's ``device: cuda`` / ``cuda:0``, ``--set device=cuda``, ``--device cuda`` and ``auto``
on a machine whose CUDA (mocked here: 8 devices) finds GPUs."""

from __future__ import annotations

import argparse

import pytest
import torch

from mutransfer_cli import sweep as sweep_cli
from sweeps.study import worker_layout
from sweeps.worker import worker_pin


@pytest.fixture
def eight_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _spec(argv: list[str]):  # the spec `mutransfer sweep lr ARGV` runs, and its --device
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    sweep_cli.add_arguments(sub.add_parser("sweep"))
    args = parser.parse_args(["sweep", "lr", "--widths", "32,64", *argv])
    return sweep_cli._spec_from_args(args, "lr"), args.device


@pytest.mark.parametrize("argv", [["--set", "device=cuda"], ["--set", "device=cuda:0"], ["--device", "cuda"],
                                  ["--device", "cuda:0"], ["--device", "auto"], ["--set", "device=auto"], [],
                                  ["--set", "device=CUDA"]])
def test_every_cuda_spelling_gives_eight_pinned_workers(eight_gpus, argv: list[str]) -> None:
    spec, flag = _spec(argv)
    device, n, gpus = worker_layout(spec, flag, None, pending=100)
    assert (device, n) == ("cuda", 8)
    pins = [worker_pin(k, device, gpus) for k in range(n)]
    assert [p["CUDA_VISIBLE_DEVICES"] for p in pins] == [str(i) for i in range(8)]


def test_a_spec_file_device_and_more_workers_than_gpus(eight_gpus) -> None:
    spec, _ = _spec([])
    spec.base["device"] = "cuda:0"  # as `device: cuda:0` in a YAML spec's base
    device, n, gpus = worker_layout(spec, None, 16, pending=100)
    assert (device, n) == ("cuda", 16)  # --workers 16: two per GPU, round robin
    assert [worker_pin(k, device, gpus)["CUDA_VISIBLE_DEVICES"] for k in range(n)] == [str(i % 8) for i in range(16)]


def test_cpu_stays_cpu_with_gpus_present(eight_gpus) -> None:
    spec, flag = _spec(["--device", "cpu"])
    device, n, gpus = worker_layout(spec, flag, 2, pending=100)
    assert (device, n, gpus) == ("cpu", 2, None)
    assert worker_pin(0, "cpu", None) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
