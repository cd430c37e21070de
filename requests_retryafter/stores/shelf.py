"""A store in a :mod:`dbm` database (what :mod:`shelve` is built on), for one process only.

Spec: ``shelve:///abs/path`` (three slashes: absolute) or ``shelve://rel/path``.

Values are each host's JSON text, never pickles: the file is opened with :mod:`dbm` directly
(:mod:`shelve` would pickle every value). New databases use the first of GNU dbm, ndbm and
``dbm.dumb`` that Python has (never ``dbm.sqlite3``, which refuses use from several threads);
the database is ``PATH`` itself or ``PATH`` plus a suffix (``.db``, ``.dat``/``.dir``).

Only one process may have the store open: it holds an exclusive lock file
(``PATH + ".lock"``) while open, and a second process gets :class:`~requests_retryafter.StoreError`
at once instead of corrupting the file. Threads of the owning process share it safely. For
several processes, use the ``json://`` or ``sqlite://`` store.
"""

from __future__ import annotations

import dbm
import errno
import importlib
import logging
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import filelock

from ..errors import StoreError
from ..state import SCHEMA_VERSION, HostState
from .base import BaseStore, Updater
from .jsonfile import _ensure_parent, _move_aside, _path_from_spec

__all__ = ["ShelveStore"]

logger = logging.getLogger(__name__)

#: Key of the database's schema version (a host key never starts with a NUL byte).
_META_KEY = b"\x00requests_retryafter_schema"
# The dbm modules new stores may use, in order of preference.
_DBM_MODULES = ("dbm.gnu", "dbm.ndbm", "dbm.dumb")
# Files a dbm implementation may keep for PATH, besides PATH itself.
_DBM_SUFFIXES = (".db", ".dat", ".dir", ".bak", ".pag")
# Errors that say something about the environment, not about the file: never move it aside.
_ENVIRONMENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EAGAIN}


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
    """The database cannot be used as it is; the message says why."""


class ShelveStore(BaseStore):
    """Host state in a local :mod:`dbm` database, for a single process (many threads).

    Args:
        path: the database (created if absent, with its directory).

    A database that cannot be opened, is not a database or carries another schema version is
    moved aside to ``PATH.corrupt-<UTC timestamp>``, a warning is logged and the store starts
    fresh. A host whose value is malformed is skipped with a warning.

    Raises:
        StoreError: another process has the store open.
    """

    scheme = "shelve"
    shared = False

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.lock_path = self.path + ".lock"
        self._closed = False
        self._warned: Dict[str, bytes] = {}
        _ensure_parent(self.path)
        self._filelock = filelock.FileLock(self.lock_path, timeout=0)
        try:
            self._filelock.acquire(timeout=0)
        except filelock.Timeout as exc:
            raise StoreError(
                f"shelve store {self.path} is in use by another process (lock file "
                f"{self.lock_path}); a shelve store is single-process: use json:// or "
                "sqlite:// to share one between processes"
            ) from exc
        except OSError as exc:
            raise StoreError(f"cannot take lock file {self.lock_path}: {exc}") from exc
        try:
            self._db = self._open()
        except BaseException:
            self._filelock.release()
            raise

    @classmethod
    def from_url(cls, url: str) -> ShelveStore:
        """Build from a ``shelve:///abs/path`` or ``shelve://rel/path`` spec."""
        return cls(_path_from_spec(url, cls.scheme))

    def __repr__(self) -> str:
        return f"ShelveStore({self.path!r})"

    # -- opening ---------------------------------------------------------------------------

    def _open(self) -> Any:
        try:
            return self._open_checked()
        except _Damaged as exc:
            reason = str(exc)
        _move_aside(self.path, reason, _DBM_SUFFIXES, logger)
        try:
            return self._open_checked()
        except _Damaged as exc:  # pragma: no cover - a fresh database is never damaged
            raise StoreError(f"cannot create a fresh store in {self.path}: {exc}") from exc

    def _open_checked(self) -> Any:
        kind = dbm.whichdb(self.path)
        existed = kind is not None
        if kind == "":
            raise _Damaged("not a database this Python can read")
        if kind == "dbm.sqlite3":  # Python 3.13's default; never created by this store
            raise _Damaged("a dbm.sqlite3 database (not one this store wrote)")
        try:
            module: Any = importlib.import_module(kind or _creation_module())
            db = module.open(self.path, "c", 0o600)
        except Exception as exc:  # dbm.error, and dbm.dumb's SyntaxError/ValueError on bad files
            if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:
                raise StoreError(f"cannot open {self.path}: {exc.strerror or exc}") from exc
            raise _Damaged(f"cannot open: {type(exc).__name__}") from exc
        try:
            version = db.get(_META_KEY)
            if version is None and existed:  # every database this store creates has it
                raise _Damaged("no schema version (an incomplete or damaged database)")
            if version is None:
                db[_META_KEY] = str(SCHEMA_VERSION).encode()
            elif version != str(SCHEMA_VERSION).encode():
                raise _Damaged(f"schema version {version[:20]!r}, expected {SCHEMA_VERSION}")
        except _Damaged:
            db.close()
            raise
        except Exception as exc:  # dbm implementations raise assorted errors on bad files
            db.close()
            raise _Damaged(f"cannot read: {type(exc).__name__}: {exc}") from exc
        return db

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.path} is closed")

    # -- the mapping -----------------------------------------------------------------------

    def _decode(self, host: str, raw: bytes) -> Optional[HostState]:
        try:
            return HostState.from_json(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            if self._warned.get(host) != raw:
                self._warned[host] = raw
                logger.warning(
                    "skipping the stored state of host %s in %s: %s", host, self.path, exc
                )
            return None

    def get(self, host: str) -> Optional[HostState]:
        """Return the stored state of ``host``, or ``None``."""
        with self._lock:
            self._check_open()
            try:
                raw = self._db.get(host.encode("utf-8"))
            except Exception as exc:
                raise StoreError(f"cannot read {self.path}: {exc}") from exc
            return None if raw is None else self._decode(host, raw)

    def set(self, host: str, state: HostState) -> None:
        """Store ``state`` for ``host``."""
        with self._lock:
            self._check_open()
            try:
                self._db[host.encode("utf-8")] = state.to_json().encode("utf-8")
            except Exception as exc:
                raise StoreError(f"cannot write {self.path}: {exc}") from exc

    def update(self, host: str, fn: Updater) -> HostState:
        """Replace the state of ``host`` with ``fn(current)`` under the store's lock."""
        with self._lock:
            new = fn(self.get(host))
            self.set(host, new)
            return new

    def delete(self, host: str) -> None:
        """Forget ``host``."""
        with self._lock:
            self._check_open()
            try:
                del self._db[host.encode("utf-8")]
            except KeyError:
                pass
            except Exception as exc:
                raise StoreError(f"cannot write {self.path}: {exc}") from exc

    def items(self) -> Iterator[Tuple[str, HostState]]:
        """Iterate over a snapshot of every ``(host, state)``, sorted by host."""
        with self._lock:
            self._check_open()
            try:
                pairs = [(k, self._db[k]) for k in self._db.keys() if k != _META_KEY]  # noqa: SIM118
            except Exception as exc:
                raise StoreError(f"cannot read {self.path}: {exc}") from exc
        result: List[Tuple[str, HostState]] = []
        for key, raw in sorted(pairs):
            host = key.decode("utf-8", "replace")
            state = self._decode(host, raw)
            if state is not None:
                result.append((host, state))
        return iter(result)

    def close(self) -> None:
        """Close the database and release the lock file."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._db.close()
            except Exception as exc:
                raise StoreError(f"cannot close {self.path}: {exc}") from exc
            finally:
                self._filelock.release()
