"""Helpers the file-backed stores share: safe paths, refusals, lock files, error messages.

Private: the names here may change without notice.

Every file a store opens is first checked with ``stat`` (a FIFO, a device, a directory or a
socket is refused before anything opens it, so nothing blocks and nothing is replaced), and
every error names the store's file and the operating system's reason, for instance
``JSON store /x/hosts.json: cannot write: Permission denied (EACCES)``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import time
from typing import Any, Optional, Sequence, Tuple

from ..errors import ConfigurationError, StoreError

try:  # POSIX
    import fcntl as _fcntl_module

    _fcntl: Any = _fcntl_module
except ImportError:  # pragma: no cover - Windows
    _fcntl = None

__all__: Sequence[str] = ()

logger = logging.getLogger(__name__)

#: Seconds between attempts to take a contended lock file.
POLL_INTERVAL = 0.005
#: Mode of files a store creates when there is no store file to copy the mode from.
NEW_FILE_MODE = 0o600

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)


def os_reason(exc: BaseException) -> str:
    """``strerror (ENAME)`` for an :class:`OSError` (``Permission denied (EACCES)``), else the
    exception's own text."""
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, f"errno {exc.errno}")
        return f"{exc.strerror or os.strerror(exc.errno)} ({name})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure(label: str, path: str, action: str, exc: BaseException) -> StoreError:
    """A StoreError saying that ``action`` on the store at ``path`` failed, and why."""
    return StoreError(f"{label} {path}: {action}: {os_reason(exc)}")


def path_from_spec(spec: str, scheme: str) -> str:
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


def resolve(path: str) -> str:
    """The absolute path of ``path`` with every symbolic link resolved, so that a store
    reached through a link writes to (and locks) the link's target and the link stays."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"  # pragma: no cover - other platforms' special files


def not_regular(label: str, path: str, mode: int) -> StoreError:
    """The StoreError for a store path that exists but is not a regular file."""
    return StoreError(
        f"{label} {path}: is {_kind(mode)}, not a regular file; refusing to use it "
        "(nothing was changed)"
    )


def check_regular(label: str, path: str) -> Optional[os.stat_result]:
    """``stat`` ``path`` without opening it: its stat when it is a regular file, ``None`` when
    it does not exist.

    Raises:
        StoreError: it exists and is not a regular file, or cannot be examined.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise failure(label, path, "cannot examine", exc) from exc
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(label, path, st.st_mode)
    return st


def read_regular(label: str, path: str) -> Tuple[Optional[os.stat_result], Optional[bytes]]:
    """Read a regular file whole: ``(stat, bytes)``, or ``(None, None)`` when it is absent.

    The file is opened with ``O_NONBLOCK`` and checked with ``fstat`` before reading, so that
    a FIFO or a device put there since an earlier check is refused, never read (a FIFO would
    block forever).
    """
    try:
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC | _O_NOCTTY)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise failure(label, path, "cannot read", exc) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(label, path, st.st_mode)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise failure(label, path, "cannot read", exc) from exc
    finally:
        os.close(fd)
    return st, b"".join(chunks)


def require_existing(label: str, path: str) -> os.stat_result:
    """For a read-only store: the stat of ``path``, which must be an existing regular file."""
    st = check_regular(label, path)
    if st is None:
        raise StoreError(f"{label} {path}: does not exist (opened read-only: nothing created)")
    return st


def ensure_parent(label: str, path: str) -> None:
    """Create the directory that will hold ``path``; raises StoreError when it cannot."""
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise failure(label, path, f"cannot create directory {parent}", exc) from exc


def move_aside(
    label: str, path: str, reason: str, companions: Sequence[str] = (), log: logging.Logger = logger
) -> Optional[str]:
    """Rename a damaged store (one that carries this library's format) to a timestamped
    backup, log a WARNING saying why, and return the backup's name (``None`` when there was
    nothing to move).

    ``path`` and each ``path + suffix`` (for the suffixes in ``companions``) that exists is
    renamed to ``path + ".corrupt-<UTC timestamp>"`` (plus the same suffix). The caller holds
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
            raise failure(label, path + suffix, "cannot move the damaged file aside", exc) from exc
    log.warning(
        "%s %s is damaged (%s); moved it to %s and starting fresh", label, path, reason, backup
    )
    return backup


def companion_mode(st: Optional[os.stat_result]) -> int:
    """The mode for a file a store creates beside its store file (a lock file): the store
    file's read and write bits, so that whoever may write the store may take its lock."""
    if st is None:
        return NEW_FILE_MODE
    return stat.S_IMODE(st.st_mode) & 0o666


def match_owner(fd: int, st: Optional[os.stat_result], mode: int) -> None:
    """Give the file open as ``fd`` the permission bits ``mode`` and the group of ``st`` (the
    store file), as far as this process may. Best effort: a failure leaves it as it is."""
    try:
        mine = os.fstat(fd)
        if mine.st_uid != os.geteuid() and os.geteuid() != 0:
            return  # pragma: no cover - only the owner (or root) may change it
        if stat.S_IMODE(mine.st_mode) != mode:
            os.fchmod(fd, mode)
        if st is not None and mine.st_gid != st.st_gid:
            uid = st.st_uid if os.geteuid() == 0 else -1
            os.fchown(fd, uid, st.st_gid)
    except (OSError, AttributeError):  # pragma: no cover - not permitted, or not POSIX
        pass


class LockFile:
    """An exclusive lock between processes on ``path`` (``flock``), created with the store
    file's permission bits and group, never following a symbolic link and refusing a lock
    path that is not a regular file. Not re-entrant; callers serialise their threads.
    """

    def __init__(self, label: str, store_path: str, path: str) -> None:
        self.label = label
        self.store_path = store_path
        self.path = path
        self._fd: Optional[int] = None
        self._fallback: Any = None

    def _open(self) -> int:
        st_store = check_regular(self.label, self.store_path)
        mode = companion_mode(st_store)
        flags = _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC | _O_NOCTTY
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | flags, mode)
        except FileExistsError:
            check_regular(self.label, self.path)
            try:
                fd = os.open(self.path, os.O_RDWR | flags)
            except PermissionError:  # readable but not writable: flock works on it too
                fd = os.open(self.path, os.O_RDONLY | flags)
        else:
            match_owner(fd, st_store, mode)
            return fd
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise not_regular(self.label, self.path, st.st_mode)
            if stat.S_IMODE(st.st_mode) & mode != mode:  # e.g. made 0644 by an older version
                match_owner(fd, st_store, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def acquire(self, timeout: float) -> None:
        """Take the lock, waiting at most ``timeout`` seconds.

        Raises:
            StoreError: another process holds it for longer (the message says "locked by
                another process"), or the lock file cannot be created or opened.
        """
        if _fcntl is None:  # pragma: no cover - Windows
            self._acquire_fallback(timeout)
            return
        try:
            fd = self._open()
        except OSError as exc:
            raise failure(
                self.label, self.store_path, f"cannot open lock file {self.path}", exc
            ) from exc
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            while True:
                try:
                    _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self.busy(timeout) from None
                    time.sleep(POLL_INTERVAL)
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError):
                raise failure(self.label, self.store_path, f"cannot lock {self.path}", exc) from exc
            raise
        self._fd = fd

    def busy(self, timeout: float) -> StoreError:
        """The StoreError for a lock another process holds."""
        return StoreError(
            f"{self.label} {self.store_path}: locked by another process (lock file {self.path}) "
            f"for more than {timeout:g} s"
        )

    def _acquire_fallback(self, timeout: float) -> None:  # pragma: no cover - Windows
        import filelock

        if self._fallback is None:
            self._fallback = filelock.FileLock(self.path)
        try:
            self._fallback.acquire(timeout=timeout, poll_interval=POLL_INTERVAL)
        except filelock.Timeout:
            raise self.busy(timeout) from None
        except OSError as exc:
            raise failure(self.label, self.store_path, f"cannot lock {self.path}", exc) from exc

    def release(self) -> None:
        """Release the lock (nothing happens when it is not held)."""
        if self._fallback is not None:  # pragma: no cover - Windows
            self._fallback.release()
            return
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                _fcntl.flock(fd, _fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None


def read_head(label: str, path: str, size: int) -> bytes:
    """The first ``size`` bytes of the regular file ``path`` (opened without blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC | _O_NOCTTY)
    except OSError as exc:
        raise failure(label, path, "cannot read", exc) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(label, path, st.st_mode)
        return os.read(fd, size)
    except OSError as exc:
        raise failure(label, path, "cannot read", exc) from exc
    finally:
        os.close(fd)
