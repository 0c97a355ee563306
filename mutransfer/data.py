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
- Your own tokens: :func:`prepare_tokens` (``mutransfer data prepare``) encodes text with a
  local ``tokenizer.json`` (HF ``tokenizers``) into a ``.bin`` whose sidecar records the
  vocab, dtype, tokenizer hash, end-of-text handling and train/val boundary.

A batch is a pure function of ``(seed, step)`` (:meth:`TokenDataset.get_batch`), so a
resumed run replays or skips exactly the batches it should, and the global batch at a
step is the same whatever the number of DDP ranks or gradient-accumulation micro-steps.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
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
    "prepare_tokens",
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
    tail. Ignored when a ``val.bin`` exists or the sidecar of a prepared ``.bin`` gives its
    own boundary (``split.val_start``, see :func:`prepare_tokens`). The default puts 16 stdlib files (~1% of
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

    @property
    def tokenizer(self) -> str:
        """What made the token ids, for the results table's ``tokenizer`` column:
        ``sha256[:12]`` of the tokenizer file for tokens written by :func:`prepare_tokens`,
        ``"bytes"`` for byte-level text and the stdlib corpus, ``"unknown"`` otherwise (a
        bare ``.bin`` without a tokenizer in its sidecar, arrays built in code)."""
        return str(self.meta.get("tokenizer") or "unknown")

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
    split = sidecar.get("split") if isinstance(sidecar.get("split"), dict) else {}
    if "val" in files and files["val"].is_file():
        tokens = {"train": train, "val": _open_bin(files["val"], dtype)}
        split_rule = "val.bin"
    elif "val_start" in split:
        n, cut = sidecar.get("n_tokens"), split["val_start"]
        if n != train.shape[0]:
            raise ValueError(f"{files['train']} holds {train.shape[0]} tokens but its sidecar says "
                             f"n_tokens={n!r}: a stale sidecar? prepare the tokens again")
        if not (isinstance(cut, int) and 0 < cut < n):
            raise ValueError(f"sidecar of {files['train']} has split.val_start={cut!r}, "
                             f"not in (0, {n})")
        tokens = {"train": train[:cut], "val": train[cut:]}
        split_rule = str(split.get("rule", f"sidecar: tokens from {cut} on -> val"))
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
    tok = sidecar.get("tokenizer")
    if isinstance(tok, dict) and isinstance(tok.get("sha256"), str):
        tokenizer = tok["sha256"][:12]
    else:  # a stdlib cache folder opened as .bin is still bytes; anything else is not known
        tokenizer = "bytes" if sidecar.get("source") == "stdlib" else "unknown"
    meta = {"source": str(path), "dtype": dtype.name, "split_rule": split_rule, "tokenizer": tokenizer}
    if isinstance(tok, dict) and tok.get("name"):
        meta["tokenizer_name"] = str(tok["name"])
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
    meta = {"source": str(path), "dtype": "uint8", "split_rule": split_rule, "tokenizer": "bytes"}
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
        meta["tokenizer"] = "bytes"
        return TokenDataset(tokens, vocab, meta)
    path = Path(cfg.source).expanduser()
    if not path.exists():
        raise ValueError(f"data source {cfg.source!r} does not exist (use 'stdlib' or a path)")
    if path.suffix == ".bin" or (path.is_dir() and (path / "train.bin").is_file()):
        return _load_bin(cfg, path)
    if cfg.dtype is not None:
        raise ValueError(f"dtype={cfg.dtype!r} applies only to .bin sources, not to {path}")
    return _load_text(cfg, path)


# ---- your own tokens: text -> .bin with a sidecar ---------------------------------------

#: Version of the sidecar :func:`prepare_tokens` writes (``X.bin.json``); bump on a change.
_PREPARED_FORMAT = 1
#: End-of-text tokens looked for, in this order, when ``eos="auto"`` (GPT-2, Llama 3,
#: SentencePiece/T5, Gemma and BERT conventions).
_EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "[SEP]")
# A name that is not a path on disk and could be a hub repo id (``gpt2``, ``org/name``).
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def _tokenizer_file(spec: str | os.PathLike[str]) -> Path:
    """The local ``tokenizer.json`` named by ``spec`` (a file, or a folder holding one).
    Never a download: a missing path is one ValueError naming it."""
    text = str(spec)
    p = Path(text).expanduser()
    if p.is_dir():
        if not (p / "tokenizer.json").is_file():
            raise ValueError(f"tokenizer folder {text!r} holds no tokenizer.json")
        return p / "tokenizer.json"
    if p.is_file():
        return p
    if _HUB_ID.fullmatch(text) and not text.endswith(".json"):
        raise ValueError(f"tokenizer {text!r} is not a local file (a hub id?); nothing is downloaded: "
                         "save the tokenizer as tokenizer.json (Tokenizer.save) and pass its path")
    raise ValueError(f"tokenizer file {text!r} does not exist")


def _text_documents(path: Path, skip: set[Path]) -> list[tuple[str, Path]]:
    """(name, file) of each document under ``path`` (a file, or a folder's files in
    :func:`_text_files` order), leaving out ``skip`` (the outputs)."""
    if path.is_file():
        return [(path.name, path)]
    if not path.is_dir():
        raise ValueError(f"--text {str(path)!r} does not exist")
    docs = [(rel, path / rel) for rel in _text_files(path)]
    return [(rel, f) for rel, f in docs if f.resolve() not in skip]


def _pieces(path: Path, chunk_chars: int) -> Any:
    """Yield ``(text, last)``: the file in line-aligned pieces of about ``chunk_chars``
    (a longer line is cut), so a huge file never sits in memory whole. ``newline=""``
    keeps ``\\r\\n`` as written, so decoding gives back the file's exact text."""
    prev: str | None = None
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            while True:
                buf: list[str] = []
                size = 0
                while size < chunk_chars:
                    line = fh.readline(chunk_chars)
                    if not line:
                        break
                    buf.append(line)
                    size += len(line)
                if not buf:
                    break
                if prev is not None:
                    yield prev, False
                prev = "".join(buf)
    except UnicodeDecodeError as exc:
        raise ValueError(f"text file {str(path)!r} is not UTF-8 (byte {exc.start} of a read block "
                         "cannot be decoded); convert it or leave it out") from None
    if prev is not None:
        yield prev, True


def prepare_tokens(
    tokenizer: str | os.PathLike[str],
    text: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    eos: str | None = "auto",
    val_fraction: float = 0.02,
    chunk_chars: int = 1 << 16,
    batch_chars: int = 1 << 20,
    progress: Any = None,
) -> dict[str, Any]:
    """Tokenize ``text`` (a file or a folder of UTF-8 text files) with a local HF
    ``tokenizers`` file into the token memmap ``out`` (``.bin``) and its sidecar
    ``out + ".json"``; returns the sidecar.

    - Documents: each file is one document; the tokenizer's end-of-text token is appended
      after every document (``eos="auto"`` takes the first of ``<|endoftext|>``,
      ``<|end_of_text|>``, ``</s>``, ``<eos>``, ``[SEP]`` the vocab has; a token string
      names another; ``None`` puts nothing between documents). Encoding adds no other
      special tokens (no BOS/CLS of a post-processor). Empty files are skipped.
    - dtype: ``uint16`` when every id fits (vocab <= 65536), else ``uint32``.
    - Split, as :func:`load_dataset` splits text: a folder of 2+ files by file (the
      :func:`_split_by_file` hash rule, train files first, then val files), a single file
      by its tail (the last ``ceil(n * val_fraction)`` tokens). The sidecar's
      ``split.val_start`` is the first val token; the loader uses it.
    - Streaming: files are read in line-aligned pieces of ``chunk_chars`` and encoded with
      ``encode_batch`` ``batch_chars`` at a time, straight into the output, so memory stays
      bounded whatever the input size. ``progress(n_chars)`` is called after each batch.
    - Atomic: the ``.bin`` is written to a temp file and renamed, then the sidecar (it
      records ``n_tokens``; the loader refuses a sidecar that disagrees with the file).
    """
    from tokenizers import Tokenizer

    from mutransfer._io import check_output

    _check_fraction(val_fraction)
    tok_path = _tokenizer_file(tokenizer)
    src = Path(text).expanduser()
    dst = Path(out).expanduser()
    if dst.suffix != ".bin":
        raise ValueError(f"--out {str(dst)!r} must end in .bin (the loader recognizes token files by it)")
    side_path = dst.with_name(dst.name + ".json")
    check_output(dst, inputs=[src, tok_path])
    check_output(side_path, inputs=[src, tok_path])
    try:
        tk = Tokenizer.from_file(str(tok_path))
    except Exception as exc:  # the Rust side raises plain Exception with serde's message
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"tokenizer file {str(tok_path)!r} is not a tokenizers JSON file: {first}") from None
    vocab = int(tk.get_vocab_size(with_added_tokens=True))
    eos_token: str | None
    if eos == "auto":
        eos_token = next((t for t in _EOS_CANDIDATES if tk.token_to_id(t) is not None), None)
        if eos_token is None:
            raise ValueError(f"tokenizer {str(tok_path)!r} has none of the end-of-text tokens "
                             f"{list(_EOS_CANDIDATES)}; name one with --eos TOKEN, or --eos none")
    else:
        eos_token = eos
    eos_id = None if eos_token is None else tk.token_to_id(eos_token)
    if eos_token is not None and eos_id is None:
        raise ValueError(f"--eos {eos_token!r} is not a token of {str(tok_path)!r}")
    dtype = np.dtype(np.uint16 if vocab <= 1 << 16 else np.uint32)

    docs = _text_documents(src, {dst.resolve(), side_path.resolve()})
    if not docs:
        raise ValueError(f"--text {str(src)!r} holds no text files")
    if len(docs) >= 2:
        names = [n for n, _ in docs]
        groups = _split_by_file(names, val_fraction)
        by_name = dict(docs)
        ordered = {s: [(n, by_name[n]) for n in groups[s]] for s in _SPLITS}
        rule = f"by file: sha256(relative path)[:8] / 2**64 < {val_fraction} -> val; val files last"
    else:
        ordered = {"train": docs, "val": []}
        rule = f"tail: last ceil(n * {val_fraction}) tokens -> val"

    start = time.perf_counter()
    counts = {s: 0 for s in _SPLITS}
    n_docs = {s: 0 for s in _SPLITS}
    with atomic_path(dst) as tmp, open(tmp, "wb") as fh:
        for split in _SPLITS:
            pending: list[tuple[str, bool]] = []
            size = 0

            def flush(split: str = split) -> None:
                nonlocal pending, size
                if not pending:
                    return
                encs = tk.encode_batch([t for t, _ in pending], add_special_tokens=False)
                for enc, (_, last) in zip(encs, pending, strict=True):
                    ids = enc.ids + [eos_id] if last and eos_id is not None else enc.ids
                    fh.write(np.asarray(ids, dtype=dtype).tobytes())
                    counts[split] += len(ids)
                    n_docs[split] += int(last)
                if progress is not None:
                    progress(size)
                pending, size = [], 0

            for _, f in ordered[split]:
                for piece, last in _pieces(f, chunk_chars):
                    pending.append((piece, last))
                    size += len(piece)
                    if size >= batch_chars:
                        flush()
            flush()
        n = counts["train"] + counts["val"]
        if n == 0:
            raise ValueError(f"--text {str(src)!r} holds no text (every file is empty)")
        if ordered["val"]:
            val_start = counts["train"]
            if counts["val"] == 0 or val_start == 0:
                empty = "val" if counts["val"] == 0 else "train"
                raise ValueError(f"the {empty} files of {str(src)!r} are all empty: nothing to put in "
                                 f"{empty}; add text or change --val-fraction")
        else:
            val_start = n - max(1, math.ceil(n * val_fraction))
            if val_start < 1:
                raise ValueError(f"{str(src)!r} gives only {n} tokens: too few to split into train and val")
    sha = hashlib.sha256(tok_path.read_bytes()).hexdigest()
    name = tok_path.parent.name if tok_path.name == "tokenizer.json" else tok_path.stem
    sidecar = {
        "format": _PREPARED_FORMAT,
        "source": "tokenizer",
        "text": str(src),
        "dtype": dtype.name,
        "vocab_size": vocab,
        "n_tokens": n,
        "tokenizer": {"name": name or tok_path.name, "sha256": sha, "hash": sha[:12], "file": str(tok_path)},
        "eos": None if eos_id is None else {"token": eos_token, "id": eos_id,
                                            "placement": "after every document (one file = one document)"},
        "n_documents": n_docs,
        "split": {"val_start": val_start, "n_train": val_start, "n_val": n - val_start,
                  "val_fraction": val_fraction, "rule": rule},
        "n_files": {s: len(ordered[s]) for s in _SPLITS},
        "build_seconds": round(time.perf_counter() - start, 3),
    }
    atomic_write_text(side_path, json.dumps(sidecar, indent=2) + "\n")
    return sidecar
