"""Atomic file writes: nothing half-written is ever left behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    The temp file lives in the same directory so the final ``os.replace`` is atomic on
    POSIX. On any exception the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes 0600 files; give the result the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """``open()`` that writes to a temp file and renames it onto ``path`` on success."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return Path(path)


def read_yaml_mapping(path: str | os.PathLike[str], what: str = "file") -> dict[str, Any]:
    """A YAML (or JSON) file holding a mapping, read with ``yaml.safe_load`` (no code runs).

    One clear ValueError, naming ``what`` and the path, for a missing file, bad YAML or a
    document that is not a mapping; an empty file is an empty mapping.
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist")
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} {str(p)!r} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{what} {str(p)!r} must hold a mapping, got {type(doc).__name__}")
    return doc
