"""pytest fixtures for testing code that uses requests-retryafter, on virtual time.

Installed with the package, the plugin is loaded by pytest on its own (entry point
``pytest11``); load it by hand with ``-p requests_retryafter.pytest_plugin`` or
``pytest_plugins = ["requests_retryafter.pytest_plugin"]`` in a ``conftest.py``. A test of
your crawler against a host that limits it then takes three lines::

    from requests_retryafter.testing import FixedWindow

    def test_crawler_waits_for_the_limit(retryafter_session, rate_limited_server):
        server = rate_limited_server(FixedWindow(5, 60))
        crawl(retryafter_session, [f"{server.url}/items/{i}" for i in range(6)])
        assert server.rejected == 1

Fixtures (each new for every test):

- ``retryafter_clock``: a :class:`~requests_retryafter.FakeClock` at
  :data:`RETRYAFTER_START`; sleeps move it at once, and ``clock.sleeps`` lists them.
- ``retryafter_policy``: ``None`` (the default :class:`~requests_retryafter.Policy`);
  override it in your ``conftest.py`` to test other limits.
- ``retryafter_adapter``: a :class:`~requests_retryafter.RetryAfterAdapter` on that clock,
  with that policy, a fresh memory store, no ``REQUESTS_RETRYAFTER_*`` variables and a fixed
  jitter seed, closed after the test.
- ``retryafter_session``: a :class:`requests.Session` with that adapter mounted for
  ``http://`` and ``https://``, closed after the test.
- ``rate_limited_server``: a factory taking the arguments of
  :class:`~requests_retryafter.testing.RateLimitedServer`; each call starts a server on the
  same clock (unless given another) and returns it; all are stopped after the test.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional

import pytest
import requests

from .adapter import RetryAfterAdapter
from .clock import Clock, FakeClock
from .policy import Policy
from .testing import Limiter, RateLimitedServer

__all__ = [
    "RETRYAFTER_SEED",
    "RETRYAFTER_START",
    "ServerFactory",
    "rate_limited_server",
    "retryafter_adapter",
    "retryafter_clock",
    "retryafter_policy",
    "retryafter_session",
]

#: Where ``retryafter_clock`` starts: 2023-11-14 22:13:20 UTC, 20 s into a minute.
RETRYAFTER_START = 1_700_000_000.0
#: The jitter seed of ``retryafter_adapter``.
RETRYAFTER_SEED = 0


class ServerFactory:
    """What the ``rate_limited_server`` fixture returns: call it to start a server.

    Args:
        clock: the clock servers read unless a call gives another.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        #: Every server started, in order.
        self.servers: List[RateLimitedServer] = []

    def __call__(
        self, limiter: Optional[Limiter] = None, retry_after: str = "truthful", **options: Any
    ) -> RateLimitedServer:
        """Start a :class:`~requests_retryafter.testing.RateLimitedServer` with these
        arguments (``clock`` defaults to the fixture's) and return it, running."""
        options.setdefault("clock", self.clock)
        server = RateLimitedServer(limiter, retry_after, **options)
        server.start()
        self.servers.append(server)
        return server

    def stop(self) -> None:
        """Stop every server started (newest first)."""
        while self.servers:
            self.servers.pop().stop()


@pytest.fixture
def retryafter_clock() -> FakeClock:
    """A :class:`~requests_retryafter.FakeClock` at :data:`RETRYAFTER_START`."""
    return FakeClock(start=RETRYAFTER_START)


@pytest.fixture
def retryafter_policy() -> Optional[Policy]:
    """The policy of ``retryafter_adapter``: ``None`` for the defaults. Override it (a fixture
    of the same name in your ``conftest.py`` or test module) to test other limits."""
    return None


@pytest.fixture
def retryafter_adapter(
    retryafter_clock: FakeClock, retryafter_policy: Optional[Policy]
) -> Iterator[RetryAfterAdapter]:
    """A :class:`~requests_retryafter.RetryAfterAdapter` on ``retryafter_clock``, with a
    fresh memory store, ``environ={}`` and ``seed=RETRYAFTER_SEED``."""
    adapter = RetryAfterAdapter(
        retryafter_policy,
        store="memory://",
        clock=retryafter_clock,
        environ={},
        seed=RETRYAFTER_SEED,
    )
    try:
        yield adapter
    finally:
        adapter.close()


@pytest.fixture
def retryafter_session(retryafter_adapter: RetryAfterAdapter) -> Iterator[requests.Session]:
    """A :class:`requests.Session` with ``retryafter_adapter`` mounted for ``http://`` and
    ``https://``."""
    with requests.Session() as session:
        session.mount("http://", retryafter_adapter)
        session.mount("https://", retryafter_adapter)
        yield session


@pytest.fixture
def rate_limited_server(retryafter_clock: FakeClock) -> Iterator[ServerFactory]:
    """A :class:`ServerFactory`: ``rate_limited_server(FixedWindow(5, 60))`` starts a
    :class:`~requests_retryafter.testing.RateLimitedServer` on ``retryafter_clock``."""
    factory = ServerFactory(retryafter_clock)
    try:
        yield factory
    finally:
        factory.stop()
