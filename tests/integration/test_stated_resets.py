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


@pytest.mark.parametrize("limiter", ["first_request", "moving"])
@pytest.mark.parametrize("offset", [0.0, 0.3, 0.7])
def test_windows_opened_by_a_request_with_an_epoch_reset_rounded_up(limiter, offset):
    # Flask-Limiter's defaults: windows opened at a request (a fixed window at its first
    # hit, a moving window at its oldest request), X-RateLimit-Reset an epoch second rounded
    # up, and a request counted a little after it was sent: every window but the first
    # opens off the whole second, and waiting for each stated reset took about 38 s.
    from scenarios import FirstRequestWindow  # benchmarks/scenarios.py, loaded by conftest.py

    from requests_retryafter.testing import SlidingWindow

    window = FirstRequestWindow(5, 1) if limiter == "first_request" else SlidingWindow(5, 1)
    clock = FakeClock(start=START + offset)
    with RateLimitedServer(
        window, "truthful", clock=clock, rate_headers="x-ratelimit", latency=0.002
    ) as server:
        adapter = RetryAfterAdapter(clock=clock, store="memory://", environ={}, seed=0)
        with requests.Session() as session:
            session.mount("http://", adapter)
            begin = clock.time()
            for i in range(100):
                assert session.get(f"{server.url}/r/{i}", timeout=5).ok
            took = clock.time() - begin
    assert took <= 19.0 / 0.85
    assert server.rejected == 0


@pytest.mark.parametrize("offset", [0.0, 0.3, 0.7])
def test_windows_on_the_clock_cost_at_most_one_refused_probe(offset):
    # The same fields on 1 s windows of the clock, which open on the whole second: a probe
    # for a shorter window is refused once, and the adapter then waits for the stated
    # resets, which are exact.
    clock = FakeClock(start=START + offset)
    with RateLimitedServer(
        FixedWindow(5, 1), "truthful", clock=clock, rate_headers="x-ratelimit", latency=0.002
    ) as server:
        adapter = RetryAfterAdapter(clock=clock, store="memory://", environ={}, seed=0)
        with requests.Session() as session:
            session.mount("http://", adapter)
            begin = clock.time()
            for i in range(100):
                assert session.get(f"{server.url}/r/{i}", timeout=5).ok
            took = clock.time() - begin
    assert took <= 19.0 / 0.85
    assert server.rejected <= 1
