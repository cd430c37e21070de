"""The benchmark scenarios' newer shapes do what they say: windows that start at the first request,
nginx-like buckets, rate-limit fields of each generation on every answer with resets rounded
up, and :func:`extra_scenarios`.

Real HTTP on 127.0.0.1 with plain ``requests``; time is a FakeClock moved by hand.
"""

from __future__ import annotations

import math
from typing import Mapping, Tuple

import pytest
from scenarios import (  # benchmarks/scenarios.py, loaded by conftest.py
    RATE_HEADER_STYLES,
    SCENARIOS,
    FirstRequestWindow,
    FixedWindow,
    LeakyBucket,
    Portal,
    SlidingWindow,
    SlidingWindowCounter,
    Unlimited,
    extra_scenarios,
    ideal_duration,
    nginx_limit_req,
    quota,
    rate_limit_headers,
)

# The ``clock`` fixture's start (tests/conftest.py).
START = 1_700_000_000.0


def test_first_request_window_opens_at_the_first_request_not_on_the_clock():
    window = FirstRequestWindow(2, 10)
    t0 = START + 3.7  # not on a multiple of 10
    assert window.next_free(t0) == t0
    window.consume(t0)
    window.consume(t0 + 1)
    assert window.next_free(t0 + 2) == pytest.approx(t0 + 10)
    # expires 10 s after its first request, and the next window opens with the next request
    assert window.next_free(t0 + 10) == t0 + 10
    window.consume(t0 + 25.2)
    window.consume(t0 + 26)
    assert window.next_free(t0 + 27) == pytest.approx(t0 + 35.2)
    assert quota(window, t0 + 27) == (2, 0, pytest.approx(t0 + 35.2))
    assert quota(window.fresh(), t0) == (2, 2, pytest.approx(t0 + 10))


def test_first_request_window_ideal_is_one_window_per_limit():
    # 5 per 10 s from the first request: 12 requests need two full windows and then some.
    assert ideal_duration(FirstRequestWindow(5, 10), 12, start=START + 0.3) == pytest.approx(20)


def test_nginx_limit_req_without_burst_refuses_sooner_than_one_over_rate(clock, session):
    bucket = nginx_limit_req(10)
    assert isinstance(bucket, LeakyBucket)
    with Portal("nginx", bucket, "absent", clock) as portal:
        first = session.get(portal.url + "/a", timeout=5).status_code
        clock.advance(0.05)
        early = session.get(portal.url + "/a", timeout=5).status_code
        clock.advance(0.05)
        on_time = session.get(portal.url + "/a", timeout=5).status_code
    assert (first, early, on_time) == (200, 429, 200)


def test_nginx_limit_req_burst_takes_burst_plus_one_at_once():
    bucket = nginx_limit_req(10, 5)
    for _ in range(6):
        assert bucket.next_free(START) == START
        bucket.consume(START)
    assert bucket.next_free(START) == pytest.approx(START + 0.1)
    with pytest.raises(ValueError):
        nginx_limit_req(10, -1)


#: The styles that state their reset as an epoch time.
_EPOCH_RESETS = ("x-ratelimit", "x-ratelimit-decimal", "x-rate-limit")


def _stated(headers: Mapping[str, str], style: str, now: float) -> Tuple[int, int, float]:
    """(limit, remaining, seconds to reset) as ``style`` states them."""
    if style.startswith("x-rate"):
        prefix = "X-Rate-Limit-" if style == "x-rate-limit" else "X-RateLimit-"
        limit, remaining = headers[prefix + "Limit"], headers[prefix + "Remaining"]
        reset = float(headers[prefix + "Reset"])
        reset = reset - now if style in _EPOCH_RESETS else reset
    elif style == "draft6":
        limit, remaining = headers["RateLimit-Limit"], headers["RateLimit-Remaining"]
        reset = float(headers["RateLimit-Reset"])
        assert headers["RateLimit-Policy"] == "2;w=1"
    else:
        fields = dict(part.strip().split("=") for part in headers["RateLimit"].split(","))
        limit, remaining, reset = fields["limit"], fields["remaining"], float(fields["reset"])
        assert headers["RateLimit-Policy"] == "2;w=1"
    return int(float(limit)), int(float(remaining)), reset


@pytest.mark.parametrize("style", RATE_HEADER_STYLES)
def test_rate_headers_go_on_every_answer_with_resets_rounded_up(clock, session, style):
    # A moving window: its reset (oldest request + 1 s) falls between whole seconds.
    with Portal("lib", SlidingWindow(2, 1), "truthful", clock, rate_headers=style) as portal:
        clock.advance(0.3)
        answers = []
        for _ in range(3):
            answers.append((clock.time(), session.get(portal.url + "/x", timeout=5)))
            clock.advance(0.1)
    assert [r.status_code for _, r in answers] == [200, 200, 429]
    (t0, ok), (_, second), (t2, refused) = answers
    assert _stated(ok.headers, style, t0)[:2] == (2, 1)  # 200s carry them too
    assert _stated(second.headers, style, t0)[:2] == (2, 0)
    limit, remaining, reset = _stated(refused.headers, style, t2)
    assert (limit, remaining) == (2, 0)
    # the true reset is 0.8 s away (START + 1.3): stated rounded up, so late, never early
    true_reset = START + 1.3 - t2
    assert true_reset - 1e-6 <= reset < true_reset + 1.0
    # (a reset in seconds from now is whole; one at an epoch time, less now, is not)
    assert float(reset).is_integer() or style in _EPOCH_RESETS
    assert refused.headers["Retry-After"] == "1"


def test_stated_resets_round_up_to_a_whole_second():
    window = SlidingWindow(1, 1)
    window.consume(START + 0.25)
    now = START + 0.5
    assert rate_limit_headers("x-ratelimit", window, now)["X-RateLimit-Reset"] == str(
        int(START) + 2
    )
    assert rate_limit_headers("x-ratelimit-delta", window, now)["X-RateLimit-Reset"] == "1"
    draft6 = rate_limit_headers("draft6", window, now)
    assert draft6["RateLimit-Reset"] == "1"
    assert draft6["RateLimit-Policy"] == "1;w=1"
    assert rate_limit_headers("draft7", window, now) == {
        "RateLimit": "limit=1, remaining=0, reset=1",
        "RateLimit-Policy": "1;w=1",
    }
    assert rate_limit_headers("draft7", Unlimited(), now) == {}
    with pytest.raises(ValueError, match="style"):
        rate_limit_headers("draft99", window, now)


def test_quota_of_each_limiter():
    fixed = FixedWindow(3, 60)
    fixed.consume(START)
    assert quota(fixed, START + 1) == (3, 2, pytest.approx(math.floor(START / 60 + 1) * 60))
    bucket = LeakyBucket(2, 4)
    for _ in range(4):
        bucket.consume(START)
    limit, remaining, reset_at = quota(bucket, START)  # type: ignore[misc]
    assert (limit, remaining, reset_at) == (4, 0, pytest.approx(START + 0.5))
    assert quota(Unlimited(), START) is None


def test_a_portal_refuses_an_unknown_header_style(clock):
    with pytest.raises(ValueError, match="rate_headers"):
        Portal("x", FixedWindow(1, 1), "truthful", clock, rate_headers="x-rl")


def test_extra_scenarios_cover_what_the_standard_set_lacks(clock, session):
    extra = extra_scenarios()
    assert not set(extra) & set(SCENARIOS)
    fixed = [
        s
        for s in extra.values()
        if type(s.limiter) is FixedWindow and 5 <= s.limiter.window <= 30  # type: ignore[attr-defined]
    ]
    assert fixed
    assert all(20 <= s.limiter.limit <= 100 for s in fixed)  # type: ignore[attr-defined]
    assert max(s.urls for s in extra.values()) >= 1000
    assert {s.rate_headers for s in extra.values()} >= {"x-ratelimit", "draft6", "draft7"}
    assert any(
        isinstance(s.limiter, SlidingWindow) and s.behaviour == "absent" and not s.rate_headers
        for s in extra.values()
    )
    assert any(isinstance(s.limiter, FirstRequestWindow) for s in extra.values())
    counters = sorted(
        s.limiter.window  # type: ignore[attr-defined]
        for s in extra.values()
        if isinstance(s.limiter, SlidingWindowCounter) and s.count_refused
    )
    assert counters == [1.0, 10.0, 60.0, 60.0]  # per second, per 10 s and per minute
    assert any(
        isinstance(s.limiter, SlidingWindowCounter) and s.limiter.from_first for s in extra.values()
    )  # HAProxy's windows start at the first request
    assert any(
        isinstance(s.limiter, SlidingWindowCounter) and not s.count_refused for s in extra.values()
    )  # the limits library's counts only what it lets through
    longer = {
        s.limiter.window  # type: ignore[attr-defined]
        for s in extra.values()
        if type(s.limiter) is FixedWindow and s.limiter.window > 30  # type: ignore[attr-defined]
    }
    assert {45.0, 90.0} <= longer  # window lengths that are no round ones
    buckets = {
        (s.limiter.rate, s.limiter.burst)  # type: ignore[attr-defined]
        for s in extra.values()
        if isinstance(s.limiter, LeakyBucket)
    }
    assert buckets == {(10.0, 1), (10.0, 6)}
    for scenario in extra.values():
        assert scenario.period > 0
        assert scenario.ideal_seconds(START) > 0
        with scenario.build(clock) as portal:
            assert session.get(portal.url + "/r", timeout=5).status_code == 200, scenario.name
    assert extra_scenarios(urls=50)["crawl_1000"].urls == 1000
    small = extra_scenarios(scale=0.5)["fixed_10s_truthful"].limiter
    assert math.isclose(small.window, 5.0)  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        extra_scenarios(urls=0)


def test_scenario_period_is_the_window_or_the_bucket_refill():
    assert SCENARIOS["fixed_truthful"].period == 60.0
    assert SCENARIOS["leaky_truthful"].period == 20.0  # burst 20 at 1/s
    assert SCENARIOS["hourly_countdown"].period == 3600.0


def test_the_scenarios_module_takes_the_testing_names_as_they_are() -> None:
    import scenarios

    import requests_retryafter.testing as testing

    for name in ("FixedWindow", "SlidingWindow", "Unlimited", "Maintenance", "Hit", "Limiter"):
        assert getattr(scenarios, name) is getattr(testing, name)
    assert scenarios.PortalStats is testing.ServerStats
    assert issubclass(scenarios.Portal, testing.RateLimitedServer)
    assert issubclass(scenarios.LeakyBucket, testing.TokenBucket)
    assert repr(LeakyBucket(2, 4)) == "LeakyBucket(rate=2, burst=4)"
    assert repr(LeakyBucket(2, 4).fresh()) == "LeakyBucket(rate=2, burst=4)"
    assert set(scenarios.__all__) <= set(dir(scenarios))
