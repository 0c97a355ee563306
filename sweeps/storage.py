"""Where a study lives: an Optuna journal file (default) or any Optuna RDB URL.

* No ``--storage``: ``OUT/optuna.journal`` (``JournalStorage`` + ``JournalFileBackend``):
  embedded, no server, safe for many worker processes on one machine.
* ``journal:PATH`` or a path ending in ``.journal``/``.log``: that journal file.
* ``postgresql://...``, ``mysql://...``, ``sqlite:///...``: ``RDBStorage`` with a heartbeat,
  so other workers fail and retry the trial of a crashed one. SQLite is for one worker.

Open it in the dashboard with ``optuna-dashboard URL`` (for a journal:
``optuna-dashboard OUT/optuna.journal``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

JOURNAL_NAME = "optuna.journal"
RDB_SCHEMES = ("postgresql", "postgres", "mysql", "sqlite", "mariadb", "oracle", "mssql")


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for messages and attrs)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def resolve_storage(storage: str | None, out_dir: str | os.PathLike[str] | None = None) -> str:
    """Normalize a ``--storage`` value: ``journal:/abs/path`` or an RDB URL."""
    if storage is None or storage == "":
        if out_dir is None:
            raise ValueError("give --out DIR (for the default journal file) or --storage URL")
        return "journal:" + str((Path(out_dir) / JOURNAL_NAME).resolve())
    if storage.startswith("journal:"):
        path = storage[len("journal:"):]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise ValueError(f"storage {storage!r} names no journal file")
        return "journal:" + str(Path(path).resolve())
    scheme = storage.split("://", 1)[0].split("+", 1)[0] if "://" in storage else ""
    if scheme in ("postgres",):
        return "postgresql" + storage[len("postgres"):]
    if scheme in RDB_SCHEMES:
        return storage
    if "://" in storage:
        raise ValueError(f"unsupported storage URL scheme {scheme!r} in {mask_url(storage)!r}; "
                         "use a journal file or an RDB URL (postgresql://, mysql://, sqlite:///)")
    path = Path(storage)
    if path.is_dir():  # an output directory: its journal file
        path = path / JOURNAL_NAME
    return "journal:" + str(path.resolve())


def is_journal(url: str) -> bool:
    return url.startswith("journal:")


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def is_rdb(url: str) -> bool:
    return not is_journal(url)


def check_workers(url: str, workers: int) -> None:
    """SQLite serializes writers and locks up under several processes: refuse it."""
    if is_sqlite(url) and workers > 1:
        raise ValueError(f"SQLite storage {url!r} supports one worker, got --workers {workers}; "
                         "use the default journal file for many workers on one machine, "
                         "or PostgreSQL across machines")


def open_storage(
    url: str,
    *,
    heartbeat_interval: int = 10,
    grace_period: int = 60,
    stale_callback: Callable[[optuna.study.Study, optuna.trial.FrozenTrial], None] | None = None,
    create: bool = True,
) -> optuna.storages.BaseStorage:
    """Open (and for a journal, create) the storage. Unreachable -> ValueError, one line."""
    import optuna

    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url[len("journal:"):])
        if not create and not path.is_file():
            raise ValueError(f"journal file {str(path)!r} does not exist")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        except OSError as exc:
            raise ValueError(f"cannot open journal file {str(path)!r}: {exc.strerror or exc}") from None
    if is_sqlite(url) and not create:
        path = url.split(":///", 1)[-1]
        if path and not Path(path).is_file():
            raise ValueError(f"SQLite file {path!r} does not exist")
    engine_kwargs: dict[str, Any] = {}
    url = _pick_pg_driver(url)
    if url.startswith("postgresql"):
        engine_kwargs = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    elif url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
                heartbeat_stale_trial_callback=stale_callback,
            )
    except ImportError:
        raise ValueError(f"cannot open storage {mask_url(url)!r}: missing driver "
                         "(pip install 'psycopg[binary]' for PostgreSQL)") from None
    except Exception as exc:  # sqlalchemy OperationalError, ArgumentError, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"cannot reach storage {mask_url(url)!r}: {first}") from None


def _pick_pg_driver(url: str) -> str:
    """SQLAlchemy 2.1 maps plain ``postgresql://`` to psycopg 3; fall back to psycopg2."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    return [s.study_name for s in storage.get_all_studies()]


def default_study_name(storage: optuna.storages.BaseStorage, name: str | None) -> str:
    """``name``, or the only study in the storage; ValueError if that is ambiguous."""
    names = study_names(storage)
    if name is not None:
        if name not in names:
            raise ValueError(f"no study {name!r} in the storage; it holds: {', '.join(names) or 'none'}")
        return name
    if len(names) == 1:
        return names[0]
    if not names:
        raise ValueError("the storage holds no study yet")
    raise ValueError(f"the storage holds several studies ({', '.join(names)}); pick one with --study")
