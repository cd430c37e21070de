"""A store kept in one JSON file, shared safely by threads and processes on one machine.

Spec: ``json:///abs/path.json`` (three slashes: absolute) or ``json://rel/path.json`` (two
slashes: relative to the working directory when the store is opened).

The file holds ``{"v": 1, "hosts": {host: state}}``. Reads are cheap: the parsed file is
cached and read again only when its ``(mtime_ns, size, inode)`` changes. Every write takes a
lock file (``PATH + ".lock"``), reads the file again, changes one host only and replaces the
file atomically (a temporary file in the same directory, mode 0600, ``fsync``, ``os.replace``),
so concurrent writers never lose each other's updates and a reader never sees half a file.

This module also holds the small helpers the other file-backed stores share.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import filelock

from ..errors import ConfigurationError, StoreError
from ..state import SCHEMA_VERSION, HostState
from .base import BaseStore, Updater

__all__ = ["JsonFileStore"]

logger = logging.getLogger(__name__)

#: Seconds a writer waits for another process's lock before giving up with StoreError.
DEFAULT_LOCK_TIMEOUT = 30.0
#: Seconds between attempts to take a contended lock file.
_POLL_INTERVAL = 0.002
_TMP_SUFFIX = ".tmp"

_StatKey = Tuple[int, int, int]


class _Damaged(Exception):
    """A store file cannot be used as it is; the message says why (never its content)."""


# -- helpers shared by the file-backed stores -------------------------------------------------


def _path_from_spec(spec: str, scheme: str) -> str:
    """Return the absolute path named by ``scheme://PATH``.

    ``scheme:///abs/path`` is absolute; ``scheme://rel/path`` is relative to the working
    directory; ``~`` is expanded.

    Raises:
        ConfigurationError: the spec has another scheme or names no path.
    """
    prefix = f"{scheme}://"
    if not spec.lower().startswith(prefix):
        raise ConfigurationError(f"store spec must start with {prefix!r}")
    rest = spec[len(prefix) :]
    if re.match(r"^/[A-Za-z]:[/\\]", rest):  # json:///C:/dir/file.json on Windows
        rest = rest[1:]
    if not rest or rest.endswith(("/", "\\")):
        raise ConfigurationError(
            f"store spec {spec!r} names no file; use {scheme}:///abs/path or {scheme}://rel/path"
        )
    return os.path.abspath(os.path.expanduser(rest))


def _ensure_parent(path: str) -> None:
    """Create the directory that will hold ``path``; raises StoreError when it cannot."""
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create directory {parent}: {exc.strerror or exc}") from exc


def _move_aside(
    path: str, reason: str, companions: Sequence[str] = (), log: logging.Logger = logger
) -> Optional[str]:
    """Rename a damaged store to a timestamped backup, log a warning saying why, and return
    the backup's name (``None`` when there was nothing to move).

    ``path`` and each ``path + suffix`` (for the suffixes in ``companions``) that exists is
    renamed to ``path + ".corrupt-<UTC timestamp>"`` (plus the same suffix); the warning goes
    to ``log`` (the calling store's module logger). The caller holds
    the store's lock file, so no other process is recovering the same store.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    suffixes = [s for s in ("", *companions) if os.path.lexists(path + s)]
    if not suffixes:
        return None
    backup = f"{path}.corrupt-{stamp}"
    n = 1
    while any(os.path.lexists(backup + s) for s in ("", *companions)):
        backup = f"{path}.corrupt-{stamp}-{n}"
        n += 1
    for suffix in suffixes:
        try:
            os.replace(path + suffix, backup + suffix)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(
                f"cannot move damaged store file {path + suffix} aside: {exc}"
            ) from exc
    log.warning(
        "store file %s is damaged (%s); moved it to %s and starting fresh", path, reason, backup
    )
    return backup


def _acquire(lock: filelock.BaseFileLock, timeout: float, path: str) -> None:
    """Take ``lock`` (waiting at most ``timeout`` seconds) or raise StoreError."""
    try:
        lock.acquire(timeout=timeout, poll_interval=_POLL_INTERVAL)
    except filelock.Timeout as exc:
        raise StoreError(
            f"lock file {path} is held by another process for more than {timeout:g} s"
        ) from exc
    except OSError as exc:
        raise StoreError(f"cannot take lock file {path}: {exc}") from exc


def _decode_state(host: str, data: Any, where: str) -> Optional[HostState]:
    """Build a HostState from stored JSON data; log and return ``None`` when it is unusable."""
    try:
        return HostState.from_dict(data)
    except ValueError as exc:
        logger.warning("dropping the stored state of host %s in %s: %s", host, where, exc)
        return None


# -- the store -------------------------------------------------------------------------------


class JsonFileStore(BaseStore):
    """Host state in one JSON file; safe for many threads and processes on one machine.

    Args:
        path: the file (created on the first write; its directory is created now).
        lock_timeout: seconds a write waits for another process holding the lock file.

    Damage (a truncated or non-JSON file, another schema version) never stops a job: the file
    is moved aside to ``PATH.corrupt-<UTC timestamp>``, a warning is logged and the store
    starts fresh. A host whose entry is malformed is dropped with a warning; the rest are kept.
    """

    scheme = "json"
    shared = True

    def __init__(self, path: str, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.lock_path = self.path + ".lock"
        self._dir = os.path.dirname(self.path)
        self._tmp_prefix = "." + os.path.basename(self.path) + "."
        self._lock_timeout = lock_timeout
        self._filelock = filelock.FileLock(self.lock_path, timeout=lock_timeout)
        self._closed = False
        # The cache: the file's stat key and bytes, its host entries and the parsed states.
        self._key: Optional[_StatKey] = None
        self._raw: Optional[bytes] = None
        self._hosts: Dict[str, Dict[str, Any]] = {}
        self._states: Dict[str, HostState] = {}
        # The JSON text ('"host":{...}') of each entry this process last wrote, so that a
        # write re-encodes only the host it changed (valid until the file is read again).
        self._texts: Dict[str, str] = {}
        _ensure_parent(self.path)
        self._remove_stale_temp_files()
        with self._lock:
            self._refresh()

    @classmethod
    def from_url(cls, url: str) -> JsonFileStore:
        """Build from a ``json:///abs/path.json`` or ``json://rel/path.json`` spec."""
        return cls(_path_from_spec(url, cls.scheme))

    def __repr__(self) -> str:
        return f"JsonFileStore({self.path!r})"

    # -- reading ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.path} is closed")

    def _refresh(self) -> None:
        """Bring the cache up to date with the file if the file changed (lock held: RLock)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._reset(None, None, {})
            return
        except OSError as exc:
            raise StoreError(f"cannot stat {self.path}: {exc.strerror or exc}") from exc
        if (st.st_mtime_ns, st.st_size, st.st_ino) != self._key:
            self._reload(locked=False)

    def _read(self) -> Tuple[Optional[_StatKey], Optional[bytes]]:
        """Read the file and the stat key of what was read; ``(None, None)`` if it is absent."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        return (st.st_mtime_ns, st.st_size, st.st_ino), data

    def _reload(self, *, locked: bool) -> None:
        """Read and parse the file. Damage is repaired under the lock file: when the caller
        does not hold it, it is taken and the file read again (another process may have
        repaired or replaced it meanwhile)."""
        key, data = self._read()
        if data is not None and data == self._raw:
            self._key = key  # same content (e.g. touched): keep the parsed cache
            return
        try:
            hosts = self._decode(data)
        except _Damaged as exc:
            if not locked:
                _acquire(self._filelock, self._lock_timeout, self.lock_path)
                try:
                    self._reload(locked=True)
                finally:
                    self._filelock.release()
                return
            _move_aside(self.path, str(exc))
            self._reset(None, None, {})
            return
        self._reset(key, data, hosts)

    def _reset(
        self, key: Optional[_StatKey], raw: Optional[bytes], hosts: Dict[str, Dict[str, Any]]
    ) -> None:
        self._key, self._raw, self._hosts, self._states = key, raw, hosts, {}
        self._texts = {}

    def _decode(self, data: Optional[bytes]) -> Dict[str, Dict[str, Any]]:
        """Return the host entries of the file's bytes; raises _Damaged when unusable."""
        if not data:  # absent, or empty (nothing to save): a fresh store
            return {}
        try:
            doc = json.loads(data)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise _Damaged(f"not JSON: {type(exc).__name__} at byte {_err_pos(exc)}") from exc
        if not isinstance(doc, dict):
            raise _Damaged("not a JSON object")
        if doc.get("v") != SCHEMA_VERSION:
            raise _Damaged(f"schema version {doc.get('v')!r}, expected {SCHEMA_VERSION}")
        hosts = doc.get("hosts")
        if not isinstance(hosts, dict):
            raise _Damaged("no 'hosts' object")
        good: Dict[str, Dict[str, Any]] = {}
        for host, entry in hosts.items():
            if not isinstance(entry, dict):
                logger.warning(
                    "dropping the stored state of host %s in %s: not an object", host, self.path
                )
            elif entry.get("v") != SCHEMA_VERSION:
                logger.warning(
                    "dropping the stored state of host %s in %s: schema version %r",
                    host,
                    self.path,
                    entry.get("v"),
                )
            else:
                good[host] = entry
        return good

    def _state(self, host: str) -> Optional[HostState]:
        """The parsed state of ``host`` from the cache (lock held: RLock)."""
        state = self._states.get(host)
        if state is not None:
            return state
        entry = self._hosts.get(host)
        if entry is None:
            return None
        state = _decode_state(host, entry, self.path)
        if state is None:
            del self._hosts[host]  # dropped: not returned, and not written back
            self._texts.pop(host, None)
        else:
            self._states[host] = state
        return state

    def get(self, host: str) -> Optional[HostState]:
        """Return the stored state of ``host`` (one ``stat`` when the file has not changed)."""
        with self._lock:
            self._check_open()
            self._refresh()
            return self._state(host)

    def items(self) -> Iterator[Tuple[str, HostState]]:
        """Iterate over a snapshot of every ``(host, state)``, sorted by host."""
        with self._lock:
            self._check_open()
            self._refresh()
            pairs: List[Tuple[str, HostState]] = []
            for host in sorted(self._hosts):
                state = self._state(host)
                if state is not None:
                    pairs.append((host, state))
        return iter(pairs)

    # -- writing ---------------------------------------------------------------------------

    def update(self, host: str, fn: Updater) -> HostState:
        """Replace the state of ``host`` with ``fn(current)`` atomically for every process
        sharing the file; return the new state. ``fn`` runs under the lock file."""
        with self._lock:
            self._check_open()
            _acquire(self._filelock, self._lock_timeout, self.lock_path)
            try:
                self._reload(locked=True)
                new = fn(self._state(host))
                hosts = dict(self._hosts)
                hosts[host] = new.to_dict()
                self._write(hosts, changed=host)
                self._states[host] = new
                return new
            finally:
                self._filelock.release()

    def set(self, host: str, state: HostState) -> None:
        """Store ``state`` for ``host`` (an :meth:`update` that ignores what was stored)."""
        self.update(host, lambda _current: state)

    def delete(self, host: str) -> None:
        """Forget ``host``; the file is rewritten only when the host was stored."""
        with self._lock:
            self._check_open()
            _acquire(self._filelock, self._lock_timeout, self.lock_path)
            try:
                self._reload(locked=True)
                if host in self._hosts:
                    hosts = dict(self._hosts)
                    del hosts[host]
                    self._write(hosts, changed=host)
                    self._states.pop(host, None)
            finally:
                self._filelock.release()

    def _write(self, hosts: Dict[str, Dict[str, Any]], changed: str) -> None:
        """Replace the file with ``hosts`` (both locks held) and make them the cache.

        The text is what ``json.dumps(doc, separators=(",", ":"), sort_keys=True)`` gives, but
        only ``changed`` and hosts not encoded since the file was read are encoded again. On
        failure the cache is forgotten, so that the next read sees what the file holds.
        """
        texts: Dict[str, str] = {}
        for host in sorted(hosts):
            text = None if host == changed else self._texts.get(host)
            if text is None:
                text = _dumps(host) + ":" + _dumps(hosts[host])
            texts[host] = text
        data = ('{"hosts":{' + ",".join(texts.values()) + f'}},"v":{SCHEMA_VERSION}}}').encode()
        tmp: Optional[str] = None
        try:
            # mkstemp creates the file with mode 0600.
            fd, tmp = tempfile.mkstemp(prefix=self._tmp_prefix, suffix=_TMP_SUFFIX, dir=self._dir)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            tmp = None
            st = os.stat(self.path)
        except OSError as exc:
            self._reset(None, None, {})
            raise StoreError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        _fsync_dir(self._dir)
        self._key = (st.st_mtime_ns, st.st_size, st.st_ino)
        self._raw = data
        self._hosts = hosts
        self._texts = texts

    def _remove_stale_temp_files(self) -> None:
        """Remove temporary files left by writers that were killed mid-write.

        Writers write only while holding the lock file, so while this process holds it every
        temporary file of this store is stale. Best effort: skipped when the lock is busy or
        the directory cannot be written.
        """
        try:
            self._filelock.acquire(timeout=0)
        except (filelock.Timeout, OSError):
            return
        try:
            for name in os.listdir(self._dir):
                if name.startswith(self._tmp_prefix) and name.endswith(_TMP_SUFFIX):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self._dir, name))
        except OSError:
            pass
        finally:
            self._filelock.release()

    def close(self) -> None:
        """Drop the cache; the store must not be used afterwards."""
        with self._lock:
            self._closed = True
            self._reset(None, None, {})


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _err_pos(exc: ValueError) -> object:
    return getattr(exc, "pos", getattr(exc, "start", "?"))


def _fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable (best effort; not possible on every platform)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
