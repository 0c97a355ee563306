"""Text corpora as bytes: the Python standard library's own source (the default corpus,
built once into a cached ``uint8`` memmap), the files of a text folder, and the rule that
splits files into train and val by a hash of their path."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

from mutransfer._io import atomic_path, atomic_write_text

# Bump when the on-disk layout or the corpus recipe changes: old caches are then ignored.
_FORMAT_VERSION = 1


_SPLITS = ("train", "val")


# Directories of the stdlib tree that are not "the standard library's own source":
# third-party packages and the (huge, repetitive) regression test suites.
_STDLIB_EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
)


# Separates documents in byte corpora, like GPT-2's <|endoftext|>; NUL never occurs in
# Python source or ordinary text, so it is an unambiguous boundary within vocab 256.
_DOC_SEPARATOR = b"\x00"


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Return the cache directory: ``override``, else ``$MUTRANSFER_CACHE``, else
    ``~/.cache/mutransfer``."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get("MUTRANSFER_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "mutransfer"


def _hash_unit(text: str) -> float:
    """Map a string to a deterministic number in [0, 1) (sha256, first 8 bytes)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _split_by_file(relpaths: list[str], val_fraction: float) -> dict[str, list[str]]:
    """Assign each file to train or val by ``hash(relpath) < val_fraction``.

    Hashing the path (not the position) keeps a file in the same split when other files
    are added or removed. Both splits are forced non-empty: with few files or a small
    fraction the hash alone could leave val empty, so the file with the smallest hash
    moves to val (and symmetrically for train).
    """
    if len(relpaths) < 2:
        raise ValueError(f"need at least 2 files to split by file, got {len(relpaths)}")
    units = {p: _hash_unit(p) for p in relpaths}
    val = [p for p in relpaths if units[p] < val_fraction]
    if not val:
        val = [min(relpaths, key=units.__getitem__)]
    if len(val) == len(relpaths):
        val.remove(max(relpaths, key=units.__getitem__))
    val_set = set(val)
    return {"train": [p for p in relpaths if p not in val_set], "val": sorted(val_set)}


def _check_fraction(val_fraction: float) -> None:
    if not (isinstance(val_fraction, (int, float)) and 0.0 < val_fraction < 1.0):
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")


def stdlib_files() -> tuple[Path, list[str]]:
    """Return the stdlib root and the sorted relative paths of its ``*.py`` source files.

    Excludes ``site-packages``/``dist-packages`` (third-party code) and test directories.
    Does not follow symlinks, so the list is the same on every call.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise ValueError(f"the Python standard library was not found at {root}")
    rel: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _STDLIB_EXCLUDED_DIRS)
        for name in filenames:
            if name.endswith(".py"):
                rel.append(Path(dirpath, name).relative_to(root).as_posix())
    return root, sorted(rel)


def _concat(root: Path, relpaths: list[str], budget: int | None) -> bytes:
    """Concatenate files (each followed by the document separator), up to ``budget``."""
    parts: list[bytes] = []
    size = 0
    for rel in relpaths:
        chunk = (root / rel).read_bytes() + _DOC_SEPARATOR
        if budget is not None and size + len(chunk) >= budget:
            parts.append(chunk[: budget - size])
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def build_stdlib_corpus(
    cache: str | os.PathLike[str] | None = None,
    *,
    val_fraction: float = 0.02,
    max_bytes: int | None = None,
) -> Path:
    """Build (or find) the stdlib byte corpus and return its cache folder.

    The folder holds ``train.bin`` and ``val.bin`` (``uint8`` token memmaps) and
    ``meta.json`` (Python version, file counts, token counts, split rule, build time).
    Its name is a hash of everything the content depends on: format version, Python
    implementation and version, stdlib path, every file's relative path and size,
    ``val_fraction`` and ``max_bytes``. Each file is written to a temp file and renamed;
    ``meta.json`` is written last, so a folder without it is an unfinished build and is
    rebuilt. Concurrent builders write identical bytes, so the race is harmless.
    """
    _check_fraction(val_fraction)
    if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 2):
        raise ValueError(f"max_bytes must be an integer >= 2 or None, got {max_bytes!r}")
    root, rel = stdlib_files()
    sizes = [(root / p).stat().st_size for p in rel]
    python = f"{sys.implementation.name}-{'.'.join(map(str, sys.version_info[:3]))}"
    key_doc = {
        "format": _FORMAT_VERSION,
        "python": python,
        "stdlib": str(root),
        "files": list(zip(rel, sizes, strict=True)),
        "val_fraction": val_fraction,
        "max_bytes": max_bytes,
    }
    key = hashlib.sha256(json.dumps(key_doc).encode("utf-8")).hexdigest()[:16]
    folder = cache_dir(cache) / "corpus" / f"stdlib-{python}-{key}"
    meta_path = folder / "meta.json"
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if all((folder / f"{s}.bin").stat().st_size == meta["n_tokens"][s] for s in _SPLITS):
                return folder
        except (OSError, ValueError, KeyError):
            pass  # corrupt or partial cache: rebuild below

    start = time.perf_counter()
    files = _split_by_file(rel, val_fraction)
    if max_bytes is None:
        budgets: dict[str, int | None] = {"train": None, "val": None}
    else:
        # Each split gets its share of the cap so a capped corpus still has a val split.
        n_val = max(1, math.ceil(max_bytes * val_fraction))
        budgets = {"train": max_bytes - n_val, "val": n_val}
    n_tokens: dict[str, int] = {}
    for split in _SPLITS:
        data = _concat(root, files[split], budgets[split])
        with atomic_path(folder / f"{split}.bin") as tmp:
            tmp.write_bytes(data)
        n_tokens[split] = len(data)
    meta = {
        "format": _FORMAT_VERSION,
        "source": "stdlib",
        "python": python,
        "stdlib": str(root),
        "dtype": "uint8",
        "vocab_size": 256,
        "n_files": {s: len(files[s]) for s in _SPLITS},
        "n_tokens": n_tokens,
        "max_bytes": max_bytes,
        "split_rule": f"by file: sha256(relative path)[:8] / 2**64 < {val_fraction} -> val",
        "separator": "NUL byte after each file",
        "build_seconds": round(time.perf_counter() - start, 3),
        "key": key,
    }
    atomic_write_text(meta_path, json.dumps(meta, indent=2) + "\n")
    return folder


def _text_files(folder: Path) -> list[str]:
    rel: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel.extend(
            Path(dirpath, f).relative_to(folder).as_posix()
            for f in filenames
            if not f.startswith(".")
        )
    return sorted(rel)
