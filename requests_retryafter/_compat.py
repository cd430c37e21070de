"""Private: the only code that knows about differences between urllib3 1.26 and 2.x.

Feature detection, not version strings. Not part of the public API.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import requests
import urllib3
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.retry import Retry

from .errors import ConfigurationError

__all__ = ["URLLIB3_MAJOR", "connection_retry", "never_reached_server"]

URLLIB3_MAJOR = int(str(getattr(urllib3, "__version__", "2")).split(".")[0])

#: Statuses this library retries itself; urllib3 must never retry them underneath it.
OWN_STATUSES = frozenset({413, 429, 503})


def connection_retry(max_retries: Union[int, Retry, None]) -> Retry:
    """The ``Retry`` handed to urllib3: connection-level only, never statuses, never sleeping on
    ``Retry-After``.

    Raises:
        ConfigurationError: ``max_retries`` asks urllib3 to retry 429 or 503 itself.
    """
    if max_retries is None:
        return Retry(0, read=False, respect_retry_after_header=False)
    if isinstance(max_retries, Retry):
        forced = set(max_retries.status_forcelist or ()) & OWN_STATUSES
        if forced:
            raise ConfigurationError(
                "max_retries retries status "
                + ", ".join(str(s) for s in sorted(forced))
                + "; RetryAfterAdapter handles 429/503 itself, so urllib3 must not"
            )
        return max_retries.new(respect_retry_after_header=False, backoff_factor=0)
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigurationError(f"max_retries must be a Retry or an int >= 0, not {max_retries!r}")
    return Retry(max_retries, read=False, respect_retry_after_header=False, backoff_factor=0)


def _reason(exc: BaseException) -> Optional[BaseException]:
    arg: Any = exc.args[0] if exc.args else None
    reason = getattr(arg, "reason", arg)  # requests wraps urllib3's MaxRetryError
    return reason if isinstance(reason, BaseException) else None


def never_reached_server(exc: BaseException) -> bool:
    """Whether a requests exception means the request never reached the server (the connection
    was refused, could not be made in time, or the name did not resolve)."""
    if isinstance(exc, (requests.exceptions.SSLError, requests.exceptions.ProxyError)):
        return False
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if isinstance(exc, requests.exceptions.ConnectionError):
        return isinstance(_reason(exc), (NewConnectionError, ConnectTimeoutError))
    return False
