"""A store kept in one JSON file, shared safely by threads and processes on one machine.

Spec: ``json:///abs/path.json`` (three slashes: absolute) or ``json://rel/path.json`` (two
slashes: relative to the working directory when the store is opened).

The file holds ``{"format": "requests-retryafter", "hosts": {host: state}, "v": 1}``. Reads
are cheap: the parsed file is cached and read again only when its ``(mtime_ns, size, inode)``
changes. Every write takes a lock file (``PATH + ".lock"``), reads the file again, changes one
host only and replaces the file atomically (a temporary file in the same directory with the
existing file's permission bits and group, or mode 0600 for a new file, ``fsync``,
``os.replace``), so concurrent writers never lose each other's updates and a reader never sees
half a file. A path that is a symbolic link is resolved: the link's target is written.

Only files that carry this library's format are ever changed. A path that is not a regular
file, or a file that is not recognisably a store of this library (another program's JSON, a
text file), is refused with :class:`~requests_retryafter.StoreError` and left as it is; only a
damaged file whose beginning shows this library's format is moved aside.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from ..errors import StoreError
from ..state import SCHEMA_VERSION, HostState, UnsupportedSchema
from . import _files
from ._files import path_from_spec as _path_from_spec
from .base import BaseStore, Updater, salvaged

__all__ = ["FORMAT", "JsonFileStore"]

logger = logging.getLogger(__name__)

#: The value of the top-level ``"format"`` key that marks a file as this library's store.
FORMAT = "requests-retryafter"
#: Seconds a call waits for another process's lock before giving up with StoreError.
DEFAULT_LOCK_TIMEOUT = 2.0
_TMP_SUFFIX = ".tmp"
_LABEL = "JSON store"
# The beginning of a file written by this library: the format key first (keys are sorted),
# or, for files written before the key existed, the exact compact layout they had.
_MARKER = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"requests-retryafter"\s*[,}]')
_OLD_MARKER = re.compile(rb'\A\{"hosts":\{(?:"[^"\\]*":\{"(?:blocked_[a-z]+|category)":|\},"v":)')

_StatKey = Tuple[int, int, int]


class _Damaged(Exception):
    """A file of this library's format cannot be used as it is; the message says why."""


def _decode_state(host: str, data: Any, where: str) -> Optional[HostState]:
    """Build a HostState from stored JSON data; log and return ``None`` when it is unusable
    (an entry of another schema version raises :class:`UnsupportedSchema`)."""
    try:
        return salvaged(host, where, data, lambda dropped: HostState.from_dict(data, dropped))
    except UnsupportedSchema:
        raise
    except (ValueError, RecursionError) as exc:
        logger.warning("dropping the stored state of host %s in %s: %s", host, where, exc)
        return None


class JsonFileStore(BaseStore):
    """Host state in one JSON file; safe for many threads and processes on one machine.

    Args:
        path: the file (created on the first write; its directory is created now). A symbolic
            link is followed: its target is the store.
        lock_timeout: seconds a call waits for another process holding the lock file.
        read_only: never create, lock, move or write anything; the file must exist.

    Raises:
        StoreError: the path is not a regular file, the file is not a store of this library
            (or was written by a newer version of it), it cannot be read, or (read-only) it
            does not exist. Nothing is changed.

    A damaged file of this library's format (truncated, say) is moved aside to
    ``PATH.corrupt-<UTC timestamp>``, a warning is logged and the store starts fresh. A host
    whose entry is malformed is dropped with a warning; the rest are kept. A host entry
    written by a newer version of this library is treated as absent and never overwritten.
    """

    scheme = "json"
    shared = True

    def __init__(
        self,
        path: str,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        read_only: bool = False,
    ) -> None:
        super().__init__()
        self.path = _files.resolve(path)
        self.lock_path = self.path + ".lock"
        self.read_only = read_only
        self._dir = os.path.dirname(self.path)
        self._tmp_prefix = "." + os.path.basename(self.path) + "."
        self._lock_timeout = lock_timeout
        self._filelock = _files.LockFile(_LABEL, self.path, self.lock_path)
        self._closed = False
        # The cache: the file's stat key and bytes, its host entries and the parsed states.
        self._key: Optional[_StatKey] = None
        self._raw: Optional[bytes] = None
        self._hosts: Dict[str, Dict[str, Any]] = {}
        self._extra: Dict[str, Any] = {}
        self._states: Dict[str, HostState] = {}
        self._newer: Set[str] = set()
        self._told_newer: Set[str] = set()
        # The JSON text ('"host":{...}') of each entry this process last wrote, so that a
        # write re-encodes only the host it changed (valid until the file is read again).
        self._texts: Dict[str, str] = {}
        if read_only:
            _files.require_existing(_LABEL, self.path)
        else:
            _files.check_regular(_LABEL, self.path)
            _files.check_regular(_LABEL, self.lock_path)
            _files.ensure_parent(_LABEL, self.path)
            self._remove_stale_temp_files()
        with self._lock:
            self._refresh()

    @classmethod
    def from_url(cls, url: str, *, read_only: bool = False) -> JsonFileStore:
        """Build from a ``json:///abs/path.json`` or ``json://rel/path.json`` spec."""
        return cls(_path_from_spec(url, cls.scheme), read_only=read_only)

    def __repr__(self) -> str:
        return f"JsonFileStore({self.path!r})"

    # -- reading ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{_LABEL} {self.path}: closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreError(f"{_LABEL} {self.path}: opened read-only; not written")

    def _refresh(self) -> None:
        """Bring the cache up to date with the file if the file changed (lock held: RLock)."""
        st = _files.check_regular(_LABEL, self.path)
        if st is None:
            self._reset(None, None, {}, {})
            return
        if (st.st_mtime_ns, st.st_size, st.st_ino) != self._key:
            self._reload(locked=False)

    def _read(self) -> Tuple[Optional[_StatKey], Optional[bytes]]:
        """Read the file and the stat key of what was read; ``(None, None)`` if it is absent."""
        st, data = _files.read_regular(_LABEL, self.path)
        if st is None:
            return None, None
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
            hosts, extra = self._decode(data)
        except _Damaged as exc:
            if self.read_only:
                raise StoreError(
                    f"{_LABEL} {self.path}: is damaged ({exc}); opened read-only, so it was "
                    "left as it is (open it for writing to move it aside)"
                ) from exc
            if not locked:
                self._filelock.acquire(self._lock_timeout)
                try:
                    self._reload(locked=True)
                finally:
                    self._filelock.release()
                return
            _files.move_aside(_LABEL, self.path, str(exc), log=logger)
            self._reset(None, None, {}, {})
            return
        self._reset(key, data, hosts, extra)

    def _reset(
        self,
        key: Optional[_StatKey],
        raw: Optional[bytes],
        hosts: Dict[str, Dict[str, Any]],
        extra: Dict[str, Any],
    ) -> None:
        self._key, self._raw, self._hosts, self._states = key, raw, hosts, {}
        self._extra = extra
        self._newer = set()
        self._texts = {}

    def _refuse(self, why: str) -> StoreError:
        return StoreError(
            f"{_LABEL} {self.path}: not a requests-retryafter store ({why}); refusing to use "
            "it (nothing was changed)"
        )

    def _decode(self, data: Optional[bytes]) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, Any]]:
        """Return the host entries and the other top-level keys of the file's bytes.

        Raises:
            _Damaged: the file carries this library's format and is damaged.
            StoreError: the file is not this library's, or a newer version of it wrote it.
        """
        if not data:  # absent, or empty (nothing to lose): a fresh store
            return {}, {}
        ours = bool(_MARKER.match(data) or _OLD_MARKER.match(data))
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
            why = (
                "nested too deeply"
                if isinstance(exc, RecursionError)
                else f"not JSON: {type(exc).__name__} at byte {_err_pos(exc)}"
            )
            if ours:
                raise _Damaged(why) from exc
            raise self._refuse(why) from exc
        if not isinstance(doc, dict):
            raise self._refuse("not a JSON object")
        if "format" not in doc:  # written before the marker existed: exactly that layout
            hosts = doc.get("hosts")
            if not (
                set(doc) == {"v", "hosts"}
                and doc["v"] == SCHEMA_VERSION
                and isinstance(hosts, dict)
                and all(isinstance(e, dict) and "v" in e for e in hosts.values())
            ):
                raise self._refuse(f'no "format": "{FORMAT}" key')
            return dict(hosts), {}
        if doc["format"] != FORMAT:
            raise self._refuse(f'its "format" is not "{FORMAT}"')
        version = doc.get("v")
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            raise StoreError(
                f"{_LABEL} {self.path}: written by a newer version of requests-retryafter "
                f"(format version {version}, this one reads {SCHEMA_VERSION}); left as it is"
            )
        if version != SCHEMA_VERSION:
            raise _Damaged(f"format version {str(version)[:20]!r}, expected {SCHEMA_VERSION}")
        hosts = doc.get("hosts")
        if not isinstance(hosts, dict):
            raise _Damaged("no 'hosts' object")
        good: Dict[str, Dict[str, Any]] = {}
        for host, entry in hosts.items():
            if isinstance(entry, dict):
                good[host] = entry
            else:
                logger.warning(
                    "dropping the stored state of host %s in %s: not an object", host, self.path
                )
        extra = {k: v for k, v in doc.items() if k not in ("format", "hosts", "v")}
        return good, extra

    def _state(self, host: str) -> Optional[HostState]:
        """The parsed state of ``host`` from the cache (lock held: RLock). ``None`` also for
        an entry a newer version wrote (see :meth:`_is_newer`)."""
        state = self._states.get(host)
        if state is not None:
            return state
        entry = self._hosts.get(host)
        if entry is None or host in self._newer:
            return None
        try:
            state = _decode_state(host, entry, self.path)
        except UnsupportedSchema as exc:
            self._newer.add(host)
            self._note_newer(self._told_newer, host, self.path, exc)
            return None
        if state is None:
            del self._hosts[host]  # dropped: not returned, and not written back
            self._texts.pop(host, None)
        else:
            self._states[host] = state
        return state

    def _is_newer(self, host: str) -> bool:
        """Whether the entry of ``host`` was written by another version (left untouched)."""
        self._state(host)
        return host in self._newer

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
        sharing the file; return the new state. ``fn`` runs under the lock file.

        An entry written by a newer version of this library is left as it is: ``fn`` gets
        ``None`` and its result is returned without being written.
        """
        with self._lock:
            self._check_writable()
            self._filelock.acquire(self._lock_timeout)
            try:
                self._reload(locked=True)
                if self._is_newer(host):
                    return fn(None)
                current = self._state(host)
                new = fn(current)
                if new is current:
                    return new  # nothing changed: nothing to write
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
        """Forget ``host``; the file is rewritten only when the host was stored (and an
        entry written by a newer version is left as it is)."""
        with self._lock:
            self._check_writable()
            self._filelock.acquire(self._lock_timeout)
            try:
                self._reload(locked=True)
                if host in self._hosts and not self._is_newer(host):
                    hosts = dict(self._hosts)
                    del hosts[host]
                    self._write(hosts, changed=host)
                    self._states.pop(host, None)
            finally:
                self._filelock.release()

    def _encode(
        self, hosts: Dict[str, Dict[str, Any]], changed: str
    ) -> Tuple[bytes, Dict[str, str]]:
        texts: Dict[str, str] = {}
        for host in sorted(hosts):
            text = None if host == changed else self._texts.get(host)
            if text is None:
                text = _dumps(host) + ":" + _dumps(hosts[host])
            texts[host] = text
        parts = {k: _dumps(v) for k, v in self._extra.items()}
        parts["format"] = _dumps(FORMAT)
        parts["hosts"] = "{" + ",".join(texts.values()) + "}"
        parts["v"] = str(SCHEMA_VERSION)
        data = "{" + ",".join(_dumps(k) + ":" + parts[k] for k in sorted(parts)) + "}"
        return data.encode(), texts

    def _write(self, hosts: Dict[str, Dict[str, Any]], changed: str) -> None:
        """Replace the file with ``hosts`` (both locks held) and make them the cache.

        The text is what ``json.dumps(doc, separators=(",", ":"), sort_keys=True)`` gives, but
        only ``changed`` and hosts not encoded since the file was read are encoded again. The
        new file gets the old one's permission bits and group. On failure the cache is
        forgotten, so that the next read sees what the file holds.
        """
        data, texts = self._encode(hosts, changed)
        old = _files.check_regular(_LABEL, self.path)
        tmp: Optional[str] = None
        try:
            # mkstemp creates the file with mode 0600: right for a new store.
            fd, tmp = tempfile.mkstemp(prefix=self._tmp_prefix, suffix=_TMP_SUFFIX, dir=self._dir)
            with os.fdopen(fd, "wb") as f:
                if old is not None:
                    _files.match_owner(f.fileno(), old, stat.S_IMODE(old.st_mode) & 0o777)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            tmp = None
            st = os.stat(self.path)
        except OSError as exc:
            self._reset(None, None, {}, {})
            raise _files.failure(_LABEL, self.path, "cannot write", exc) from exc
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
            self._filelock.acquire(0)
        except StoreError:
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
            self._reset(None, None, {}, {})


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
