"""Token data for proxy training: an embedded default corpus, token memmaps, text files.

Three sources, one object (:class:`TokenDataset`):

- ``"stdlib"`` (the default): the Python standard library's own ``*.py`` source files on
  this machine, read as raw bytes (vocab 256). Nothing is downloaded; the corpus is built
  once into a ``uint8`` memmap under the cache dir (``$MUTRANSFER_CACHE`` or
  ``~/.cache/mutransfer``) and keyed by the Python version and the file list, so a
  different interpreter gets its own cache.
- nanoGPT-style ``.bin`` token memmaps (``uint16``/``uint32``): a folder with
  ``train.bin`` (and optionally ``val.bin``), or a single ``.bin`` file. The dtype is
  given, read from a JSON sidecar, or defaults to ``uint16`` (nanoGPT's convention).
- Plain text files or folders, read as bytes (vocab 256).

A batch is a pure function of ``(seed, step)`` (:meth:`TokenDataset.get_batch`), so a
resumed run replays or skips exactly the batches it should, and the global batch at a
step is the same whatever the number of DDP ranks or gradient-accumulation micro-steps.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mutransfer._io import atomic_path, atomic_write_text

__all__ = [
    "DataConfig",
    "TokenDataset",
    "build_stdlib_corpus",
    "cache_dir",
    "load_dataset",
    "stdlib_files",
]

# Bump when the on-disk layout or the corpus recipe changes: old caches are then ignored.
_FORMAT_VERSION = 1
_SPLITS = ("train", "val")
_DTYPES = {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32}
# Directories of the stdlib tree that are not "the standard library's own source":
# third-party packages and the (huge, repetitive) regression test suites.
_STDLIB_EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
)
# Separates documents in byte corpora, like GPT-2's <|endoftext|>; NUL never occurs in
# Python source or ordinary text, so it is an unambiguous boundary within vocab 256.
_DOC_SEPARATOR = b"\x00"


@dataclass(frozen=True)
class DataConfig:
    """Where the tokens come from and how they are split."""

    source: str = "stdlib"
    """``"stdlib"`` for the embedded default corpus, or a path: a folder with
    ``train.bin`` (+ ``val.bin``), a single ``.bin`` token file, a text file, or a folder
    of text files."""

    dtype: str | None = None
    """Token dtype of ``.bin`` files: ``"uint8"``, ``"uint16"`` or ``"uint32"``. ``None``
    reads it from a JSON sidecar (``NAME.bin.json``, ``NAME.json`` or ``meta.json`` with a
    ``"dtype"`` key) and otherwise assumes ``uint16`` as nanoGPT does."""

    vocab_size: int | None = None
    """Vocabulary size. Byte sources have 256; a larger value is allowed (a model with
    spare rows). For ``.bin`` sources ``None`` reads the sidecar's ``"vocab_size"`` or
    uses max token id + 1. Every token id is checked to be below it."""

    val_fraction: float = 0.02
    """Fraction held out for validation, in (0, 1). Folders of files are split by file
    (a hash of the relative path); single files and single ``.bin`` memmaps by their
    tail. Ignored when a ``val.bin`` exists. The default puts 16 stdlib files (~1% of
    the bytes, ~120k tokens on CPython 3.11) in val."""

    max_bytes: int | None = None
    """Cap on the stdlib corpus size in bytes (train and val together), for tests and
    quick demos. ``None`` uses the whole standard library."""

    cache_dir: str | None = None
    """Where the stdlib corpus memmap is built. ``None`` uses ``$MUTRANSFER_CACHE`` or
    ``~/.cache/mutransfer``."""


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


class TokenDataset:
    """Train and val token arrays plus step-indexed batch sampling.

    Build with :func:`load_dataset` (from a :class:`DataConfig`) or directly from arrays
    (``TokenDataset({"train": a, "val": b}, vocab_size=...)``, e.g. in tests).
    """

    def __init__(
        self,
        tokens: dict[str, np.ndarray],
        vocab_size: int,
        meta: dict[str, Any] | None = None,
    ) -> None:
        missing = [s for s in _SPLITS if s not in tokens]
        if missing:
            raise ValueError(f"tokens must have both 'train' and 'val' splits, missing {missing}")
        if not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
        for split in _SPLITS:
            arr = tokens[split]
            if arr.ndim != 1 or arr.dtype.kind not in "ui":
                raise ValueError(
                    f"{split} tokens must be a 1-D integer array, got {arr.dtype} "
                    f"with shape {arr.shape}"
                )
            if arr.size == 0:
                raise ValueError(f"the {split} split is empty")
        self._tokens = {s: tokens[s] for s in _SPLITS}
        self.vocab_size = vocab_size
        self.meta: dict[str, Any] = dict(meta or {})

    def tokens(self, split: str) -> np.ndarray:
        """The 1-D token array (a read-only memmap for file sources) of ``split``."""
        return self._tokens[self._check_split(split)]

    def n_tokens(self, split: str) -> int:
        """Number of tokens in ``split`` (``"train"`` or ``"val"``)."""
        return int(self._tokens[self._check_split(split)].shape[0])

    def __repr__(self) -> str:
        return (
            f"TokenDataset(source={self.meta.get('source', '?')!r}, "
            f"vocab_size={self.vocab_size}, train={self.n_tokens('train')}, "
            f"val={self.n_tokens('val')})"
        )

    @staticmethod
    def _check_split(split: str) -> str:
        if split not in _SPLITS:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return split

    def offsets(
        self, split: str, step: int, batch_size: int, seq_len: int, seed: int = 0
    ) -> np.ndarray:
        """Start offsets of the ``batch_size`` sequences of the global batch at ``step``.

        Drawn uniformly from ``[0, n_tokens - seq_len - 1]`` by a PCG64 generator seeded
        with ``SeedSequence([seed, step, split])``: a pure function of its arguments, so
        any step's batch can be recomputed without replaying the ones before it.
        """
        self._check_split(split)
        for name, value in (("step", step), ("seed", seed)):
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        n = self.n_tokens(split)
        if seq_len + 1 > n:
            raise ValueError(
                f"seq_len={seq_len} is too long for the {split} split of {n} tokens "
                f"(needs at least seq_len + 1 = {seq_len + 1})"
            )
        rng = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence([int(seed), int(step), _SPLITS.index(split)]))
        )
        return rng.integers(0, n - seq_len, size=int(batch_size), dtype=np.int64)

    def get_batch(
        self,
        split: str,
        step: int,
        batch_size: int,
        seq_len: int,
        seed: int = 0,
        *,
        micro: tuple[int, int] = (0, 1),
        rank: int = 0,
        world_size: int = 1,
        device: str | torch.device | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets, each ``int64 [rows, seq_len]``.

        ``batch_size`` is the GLOBAL batch in sequences. The global batch at ``step`` is
        split into ``world_size`` contiguous rank slices, and each rank slice into
        ``micro[1]`` contiguous micro-batches; this returns micro-batch ``micro[0]`` of
        rank ``rank``, i.e. ``batch_size / (world_size * micro[1])`` rows. Concatenating
        every (rank, micro) slice in that order gives back the full global batch, so the
        data seen at a step does not depend on how it is parallelized.
        """
        i, n_micro = micro
        if not (
            isinstance(n_micro, int) and n_micro >= 1 and isinstance(i, int) and 0 <= i < n_micro
        ):
            raise ValueError(f"micro must be (index, count) with 0 <= index < count, got {micro!r}")
        if not (
            isinstance(world_size, int)
            and world_size >= 1
            and isinstance(rank, int)
            and 0 <= rank < world_size
        ):
            raise ValueError(
                f"rank must be in [0, world_size) with world_size >= 1, got rank={rank!r}, "
                f"world_size={world_size!r}"
            )
        if batch_size % (world_size * n_micro) != 0:
            raise ValueError(
                f"batch_size={batch_size} is not divisible by world_size * micro count = "
                f"{world_size} * {n_micro}"
            )
        starts = self.offsets(split, step, batch_size, seq_len, seed)
        per_rank = batch_size // world_size
        rows = per_rank // n_micro
        lo = rank * per_rank + i * rows
        starts = starts[lo : lo + rows]
        # One fancy-indexing gather reads each window straight out of the memmap.
        window = self.tokens(split)[starts[:, None] + np.arange(seq_len + 1)]
        block = torch.from_numpy(np.asarray(window, dtype=np.int64))
        x, y = block[:, :-1].contiguous(), block[:, 1:].contiguous()
        if device is not None:
            dev = torch.device(device)
            pin = dev.type == "cuda"  # pinned host memory lets the copy overlap compute
            x = (x.pin_memory() if pin else x).to(dev, non_blocking=pin)
            y = (y.pin_memory() if pin else y).to(dev, non_blocking=pin)
        return x, y


def _read_sidecar(path: Path) -> dict[str, Any]:
    """The JSON sidecar of a ``.bin`` file: ``X.bin.json``, ``X.json`` or ``meta.json``."""
    for candidate in (
        path.with_name(path.name + ".json"),
        path.with_suffix(".json"),
        path.parent / "meta.json",
    ):
        if candidate.is_file():
            try:
                doc = json.loads(candidate.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise ValueError(f"sidecar {candidate} is not valid JSON: {exc}") from None
            if not isinstance(doc, dict):
                raise ValueError(f"sidecar {candidate} must hold a JSON object")
            return doc
    return {}


def _bin_dtype(path: Path, given: str | None, sidecar: dict[str, Any]) -> np.dtype[Any]:
    side = sidecar.get("dtype")
    if given is not None and side is not None and str(side) != given:
        raise ValueError(f"dtype={given!r} contradicts the sidecar of {path}, which says {side!r}")
    name = given or (str(side) if side is not None else "uint16")
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {name!r}")
    return np.dtype(_DTYPES[name])


def _open_bin(path: Path, dtype: np.dtype[Any]) -> np.ndarray:
    size = path.stat().st_size
    if size % dtype.itemsize != 0:
        raise ValueError(
            f"{path} has {size} bytes, not a multiple of {dtype.itemsize} ({dtype.name}): "
            "wrong dtype?"
        )
    if size == 0:
        raise ValueError(f"{path} is empty")
    return np.memmap(path, dtype=dtype, mode="r")


def _max_token(arr: np.ndarray) -> int:
    # Chunked so a multi-GB memmap is scanned without materializing a copy.
    chunk = 1 << 24
    return max(int(arr[i : i + chunk].max()) for i in range(0, arr.shape[0], chunk))


def _tail_split(arr: np.ndarray, val_fraction: float, what: str) -> dict[str, np.ndarray]:
    n = arr.shape[0]
    n_val = max(1, math.ceil(n * val_fraction))
    if n_val >= n:
        raise ValueError(f"{what} has only {n} tokens: too few to split into train and val")
    return {"train": arr[: n - n_val], "val": arr[n - n_val :]}


def _load_bin(cfg: DataConfig, path: Path) -> TokenDataset:
    if path.is_dir():
        files = {"train": path / "train.bin", "val": path / "val.bin"}
    else:
        files = {"train": path}
    sidecar = _read_sidecar(files["train"])
    dtype = _bin_dtype(files["train"], cfg.dtype, sidecar)
    train = _open_bin(files["train"], dtype)
    if "val" in files and files["val"].is_file():
        tokens = {"train": train, "val": _open_bin(files["val"], dtype)}
        split_rule = "val.bin"
    else:
        tokens = _tail_split(train, cfg.val_fraction, str(files["train"]))
        split_rule = f"tail: last {cfg.val_fraction} of the tokens -> val"
    vocab = cfg.vocab_size if cfg.vocab_size is not None else sidecar.get("vocab_size")
    top = max(_max_token(tokens[s]) for s in _SPLITS)
    if vocab is None:
        vocab = top + 1
    elif not isinstance(vocab, int) or vocab < 1:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab!r}")
    elif top >= vocab:
        raise ValueError(
            f"{path} holds token id {top} >= vocab_size {vocab}: wrong dtype ({dtype.name}) "
            "or vocab_size?"
        )
    meta = {"source": str(path), "dtype": dtype.name, "split_rule": split_rule}
    return TokenDataset(tokens, int(vocab), meta)


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


def _load_text(cfg: DataConfig, path: Path) -> TokenDataset:
    if path.is_dir():
        rel = _text_files(path)
        if not rel:
            raise ValueError(f"no files found in the text folder {path}")
        if len(rel) >= 2:
            files = _split_by_file(rel, cfg.val_fraction)
            tokens = {
                s: np.frombuffer(_concat(path, files[s], None), dtype=np.uint8) for s in _SPLITS
            }
            split_rule = f"by file: sha256(relative path)[:8] / 2**64 < {cfg.val_fraction} -> val"
        else:
            data = np.frombuffer((path / rel[0]).read_bytes(), dtype=np.uint8)
            tokens = _tail_split(data, cfg.val_fraction, str(path / rel[0]))
            split_rule = f"tail: last {cfg.val_fraction} of the bytes -> val"
    else:
        data = np.frombuffer(path.read_bytes(), dtype=np.uint8)
        if data.size == 0:
            raise ValueError(f"{path} is empty")
        tokens = _tail_split(data, cfg.val_fraction, str(path))
        split_rule = f"tail: last {cfg.val_fraction} of the bytes -> val"
    meta = {"source": str(path), "dtype": "uint8", "split_rule": split_rule}
    return TokenDataset(tokens, _byte_vocab(cfg), meta)


def _byte_vocab(cfg: DataConfig) -> int:
    if cfg.vocab_size is None:
        return 256
    if not isinstance(cfg.vocab_size, int) or cfg.vocab_size < 256:
        raise ValueError(f"vocab_size must be >= 256 for byte-level data, got {cfg.vocab_size!r}")
    return cfg.vocab_size


def load_dataset(cfg: DataConfig | None = None) -> TokenDataset:
    """Open the data described by ``cfg`` (default: the stdlib corpus).

    ``.bin`` sources are memory-mapped, so opening is cheap whatever their size (one pass
    checks the token ids against ``vocab_size``). Text sources are read into memory; for
    large corpora tokenize them to a ``.bin`` first.
    """
    cfg = cfg or DataConfig()
    _check_fraction(cfg.val_fraction)
    if cfg.source == "stdlib":
        vocab = _byte_vocab(cfg)
        folder = build_stdlib_corpus(
            cfg.cache_dir, val_fraction=cfg.val_fraction, max_bytes=cfg.max_bytes
        )
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        tokens = {s: np.memmap(folder / f"{s}.bin", dtype=np.uint8, mode="r") for s in _SPLITS}
        meta["path"] = str(folder)
        return TokenDataset(tokens, vocab, meta)
    path = Path(cfg.source).expanduser()
    if not path.exists():
        raise ValueError(f"data source {cfg.source!r} does not exist (use 'stdlib' or a path)")
    if path.suffix == ".bin" or (path.is_dir() and (path / "train.bin").is_file()):
        return _load_bin(cfg, path)
    if cfg.dtype is not None:
        raise ValueError(f"dtype={cfg.dtype!r} applies only to .bin sources, not to {path}")
    return _load_text(cfg, path)
