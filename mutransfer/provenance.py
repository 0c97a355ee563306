"""Where a result came from: the git revision of the checkout that produced it. Read by
the transfer card's provenance and by every sweep trial (``sweeps.provenance``)."""

from __future__ import annotations

import functools
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
