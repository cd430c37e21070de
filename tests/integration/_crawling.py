"""A crawl of a local portal as a scheduler makes it (importable by the tests)."""

from __future__ import annotations

import requests

from requests_retryafter import FakeClock, RetryAfterAdapter, RetryLimitExceeded
from requests_retryafter.testing import RateLimitedServer


def crawl(portal: RateLimitedServer, adapter: RetryAfterAdapter, calls: int) -> None:
    """Fetch ``calls`` URLs; a call whose attempts ran out is made again, as a scheduler
    would (on first contact with no header, six attempts may not reach a window's end)."""
    with requests.Session() as session:
        session.mount("http://", adapter)
        for i in range(calls):
            for _ in range(5):
                try:
                    response = session.get(f"{portal.url}/records/{i}", timeout=5)
                except RetryLimitExceeded:
                    continue
                assert response.status_code == 200
                break
            else:
                raise AssertionError(f"call {i} failed five times")


class Ticking(FakeClock):
    """A FakeClock that moves on a microsecond each time its monotonic time is read, as a
    real clock does between a request's reservation and its send (a FakeClock stands still
    then)."""

    def monotonic(self) -> float:
        self.advance(1e-6)
        return super().monotonic()
