"""The transport's edges, for the adapter: which requests may be sent twice, a timeout capped
by the call's deadline, and releasing a rejection's connection before a retry."""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, List, Optional, Tuple, Union

import requests
from urllib3.util.timeout import Timeout

from ._compat import body_reader, response_socket, timeout_parts

__all__ = [
    "DRAIN_LIMIT",
    "DRAIN_SECONDS",
    "IDEMPOTENT_METHODS",
    "KEYED_METHODS",
    "MAX_SOCKET_TIMEOUT",
    "TimeoutArg",
    "body_position",
    "cap_timeout",
    "drain",
    "read_timeout",
    "release",
    "replayable",
]

#: Methods RFC 9110 makes idempotent: safe to send again.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
#: Methods replayed only with an ``Idempotency-Key`` header.
KEYED_METHODS = frozenset({"POST", "PATCH"})
#: The longest socket timeout handed on (larger ones overflow the C timeval).
MAX_SOCKET_TIMEOUT = 1e8

TimeoutArg = Union[None, float, Tuple[Optional[float], Optional[float]], Any]


#: Bodies that can be sent again as they are.
_BYTES_LIKE = (bytes, str, bytearray, memoryview)


def replayable(request: requests.PreparedRequest) -> Tuple[bool, str]:
    """Whether ``request`` may be sent again, and if not, why: its method is idempotent (or
    keyed with an ``Idempotency-Key``) and its body can be sent again."""
    method = (request.method or "GET").upper()
    if method in KEYED_METHODS:
        if "Idempotency-Key" not in request.headers:
            return False, f"{method} without an Idempotency-Key header"
    elif method not in IDEMPOTENT_METHODS:
        return False, f"{method} is not idempotent"
    body = request.body
    if body is None or isinstance(body, _BYTES_LIKE):
        return True, ""
    if body_position(request) is None:
        return False, "its body is a stream that cannot be sent again"
    return True, ""


def body_position(request: requests.PreparedRequest) -> Optional[int]:
    """Where a stream body starts (to rewind it for a retry); ``None`` for a body that is
    sent again as it is, or a stream that cannot be rewound."""
    body = request.body
    if body is None or isinstance(body, _BYTES_LIKE):
        return None
    seek, tell = getattr(body, "seek", None), getattr(body, "tell", None)
    if seek is None or tell is None:
        return None
    try:
        if hasattr(body, "seekable") and not body.seekable():
            return None
        position = tell()
        return position if isinstance(position, int) else None
    except (OSError, ValueError):
        return None


def _is_seconds(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and not (isinstance(value, float) and math.isnan(value))
    )


def cap_timeout(timeout: TimeoutArg, remaining: float) -> TimeoutArg:
    """``timeout`` (any form requests takes) with each part capped by ``remaining``.

    Parts that are not numbers are left as they are, for the transport to judge as it would
    without this adapter.
    """
    # (Comparisons, not min() and max(): this runs before every send.)
    if remaining < 0.001:
        remaining = 0.001
    elif remaining > MAX_SOCKET_TIMEOUT:
        remaining = MAX_SOCKET_TIMEOUT
    if timeout is None:
        return remaining
    kind = type(timeout)
    if (kind is float or kind is int) and timeout == timeout:  # the usual form (not NaN)
        return remaining if remaining < timeout else float(timeout)  # type: ignore[arg-type,operator]
    # Every other form: a (connect, read) pair, a urllib3 Timeout, a number of a subclass.

    def cap(value: Any) -> Any:
        if value is None:
            return remaining
        return min(value, remaining) if _is_seconds(value) else value

    if isinstance(timeout, tuple) and len(timeout) == 2:
        return (cap(timeout[0]), cap(timeout[1]))
    if _is_seconds(timeout):
        return min(float(timeout), remaining)  # type: ignore[arg-type]
    if isinstance(timeout, Timeout):
        total, connect, read = timeout_parts(timeout)
        # urllib3's default sentinel means "no timeout" here: the deadline caps it too.
        return Timeout(
            total=cap(total) if _is_seconds(total) else None,
            connect=cap(connect) if _is_seconds(connect) or connect is None else remaining,
            read=cap(read) if _is_seconds(read) or read is None else remaining,
        )
    return timeout


def read_timeout(timeout: TimeoutArg) -> Optional[float]:
    """The read part of a timeout as :func:`cap_timeout` returns it (``None``: unknown)."""
    if isinstance(timeout, tuple) and len(timeout) == 2:
        timeout = timeout[1]
    elif isinstance(timeout, Timeout):
        total, _, read = timeout_parts(timeout)
        parts = [float(p) for p in (total, read) if _is_seconds(p)]
        return min(parts) if parts else None
    return float(timeout) if _is_seconds(timeout) else None  # type: ignore[arg-type]


#: A refused response's body is read (so the connection can be reused) up to this many bytes
#: as they come off the wire (never decompressed) ...
DRAIN_LIMIT = 1 << 20
#: ... and for at most this many seconds (and no longer than the call's deadline and read
#: timeout allow); beyond either, the connection is closed instead.
DRAIN_SECONDS = 1.0
_DRAIN_CHUNK = 64 * 1024


def _read_off(response: requests.Response, seconds: float) -> Optional[bytes]:
    """Read what is left of ``response``'s body off the wire, undecoded, within ``seconds``
    of real time and :data:`DRAIN_LIMIT` bytes. ``None`` when it did not end within both."""
    raw = response.raw
    read = body_reader(raw)
    if read is None:
        return None
    sock = response_socket(raw)
    # Real time: the bound is on the socket, whatever clock the adapter was given.
    ends = time.monotonic() + seconds
    chunks: List[bytes] = []
    size = 0
    while True:
        left = ends - time.monotonic()
        if left <= 0:
            return None
        if sock is not None:
            sock.settimeout(left)
        chunk = read(min(_DRAIN_CHUNK, DRAIN_LIMIT + 1 - size))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > DRAIN_LIMIT:
            return None
        chunks.append(chunk)


def drain(response: requests.Response, left: float, timeout: TimeoutArg) -> None:
    """Release a rejection before retrying or raising: its body is read for at most
    :data:`DRAIN_SECONDS`, the read timeout and ``left`` (what is left of the call's time)."""
    seconds = min(DRAIN_SECONDS, left)
    read = read_timeout(timeout)
    if read is not None:
        seconds = min(seconds, read)
    release(response, seconds)


def release(response: requests.Response, seconds: float) -> None:
    """Release a response that will not be returned.

    A body that ends within :data:`DRAIN_LIMIT` bytes and ``seconds`` is read (undecoded), so
    that the connection goes back to the pool; it stays readable as ``response.content``
    unless it was compressed. Any other body is not read on: the connection is closed.
    """
    if getattr(response, "_content_consumed", False):
        response.close()
        return
    body: Optional[bytes] = None
    if seconds > 0:
        with contextlib.suppress(Exception):  # a failing body only means: close it
            body = _read_off(response, seconds)
    raw = response.raw
    if body is not None:
        with contextlib.suppress(Exception):
            raw._fp.close()  # type: ignore[union-attr] # the http.client response, at its end: the socket stays open
            raw.release_conn()
        encoded = response.headers.get("Content-Encoding", "identity").strip().lower()
        response._content = body if encoded in ("", "identity") else b""
    else:
        with contextlib.suppress(Exception):
            raw.close()  # closes the connection: it is not reused
        with contextlib.suppress(Exception):
            raw.release_conn()
        response._content = b""
    response._content_consumed = True  # type: ignore[attr-defined]
