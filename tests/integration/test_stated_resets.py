"""A stated reset is whole seconds, rounded up: the adapter must not lose most of a short
window waiting for it (issue #10, item 5)."""

from __future__ import annotations

import pytest
import requests

from requests_retryafter import RetryAfterAdapter
from requests_retryafter.clock import FakeClock
from requests_retryafter.testing import RATE_HEADER_STYLES, FixedWindow, RateLimitedServer

START = 1_700_000_000.0


@pytest.mark.parametrize("style", RATE_HEADER_STYLES)
@pytest.mark.parametrize("offset", [0.0, 0.3, 0.7])
def test_a_one_second_window_stated_on_every_answer_is_used_at_its_rate(style, offset):
    clock = FakeClock(start=START + offset)
    with RateLimitedServer(
        FixedWindow(5, 1), "truthful", clock=clock, rate_headers=style
    ) as server:
        adapter = RetryAfterAdapter(clock=clock, store="memory://", environ={}, seed=0)
        with requests.Session() as session:
            session.mount("http://", adapter)
            begin = clock.time()
            for i in range(100):
                assert session.get(f"{server.url}/r/{i}", timeout=5).ok
            took = clock.time() - begin
    # 5 a second allows 100 in 19-20 s; waiting for each rounded-up reset took about 36 s.
    assert took <= 19.0 / 0.85
    assert server.rejected <= 2
