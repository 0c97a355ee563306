"""Where a run executes: the device it asks for (checked), the torch.distributed
environment it was launched in, and whether denormals are flushed."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch


def resolve_device(name: str = "auto") -> torch.device:
    """``auto``: cuda, then mps, then cpu; otherwise the named device (checked)."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be auto, cpu, cuda[:N] or mps, got {name!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but CUDA is not available")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device {name!r} was asked for but MPS is not available")
    return dev


def dist_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment (1 process: 0, 1, 0)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size(), int(
            os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def denormals_flushed() -> bool:
    """Whether the CPU currently flushes subnormal floats to zero."""
    return float(torch.tensor([1e-40], dtype=torch.float32).mul(1.0)) == 0.0


@contextlib.contextmanager
def flush_denormals(device: torch.device) -> Iterator[None]:
    """Flush subnormal floats to zero on CPU while the block runs (a training loop), then
    put the flag back. Denormals in the tails of high-LR runs made CPU steps up to 2x
    slower; the flag is CPU state shared with everything else in the thread (Python's own
    float math too), so it is on only inside the loop. Elsewhere: nothing."""
    if device.type != "cpu":
        yield
        return
    before = denormals_flushed()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)
