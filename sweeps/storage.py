"""Where a study lives: an Optuna journal file (default) or any Optuna RDB URL.

* No ``--storage``: ``OUT/optuna.journal`` (``JournalStorage`` + ``JournalFileBackend``):
  embedded, no server, safe for many worker processes on one machine.
* ``journal:PATH`` or a path ending in ``.journal``/``.log``: that journal file.
* ``postgresql://...``, ``mysql://...``, ``sqlite:///...``: ``RDBStorage`` with a heartbeat,
  so other workers fail and retry the trial of a crashed one. SQLite is for one worker.

:class:`Storage` is built once per process from the user's input (:meth:`Storage.resolve`,
:meth:`Storage.from_user`) and handed to everything that needs the storage: it knows its
kind, its masked form, the Optuna storage it opens (once) and what a worker needs in its
environment. Open it in the dashboard with ``optuna-dashboard URL`` (for a journal:
``optuna-dashboard OUT/optuna.journal``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mutransfer.redact import SCHEME as _SCHEME
from mutransfer.redact import mask_url, parsed_secrets, redact_text

if TYPE_CHECKING:
    import optuna

JOURNAL_NAME = "optuna.journal"
RDB_SCHEMES = ("postgresql", "postgres", "mysql", "sqlite", "mariadb", "oracle", "mssql")


#: Environment variable a worker reads the storage URL from (never its argv: ``ps`` shows argv
#: to every local user, while /proc/PID/environ is readable only by the owner).
STORAGE_ENV = "MUTRANSFER_STORAGE"
#: Optuna's ``heartbeat_stale_trial_callback``: called with the study and each stale trial.
StaleCallback = Callable[["optuna.study.Study", "optuna.trial.FrozenTrial"], None]



def scrub(message: str, url: str) -> str:
    """``message`` with ``url`` and every secret in it masked (driver errors may echo them)."""
    message = message.replace(url, mask_url(url))
    for secret in parsed_secrets(url):
        if len(secret) >= 3:
            message = message.replace(secret, "***")
    return message


def _check_rdb_url(url: str) -> None:
    """SQLAlchemy must parse ``url`` the way its author meant: a raw ``@`` in the password
    would silently make the host ``rest@host``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        u = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ValueError(f"malformed storage URL {mask_url(url)!r}: {exc}") from None
    if u.host and "@" in u.host:
        raise ValueError(f"malformed storage URL {mask_url(url)!r}: a password holding '@' must be "
                         "percent-encoded (%40)")


def _normalize(storage: str | None, out_dir: str | os.PathLike[str] | None) -> str:
    """A ``--storage`` value as ``journal:/abs/path`` or an RDB URL.

    A string that looks like a URL but is malformed (``postgresql:/u:pw@h/db`` with one
    slash, ``user:pw@host``) is refused, never taken as a local file name."""
    if storage is None or storage == "":
        if out_dir is None:
            raise ValueError("give --out DIR (for the default journal file), --storage URL, "
                             f"or set ${STORAGE_ENV}")
        return "journal:" + str((Path(out_dir) / JOURNAL_NAME).resolve())
    if storage.startswith("journal:"):
        path = storage[len("journal:"):]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise ValueError(f"storage {storage!r} names no journal file")
        return "journal:" + str(Path(path).resolve())
    m = _SCHEME.match(storage)
    scheme = m.group("scheme").lower().split("+", 1)[0] if m else ""
    if m and m.group("slashes").startswith("//"):
        if scheme == "postgres":
            storage = "postgresql" + storage[len("postgres"):]
            scheme = "postgresql"
        if scheme in RDB_SCHEMES:
            _check_rdb_url(storage)
            return storage
        raise ValueError(f"unsupported storage URL scheme {scheme!r} in {mask_url(storage)!r}; "
                         "use a journal file or an RDB URL (postgresql://, mysql://, sqlite:///)")
    if m and (scheme in RDB_SCHEMES or "@" in storage or m.group("slashes")):
        raise ValueError(f"malformed storage URL {mask_url(storage)!r}: write {scheme}://..., "
                         "or journal:PATH for a journal file")
    if "@" in storage:
        raise ValueError(f"storage {mask_url(storage)!r} looks like a URL without a scheme; "
                         "write postgresql://user:pw@host/db, or journal:PATH for a journal file")
    path = Path(storage)
    if path.is_dir():  # an output directory: its journal file
        path = path / JOURNAL_NAME
    return "journal:" + str(path.resolve())


def read_storage_file(path: str | os.PathLike[str]) -> str:
    """The storage URL in a file that only its owner may read (``chmod 600``); a group- or
    world-readable file is refused, since the URL may hold a password."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        text = p.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"cannot read storage file {str(p)!r}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise ValueError(f"storage file {str(p)!r} is readable by others (mode {mode & 0o777:o}); "
                         f"chmod 600 {p}")
    if not text or "\n" in text:
        raise ValueError(f"storage file {str(p)!r} must hold exactly one URL on one line")
    return text


class Storage:
    """Where a study lives, resolved once per process from the user's input, as Optuna's
    ``get_storage`` turns a URL into one storage object.

    It knows its :attr:`kind`, its :attr:`masked` form (no secret: the only form printed or
    recorded; ``str()`` and ``repr()`` give it too), the one Optuna storage this process
    opens on it (:meth:`open`, cached), and what a spawned worker needs in its environment
    (:meth:`worker_env`: the URL travels there, never in argv). Build it with
    :meth:`resolve` (a ``--storage`` value or an output directory) or :meth:`from_user`
    (the CLI's flags and :data:`STORAGE_ENV`); every function that takes a storage takes
    this object, or a string it resolves once.

    Attributes: ``url`` (``journal:/abs/path`` or the RDB URL, password included: for Optuna
    and the workers' environment only), ``kind`` (``journal``, ``sqlite``, or the RDB
    dialect: ``postgresql``, ``mysql``, ...), ``journal`` (a journal file: it has no
    heartbeat of its own, so workers record theirs as trial attrs) and ``path`` (the journal
    file, None for an RDB)."""

    __slots__ = ("_key", "_opened", "journal", "kind", "path", "url")

    def __init__(self, url: str) -> None:
        """``url`` already normalized (``journal:/abs/path`` or an RDB URL): use :meth:`resolve`."""
        self.url = url  # with its password: for Optuna and the workers' environment only
        m = _SCHEME.match(url)
        self.kind = m.group("scheme").lower().split("+", 1)[0] if m else "rdb"
        self.journal = self.kind == "journal"
        self.path = Path(url[len("journal:"):]) if self.journal else None
        self._opened: optuna.storages.BaseStorage | None = None
        self._key: tuple[int, int, StaleCallback | None] | None = None

    @classmethod
    def resolve(cls, storage: Storage | str | None, out_dir: str | os.PathLike[str] | None = None
                ) -> Storage:
        """``storage`` itself if it is one; else the storage a ``--storage`` value names
        (``None``: the journal file in ``out_dir``)."""
        if isinstance(storage, Storage):
            return storage
        return cls(_normalize(storage, out_dir))

    @classmethod
    def from_user(cls, storage: str | None = None, *, storage_file: str | os.PathLike[str] | None = None,
                  out: str | os.PathLike[str] | None = None, default: str | None = None) -> Storage:
        """The CLI's storage: ``--storage-file``, ``--storage``, then :data:`STORAGE_ENV`,
        then ``default`` (the journal in ``out``). ``out`` together with :data:`STORAGE_ENV`
        and no explicit storage is an error: the study would silently stay in the local
        journal, where the other workers never look."""
        if storage_file is not None:
            if storage:
                raise ValueError("give --storage or --storage-file, not both")
            return cls.resolve(read_storage_file(storage_file))
        if storage:
            return cls.resolve(storage, out)
        env = os.environ.get(STORAGE_ENV)
        if env and out is not None:
            raise ValueError(f"--out {out} would keep the study in {out}/optuna.journal, but "
                             f"${STORAGE_ENV} is set ({mask_url(env)}), where other workers look for it; "
                             f"pass --storage {out}/optuna.journal for the local journal, or drop --out "
                             f"to use ${STORAGE_ENV}")
        if env:
            return cls.resolve(env)
        return cls.resolve(default, out)

    @property
    def files(self) -> list[str]:
        """The local files that hold the study: a journal file, or a SQLite database (with its
        ``-journal``/``-wal`` companions); none for a server. No output may replace them."""
        if self.journal:
            return [str(self.path)]
        if self.kind == "sqlite" and ":///" in self.url:
            path = self.url.split(":///", 1)[1].split("?", 1)[0]
            if path and path != ":memory:":
                return [path, path + "-journal", path + "-wal"]
        return []

    @property
    def masked(self) -> str:
        """The URL with every secret replaced by ``***`` (:func:`mask_url`)."""
        return mask_url(self.url)

    def __repr__(self) -> str:
        return f"Storage({self.masked!r})"

    def __str__(self) -> str:
        return self.masked

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Storage) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def describe(self) -> str:
        """The one line a run prints about where its study lives (never a password)."""
        if self.journal:
            return f"storage: journal file {self.path}"
        return f"storage: {self.kind} {self.masked}"

    def join_command(self, study: str) -> str:
        """The command that joins ``study``; a URL holding a password is never printed whole."""
        if self.journal:
            return f"mutransfer sweep worker --storage {self.path} --study {study}"
        if self.masked != self.url:  # keep the secret off the screen and off every argv
            return (f"export {STORAGE_ENV}='{self.masked}' (with the real password), then "
                    f"mutransfer sweep worker --study {study}")
        return f"mutransfer sweep worker --storage {self.url} --study {study}"

    def worker_env(self) -> dict[str, str]:
        """What a spawned worker needs to find the storage: its environment, not its argv
        (``ps`` shows argv to every local user; /proc/PID/environ only to the owner)."""
        return {STORAGE_ENV: self.url}

    def check_workers(self, workers: int) -> None:
        """SQLite serializes writers and locks up under several processes: refuse it."""
        if self.kind == "sqlite" and workers > 1:
            raise ValueError(f"SQLite storage {self.masked!r} supports one worker, got --workers "
                             f"{workers}; use the default journal file for many workers on one machine, "
                             "or PostgreSQL across machines")

    def open(self, *, heartbeat_interval: int | None = None, grace_period: int | None = None,
             stale_callback: StaleCallback | None = None, create: bool = True
             ) -> optuna.storages.BaseStorage:
        """This process's Optuna storage on it, opened on the first call and then reused.

        A journal is opened once, whatever the arguments (it has no heartbeat). An RDB is
        opened with Optuna's heartbeat when ``heartbeat_interval`` is given (``stale_callback``:
        Optuna's ``heartbeat_stale_trial_callback``, compared by ``==``); a call without it
        takes whatever is open, a call with other heartbeat settings opens it anew.
        ``create=False``: a journal or SQLite file must exist. Unreachable -> ValueError,
        one line."""
        key = None if self.journal or heartbeat_interval is None else (
            heartbeat_interval, grace_period or 2 * heartbeat_interval, stale_callback)
        if self._opened is not None and (key is None or key == self._key):
            return self._opened
        self._opened = self._open_journal(create) if self.journal else self._open_rdb(key, create)
        self._key = key
        return self._opened

    @contextlib.contextmanager
    def lock(self, name: str, timeout: float = 600.0) -> Iterator[None]:
        """Hold this storage's lock for study ``name`` (one holder at a time, across
        processes and machines that share the storage): creating a study and enqueuing its
        grid run under it, so two launches started at once cannot both enqueue a point.

        A journal: ``fcntl.flock`` on the journal file; SQLite: on ``FILE.prepare.lock``
        beside it (the kernel drops either when the holder dies, even by SIGKILL). PostgreSQL: a session
        advisory lock (``pg_advisory_lock``), MySQL/MariaDB: ``GET_LOCK``, on a connection
        of their own, released by the server when that connection ends. Another RDB: no lock
        (one launcher at a time). Not reached within ``timeout`` s -> ValueError."""
        files = self.files
        if files:
            # a journal: its own file (Optuna locks it with a symlink, never flock); SQLite's
            # file takes POSIX locks that closing another descriptor of it would drop: a file beside
            where = self.path if self.path is not None else Path(files[0] + ".prepare.lock")
            with _file_lock(where, timeout, self.masked):
                yield
            return
        if self.kind in ("postgresql", "mysql", "mariadb"):
            with _rdb_lock(self, name, timeout):
                yield
            return
        yield

    def _open_journal(self, create: bool) -> optuna.storages.BaseStorage:
        import optuna
        from optuna.storages.journal import JournalFileBackend

        path = self.path
        assert path is not None
        if not create and not path.is_file():
            raise ValueError(f"journal file {str(path)!r} does not exist")
        if path.is_dir():
            raise ValueError(f"journal file {str(path)!r} is a directory")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            backend = _torn_safe_backend(JournalFileBackend)(str(path))
            return optuna.storages.JournalStorage(backend)
        except OSError as exc:
            raise ValueError(f"cannot open journal file {str(path)!r}: {exc.strerror or exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # damaged or not a journal
            raise ValueError(_journal_error(path, exc)) from None

    def _open_rdb(self, key: tuple[int, int, StaleCallback | None] | None, create: bool
                  ) -> optuna.storages.BaseStorage:
        import optuna

        url = self.url
        if self.kind == "sqlite" and not create:
            path = url.split(":///", 1)[-1].split("?", 1)[0]  # the query may hold a secret
            if path and not Path(path).is_file():
                raise ValueError(f"SQLite file {path!r} does not exist")
        engine_kwargs: dict[str, Any] = {}
        url = _pick_pg_driver(url)
        if self.kind == "postgresql":
            engine_kwargs = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
        elif self.kind == "sqlite":
            engine_kwargs = {"connect_args": {"timeout": 60}}
        heartbeat: dict[str, Any] = {}
        if key is not None:
            heartbeat = {"heartbeat_interval": key[0], "grace_period": key[1],
                         "heartbeat_stale_trial_callback": key[2]}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **heartbeat)
        except ImportError:
            raise ValueError(f"cannot open storage {self.masked!r}: missing driver "
                             "(pip install 'psycopg[binary]' for PostgreSQL)") from None
        except Exception as exc:  # sqlalchemy OperationalError, ArgumentError, ...
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(scrub(f"cannot reach storage {self.masked!r}: {first}", self.url)) from None


@contextlib.contextmanager
def _file_lock(path: Path, timeout: float, what: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (made if missing), polled up to ``timeout`` s."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ValueError(f"another launch has held the lock {str(path)!r} of storage "
                                     f"{what!r} for {timeout:g} s; is it stuck?") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lock_key(name: str) -> int:
    """A stable signed 63-bit key for study ``name`` (PostgreSQL advisory locks take a bigint)."""
    digest = hashlib.sha256(f"mutransfer.sweep:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True) >> 1


@contextlib.contextmanager
def _rdb_lock(storage: Storage, name: str, timeout: float) -> Iterator[None]:
    """A server-side lock for study ``name`` on a connection of its own (the server drops it
    when the connection ends, so a killed holder never leaves it taken)."""
    import sqlalchemy

    text = sqlalchemy.text
    pg = storage.kind == "postgresql"
    mysql_name = f"mutransfer.sweep:{name}"[:64]
    try:
        engine = sqlalchemy.create_engine(_pick_pg_driver(storage.url),
                                          poolclass=sqlalchemy.pool.NullPool)
    except ImportError as exc:  # the database's driver (MySQLdb, psycopg) is not installed
        raise ValueError(f"cannot open storage {storage.masked!r}: missing driver ({exc.name or exc}); "
                         "install the database's Python driver (pip install 'psycopg[binary]' for "
                         "PostgreSQL)") from None
    try:
        try:
            conn = engine.connect()
            if pg:
                conn.execute(text(f"SET lock_timeout = {int(timeout * 1000)}"))
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": lock_key(name)})
                conn.commit()
                got = True
            else:
                got = conn.execute(text("SELECT GET_LOCK(:n, :t)"), {"n": mysql_name, "t": int(timeout)}
                                   ).scalar() == 1
        except sqlalchemy.exc.DBAPIError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(scrub(f"cannot lock study {name!r} in {storage.masked!r}: {first}",
                                   storage.url)) from None
        if not got:
            conn.close()
            raise ValueError(f"could not take the lock of study {name!r} in {storage.masked!r} within "
                             f"{timeout:g} s; is another launch stuck?")
        try:
            yield
        finally:
            with contextlib.suppress(sqlalchemy.exc.DBAPIError):  # closing the connection frees it anyway
                if pg:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lock_key(name)})
                    conn.commit()
                else:
                    conn.execute(text("SELECT RELEASE_LOCK(:n)"), {"n": mysql_name})
            conn.close()
    finally:
        engine.dispose()


#: Seconds a journal lock whose link points at a missing file is waited for before it is
#: taken over (Optuna's grace for a live-looking one is 30 s; an append holds it for ms).
DANGLING_GRACE_S = 3.0


def _torn_safe_backend(base: type) -> type:
    """A ``JournalFileBackend`` whose appends first cut a torn last line.

    A writer killed mid-append leaves a last line without its newline. Optuna's reader
    skips such a line, but the next append would glue a whole record onto it: one bad
    JSON line in the middle, and every later read fails for good. So each append, holding
    the journal's lock (no other writer is mid-append then), checks the last byte and
    truncates the file back to its last complete line: the torn record was never
    committed, so dropping it loses nothing that any reader saw."""
    from optuna.storages.journal import JournalFileSymlinkLock

    class BoundedSymlinkLock(JournalFileSymlinkLock):  # type: ignore[misc, valid-type]
        """Optuna's symlink lock without its hot loop: Optuna stats the lock *through* the
        link, and a link whose target is gone (the run folder was moved or renamed while a
        holder was killed) fails every stat, so it retries at once, forever, at 100% CPU.
        Here the link itself is stat'ed (``lstat``), the wait backs off to 1 s, and a lock
        unchanged for its grace period (30 s; :data:`DANGLING_GRACE_S` for a link to a
        missing file, which no live writer of this file made) is taken over, said in one line."""

        def acquire(self) -> bool:
            sleep_s = 0.001
            seen: float | None = None
            since = time.monotonic()
            told = False
            while True:
                try:
                    os.symlink(self._lock_target_file, self._lock_file)
                    return True
                except FileExistsError:
                    pass
                try:
                    mtime = os.lstat(self._lock_file).st_mtime
                except FileNotFoundError:
                    continue  # released between the two calls: try again
                if mtime != seen:
                    seen, since = mtime, time.monotonic()
                dangling = not os.path.exists(self._lock_file)
                grace = DANGLING_GRACE_S if dangling else self.grace_period
                if dangling and not told:
                    told = True
                    with contextlib.suppress(OSError):
                        print(f"mutransfer: the journal lock {self._lock_file!r} points at "
                              f"{os.readlink(self._lock_file)!r}, which does not exist (its folder moved "
                              f"while a writer held it?); taking it over in {grace:g} s", file=sys.stderr)
                if grace is not None and time.monotonic() - since > grace:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._lock_file)
                    sleep_s = 0.001
                    continue
                time.sleep(sleep_s)
                sleep_s = min(sleep_s * 2, 1.0)

    class TornSafeJournalFileBackend(base):  # type: ignore[misc, valid-type]
        def __init__(self, file_path: str) -> None:
            self._write_lock = BoundedSymlinkLock(file_path)
            super().__init__(file_path, lock_obj=self._write_lock)
            self._path = file_path

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            import json

            text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
            self._write_lock.acquire()
            try:
                cut_torn_tail(self._path)
                with open(self._path, "ab") as f:
                    f.write(text.encode("utf-8"))
                    f.flush()
                    os.fsync(f.fileno())
            finally:
                self._write_lock.release()

    return TornSafeJournalFileBackend


def cut_torn_tail(path: str | os.PathLike[str]) -> int:
    """Truncate a journal whose last line has no newline back to its last complete line
    (call it holding the journal's lock); returns the bytes dropped."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        pos = size
        keep = 0
        while pos > 0:  # scan back in blocks for the last newline
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            nl = f.read(step).rfind(b"\n")
            if nl >= 0:
                keep = pos + nl + 1
                break
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
        return size - keep


def _journal_error(path: Path, exc: Exception) -> str:
    """One line naming the journal and its first unreadable line."""
    line_no = None
    try:
        with open(path, "rb") as f:
            for i, line in enumerate(f, start=1):
                if not line.endswith(b"\n"):
                    break  # a torn last line is skipped by readers, repaired by writers
                try:
                    json.loads(line)
                except ValueError:
                    line_no = i
                    break
    except OSError:
        pass
    where = f" at line {line_no}" if line_no is not None else ""
    return (f"{str(path)!r} is not a readable Optuna journal{where} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); if a writer was killed mid-write by an "
            "older version, keep a copy and delete the damaged line")


def storage_refusal(exc: BaseException) -> str | None:
    """One line for an exception whose chain holds a database's refusal (Optuna's
    ``StorageInternalError``, SQLAlchemy's ``DBAPIError``: a read-only SQLite file, a
    database user without write rights, a full disk), secrets masked; None for any other
    exception. Optuna wraps the driver's error in two more tracebacks; the driver's first
    line is the reason."""
    if isinstance(exc, ValueError):  # ours, already one line (its context may be a driver's error)
        return None
    kinds = tuple(t for t in (getattr(sys.modules.get("optuna.exceptions"), "StorageInternalError", None),
                              getattr(sys.modules.get("sqlalchemy.exc"), "DBAPIError", None)) if t)
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain and len(chain) < 20:
        chain.append(e)
        e = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)
    if not kinds or not any(isinstance(x, kinds) for x in chain):
        return None
    root = chain[-1]
    orig = getattr(root, "orig", None)  # SQLAlchemy's wrapper of the driver's error
    text = str(orig if orig is not None else root).strip()
    first = text.splitlines()[0] if text else type(root).__name__
    if "readonly" in first.replace("-", "").replace(" ", "").lower():
        return (f"the storage is read-only ({first}): a sweep records its trials there; make the file "
                "and its folder writable, or copy it somewhere writable")
    return f"the storage failed: {redact_text(first)}"


def _pick_pg_driver(url: str) -> str:
    """SQLAlchemy 2.1 maps plain ``postgresql://`` to psycopg 3; fall back to psycopg2."""
    if not url.startswith("postgresql://"):
        return url
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
