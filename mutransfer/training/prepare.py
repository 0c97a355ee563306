"""Your own tokens: text encoded with a local Hugging Face ``tokenizers`` file into a
token memmap (``.bin``) and a sidecar recording vocab, dtype, tokenizer hash, end-of-text
handling and the train/val boundary (:func:`prepare_tokens`, ``mutransfer data prepare``)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from mutransfer._io import atomic_write_text, check_output
from mutransfer.provenance import pid_alive
from mutransfer.training.corpus import _SPLITS, _check_fraction, _split_by_file, _text_files

#: Version of the sidecar :func:`prepare_tokens` writes (``X.bin.json``); bump on a change.
_PREPARED_FORMAT = 1


#: The fewest tokens a split of a prepared dataset may hold: one input and its target.
MIN_SPLIT_TOKENS = 2


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
    - Whole or absent: the ``.bin`` is written to a temp file, the sidecar (it records
      ``n_tokens``) is written next, and the ``.bin`` is renamed into place last; the
      loader refuses a ``.bin`` whose sidecar is missing or disagrees with it. Temp files
      of a killed earlier run are removed (:func:`clean_stale_temps`); a write error
      (a full disk) names the file.
    """
    _check_fraction(val_fraction)
    tok_path = _tokenizer_file(tokenizer)
    src = Path(text).expanduser()
    dst = Path(out).expanduser()
    if dst.suffix != ".bin":
        raise ValueError(f"--out {str(dst)!r} must end in .bin (the loader recognizes token files by it)")
    side_path = dst.with_name(dst.name + ".json")
    check_output(dst, inputs=[src, tok_path])
    check_output(side_path, inputs=[src, tok_path])
    tk = _open_tokenizer(tok_path)
    vocab = int(tk.get_vocab_size(with_added_tokens=True))
    eos_token, eos_id = _end_of_text(tk, eos, tok_path)
    dtype = np.dtype(np.uint16 if vocab <= 1 << 16 else np.uint32)

    docs = _text_documents(src, {dst.resolve(), side_path.resolve()})
    if not docs:
        raise ValueError(f"--text {str(src)!r} holds no text files")
    ordered, rule = _order_documents(docs, val_fraction)

    start = time.perf_counter()
    dst.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(dst)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    writing = dst  # the file a write error names (ENOSPC has no file name of its own)
    try:
        counts, n_docs, n, val_start = _encode_into(
            tmp, tk, ordered, src=src, val_fraction=val_fraction, dtype=dtype, eos_id=eos_id,
            chunk_chars=chunk_chars, batch_chars=batch_chars, progress=progress)
        sidecar = _sidecar(src, dtype, vocab, n, tok_path, eos_token, eos_id, n_docs, val_start,
                           val_fraction, rule, ordered, start)
        # Whole or absent: the old .bin goes first, then the sidecar is written, and the new
        # .bin is renamed into place last. A .bin is never without the sidecar that
        # describes it (the loader refuses a .bin whose sidecar is missing or disagrees).
        dst.unlink(missing_ok=True)
        writing = side_path
        atomic_write_text(side_path, json.dumps(sidecar, indent=2) + "\n")
        writing = dst
        os.replace(tmp, dst)
    except OSError as exc:  # ENOSPC, EIO, ...: name the file being written
        tmp.unlink(missing_ok=True)
        if writing == side_path:  # no sidecar: no dataset
            side_path.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(exc.filename or writing)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return sidecar


def clean_stale_temps(dst: Path) -> list[Path]:
    """Remove temp files an earlier ``prepare_tokens`` of ``dst`` left when it was killed
    (``.NAME.bin.PID.XXXX.tmp`` of a process that is gone, or an older version's
    ``.NAME.bin.XXXXXXXX.tmp``); one of a live process is kept. Returns those removed."""
    removed = []
    for p in dst.parent.glob(f".{dst.name}.*.tmp"):
        parts = p.name[len(dst.name) + 2:-len(".tmp")].split(".")
        if parts and parts[0].isdigit() and len(parts) == 2 and pid_alive(int(parts[0])):
            continue
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    return removed


    return True


def _sidecar(src: Path, dtype: np.dtype, vocab: int, n: int, tok_path: Path, eos_token: str | None,
             eos_id: int | None, n_docs: dict[str, int], val_start: int, val_fraction: float, rule: str,
             ordered: dict[str, list[tuple[str, Path]]], start: float) -> dict[str, Any]:
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
    return sidecar


def _open_tokenizer(tok_path: Path) -> Any:
    """The ``tokenizers.Tokenizer`` in ``tok_path``; one ValueError naming the file otherwise."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(tok_path))
    except Exception as exc:  # the Rust side raises plain Exception with serde's message
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"tokenizer file {str(tok_path)!r} is not a tokenizers JSON file: {first}") from None


def _end_of_text(tk: Any, eos: str | None, tok_path: Path) -> tuple[str | None, int | None]:
    """(token, id) put after every document: ``auto`` takes the first of
    :data:`_EOS_CANDIDATES` the vocab has, a token string names one, None puts nothing."""
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
    return eos_token, eos_id


def _order_documents(docs: list[tuple[str, Path]],
                     val_fraction: float) -> tuple[dict[str, list[tuple[str, Path]]], str]:
    """Documents per split, in write order, and the split rule in words: a folder of 2+
    files by file (:func:`mutransfer.training.corpus._split_by_file`), a single file by its tail."""
    if len(docs) >= 2:
        names = [n for n, _ in docs]
        groups = _split_by_file(names, val_fraction)
        by_name = dict(docs)
        ordered = {s: [(n, by_name[n]) for n in groups[s]] for s in _SPLITS}
        return ordered, f"by file: sha256(relative path)[:8] / 2**64 < {val_fraction} -> val; val files last"
    return {"train": docs, "val": []}, f"tail: last ceil(n * {val_fraction}) tokens -> val"


def _encode_into(dst: Path, tk: Any, ordered: dict[str, list[tuple[str, Path]]], *, src: Path,
                 val_fraction: float, dtype: np.dtype, eos_id: int | None, chunk_chars: int, batch_chars: int,
                 progress: Any) -> tuple[dict[str, int], dict[str, int], int, int]:
    """Stream every document's pieces through ``encode_batch`` into ``dst`` split by
    split; returns the token and document counts per split, the total and the first val
    token. ``dst`` is the temp file the caller renames once the sidecar is in place."""
    counts = {s: 0 for s in _SPLITS}
    n_docs = {s: 0 for s in _SPLITS}
    with open(dst, "wb") as fh:
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
        fh.flush()
        os.fsync(fh.fileno())
    n, val_start = _val_start(counts, ordered, src, val_fraction)  # refused before the rename
    return counts, n_docs, n, val_start


def _val_start(counts: dict[str, int], ordered: dict[str, list[tuple[str, Path]]], src: Path,
               val_fraction: float) -> tuple[int, int]:
    """(total tokens, first val token); one ValueError when a split would be empty."""
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
        val_start = n - max(MIN_SPLIT_TOKENS, math.ceil(n * val_fraction))
        if val_start < MIN_SPLIT_TOKENS:
            raise ValueError(f"{str(src)!r} gives only {n} tokens: too few to split into train and val "
                             f"(each needs at least {MIN_SPLIT_TOKENS}: an input and its target)")
    for name, k in (("train", val_start), ("val", n - val_start)):
        if k < MIN_SPLIT_TOKENS:
            raise ValueError(f"{str(src)!r} gives {k} {name} token(s): each split needs at least "
                             f"{MIN_SPLIT_TOKENS} (an input and its target)")
    return n, val_start
