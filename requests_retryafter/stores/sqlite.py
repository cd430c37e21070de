"""A store in an SQLite database, shared safely by threads and processes on one machine.

Spec: ``sqlite:///abs/path.db`` (three slashes: absolute) or ``sqlite://rel/path.db``.

One table, ``hosts(host TEXT PRIMARY KEY, state TEXT, updated REAL)``, whose ``state`` is the
host's JSON text; ``PRAGMA application_id`` marks the file as this library's and ``PRAGMA
user_version`` holds the schema version. The database runs in WAL mode (readers never wait for
the writer) with a short busy timeout; :meth:`SqliteStore.update` runs inside ``BEGIN
IMMEDIATE``, so concurrent read-modify-writes from any number of processes are serialised and
none is lost. Another program's database is refused and left as it is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple
from urllib.parse import quote

from ..errors import StoreError
from ..state import SCHEMA_VERSION, HostState, UnsupportedSchema
from . import _files
from .base import BaseStore, Updater, salvaged

__all__ = ["APPLICATION_ID", "SqliteStore"]

logger = logging.getLogger(__name__)

#: Seconds to wait for another process's write (SQLite ``busy_timeout``) and for the lock file.
DEFAULT_TIMEOUT = 2.0
#: ``PRAGMA application_id`` of the databases this store creates ("RRAF").
APPLICATION_ID = 0x52524146

_CREATE = (
    "CREATE TABLE IF NOT EXISTS hosts ("
    "host TEXT PRIMARY KEY, state TEXT NOT NULL, updated REAL NOT NULL)"
)
_COLUMNS = {"host", "state", "updated"}
# SQLite's result codes for a damaged file: SQLITE_CORRUPT and SQLITE_NOTADB.
_CORRUPTION_CODES = {11, 26}
# SQLITE_BUSY and SQLITE_LOCKED: another connection holds a lock.
_BUSY_CODES = {5, 6}
_COMPANIONS = ("-wal", "-shm", "-journal")
_MAGIC = b"SQLite format 3\x00"
_LABEL = "SQLite store"
# Connections a forked child inherited from its parent (see SqliteStore._connection).
_INHERITED: List[sqlite3.Connection] = []


class _Damaged(Exception):
    """A database of this store's format cannot be used as it is; the message says why.

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
    return type(exc) is sqlite3.DatabaseError  # pragma: no cover - Python < 3.11


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (int(code) & 0xFF) in _BUSY_CODES
    return "locked" in str(exc)  # pragma: no cover - Python < 3.11


class SqliteStore(BaseStore):
    """Host state in an SQLite database; safe for many threads and processes on one machine
    (not on a network file system).

    Args:
        path: the database file (created with mode 0600 if absent, with its directory). A
            symbolic link is followed: its target is the store.
        timeout: seconds a call waits for another process's lock before raising StoreError.
        read_only: open with ``mode=ro`` (``immutable=1`` when no writer has a ``-wal`` file
            open, so that not even those files are created): never create, lock, move or
            write anything; the database must exist.

    The file is checked when the store opens. A file of this store's format that fails
    SQLite's ``quick_check`` or has a damaged schema is moved aside to
    ``PATH.corrupt-<UTC timestamp>`` (with its ``-wal``/``-shm`` files), a warning is logged and
    the store starts fresh. A file that is not an SQLite database, or a database without this
    store's table, is refused with StoreError and left as it is. A row whose state is
    malformed is skipped with a warning; one written by a newer version is treated as absent
    and never overwritten.
    """

    scheme = "sqlite"
    shared = True

    def __init__(
        self, path: str, *, timeout: float = DEFAULT_TIMEOUT, read_only: bool = False
    ) -> None:
        super().__init__()
        self.path = _files.resolve(path)
        self.lock_path = self.path + ".lock"
        self.read_only = read_only
        self._timeout = timeout
        self._closed = False
        self._warned: Dict[str, str] = {}
        self._told_newer: Set[str] = set()
        self._no_table = False
        # get() cache, valid while PRAGMA data_version (other connections' commits) is unchanged.
        self._cache: Dict[str, Optional[HostState]] = {}
        self._data_version: Optional[int] = None
        for name in (self.path, *(self.path + s for s in _COMPANIONS), self.lock_path):
            _files.check_regular(_LABEL, name)
        if read_only:
            _files.require_existing(_LABEL, self.path)
        else:
            _files.ensure_parent(_LABEL, self.path)
        self._conn = self._open()
        self._pid = os.getpid()

    @classmethod
    def from_url(cls, url: str, *, read_only: bool = False) -> SqliteStore:
        """Build from a ``sqlite:///abs/path.db`` or ``sqlite://rel/path.db`` spec."""
        return cls(_files.path_from_spec(url, cls.scheme), read_only=read_only)

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    def _fail(self, action: str, exc: BaseException) -> StoreError:
        if isinstance(exc, sqlite3.Error):
            name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
            if _is_busy(exc):
                return StoreError(
                    f"{_LABEL} {self.path}: {action}: locked by another process for more than "
                    f"{self._timeout:g} s ({name})"
                )
            return StoreError(f"{_LABEL} {self.path}: {action}: {exc} ({name})")
        return _files.failure(_LABEL, self.path, action, exc)

    def _refuse(self, why: str) -> StoreError:
        return StoreError(
            f"{_LABEL} {self.path}: not a requests-retryafter store ({why}); refusing to use "
            "it (nothing was changed)"
        )

    # -- opening ---------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        """Connect, check the file and repair it if damaged. The lock file serialises this
        between processes, so that two never move the same file aside."""
        if self.read_only:
            try:
                return self._connect_checked()
            except _Damaged as exc:
                if exc.conn is not None:
                    exc.conn.close()
                raise StoreError(
                    f"{_LABEL} {self.path}: is damaged ({exc}); opened read-only, so it was "
                    "left as it is (open it for writing to move it aside)"
                ) from None
        lock = _files.LockFile(_LABEL, self.path, self.lock_path)
        lock.acquire(self._timeout)
        try:
            try:
                return self._connect_checked()
            except _Damaged as exc:
                try:
                    _files.move_aside(_LABEL, self.path, str(exc), _COMPANIONS, logger)
                finally:
                    if exc.conn is not None:
                        exc.conn.close()
            try:
                return self._connect_checked()
            except _Damaged as exc:  # pragma: no cover - a fresh file is never damaged
                raise StoreError(
                    f"{_LABEL} {self.path}: cannot create a fresh store: {exc}"
                ) from exc
        finally:
            lock.release()

    def _header(self) -> Tuple[bool, int]:
        """Whether the file carries this store's application id, and its size; raises
        StoreError for a file that is not an SQLite database at all."""
        st = _files.check_regular(_LABEL, self.path)
        if st is None or st.st_size == 0:
            return False, 0
        head = _files.read_head(_LABEL, self.path, 100)
        if not head.startswith(_MAGIC):
            raise self._refuse("not an SQLite database")
        app_id = int.from_bytes(head[68:72], "big") if len(head) >= 72 else 0
        return app_id == APPLICATION_ID, st.st_size

    def _connect_checked(self) -> sqlite3.Connection:
        if not self.read_only and not os.path.exists(self.path):
            try:  # an empty file is an empty database; create it private to its owner
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass
            except OSError as exc:
                raise self._fail("cannot create", exc) from exc
        marked, _size = self._header()
        try:
            if self.read_only:
                # mode=ro would create the -wal and -shm files of a WAL database when they
                # are absent; with no -wal there is nothing but the file itself to read.
                live = any(os.path.lexists(self.path + s) for s in ("-wal", "-shm"))
                conn = sqlite3.connect(
                    f"file:{quote(self.path)}?mode=ro" + ("" if live else "&immutable=1"),
                    uri=True,
                    timeout=self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self._timeout,
                    isolation_level=None,  # transactions are explicit
                    check_same_thread=False,  # guarded by self._lock
                )
        except sqlite3.Error as exc:
            raise self._fail("cannot open", exc) from exc
        try:
            self._check(conn, marked)
        except sqlite3.Error as exc:
            if _is_corruption(exc):
                if marked or _has_our_table(conn):
                    raise _Damaged(str(exc), conn) from exc
                conn.close()
                raise self._refuse(f"an unreadable database: {exc}") from exc
            conn.close()
            raise self._fail("cannot open", exc) from exc
        except _Damaged as exc:
            exc.conn = conn
            raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _check(self, conn: sqlite3.Connection, marked: bool) -> None:
        """Set the connection up; create the table or check the one there. Raises _Damaged
        for a damaged store of this library, StoreError for anything else that is not one."""
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        # Check before changing anything, so that a file moved aside is as it was found.
        check = conn.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            if marked or _has_our_table(conn):
                raise _Damaged(f"quick_check: {check[0] if check else 'no answer'}")
            raise self._refuse("a damaged database without this library's table")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        ours = marked or (version == SCHEMA_VERSION and "hosts" in tables)
        if version > SCHEMA_VERSION and (marked or "hosts" in tables):
            raise StoreError(
                f"{_LABEL} {self.path}: written by a newer version of requests-retryafter "
                f"(schema {version}, this one reads {SCHEMA_VERSION}); left as it is"
            )
        if "hosts" in tables:
            columns = {r[1] for r in conn.execute("PRAGMA table_info(hosts)")}
            missing = _COLUMNS - columns
            if missing and marked:
                raise _Damaged("table 'hosts' lacks columns " + ", ".join(sorted(missing)))
            if missing:
                raise self._refuse("its 'hosts' table is not this library's")
        if not ours and (tables or version not in (0, SCHEMA_VERSION)):
            # someone else's database: never move it aside or write to it
            raise self._refuse("it holds other tables" if tables else f"user_version {version}")
        if marked and "hosts" not in tables and version == SCHEMA_VERSION:
            raise _Damaged("no 'hosts' table")
        if self.read_only:
            self._no_table = "hosts" not in tables
            return
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # with WAL: durable across process crashes
        if version == 0 or not marked:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_CREATE)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        """The connection for this process (lock held). A connection must not be used across
        ``fork()``, so a child process opens its own."""
        if self._closed:
            raise StoreError(f"{_LABEL} {self.path}: closed")
        if self._pid != os.getpid():
            # The parent's connection is never used or closed here (closing it could touch
            # the parent's WAL); it is kept referenced so that it is not finalised either.
            _INHERITED.append(self._conn)
            self._conn = self._open()
            self._pid = os.getpid()
            self._cache.clear()
            self._data_version = None
        return self._conn

    def _writable(self) -> sqlite3.Connection:
        conn = self._connection()
        if self.read_only:
            raise StoreError(f"{_LABEL} {self.path}: opened read-only; not written")
        return conn

    # -- reading ---------------------------------------------------------------------------

    def _decode(self, host: str, text: Any) -> Tuple[Optional[HostState], bool]:
        """Parse a row's state: ``(state, False)``; ``(None, True)`` for a state written by
        another version (left as it is); ``(None, False)`` with a warning (once per distinct
        bad value) for a malformed one."""
        try:
            return salvaged(
                host,
                self.path,
                text,
                lambda dropped: HostState.from_json(text, dropped),
                self._warned,
            ), False
        except UnsupportedSchema as exc:
            self._note_newer(self._told_newer, host, self.path, exc)
            return None, True
        except (ValueError, RecursionError) as exc:
            if self._warned.get(host) != text:
                self._warned[host] = text
                logger.warning(
                    "skipping the stored state of host %s in %s: %s", host, self.path, exc
                )
            return None, False

    def get(self, host: str) -> Optional[HostState]:
        """Return the stored state of ``host``. Served from a cache while no other connection
        has committed since (checked with ``PRAGMA data_version``)."""
        with self._lock:
            conn = self._connection()
            if self._no_table:
                return None
            try:
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != self._data_version:
                    self._cache.clear()
                    self._data_version = version
                elif host in self._cache:
                    return self._cache[host]
                row = conn.execute("SELECT state FROM hosts WHERE host = ?", (host,)).fetchone()
            except sqlite3.Error as exc:
                raise self._fail("cannot read", exc) from exc
            state = None if row is None else self._decode(host, row[0])[0]
            self._cache[host] = state
            return state

    def items(self) -> Iterator[Tuple[str, HostState]]:
        """Iterate over a snapshot of every ``(host, state)``, sorted by host."""
        with self._lock:
            conn = self._connection()
            if self._no_table:
                return iter([])
            try:
                rows = conn.execute("SELECT host, state FROM hosts ORDER BY host").fetchall()
            except sqlite3.Error as exc:
                raise self._fail("cannot read", exc) from exc
            pairs: List[Tuple[str, HostState]] = []
            for host, text in rows:
                state = self._decode(host, text)[0]
                if state is not None:
                    pairs.append((host, state))
        return iter(pairs)

    # -- writing ---------------------------------------------------------------------------

    def _transaction(self, host: str, fn: Optional[Updater]) -> Optional[HostState]:
        """In ``BEGIN IMMEDIATE``: read ``host``; unless its row was written by another
        version, write ``fn(current)`` (or delete the row when ``fn`` is ``None``)."""
        conn = self._writable()
        self._cache.pop(host, None)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._fail("cannot write", exc) from exc
        try:
            row = conn.execute("SELECT state FROM hosts WHERE host = ?", (host,)).fetchone()
            current, newer = (None, False) if row is None else self._decode(host, row[0])
            new = None if fn is None else fn(current)
            if newer or (new is not None and new is current):
                conn.execute("ROLLBACK")  # a newer version's row, or nothing changed
                return new
            if new is None:
                conn.execute("DELETE FROM hosts WHERE host = ?", (host,))
            else:
                conn.execute(
                    "INSERT OR REPLACE INTO hosts (host, state, updated) VALUES (?, ?, ?)",
                    (host, new.to_json(), time.time()),
                )
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._fail("cannot write", exc) from exc
            raise
        self._cache[host] = new
        return new

    def update(self, host: str, fn: Updater) -> HostState:
        """Replace the state of ``host`` with ``fn(current)`` inside ``BEGIN IMMEDIATE`` (no
        other process writes meanwhile) and return it. A row a newer version wrote is left as
        it is: ``fn(None)`` is returned, not written."""
        with self._lock:
            new = self._transaction(host, fn)
            assert new is not None
            return new

    def set(self, host: str, state: HostState) -> None:
        """Store ``state`` for ``host`` (a row a newer version wrote is left as it is)."""
        with self._lock:
            self._transaction(host, lambda _current: state)

    def delete(self, host: str) -> None:
        """Forget ``host`` (a row a newer version wrote is left as it is)."""
        with self._lock:
            self._transaction(host, None)

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
                    raise self._fail("cannot close", exc) from exc


def _has_our_table(conn: sqlite3.Connection) -> bool:
    """Whether the schema (readable even when other pages are damaged) has this store's table."""
    try:
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type='table' AND name='hosts'"
        ).fetchone()
    except sqlite3.Error:
        return False
    sql = (row[0] if row else "") or ""
    return all(part in sql for part in ("host TEXT PRIMARY KEY", "state TEXT", "updated REAL"))
