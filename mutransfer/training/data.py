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

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mutransfer.training.corpus import (
    _SPLITS,
    _check_fraction,
    _concat,
    _split_by_file,
    _text_files,
    build_stdlib_corpus,
)
from mutransfer.training.prepare import _PREPARED_FORMAT

__all__ = ["DataConfig", "TokenDataset", "load_dataset"]

_DTYPES = {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32}


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

    def eval_offsets(self, n_sequences: int, seq_len: int) -> np.ndarray:
        """Start offsets of the fixed held-out set: ``n_sequences`` windows of the val split.

        Drawn once, as :meth:`offsets` of step 0 and seed 0 with ``batch_size =
        n_sequences``, so the set depends on nothing a run varies (batch size, seed, trial,
        parallelism): every run that evaluates ``n_sequences`` sequences of ``seq_len``
        tokens is scored on the same sequences, and the loss of two batch sizes is
        comparable. (Drawing it per training batch size, as eval batches of ``batch_size``
        rows did, gave each batch size its own sample: on the same weights they differed by
        up to 6.7%, the smallest batch's set the easiest every time.)
        """
        return self.offsets("val", 0, n_sequences, seq_len, 0)

    def eval_batches(
        self,
        n_sequences: int,
        seq_len: int,
        rows: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        device: str | torch.device | None = None,
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The held-out set of :meth:`eval_offsets` as ``(x, y)`` chunks of at most ``rows``
        sequences, ``int64 [rows, seq_len]`` each, in set order.

        Under data parallelism each rank takes a contiguous share (``np.array_split``, so
        any ``n_sequences`` splits over any ``world_size``); ``rows`` only bounds memory and
        never changes which sequences are scored.
        """
        if not (isinstance(rows, (int, np.integer)) and rows >= 1):
            raise ValueError(f"rows must be a positive integer, got {rows!r}")
        starts = np.array_split(self.eval_offsets(n_sequences, seq_len), world_size)[rank]
        out = []
        for lo in range(0, len(starts), int(rows)):
            chunk = starts[lo : lo + int(rows)]
            window = self.tokens("val")[chunk[:, None] + np.arange(seq_len + 1)]
            block = torch.from_numpy(np.asarray(window, dtype=np.int64))
            x, y = block[:, :-1].contiguous(), block[:, 1:].contiguous()
            if device is not None:
                x, y = x.to(device), y.to(device)
            out.append((x, y))
        return out

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


def _check_sidecar(path: Path, sidecar: dict[str, Any], *, given_dtype: str | None, folder: bool) -> None:
    """A single ``.bin`` needs a sidecar (``data prepare`` writes it before the ``.bin``, so a
    ``.bin`` without one is half-written), unless ``dtype`` is given for a bare memmap; a
    nanoGPT folder (train.bin/val.bin) may have none. A sidecar of ours must be of a
    format this version reads."""
    if not sidecar and not folder and given_dtype is None:
        raise ValueError(f"{path} has no sidecar ({path.name}.json): a half-written `data prepare`? "
                         "prepare it again, or give its dtype for a bare token memmap (train: --set "
                         "data_dtype=uint16)")
    fmt = sidecar.get("format")
    if fmt is not None and not (isinstance(fmt, int) and not isinstance(fmt, bool)
                                and 1 <= fmt <= _PREPARED_FORMAT):
        raise ValueError(f"the sidecar of {path} has format {fmt!r}; this version reads format 1 to "
                         f"{_PREPARED_FORMAT}: prepare the tokens again with this version")


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
    _check_sidecar(files["train"], sidecar, given_dtype=cfg.dtype, folder=path.is_dir())
    dtype = _bin_dtype(files["train"], cfg.dtype, sidecar)
    train = _open_bin(files["train"], dtype)
    if isinstance(sidecar.get("n_tokens"), int) and sidecar["n_tokens"] != train.shape[0]:
        raise ValueError(f"{files['train']} holds {train.shape[0]} tokens but its sidecar says "
                         f"n_tokens={sidecar['n_tokens']!r}: a half-written or stale dataset? "
                         "prepare it again")
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


