"""What a trial records so it can be reproduced: versions, git revision, host, process."""

from __future__ import annotations

import functools
import platform
import socket
from importlib import metadata
from pathlib import Path

__all__ = ["hostname", "package_versions", "process_start_ticks"]

_PACKAGES = ("mutransfer", "torch", "optuna", "numpy", "pandas")


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


@functools.lru_cache(maxsize=1)
def hostname() -> str:
    return socket.gethostname()


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])  # field 22 of stat; fields[0] is field 3 (state)
    except (IndexError, ValueError):
        return None

