"""A crawl of a local portal as a scheduler makes it (importable by the tests)."""

from __future__ import annotations

import requests

from requests_retryafter import RetryAfterAdapter, RetryLimitExceeded
from requests_retryafter.testing import RateLimitedServer


def crawl(portal: RateLimitedServer, adapter: RetryAfterAdapter, calls: int) -> int:
    """Fetch ``calls`` URLs; a call whose attempts ran out is made again, as a scheduler
    would (on first contact with no header, six attempts may not reach a window's end).
    Returns how many calls gave up so."""
    gave_up = 0
    with requests.Session() as session:
        session.mount("http://", adapter)
        for i in range(calls):
            for _ in range(5):
                try:
                    response = session.get(f"{portal.url}/records/{i}", timeout=5)
                except RetryLimitExceeded:
                    gave_up += 1
                    continue
                assert response.status_code == 200
                break
            else:
                raise AssertionError(f"call {i} failed five times")
    return gave_up
