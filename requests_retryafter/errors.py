"""The exception hierarchy.

Every error the adapter raises on purpose derives from :class:`RetryAfterError`, which is a
:class:`requests.exceptions.RetryError`, so an existing ``except requests.RequestException``
in a user's script still catches it.
"""

from __future__ import annotations

import datetime
from typing import Any, Optional

import requests

__all__ = [
    "ConfigurationError",
    "HostHeld",
    "RetryAfterError",
    "RetryDeadlineExceeded",
    "RetryLimitExceeded",
    "StoreError",
]


class RetryAfterError(requests.exceptions.RetryError):
    """Base class: the adapter gave up on a call.

    Attributes:
        response: the last response received, or ``None`` when none was.
        host: the host key (``host`` or ``host:port``) the call was for.
    """

    def __init__(
        self,
        message: str,
        *,
        host: str,
        response: Optional[requests.Response] = None,
        request: Any = None,
    ) -> None:
        super().__init__(message, response=response, request=request)
        self.host = host


class RetryLimitExceeded(RetryAfterError):
    """Every attempt the policy allows (``max_attempts``) was used and the host still refused."""


class RetryDeadlineExceeded(RetryAfterError):
    """The wait the host needs would pass the call's deadline; raised before sleeping.

    Attributes:
        delay: the wait, in seconds, that was needed.
        remaining: what was left of the deadline, in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        host: str,
        delay: float,
        remaining: float,
        response: Optional[requests.Response] = None,
        request: Any = None,
    ) -> None:
        super().__init__(message, host=host, response=response, request=request)
        self.delay = delay
        self.remaining = remaining


class HostHeld(RetryAfterError):
    """The host is held: no request goes on the wire to it until ``until``.

    Attributes:
        until: epoch seconds (wall clock) when the hold ends.
        reason: why the host is held.
    """

    def __init__(
        self,
        message: str,
        *,
        host: str,
        until: float,
        reason: str,
        response: Optional[requests.Response] = None,
        request: Any = None,
    ) -> None:
        super().__init__(message, host=host, response=response, request=request)
        self.until = until
        self.reason = reason


class ConfigurationError(ValueError):
    """A setting (argument or ``REQUESTS_RETRYAFTER_*`` variable) has a bad value."""


class StoreError(Exception):
    """A store could not be opened or used; raised ``from`` the backend's own error."""


def utc_iso(epoch: float) -> str:
    """``epoch`` as UTC ISO 8601 to the second (``2026-12-01T09:30:00Z``), for messages; the
    number itself where no calendar shows it."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return f"epoch {epoch!r}"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
