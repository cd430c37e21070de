"""requests-retryafter: a requests adapter that is never faster than a host allows, never slower
than it needs to be, and can explain every wait, however the host's ``Retry-After`` lies.

    import requests
    from requests_retryafter import RetryAfterAdapter

    session = requests.Session()
    session.mount("https://", RetryAfterAdapter())
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from ._install import install, uninstall
from .adapter import HostSummary, RetryAfterAdapter, RetryTrace, mount, trace_of
from .categories import judge
from .clock import Clock, FakeClock, SystemClock, TickingClock
from .decisions import Code, Decision, Event
from .errors import (
    ConfigurationError,
    HostHeld,
    RetryAfterError,
    RetryDeadlineExceeded,
    RetryLimitExceeded,
    StoreError,
)
from .parsing import parse_rate_limit, parse_retry_after
from .policy import Policy, RetryAfterWarning
from .state import (
    CATEGORIES,
    Category,
    HostState,
    LimitEstimate,
    Observation,
    Search,
    host_key,
)
from .stores import BaseStore, MemoryStore, StateStore, open_store

try:
    __version__ = version("requests-retryafter")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "CATEGORIES",
    "BaseStore",
    "Category",
    "Clock",
    "Code",
    "ConfigurationError",
    "Decision",
    "Event",
    "FakeClock",
    "HostHeld",
    "HostState",
    "HostSummary",
    "LimitEstimate",
    "MemoryStore",
    "Observation",
    "Policy",
    "RetryAfterAdapter",
    "RetryAfterError",
    "RetryAfterWarning",
    "RetryDeadlineExceeded",
    "RetryLimitExceeded",
    "RetryTrace",
    "Search",
    "StateStore",
    "StoreError",
    "SystemClock",
    "TickingClock",
    "__version__",
    "host_key",
    "install",
    "judge",
    "mount",
    "open_store",
    "parse_rate_limit",
    "parse_retry_after",
    "trace_of",
    "uninstall",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
