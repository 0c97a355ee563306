"""Where a result came from: the git revision of the checkout that produced it (read by
the transfer card's provenance and by every sweep trial, ``sweeps.provenance``), and
whether the process that wrote something is still alive (stale temp files, orphaned trials)."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path


@functools.lru_cache(maxsize=8)
def git_revision(cwd: str | Path | None = None) -> str | None:
    """The current git commit of the checkout holding ``cwd`` (default: this package), or
    None outside a checkout. Cached per ``cwd``: HEAD does not move under a running process."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd or Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


__all__ = ["git_revision"]


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
