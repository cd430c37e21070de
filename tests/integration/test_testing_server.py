"""requests_retryafter.testing: the server's limits and Retry-After over real HTTP.

Plain ``requests`` against a RateLimitedServer on 127.0.0.1; time is a FakeClock moved by
hand (or by the adapter's virtual sleeps), so nothing here sleeps.
"""

from __future__ import annotations

import email.utils
import inspect
from typing import Callable, List

import pytest
import requests

import requests_retryafter.testing as testing
from requests_retryafter import FakeClock, RetryAfterAdapter, host_key
from requests_retryafter.testing import (
    FixedWindow,
    Maintenance,
    RateLimitedServer,
    SlidingWindow,
    SlidingWindowCounter,
    Sporadic,
    TokenBucket,
    Unlimited,
    Unstated,
)

# The ``clock`` fixture's start (tests/conftest.py): 20 s into a minute.
START = 1_700_000_000.0

#: ``statuses(server, count)``, the fixture of tests/integration/conftest.py.
Statuses = Callable[[RateLimitedServer, int], List[int]]


def test_fixed_window_refuses_the_request_over_the_limit_until_the_window_ends(
    clock: FakeClock, session: requests.Session, statuses: Statuses
) -> None:
    with RateLimitedServer(FixedWindow(5, 60), clock=clock) as server:
        assert statuses(server, 5) == [200] * 5
        refused = session.get(server.url + "/six", timeout=5)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "40"  # the window ends on the minute
        clock.advance(39.5)
        assert statuses(server, 1) == [429]
        clock.advance(0.5)
        assert statuses(server, 6) == [200] * 5 + [429]
    assert (server.requests, server.accepted, server.rejected) == (13, 10, 3)


@pytest.mark.parametrize("count_refused", [False, True])
def test_a_server_that_counts_refusals_keeps_a_knocking_client_out(
    count_refused: bool, clock: FakeClock, statuses: Statuses
) -> None:
    # HAProxy tracks a request before it denies it: every refusal counts against the limit.
    limiter = SlidingWindowCounter(10, 1.0)
    with RateLimitedServer(limiter, "absent", clock=clock, count_refused=count_refused) as server:
        assert statuses(server, 12) == [200] * 10 + [429] * 2
        clock.advance(1.1)  # 0.9 of the last window weighs on this one: 9 of 10, or 10.8 of 12
        assert statuses(server, 1) == [429 if count_refused else 200]
        assert server.count_refused is count_refused


def test_a_sliding_window_counter_from_the_first_request_counts_its_windows_from_it() -> None:
    # HAProxy's http_req_rate: windows follow one another from the first request, not the
    # clock, and start again at the next request after two windows with none.
    counter = SlidingWindowCounter(4, 10.0, from_first=True)
    assert counter.fresh().from_first
    first = 1_000_003.0  # 3 s into a window of the clock
    for _ in range(4):
        assert counter.next_free(first) == first
        counter.consume(first)
    # The first window ends 10 s after the first request (the clock's window, 7 s after);
    # then its 4 weigh 4 * (the share of this one to come), rounded down: a place frees at
    # once, the next 2.5 s in.
    assert counter.next_free(first + 1.0) == pytest.approx(first + 10.0)
    clock_counter = SlidingWindowCounter(4, 10.0)
    for _ in range(4):
        clock_counter.consume(first)
    assert clock_counter.next_free(first + 1.0) == pytest.approx(first + 7.0)
    counter.consume(first + 10.0)
    assert counter.next_free(first + 10.0) == pytest.approx(first + 12.5)
    # Two windows with no request: the next request starts a window of its own.
    later = first + 31.0
    for _ in range(4):
        assert counter.next_free(later) == later
        counter.consume(later)
    assert counter.next_free(later + 1.0) == pytest.approx(later + 10.0)
    assert "from_first=True" in repr(counter)


def test_sliding_window_counter_weighs_the_last_window_on_this_one(
    clock: FakeClock, session: requests.Session, statuses: Statuses
) -> None:
    # 4 per 10 s windows of the clock (START is 20 s into a minute: a window's start). The
    # last window's 4 weigh 4 * (the share of this one to come), and a request goes while
    # that and this window's count, rounded down, stay under 4: a place frees at once,
    # then one each 2.5 s.
    with RateLimitedServer(
        SlidingWindowCounter(4, 10), clock=clock, rate_headers="x-ratelimit"
    ) as server:
        assert statuses(server, 5) == [200] * 4 + [429]
        clock.advance(10.0)  # the next window's start: the last one weighs all of its 4
        refused = session.get(server.url, timeout=5)
        assert refused.status_code == 429
        assert refused.headers["X-RateLimit-Remaining"] == "0"
        clock.advance(0.1)  # 4 * 0.99 + 0 = 3.96: one place
        ok = session.get(server.url, timeout=5)
        assert ok.status_code == 200
        assert ok.headers["X-RateLimit-Remaining"] == "0"  # 3.96 + 1
        # The last window weighs a request less at 2.5 s: stated as the whole second after.
        assert ok.headers["X-RateLimit-Reset"] == str(int(START + 13))
        assert statuses(server, 1) == [429]
        clock.advance(2.5)  # 2.6 s in: 4 * 0.74 + 1 = 3.96
        assert statuses(server, 2) == [200, 429]
    assert server.accepted == 6


def test_sliding_window_counter_decides_as_the_limits_library_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same decisions, what remains and reset, request for request, as limits' own
    # sliding window counter (the one Flask-Limiter uses), over random arrivals.
    import random
    import time

    limits = pytest.importorskip("limits")
    from limits import storage, strategies

    now = [0.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    for seed in range(40):
        rng = random.Random(seed)
        limit, window = rng.randint(1, 12), rng.choice([1, 2, 5])
        theirs = strategies.SlidingWindowCounterRateLimiter(storage.MemoryStorage())
        item = limits.parse(f"{limit} per {window} second")
        ours = SlidingWindowCounter(limit, window)
        at = 1_000_000.0 + rng.random() * window
        for _ in range(100):
            at += rng.expovariate(limit / window * 1.5)
            now[0] = at
            accepted = ours.next_free(at) == at
            assert theirs.hit(item, "k") is accepted
            if accepted:
                ours.consume(at)
                stats = theirs.get_window_stats(item, "k")
                _, remaining, reset_at = ours.quota(at)
                assert remaining == stats.remaining
                assert reset_at == pytest.approx(stats.reset_time, abs=1e-6)


def test_sliding_window_counts_any_interval(
    clock: FakeClock, session: requests.Session, statuses: Statuses
) -> None:
    with RateLimitedServer(SlidingWindow(2, 10), clock=clock) as server:
        assert statuses(server, 1) == [200]
        clock.advance(5)
        assert statuses(server, 1) == [200]
        clock.advance(1)
        refused = session.get(server.url, timeout=5)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "4"  # the first leaves the window at +10
        clock.advance(4)
        assert statuses(server, 2) == [200, 429]  # the second still counts


def test_token_bucket_refills_at_its_rate(clock: FakeClock, statuses: Statuses) -> None:
    with RateLimitedServer(TokenBucket(rate=2, burst=3), clock=clock) as server:
        assert statuses(server, 4) == [200, 200, 200, 429]
        assert server.hits[-1].retry_after == "1"  # half a second, rounded up
        clock.advance(0.5)
        assert statuses(server, 2) == [200, 429]
        clock.advance(1.5)  # full again
        assert statuses(server, 4) == [200, 200, 200, 429]


def test_sporadic_refuses_a_share_at_random_on_top_of_its_limit(
    clock: FakeClock, statuses: Statuses
) -> None:
    # One request in ten refused at random on top of a bucket of 50 a second: about that
    # share is refused, the same moments every time (next_free changes nothing), and the
    # bucket still refuses what it would alone.
    limiter = Sporadic(0.1, TokenBucket(50.0, 1000), seed=3)
    moments = [START + i * 0.25 for i in range(2000)]
    refused = [m for m in moments if limiter.next_free(m) > m]
    assert refused == [m for m in moments if limiter.next_free(m) > m]
    assert 150 <= len(refused) <= 250
    assert all(limiter.next_free(m) == m + 1.0 for m in refused)
    assert limiter.rate == 50.0
    assert repr(limiter).startswith("Sporadic(0.1, ")
    fresh = limiter.fresh()
    assert [m for m in moments if fresh.next_free(m) > m] == refused
    with RateLimitedServer(Sporadic(0.0, TokenBucket(1.0, 2)), clock=clock) as server:
        assert statuses(server, 3) == [200, 200, 429]
    for share in (-0.1, 1.0):
        with pytest.raises(ValueError, match="share"):
            Sporadic(share)


def test_unstated_refuses_by_a_limit_its_fields_do_not_state(clock: FakeClock) -> None:
    # An hour's quota of 100 stated on every answer, and 2 a second refused unstated: the
    # third request in a second is refused while the fields say 98 remain; both limits
    # count the requests that pass.
    limiter = Unstated(FixedWindow(100, 3600), SlidingWindow(2, 1))
    assert limiter.rate == pytest.approx(100 / 3600)
    assert repr(limiter) == (
        "Unstated(FixedWindow(limit=100, window=3600), SlidingWindow(limit=2, window=1))"
    )
    with RateLimitedServer(limiter, clock=clock, rate_headers="draft6") as server:
        answers = [requests.get(server.url + "/") for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 429]
        assert answers[2].headers["RateLimit-Remaining"] == "98"
        assert answers[2].headers["RateLimit-Policy"] == "100;w=3600"
        clock.advance(1.0)
        assert requests.get(server.url + "/").headers["RateLimit-Remaining"] == "97"
    fresh = limiter.fresh()
    assert fresh.next_free(START) == START
    assert Unstated(Unlimited(), SlidingWindow(2, 1)).quota(START) is None


def test_maintenance_answers_503_with_the_date_it_ends(
    clock: FakeClock, session: requests.Session, statuses: Statuses
) -> None:
    window = Maintenance(START + 10, START + 70)
    with RateLimitedServer(Unlimited(), "maintenance", clock=clock, maintenance=window) as server:
        assert statuses(server, 3) == [200] * 3
        clock.advance(10)
        down = session.get(server.url, timeout=5)
        assert down.status_code == 503
        assert email.utils.parsedate_to_datetime(down.headers["Retry-After"]).timestamp() == (
            START + 70
        )
        clock.advance(60)
        assert statuses(server, 3) == [200] * 3


@pytest.mark.parametrize(
    ("retry_after", "options", "expected"),
    [
        ("constant", {"constant": 3600}, "3600"),
        ("zero", {}, "0"),
        ("absent", {}, None),
        ("truthful_date", {}, email.utils.formatdate(START + 40, usegmt=True)),
    ],
)
def test_retry_after_behaviours(
    clock: FakeClock,
    session: requests.Session,
    retry_after: str,
    options: dict,
    expected: str,
) -> None:
    with RateLimitedServer(FixedWindow(1, 60), retry_after, clock=clock, **options) as server:
        assert session.get(server.url, timeout=5).status_code == 200
        refused = session.get(server.url, timeout=5)
    assert refused.status_code == 429
    assert refused.headers.get("Retry-After") == expected


def test_defaults_addresses_and_counts(clock: FakeClock, session: requests.Session) -> None:
    with RateLimitedServer(clock=clock, name="county") as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server.host == host_key(server.url) == f"127.0.0.1:{server.port}"
        answers = [session.post(f"{server.url}/q?page={i}", timeout=5) for i in range(11)]
    assert [a.status_code for a in answers] == [200] * 10 + [429]  # ten a minute by default
    assert answers[0].json() == {"server": "county", "path": "/q?page=0", "ok": True}
    assert answers[0].headers["Server"] == "requests-retryafter-testing/1"
    assert answers[0].headers["Date"] == email.utils.formatdate(START, usegmt=True)
    assert [(h.method, h.status, h.time) for h in server.hits][-1] == ("POST", 429, START)
    assert server.stats.by_status() == {200: 10, 429: 1}
    with pytest.raises(RuntimeError, match="not running"):
        server.url


def test_the_adapter_waits_as_long_as_the_server_says(clock: FakeClock) -> None:
    adapter = RetryAfterAdapter(clock=clock, store="memory://", environ={}, seed=0)
    with RateLimitedServer(FixedWindow(5, 60), clock=clock) as server, requests.Session() as s:
        s.mount("http://", adapter)
        assert all(s.get(f"{server.url}/{i}", timeout=5).ok for i in range(6))
    assert server.rejected == 1
    assert clock.sleeps == [40.0]


def test_bad_settings_are_refused(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="unknown behaviour 'sometimes'"):
        RateLimitedServer(retry_after="sometimes")
    with pytest.raises(ValueError, match="needs switch_at"):
        RateLimitedServer(retry_after="switch")
    with pytest.raises(ValueError, match="window must be positive"):
        SlidingWindow(1, 0)
    with pytest.raises(ValueError, match="rate must be positive"):
        TokenBucket(0, 1)
    server = RateLimitedServer(clock=clock)
    server.start()
    try:
        with pytest.raises(RuntimeError, match="already running"):
            server.start()
    finally:
        server.stop()
    server.stop()  # idempotent


def test_the_public_api_is_small_and_documented() -> None:
    assert set(testing.__all__) == {
        "BEHAVIOURS",
        "RATE_HEADER_STYLES",
        "FixedWindow",
        "Hit",
        "Limiter",
        "Maintenance",
        "RateLimitedServer",
        "ServerStats",
        "SlidingWindow",
        "SlidingWindowCounter",
        "Sporadic",
        "TokenBucket",
        "Unlimited",
        "Unstated",
    }
    for name in testing.__all__:
        obj = getattr(testing, name)
        if inspect.isclass(obj):
            assert inspect.getdoc(obj), name
    # Benchmark scenarios, ideal maths and expected verdicts are not test support.
    for name in ("Scenario", "standard_scenarios", "ideal_duration", "steady_duration"):
        assert not hasattr(testing, name)


@pytest.mark.parametrize("each", [False, True])
def test_latency_moves_the_clock_before_a_request_is_counted(each: bool, clock: FakeClock) -> None:
    # A fixed latency, or one asked of a callable for each request (a network's jitter).
    expected = [0.5, 0.125, 2.0] if each else [0.25] * 3
    latency = iter(expected).__next__ if each else 0.25
    with RateLimitedServer(Unlimited(), clock=clock, latency=latency) as server:
        for _ in range(3):
            requests.get(f"{server.url}/x", timeout=5)
    times = [START] + [h.time for h in server.stats.hits]
    assert [b - a for a, b in zip(times, times[1:])] == pytest.approx(expected)


def test_latency_cannot_be_negative(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="latency"):
        RateLimitedServer(Unlimited(), clock=clock, latency=-0.1)
