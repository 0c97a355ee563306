"""Atomic file writes: nothing half-written is ever left behind."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
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


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """The file's text as UTF-8; a binary file is one ValueError naming it (not the codec's
    "'utf-8' codec can't decode byte ..." with no file)."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot decode {what} {str(p)!r} as UTF-8 text (a binary file?): byte "
                         f"{exc.start}") from None


def read_json(path: str | os.PathLike[str], what: str = "file", *, max_bytes: int | None = None) -> Any:
    """A JSON file's document (JSON, not YAML: YAML 1.1 would read JSON's 1e-08 as a string).

    One ValueError naming ``what`` and the path for a missing file, one over ``max_bytes``
    (refused before it is parsed), one that is not UTF-8 or not valid JSON, or one nested
    too deeply to read."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist")
    check_size(p, what, max_bytes)
    try:
        return json.loads(read_text(p, what))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what} {str(p)!r} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"{what} {str(p)!r} is nested too deeply to read") from None


def read_yaml_mapping(path: str | os.PathLike[str], what: str = "file", *, max_bytes: int | None = None,
                      bound_aliases: bool = False) -> dict[str, Any]:
    """A YAML (or JSON) file holding a mapping, read with ``yaml.safe_load`` (no code runs).

    One clear ValueError, naming ``what`` and the path, for a missing file, bad YAML or a
    document that is not a mapping; an empty file is an empty mapping. ``max_bytes``: a
    larger file is refused before it is parsed. ``bound_aliases``: YAML aliases (``*name``)
    are bounded before anything is constructed: a self-referencing one, or ones that would
    expand the document past :data:`MAX_EXPANDED_NODES` ("billion laughs"), are refused.
    Nesting too deep for Python's recursion is refused too.
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist")
    check_size(p, what, max_bytes)
    if bound_aliases:
        check_items(p, what)
    loader = _bounded_alias_loader() if bound_aliases else yaml.SafeLoader
    try:
        doc = yaml.load(read_text(p, what), Loader=loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} {str(p)!r} is not valid YAML: {str(exc).splitlines()[0]}") from None
    except _AliasRefused as exc:
        raise ValueError(f"{what} {str(p)!r} holds {exc.args[0]} (line {exc.args[1]}){exc.args[2]}") from None
    except RecursionError:
        raise ValueError(f"{what} {str(p)!r} is nested too deeply to read") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{what} {str(p)!r} must hold a mapping, got {type(doc).__name__}")
    return doc


def check_size(path: str | os.PathLike[str], what: str, max_bytes: int | None) -> None:
    """A file larger than ``max_bytes`` is one ValueError naming it and the limit (None: any)."""
    if max_bytes is None:
        return
    size = Path(path).stat().st_size
    if size > max_bytes:
        raise ValueError(f"{what} {str(path)!r} is {size:,} bytes, above the limit of {max_bytes:,}")


#: The most nodes a YAML document read with ``bound_aliases`` may hold once its aliases are
#: expanded (a "billion laughs" of 1 KB expands to 10^9): far above any card (~10^4).
MAX_EXPANDED_NODES = 1_000_000
#: The most list items and lines (commas plus newlines) a file read with ``bound_aliases``
#: may hold: each value of a document takes one of them, a card of a 1,000-layer model
#: ~4×10^4. Counted on the bytes (milliseconds) before PyYAML's parser, which takes ~20 s
#: per million values.
MAX_ITEMS = 500_000


def check_items(path: str | os.PathLike[str], what: str, max_items: int = MAX_ITEMS) -> None:
    """A file with more than ``max_items`` commas and newlines (list items, lines) is one
    ValueError naming it, the count and the limit, before anything parses it."""
    data = Path(path).read_bytes()
    n = data.count(b",") + data.count(b"\n")
    if n > max_items:
        raise ValueError(f"{what} {str(path)!r} holds {n:,} list items and lines, above the limit of "
                         f"{max_items:,} (a card holds ~10^4): not a card, or a list that belongs in a file "
                         "of its own")


class _AliasRefused(Exception):
    """A YAML document :func:`_bounded_alias_loader` refuses: args are (why, line, hint)."""


@functools.lru_cache(maxsize=1)
def _bounded_alias_loader() -> type:
    import yaml

    class BoundedAliasLoader(yaml.SafeLoader):
        """A SafeLoader that, before constructing anything, counts the nodes of the document
        with every alias expanded (memoized on the node graph, so the count itself is
        cheap) and refuses a self-referencing alias or more than MAX_EXPANDED_NODES."""

        def compose_document(self) -> Any:
            node = super().compose_document()
            _expanded_size(node)
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # a key given twice would silently take the last value (a hand edit that
            # "changed" optimizer.lr and left the old line in): refused, both lines named
            if isinstance(node, yaml.MappingNode):
                lines: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node)
                    line = key_node.start_mark.line + 1
                    if isinstance(key, (str, int, float, bool)) and key in lines:
                        raise _AliasRefused(f"the key {key!r} twice in one mapping", line,
                                            f", first at line {lines[key]}; keep one")
                    lines[key] = line
            return super().construct_mapping(node, deep=deep)

    return BoundedAliasLoader


def _expanded_size(root: Any) -> int:
    import yaml

    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    aliased: list[bool] = []

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            aliased[:] = [True]  # a node met twice: an alias refers to it
            return sizes[key]
        if key in on_path:
            raise _AliasRefused("a self-referencing alias", node.start_mark.line + 1, "; write the value out")
        on_path.add(key)
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(v) for v in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        on_path.discard(key)
        if n > MAX_EXPANDED_NODES:
            if aliased:
                raise _AliasRefused(f"aliases that expand past {MAX_EXPANDED_NODES:,} nodes",
                                    node.start_mark.line + 1, "; write the value out")
            raise _AliasRefused(f"more than {MAX_EXPANDED_NODES:,} values", node.start_mark.line + 1, "")
        sizes[key] = n
        return n

    return size(root)


def _named(items: Any, default: str) -> list[tuple[str, Path]]:
    out = []
    for item in items or ():
        label, path = item if isinstance(item, tuple) else (default, item)
        if path is not None and path != "":
            out.append((label, Path(path)))
    return out


def same_path(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` name one file: equal once resolved (``.``, ``..`` and symlinks
    followed), or the same inode (a hard link)."""
    p, q = Path(a), Path(b)
    if p.resolve() == q.resolve():
        return True
    if p.exists() and q.exists():
        with contextlib.suppress(OSError):
            return os.path.samefile(p, q)
    return False


def check_output(path: str | os.PathLike[str] | None, *, inputs: Any = (), outputs: Any = (),
                 directory: bool = False, flag: str = "--out") -> Path | None:
    """The output guard of every verb that writes, called before any work starts.

    ``path`` must be writable: not an existing directory (a file) or file (a directory),
    under a writable folder. It may never be one of ``inputs`` (a checkpoint replaced by
    its folded copy, a card by its export, a results table by its own fit) nor one of
    ``outputs``, the files another output of the same run writes (a study's journal or
    SQLite file replaced by an audit). Items of either are paths or ``(label, path)``
    pairs; paths compare resolved, through symlinks and hard links. One ValueError naming
    both paths. ``None`` passes through (no output asked for)."""
    if path is None or path == "":
        return None
    p = Path(path)
    if directory:
        if p.exists() and not p.is_dir():
            raise ValueError(f"{flag} {str(p)!r} is a file, not a directory")
    elif p.is_dir():
        raise ValueError(f"{flag} {str(p)!r} is a directory; give a file name")
    for label, q in _named(inputs, "the input"):
        if same_path(p, q):
            raise ValueError(f"{flag} {str(p)!r} is {label} {str(q)!r}; refusing to overwrite it")
    for label, q in _named(outputs, "another output"):
        if same_path(p, q):
            raise ValueError(f"{flag} {str(p)!r} is also {label} {str(q)!r} of this run; refusing to "
                             "overwrite it, give another path")
    anc = p if directory else p.parent
    anc = anc if str(anc) else Path(".")
    while not anc.exists():  # the nearest folder that exists must take new entries
        if anc.parent == anc:
            break
        anc = anc.parent
    if anc.exists() and not anc.is_dir():
        raise ValueError(f"{flag} {str(p)!r} cannot be made: {str(anc)!r} is a file")
    if anc.exists() and not os.access(anc, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(p)!r} cannot be written: permission denied on {str(anc)!r}")
    if not directory and p.exists() and not os.access(p.parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(p)!r} cannot be replaced: permission denied on {str(p.parent)!r}")
    return p


def check_fresh_dir(path: str | os.PathLike[str] | None, names: tuple[str, ...] | list[str], *,
                    overwrite: bool, flag: str = "--out") -> None:
    """Refuse an output folder that already holds an earlier run's files (any of
    ``names``) unless ``overwrite``: replacing a finished run's results is never silent."""
    if path is None or overwrite:
        return
    p = Path(path)
    found = [n for n in names if (p / n).exists()]
    if found:
        raise ValueError(f"{flag} {str(p)!r} already holds an earlier run ({', '.join(found)}); "
                         "pass --overwrite to replace it, or choose another folder")


def plain(obj: Any, *, nonfinite_to_none: bool = False) -> Any:
    """What JSON and YAML hold: mappings -> dicts with string keys, tuples -> lists, numpy
    and torch scalars -> Python scalars, recursively. ``nonfinite_to_none`` writes NaN and
    inf as null (JSON has neither); otherwise they stay, for a validator to refuse."""
    if isinstance(obj, Mapping):
        return {str(k): plain(v, nonfinite_to_none=nonfinite_to_none) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v, nonfinite_to_none=nonfinite_to_none) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if nonfinite_to_none and isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
