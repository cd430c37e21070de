"""A store in a :mod:`dbm` database (what :mod:`shelve` is built on), for one process only.

Spec: ``shelve:///abs/path`` (three slashes: absolute) or ``shelve://rel/path``.

Values are each host's JSON text, never pickles: the file is opened with :mod:`dbm` directly
(:mod:`shelve` would pickle every value). New databases use the first of GNU dbm, ndbm and
``dbm.dumb`` that Python has (never ``dbm.sqlite3``, which refuses use from several threads);
the database is ``PATH`` itself or ``PATH`` plus a suffix (``.db``, ``.dat``/``.dir``). Every
database this store creates holds a schema marker key; a database without it is another
program's and is refused, never changed.

Only one process may have the store open: it holds an exclusive lock file
(``PATH + ".lock"``) while open, and a second process gets :class:`~requests_retryafter.StoreError`
at once instead of corrupting the file. Within the owning process, every store opened on the
same path shares one handle (reference counted), so they see each other's writes. For several
processes, use the ``json://`` or ``sqlite://`` store.
"""

from __future__ import annotations

import dbm
import errno
import importlib
import logging
import os
import threading
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from ..errors import StoreError
from ..state import SCHEMA_VERSION, HostState, UnsupportedSchema
from . import _files
from .base import BaseStore, Updater, salvaged

__all__ = ["ShelveStore"]

logger = logging.getLogger(__name__)

#: Key of the database's schema version (a host key never starts with a NUL byte).
_META_KEY = b"\x00requests_retryafter_schema"
_MARKER_BYTES = b"requests_retryafter_schema"
# The dbm modules new stores may use, in order of preference.
_DBM_MODULES = ("dbm.gnu", "dbm.ndbm", "dbm.dumb")
# Files a dbm implementation may keep for PATH, besides PATH itself.
_DBM_SUFFIXES = (".db", ".dat", ".dir", ".bak", ".pag")
# Errors that say something about the environment, not about the file: never move it aside.
_ENVIRONMENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EAGAIN}
# Files larger than this are not searched for the schema marker (they are not ours to move).
_MARKER_SCAN_LIMIT = 256 << 20
_LABEL = "shelve store"


def _creation_module() -> str:
    """The dbm module new stores use: the first of GNU dbm, ndbm and dbm.dumb that this
    Python has. Python 3.13's default, dbm.sqlite3, is skipped: its connection refuses to be
    used from more than one thread, and this store serves many."""
    for name in _DBM_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name
    return "dbm.dumb"  # pragma: no cover - always importable


class _Damaged(Exception):
    """A database of this store's format cannot be used as it is; the message says why."""


class _Handle:
    """One open database shared by every ShelveStore of this process on the same path."""

    def __init__(self, path: str, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only
        self.lock = threading.RLock()
        self.refs = 1
        self.warned: Dict[str, bytes] = {}
        self.told_newer: Set[str] = set()
        self.filelock: Optional[_files.LockFile] = None
        self.db: Any = None


#: The handles open in this process, by resolved path.
_HANDLES: Dict[str, _Handle] = {}
_HANDLES_LOCK = threading.Lock()


def _files_of(path: str) -> List[str]:
    return [path + s for s in ("", *_DBM_SUFFIXES)]


def _has_marker(path: str) -> bool:
    """Whether any file of the database at ``path`` contains this store's schema marker."""
    for name in _files_of(path):
        st = _files.check_regular(_LABEL, name)
        if st is None or st.st_size > _MARKER_SCAN_LIMIT:
            continue
        _, data = _files.read_regular(_LABEL, name)
        if data and _MARKER_BYTES in data:
            return True
    return False


def _refuse(path: str, why: str) -> StoreError:
    return StoreError(
        f"{_LABEL} {path}: not a requests-retryafter store ({why}); refusing to use it "
        "(nothing was changed)"
    )


def _open_handle(path: str, read_only: bool) -> _Handle:
    handle = _Handle(path, read_only)
    for name in (*_files_of(path), path + ".lock"):
        _files.check_regular(_LABEL, name)
    if read_only:
        if not any(os.path.lexists(name) for name in _files_of(path)):
            raise StoreError(f"{_LABEL} {path}: does not exist (opened read-only: nothing created)")
        handle.db = _open_checked(path, read_only=True)
        return handle
    _files.ensure_parent(_LABEL, path)
    lock = _files.LockFile(_LABEL, path, path + ".lock")
    try:
        lock.acquire(0)
    except StoreError as exc:
        if "locked by another process" not in str(exc):
            raise
        raise StoreError(
            f"{_LABEL} {path}: in use by another process (lock file {path}.lock); a shelve "
            "store is single-process: use json:// or sqlite:// to share one between processes"
        ) from exc
    try:
        try:
            handle.db = _open_checked(path, read_only=False)
        except _Damaged as exc:
            _files.move_aside(_LABEL, path, str(exc), _DBM_SUFFIXES, logger)
            try:
                handle.db = _open_checked(path, read_only=False)
            except _Damaged as again:  # pragma: no cover - a fresh database is never damaged
                raise StoreError(
                    f"{_LABEL} {path}: cannot create a fresh store: {again}"
                ) from again
    except BaseException:
        lock.release()
        raise
    handle.filelock = lock
    return handle


def _open_checked(path: str, *, read_only: bool) -> Any:
    """Open the database at ``path`` and check that it is this store's.

    Raises:
        _Damaged: it carries this store's marker and is damaged (the caller moves it aside).
        StoreError: it is another program's, a newer version's, or cannot be opened.
    """
    kind = dbm.whichdb(path)
    if kind is None and any(os.path.lexists(name) for name in _files_of(path)):
        kind = ""  # files of a database that no dbm module recognises
    existed = kind is not None
    if kind == "":
        if _has_marker(path):
            raise _Damaged("not a database this Python can read")
        raise _refuse(path, "not a dbm database")
    if kind == "dbm.sqlite3":  # Python 3.13's default; never created by this store
        if _has_marker(path):
            raise _Damaged("a dbm.sqlite3 database (not one this store can use)")
        raise _refuse(path, "a dbm.sqlite3 database, which this store never creates")
    try:
        module: Any = importlib.import_module(kind or _creation_module())
        db = module.open(path, "r" if read_only else "c", 0o600)
    except Exception as exc:  # dbm.error, and dbm.dumb's SyntaxError/ValueError on bad files
        if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:
            if exc.errno == errno.EAGAIN:
                raise StoreError(
                    f"{_LABEL} {path}: locked by another process: {_files.os_reason(exc)}"
                ) from exc
            raise _files.failure(_LABEL, path, "cannot open", exc) from exc
        if existed and _has_marker(path):
            raise _Damaged(f"cannot open: {type(exc).__name__}") from exc
        raise _refuse(path, f"cannot be opened as a database: {type(exc).__name__}") from exc
    try:
        version = db.get(_META_KEY)
        if version is None and existed and len(db.keys()) > 0:
            raise _refuse(path, "a database without this library's schema marker")
        if version is None and not read_only:
            db[_META_KEY] = str(SCHEMA_VERSION).encode()
        elif version is not None and version != str(SCHEMA_VERSION).encode():
            if version.isdigit() and int(version) > SCHEMA_VERSION:
                raise StoreError(
                    f"{_LABEL} {path}: written by a newer version of requests-retryafter "
                    f"(schema {int(version)}, this one reads {SCHEMA_VERSION}); left as it is"
                )
            raise _Damaged(f"schema version {version[:20]!r}, expected {SCHEMA_VERSION}")
    except (_Damaged, StoreError):
        db.close()
        raise
    except Exception as exc:  # dbm implementations raise assorted errors on bad files
        db.close()
        raise _Damaged(f"cannot read: {type(exc).__name__}: {exc}") from exc
    return db


class ShelveStore(BaseStore):
    """Host state in a local :mod:`dbm` database, for a single process (many threads).

    Args:
        path: the database (created if absent, with its directory). A symbolic link is
            followed: its target is the store.
        read_only: open with flag ``"r"``: never create, lock, move or write anything; the
            database must exist.

    Stores of this process opened on the same path share one database handle, so that a
    report beside a running job works and sees its writes. A database with this store's
    marker that cannot be opened, or has a damaged marker, is moved aside to
    ``PATH.corrupt-<UTC timestamp>``, a warning is logged and the store starts fresh. A host
    whose value is malformed is skipped with a warning; one written by a newer version is
    treated as absent and never overwritten.

    Raises:
        StoreError: another process has the store open; the path is not a regular file or
            not a database of this store; (read-only) it does not exist.
    """

    scheme = "shelve"
    shared = False

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        super().__init__()
        self.path = _files.resolve(path)
        self.lock_path = self.path + ".lock"
        self.read_only = read_only
        self._closed = False
        with _HANDLES_LOCK:
            handle = _HANDLES.get(self.path)
            if handle is not None:
                if handle.read_only and not read_only:
                    raise StoreError(
                        f"{_LABEL} {self.path}: this process already has it open read-only; "
                        "close that store before opening it for writing"
                    )
                with handle.lock:
                    handle.refs += 1
            else:
                handle = _open_handle(self.path, read_only)
                _HANDLES[self.path] = handle
        self._handle = handle
        self._lock = handle.lock

    @classmethod
    def from_url(cls, url: str, *, read_only: bool = False) -> ShelveStore:
        """Build from a ``shelve:///abs/path`` or ``shelve://rel/path`` spec."""
        return cls(_files.path_from_spec(url, cls.scheme), read_only=read_only)

    def __repr__(self) -> str:
        return f"ShelveStore({self.path!r})"

    @property
    def _db(self) -> Any:
        return self._handle.db

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{_LABEL} {self.path}: closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreError(f"{_LABEL} {self.path}: opened read-only; not written")

    # -- the mapping -----------------------------------------------------------------------

    def _decode(self, host: str, raw: bytes) -> Optional[HostState]:
        try:
            text = raw.decode("utf-8")
            return salvaged(
                host,
                self.path,
                raw,
                lambda dropped: HostState.from_json(text, dropped),
                self._handle.warned,
            )
        except UnsupportedSchema:
            raise
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            if self._handle.warned.get(host) != raw:
                self._handle.warned[host] = raw
                logger.warning(
                    "skipping the stored state of host %s in %s: %s", host, self.path, exc
                )
            return None

    def _lookup(self, host: str) -> Tuple[Optional[HostState], bool]:
        """The state of ``host`` and whether its entry was written by another version."""
        try:
            raw = self._db.get(host.encode("utf-8"))
        except Exception as exc:
            raise _files.failure(_LABEL, self.path, "cannot read", exc) from exc
        if raw is None:
            return None, False
        try:
            return self._decode(host, raw), False
        except UnsupportedSchema as exc:
            self._note_newer(self._handle.told_newer, host, self.path, exc)
            return None, True

    def get(self, host: str) -> Optional[HostState]:
        """Return the stored state of ``host``, or ``None``."""
        with self._lock:
            self._check_open()
            return self._lookup(host)[0]

    def _put(self, host: str, state: HostState) -> None:
        try:
            self._db[host.encode("utf-8")] = state.to_json().encode("utf-8")
        except Exception as exc:
            raise _files.failure(_LABEL, self.path, "cannot write", exc) from exc

    def set(self, host: str, state: HostState) -> None:
        """Store ``state`` for ``host`` (an entry a newer version wrote is left as it is)."""
        with self._lock:
            self._check_writable()
            if not self._lookup(host)[1]:
                self._put(host, state)

    def update(self, host: str, fn: Updater) -> HostState:
        """Replace the state of ``host`` with ``fn(current)`` under the store's lock. An entry
        a newer version wrote is left as it is: ``fn(None)`` is returned, not written."""
        with self._lock:
            self._check_writable()
            current, newer = self._lookup(host)
            new = fn(current)
            if not newer and new is not current:
                self._put(host, new)
            return new

    def delete(self, host: str) -> None:
        """Forget ``host`` (an entry a newer version wrote is left as it is)."""
        with self._lock:
            self._check_writable()
            if self._lookup(host)[1]:
                return
            try:
                del self._db[host.encode("utf-8")]
            except KeyError:
                pass
            except Exception as exc:
                raise _files.failure(_LABEL, self.path, "cannot write", exc) from exc

    def items(self) -> Iterator[Tuple[str, HostState]]:
        """Iterate over a snapshot of every ``(host, state)``, sorted by host."""
        with self._lock:
            self._check_open()
            try:
                pairs = [(k, self._db[k]) for k in self._db.keys() if k != _META_KEY]  # noqa: SIM118
            except Exception as exc:
                raise _files.failure(_LABEL, self.path, "cannot read", exc) from exc
            result: List[Tuple[str, HostState]] = []
            for key, raw in sorted(pairs):
                host = key.decode("utf-8", "replace")
                try:
                    state = self._decode(host, raw)
                except UnsupportedSchema:
                    continue
                if state is not None:
                    result.append((host, state))
        return iter(result)

    def close(self) -> None:
        """Release this store; the database is closed (and the lock file released) when the
        last store of this process on the path is closed."""
        with _HANDLES_LOCK, self._lock:
            if self._closed:
                return
            self._closed = True
            handle = self._handle
            handle.refs -= 1
            if handle.refs > 0:
                return
            _HANDLES.pop(self.path, None)
            try:
                handle.db.close()
            except Exception as exc:
                raise _files.failure(_LABEL, self.path, "cannot close", exc) from exc
            finally:
                if handle.filelock is not None:
                    handle.filelock.release()
