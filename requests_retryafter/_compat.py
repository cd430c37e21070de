"""Private: the only code that knows about differences between urllib3 1.26 and 2.x, and
about the insides of the responses and exceptions requests and urllib3 hand us.

Feature detection, not version strings. Not part of the public API.
"""

from __future__ import annotations

import http.client
import logging
import socket
from typing import Any, Callable, Iterator, Optional, Tuple, Union

import requests
import urllib3
import urllib3.response
from urllib3.exceptions import (
    ConnectTimeoutError,
    NewConnectionError,
    ProtocolError,
)
from urllib3.util.retry import Retry
from urllib3.util.timeout import Timeout

from .errors import ConfigurationError

__all__ = [
    "OWN_STATUSES",
    "URLLIB3_MAJOR",
    "body_reader",
    "connection_retry",
    "failure_kind",
    "never_reached_server",
    "response_socket",
    "timeout_parts",
]

log = logging.getLogger(__name__)

URLLIB3_MAJOR = int(str(getattr(urllib3, "__version__", "2")).split(".")[0])

#: Statuses this library retries itself; urllib3 must never retry them underneath it.
OWN_STATUSES = frozenset({429, 503})


def connection_retry(max_retries: Union[int, Retry, None]) -> Retry:
    """The ``Retry`` handed to urllib3: never 429 or 503, never sleeping on ``Retry-After``.

    A user's own ``Retry`` keeps everything else: its backoff, its counts, its methods and
    the other statuses it names (413 included: this adapter never retries 413 itself). Only
    429 and 503 are taken out of its ``status_forcelist``, since the adapter retries those
    itself; a ``Retry`` that named them is logged once, at INFO.

    Raises:
        ConfigurationError: ``max_retries`` is neither a ``Retry`` nor an int >= 0.
    """
    if max_retries is None:
        return Retry(0, read=False, respect_retry_after_header=False)
    if isinstance(max_retries, Retry):
        forcelist = max_retries.status_forcelist
        changes: dict[str, Any] = {"respect_retry_after_header": False}
        if forcelist:
            kept = [s for s in forcelist if s not in OWN_STATUSES]
            if len(kept) != len(list(forcelist)):
                log.info(
                    "max_retries: statuses %s taken out of status_forcelist; "
                    "RetryAfterAdapter retries them itself",
                    ", ".join(str(s) for s in sorted(set(forcelist) & OWN_STATUSES)),
                )
                changes["status_forcelist"] = frozenset(kept)
        return max_retries.new(**changes)
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigurationError(f"max_retries must be a Retry or an int >= 0, not {max_retries!r}")
    return Retry(max_retries, read=False, respect_retry_after_header=False, backoff_factor=0)


def _reason(exc: BaseException) -> Optional[BaseException]:
    arg: Any = exc.args[0] if exc.args else None
    reason = getattr(arg, "reason", arg)  # requests wraps urllib3's MaxRetryError
    return reason if isinstance(reason, BaseException) else None


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, innermost last."""
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
    return


def _name_not_resolved(exc: BaseException) -> bool:
    # urllib3 2.x raises NameResolutionError from the gaierror; 1.26 a NewConnectionError
    # raised while handling it.
    return any(isinstance(e, socket.gaierror) for e in _causes(exc))


#: Errors of a connection that was reset or closed before any byte of the answer came.
_RESET = (
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
    http.client.RemoteDisconnected,
)


def failure_kind(exc: BaseException) -> Optional[str]:
    """What a requests exception from sending means, when it is plainly transient:

    - ``"connect"``: the request never reached the server (the connection was refused or
      could not be made in time);
    - ``"reset"``: the connection was reset or closed before any byte of the answer came.

    ``None`` for everything else (TLS errors, proxy errors, names that do not resolve, invalid
    URLs and headers, garbled answers, and a read timeout: the server may still be working on
    the request, and the caller's timeout is the caller's choice, as with a plain adapter):
    never retried, raised to the caller unchanged.
    """
    if isinstance(exc, (requests.exceptions.SSLError, requests.exceptions.ProxyError)):
        return None
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "connect"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return None
    if not isinstance(exc, requests.exceptions.ConnectionError):
        return None
    reason = _reason(exc)
    if reason is None:
        return None
    if isinstance(reason, (NewConnectionError, ConnectTimeoutError)):
        if isinstance(reason, NewConnectionError) and _name_not_resolved(reason):
            return None
        return "connect"
    if isinstance(reason, ProtocolError):
        inner = reason.args[1] if len(reason.args) > 1 else None
        if isinstance(inner, _RESET):
            return "reset"
        return None
    if isinstance(reason, _RESET):
        return "reset"
    return None


def never_reached_server(exc: BaseException) -> bool:
    """Whether a requests exception means the request never reached the server (the connection
    was refused or could not be made in time)."""
    return failure_kind(exc) == "connect"


def timeout_parts(timeout: Timeout) -> Tuple[Any, Any, Any]:
    """``(total, connect, read)`` as given to a urllib3 ``Timeout`` (a number, ``None`` or
    urllib3's default sentinel), without its properties, which raise before the connection
    starts when ``total`` is set."""
    return (
        getattr(timeout, "total", None),
        getattr(timeout, "_connect", None),
        getattr(timeout, "_read", None),
    )


def response_socket(raw: Any) -> Optional[socket.socket]:
    """The socket a urllib3 response is read from, if it can be found."""
    connection = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
    sock = getattr(connection, "sock", None)
    return sock if isinstance(sock, socket.socket) else None


def body_reader(raw: Any) -> Optional[Callable[[int], bytes]]:
    """A function reading at most ``n`` bytes of a urllib3 response's body as it came off the
    wire (never decompressed), each call waiting for the socket at most once: the
    ``http.client`` response's ``read1`` (or, when the body was wrapped, urllib3's ``read``
    through the wrapper). ``None`` if there is none."""
    fp = getattr(raw, "_fp", None)
    if isinstance(fp, http.client.HTTPResponse):
        return fp.read1
    if isinstance(raw, urllib3.response.HTTPResponse) and fp is not None:
        # Someone wrapped the body (CacheControl does): read through the wrapper, undecoded,
        # so that it sees the end and tidies up. Each read may wait for the socket more
        # than once, but never longer than the socket's timeout each time.
        def read(n: int) -> bytes:
            return bytes(raw.read(n, decode_content=False) or b"")

        return read
    return None
