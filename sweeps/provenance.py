"""What a trial records so it can be reproduced: versions, git revision, host, process."""

from __future__ import annotations

import functools
import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path

from mutransfer.provenance import git_revision  # torch-free, read once per checkout

__all__ = ["git_revision", "hostname", "package_versions", "process_start_ticks"]

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


def pid_alive(pid: int, start_ticks: int | None = None) -> bool:
    """Is process ``pid`` (started at ``start_ticks``) alive on this host? Zombies are dead."""
    stat_path = Path(f"/proc/{pid}/stat")
    if stat_path.parent.parent.is_dir() and Path("/proc/self/stat").exists():
        try:
            stat = stat_path.read_text()
        except OSError:
            return False
        fields = stat.rsplit(")", 1)[-1].split()
        if not fields or fields[0] in ("Z", "X", "x"):
            return False
        if start_ticks is not None:
            try:
                return int(fields[19]) == int(start_ticks)
            except (IndexError, ValueError):
                return True
        return True
    try:  # no /proc (macOS): signal 0 probes existence
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def command_line() -> str:
    return " ".join(sys.argv)
