"""A store in an SQLite database, shared safely by threads and processes on one machine.

Spec: ``sqlite:///abs/path.db`` (three slashes: absolute) or ``sqlite://rel/path.db``.

One table, ``hosts(host TEXT PRIMARY KEY, state TEXT, updated REAL)``, whose ``state`` is the
host's JSON text. The database runs in WAL mode (readers never wait for the writer) with a
busy timeout; :meth:`SqliteStore.update` runs inside ``BEGIN IMMEDIATE``, so concurrent
read-modify-writes from any number of processes are serialised and none is lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import filelock

from ..errors import StoreError
from ..state import SCHEMA_VERSION, HostState
from .base import BaseStore, Updater
from .jsonfile import _acquire, _ensure_parent, _move_aside, _path_from_spec

__all__ = ["SqliteStore"]

logger = logging.getLogger(__name__)

#: Seconds to wait for another process's write (SQLite ``busy_timeout``) and for the lock file.
DEFAULT_TIMEOUT = 30.0

_CREATE = (
    "CREATE TABLE IF NOT EXISTS hosts ("
    "host TEXT PRIMARY KEY, state TEXT NOT NULL, updated REAL NOT NULL)"
)
_COLUMNS = {"host", "state", "updated"}
# SQLite's result codes for a damaged file: SQLITE_CORRUPT and SQLITE_NOTADB.
_CORRUPTION_CODES = {11, 26}
_COMPANIONS = ("-wal", "-shm", "-journal")
# Connections a forked child inherited from its parent (see SqliteStore._connection).
_INHERITED: List[sqlite3.Connection] = []


class _Damaged(Exception):
    """The database cannot be used as it is; the message says why.

    ``conn`` is the connection that found it, still open: closing it could make SQLite
    delete the database's ``-wal`` file, which belongs in the backup.
    """

    def __init__(self, reason: str, conn: Optional[sqlite3.Connection] = None) -> None:
        super().__init__(reason)
        self.conn = conn


def _is_corruption(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the file is damaged (not busy, not a programming error)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return (int(code) & 0xFF) in _CORRUPTION_CODES
    return type(exc) is sqlite3.DatabaseError


class SqliteStore(BaseStore):
    """Host state in an SQLite database; safe for many threads and processes on one machine
    (not on a network file system).

    Args:
        path: the database file (created with mode 0600 if absent, with its directory).
        timeout: seconds a call waits for another process's write before raising StoreError.

    The file is checked when the store opens. A file that is not an SQLite database, fails
    SQLite's ``quick_check`` or carries another schema version is moved aside to
    ``PATH.corrupt-<UTC timestamp>`` (with its ``-wal``/``-shm`` files), a warning is logged and
    the store starts fresh. A row whose state is malformed is skipped with a warning.
    """

    scheme = "sqlite"
    shared = True

    def __init__(self, path: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.lock_path = self.path + ".lock"
        self._timeout = timeout
        self._closed = False
        self._warned: Dict[str, str] = {}
        # get() cache, valid while PRAGMA data_version (other connections' commits) is unchanged.
        self._cache: Dict[str, Optional[HostState]] = {}
        self._data_version: Optional[int] = None
        _ensure_parent(self.path)
        self._conn = self._open()
        self._pid = os.getpid()

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        """Build from a ``sqlite:///abs/path.db`` or ``sqlite://rel/path.db`` spec."""
        return cls(_path_from_spec(url, cls.scheme))

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    # -- opening ---------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        """Connect, check the file and repair it if damaged. The lock file serialises this
        between processes, so that two never move the same file aside."""
        lock = filelock.FileLock(self.lock_path, timeout=self._timeout)
        _acquire(lock, self._timeout, self.lock_path)
        try:
            try:
                return self._connect_checked()
            except _Damaged as exc:
                try:
                    _move_aside(self.path, str(exc), _COMPANIONS, logger)
                finally:
                    if exc.conn is not None:
                        exc.conn.close()
            try:
                return self._connect_checked()
            except _Damaged as exc:  # pragma: no cover - a fresh file is never damaged
                raise StoreError(f"cannot create a fresh store in {self.path}: {exc}") from exc
        finally:
            lock.release()

    def _connect_checked(self) -> sqlite3.Connection:
        if not os.path.exists(self.path):
            try:  # an empty file is an empty database; create it private to its owner
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot create {self.path}: {exc.strerror or exc}") from exc
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._timeout,
                isolation_level=None,  # transactions are explicit
                check_same_thread=False,  # guarded by self._lock
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        try:
            self._check(conn)
        except sqlite3.Error as exc:
            if _is_corruption(exc):
                raise _Damaged(str(exc), conn) from exc
            conn.close()
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        except _Damaged as exc:
            exc.conn = conn
            raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _check(self, conn: sqlite3.Connection) -> None:
        """Set the connection up; create the table or check the one there. Raises _Damaged."""
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        # Check before changing anything, so that a file moved aside is as it was found.
        check = conn.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise _Damaged(f"quick_check: {check[0] if check else 'no answer'}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise _Damaged(f"schema version {version}, expected {SCHEMA_VERSION}")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "hosts" in tables:
            columns = {r[1] for r in conn.execute("PRAGMA table_info(hosts)")}
            missing = _COLUMNS - columns
            if missing:
                raise _Damaged("table 'hosts' lacks columns " + ", ".join(sorted(missing)))
        elif version == SCHEMA_VERSION:
            raise _Damaged("no 'hosts' table")
        elif tables:  # someone else's database: never move it aside or write to it
            raise StoreError(
                f"{self.path} holds other tables; it is not a requests-retryafter store"
            )
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # with WAL: durable across process crashes
        if version == 0:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_CREATE)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        """The connection for this process (lock held). A connection must not be used across
        ``fork()``, so a child process opens its own."""
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        if self._pid != os.getpid():
            # The parent's connection is never used or closed here (closing it could touch
            # the parent's WAL); it is kept referenced so that it is not finalised either.
            _INHERITED.append(self._conn)
            self._conn = self._open()
            self._pid = os.getpid()
            self._cache.clear()
            self._data_version = None
        return self._conn

    # -- reading ---------------------------------------------------------------------------

    def _decode(self, host: str, text: Any) -> Optional[HostState]:
        """Parse a row's state; log (once per distinct bad value) and return None if bad."""
        try:
            return HostState.from_json(text)
        except ValueError as exc:
            if self._warned.get(host) != text:
                self._warned[host] = text
                logger.warning(
                    "skipping the stored state of host %s in %s: %s", host, self.path, exc
                )
            return None

    def get(self, host: str) -> Optional[HostState]:
        """Return the stored state of ``host``. Served from a cache while no other connection
        has committed since (checked with ``PRAGMA data_version``)."""
        with self._lock:
            conn = self._connection()
            try:
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._data_version:
                    self._cache.clear()
                    self._data_version = version
                elif host in self._cache:
                    return self._cache[host]
                row = conn.execute("SELECT state FROM hosts WHERE host = ?", (host,)).fetchone()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read {self.path}: {exc}") from exc
            state = None if row is None else self._decode(host, row[0])
            self._cache[host] = state
            return state

    def items(self) -> Iterator[Tuple[str, HostState]]:
        """Iterate over a snapshot of every ``(host, state)``, sorted by host."""
        with self._lock:
            conn = self._connection()
            try:
                rows = conn.execute("SELECT host, state FROM hosts ORDER BY host").fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read {self.path}: {exc}") from exc
        pairs: List[Tuple[str, HostState]] = []
        for host, text in rows:
            state = self._decode(host, text)
            if state is not None:
                pairs.append((host, state))
        return iter(pairs)

    # -- writing ---------------------------------------------------------------------------

    def update(self, host: str, fn: Updater) -> HostState:
        """Replace the state of ``host`` with ``fn(current)`` inside ``BEGIN IMMEDIATE`` (no
        other process writes meanwhile) and return it."""
        with self._lock:
            conn = self._connection()
            self._cache.pop(host, None)
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write {self.path}: {exc}") from exc
            try:
                row = conn.execute("SELECT state FROM hosts WHERE host = ?", (host,)).fetchone()
                new = fn(None if row is None else self._decode(host, row[0]))
                conn.execute(
                    "INSERT OR REPLACE INTO hosts (host, state, updated) VALUES (?, ?, ?)",
                    (host, new.to_json(), time.time()),
                )
                conn.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"cannot write {self.path}: {exc}") from exc
                raise
            self._cache[host] = new
            return new

    def set(self, host: str, state: HostState) -> None:
        """Store ``state`` for ``host``."""
        with self._lock:
            conn = self._connection()
            self._cache.pop(host, None)
            try:
                conn.execute(
                    "INSERT OR REPLACE INTO hosts (host, state, updated) VALUES (?, ?, ?)",
                    (host, state.to_json(), time.time()),
                )
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write {self.path}: {exc}") from exc
            self._cache[host] = state

    def delete(self, host: str) -> None:
        """Forget ``host``."""
        with self._lock:
            conn = self._connection()
            self._cache.pop(host, None)
            try:
                conn.execute("DELETE FROM hosts WHERE host = ?", (host,))
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write {self.path}: {exc}") from exc
            self._cache[host] = None

    def close(self) -> None:
        """Close the connection; the store must not be used afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cache.clear()
            if self._pid == os.getpid():
                try:
                    self._conn.close()
                except sqlite3.Error as exc:
                    raise StoreError(f"cannot close {self.path}: {exc}") from exc
