"""The benchmarks' lying portal (benchmarks/scenarios.py) does what it says: each limit, each
Retry-After behaviour, the stats.

Real HTTP on 127.0.0.1 with plain ``requests``; time is a FakeClock moved by hand, so nothing
here sleeps.
"""

from __future__ import annotations

import concurrent.futures
import email.utils
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, List, Optional

import pytest
import requests
from scenarios import (  # benchmarks/scenarios.py, loaded by conftest.py
    BEHAVIOURS,
    GARBAGE_VALUES,
    SCENARIOS,
    FixedWindow,
    HourlyQuota,
    LeakyBucket,
    Limiter,
    Maintenance,
    Portal,
    SlidingWindow,
    Unlimited,
    format_http_date,
    ideal_duration,
    standard_scenarios,
    steady_duration,
)

from requests_retryafter.clock import FakeClock

# The ``clock`` fixture's start (tests/conftest.py): 20 s into a minute, 800 s into an hour
# and a multiple of 10.
START = 1_700_000_000.0


@contextmanager
def running(limiter: Limiter, behaviour: str, clock: FakeClock, **opts: Any) -> Iterator[Portal]:
    portal = Portal("test", limiter, behaviour, clock, **opts)
    with portal:
        yield portal


def http_date_epoch(value: str) -> float:
    parsed = email.utils.parsedate_tz(value)
    assert parsed is not None, value
    return float(email.utils.mktime_tz(parsed))


# -- limits ------------------------------------------------------------------------------------


def test_fixed_window_limits_per_aligned_window(clock, session, statuses):
    with running(FixedWindow(3, 60), "truthful", clock) as portal:
        assert statuses(portal, 3) == [200, 200, 200]
        r = session.get(portal.url + "/x", timeout=5)
        assert r.status_code == 429
        # 20 s into the minute: the window ends in 40 s.
        assert r.headers["Retry-After"] == "40"
        clock.advance(39.5)
        r = session.get(portal.url + "/x", timeout=5)
        assert (r.status_code, r.headers["Retry-After"]) == (429, "1")
        clock.advance(0.5)
        assert statuses(portal, 4) == [200, 200, 200, 429]
    # Rejected requests consume nothing: 3 accepted in each window, whatever the rejections.
    assert portal.stats.accepted == 6
    assert portal.stats.rejected == 3


def test_sliding_window_counts_the_last_window(clock, session, statuses):
    with running(SlidingWindow(3, 10), "truthful", clock) as portal:
        for _ in range(3):
            assert statuses(portal, 1) == [200]
            clock.advance(1)
        # Requests at +0, +1, +2; now +3: the first leaves the window at +10.
        r = session.get(portal.url, timeout=5)
        assert (r.status_code, r.headers["Retry-After"]) == (429, "7")
        clock.advance(7)
        assert statuses(portal, 2) == [200, 429]
        clock.advance(1)  # +11: the request at +1 has left
        assert statuses(portal, 1) == [200]


def test_leaky_bucket_refills_at_its_rate(clock, statuses):
    with running(LeakyBucket(rate=2.0, burst=3), "truthful", clock) as portal:
        assert statuses(portal, 4) == [200, 200, 200, 429]
        assert portal.stats.hits[-1].retry_after == "1"  # a token in 0.5 s, rounded up
        clock.advance(0.5)
        assert statuses(portal, 2) == [200, 429]
        clock.advance(10)  # refills to the burst, not beyond
        assert statuses(portal, 4) == [200, 200, 200, 429]


def test_hourly_quota_resets_at_the_top_of_the_hour(clock, session, statuses):
    with running(HourlyQuota(2), "countdown", clock) as portal:
        assert statuses(portal, 3) == [200, 200, 429]
        assert portal.stats.hits[-1].retry_after == "2800"  # 800 s into the hour
        clock.advance(2799)
        r = session.get(portal.url, timeout=5)
        assert (r.status_code, r.headers["Retry-After"]) == (429, "1")
        clock.advance(1)
        assert statuses(portal, 3) == [200, 200, 429]
        assert portal.stats.hits[-1].retry_after == "3600"


def test_maintenance_answers_503_with_the_end_as_http_date(clock, session, statuses):
    window = Maintenance(START + 10, START + 70)
    with running(Unlimited(), "maintenance", clock, maintenance=window) as portal:
        assert statuses(portal, 1) == [200]
        clock.advance(10)
        r = session.get(portal.url, timeout=5)
        assert r.status_code == 503
        assert http_date_epoch(r.headers["Retry-After"]) == START + 70
        clock.advance(59.9)
        assert statuses(portal, 1) == [503]
        clock.advance(0.1)
        assert statuses(portal, 2) == [200, 200]
    assert portal.stats.by_status() == {200: 3, 503: 2}


def test_maintenance_does_not_consume_quota_and_429s_stay_truthful(clock, statuses):
    window = Maintenance(START + 5, START + 15)
    with running(FixedWindow(2, 60), "maintenance", clock, maintenance=window) as portal:
        clock.advance(5)
        assert statuses(portal, 3) == [503, 503, 503]
        clock.advance(10)
        assert statuses(portal, 3) == [200, 200, 429]
        assert portal.stats.hits[-1].retry_after == "25"  # 35 s into the minute


def test_a_limit_full_at_the_end_of_maintenance_is_counted_in_the_wait(clock):
    # Truthful values cover both: the window ends at +10 but the limiter is full until +40.
    limiter = FixedWindow(1, 60)
    limiter.consume(START)
    window = Maintenance(START + 1, START + 10)
    with running(limiter, "truthful", clock, maintenance=window) as portal:
        clock.advance(2)
        with requests.Session() as s:
            r = s.get(portal.url, timeout=5)
        assert (r.status_code, r.headers["Retry-After"]) == (503, "38")


# -- behaviours --------------------------------------------------------------------------------


def rejected_header(clock: FakeClock, behaviour: str, **opts: Any) -> Optional[str]:
    with running(FixedWindow(1, 60), behaviour, clock, **opts) as portal, requests.Session() as s:
        s.get(portal.url, timeout=5)
        r = s.get(portal.url, timeout=5)
        assert r.status_code == 429
        return r.headers.get("Retry-After")


def test_truthful_date_is_the_moment_of_recovery(clock):
    value = rejected_header(clock, "truthful_date")
    assert value == format_http_date(START + 40)
    assert value.endswith(" GMT")
    assert http_date_epoch(value) == START + 40


def test_truthful_date_rounds_up_to_the_second(clock, statuses):
    clock.advance(0.25)
    with running(LeakyBucket(1.0, 1), "truthful_date", clock) as portal:
        assert statuses(portal, 2) == [200, 429]
        assert http_date_epoch(portal.stats.hits[-1].retry_after or "") == START + 2


def test_zero(clock):
    assert rejected_header(clock, "zero") == "0"


@pytest.mark.parametrize("constant", [3600, 7])
def test_constant_ignores_the_real_window(clock, constant):
    assert rejected_header(clock, "constant", constant=constant) == str(constant)


def test_absent_sends_no_header(clock):
    assert rejected_header(clock, "absent") is None


def test_past_date_is_in_the_past(clock):
    value = rejected_header(clock, "past_date")
    assert value is not None
    assert http_date_epoch(value) == START - 3600


def test_random_is_seeded_and_in_range(clock, statuses):
    def values(seed: int) -> List[str]:
        with running(FixedWindow(1, 60), "random", clock, seed=seed, random_range=(5, 9)) as p:
            statuses(p, 30)
            return [h.retry_after or "" for h in p.stats.hits if h.rejected]

    first = values(1)
    assert len(first) == 29
    assert all(5 <= int(v) <= 9 for v in first)
    assert len(set(first)) > 1
    assert values(1) == first
    assert values(2) != first


def test_garbage_cycles_through_bad_values(clock, statuses):
    with running(FixedWindow(1, 60), "garbage", clock) as portal:
        statuses(portal, 1 + 2 * len(GARBAGE_VALUES))
    sent = [h.retry_after for h in portal.stats.hits if h.rejected]
    assert sent == list(GARBAGE_VALUES) * 2
    assert {"soon", "1.5", "30, 60", "-5"} <= set(GARBAGE_VALUES)


def test_on_200_puts_retry_after_on_successes_too(clock, session):
    with running(FixedWindow(2, 60), "on_200", clock) as portal:
        responses = [session.get(portal.url, timeout=5) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert [r.headers.get("Retry-After") for r in responses] == ["120", "120", "40"]


def test_switch_turns_truthful_into_constant(clock, statuses):
    with running(FixedWindow(1, 60), "switch", clock, switch_at=START + 100) as portal:
        statuses(portal, 2)
        clock.advance(99)  # +99: 59 s into a minute
        statuses(portal, 2)
        clock.advance(1)
        statuses(portal, 2)
        clock.advance(100)
        statuses(portal, 2)
    sent = [h.retry_after for h in portal.stats.hits if h.rejected]
    assert sent == ["40", "1", "3600", "3600"]


def test_countdown_counts_to_the_top_of_the_hour_whatever_the_limiter(clock):
    assert rejected_header(clock, "countdown", countdown_period=3600) == "2800"


@pytest.mark.parametrize(
    ("behaviour", "opts", "message"),
    [
        ("sometimes", {}, "unknown behaviour"),
        ("switch", {}, "switch_at"),
        ("maintenance", {}, "maintenance window"),
        ("random", {"random_range": (5, 1)}, "random_range"),
    ],
)
def test_bad_settings_are_refused(clock, behaviour, opts, message):
    with pytest.raises(ValueError, match=message):
        Portal("bad", Unlimited(), behaviour, clock, **opts)


def test_every_behaviour_serves(clock, statuses):
    window = Maintenance(START + 1000, START + 2000)
    for behaviour in BEHAVIOURS:
        with running(
            FixedWindow(1, 60), behaviour, clock, switch_at=START, maintenance=window
        ) as portal:
            assert statuses(portal, 2) == [200, 429]


# -- stats, lifecycle, service time ------------------------------------------------------------


def test_stats_record_times_and_fast_retries(clock, statuses):
    with running(FixedWindow(1, 60), "zero", clock) as portal:
        statuses(portal, 3)  # 200, then two 429s at the same instant
        clock.advance(0.5)
        statuses(portal, 1)  # 0.5 s after a rejection
        clock.advance(1.0)
        statuses(portal, 1)  # 1.0 s after: not "less than 1 s"
    stats = portal.stats
    assert (stats.requests, stats.accepted, stats.rejected) == (5, 1, 4)
    assert stats.request_times == [START, START, START, START + 0.5, START + 1.5]
    assert stats.rejection_times == [START, START, START + 0.5, START + 1.5]
    assert stats.requests_after_rejection() == 2
    assert stats.requests_after_rejection(within=1.01) == 3
    assert stats.by_status() == {200: 1, 429: 4}
    assert [h.path for h in stats.hits] == ["/r/0", "/r/1", "/r/2", "/r/0", "/r/0"]


def test_headers_and_body(clock, session):
    with running(FixedWindow(1, 60), "truthful", clock) as portal:
        ok = session.get(portal.url + "/records?page=2", timeout=5)
        head = session.head(portal.url, timeout=5)
        post = session.post(portal.url, data=b"x" * 100, timeout=5)
    assert ok.json() == {"portal": "test", "path": "/records?page=2", "ok": True}
    assert ok.headers["Date"] == format_http_date(START)  # the portal's clock, not the host's
    assert ok.headers["Content-Type"] == "application/json"
    assert (head.status_code, head.content) == (429, b"")
    assert post.json()["error"] == "Too Many Requests"
    assert [h.method for h in portal.stats.hits] == ["GET", "HEAD", "POST"]


def test_keep_alive_and_stop_closes_connections(clock):
    portal = Portal("ka", Unlimited(), "truthful", clock)
    url = portal.start()
    assert url == f"http://127.0.0.1:{portal.port}"
    with pytest.raises(RuntimeError, match="already running"):
        portal.start()
    with requests.Session() as s:
        for _ in range(3):
            s.get(url, timeout=5)
        portal.stop()
        portal.stop()  # idempotent
        with pytest.raises(requests.ConnectionError):
            s.get(url, timeout=5)
    with pytest.raises(RuntimeError, match="not running"):
        _ = portal.url


def test_a_portal_can_restart_on_the_same_port(clock, statuses):
    first = Portal("one", Unlimited(), "truthful", clock)
    port = int(first.start().rsplit(":", 1)[1])
    assert statuses(first, 1) == [200]
    first.stop()
    with Portal("two", Unlimited(), "truthful", clock, port=port) as second:
        assert second.port == port
        assert statuses(second, 1) == [200]


def test_service_time_advances_the_clock(clock, statuses):
    with running(Unlimited(), "truthful", clock, service_time=0.25) as portal:
        statuses(portal, 4)
    assert clock.time() == START + 1.0
    assert clock.sleeps == []  # advanced, not slept: the client's sleeps stay its own
    assert portal.stats.request_times == [START, START + 0.25, START + 0.5, START + 0.75]


def test_concurrent_requests_never_exceed_the_limit(clock):
    with running(FixedWindow(25, 60), "truthful", clock) as portal:

        def fetch(i: int) -> int:
            with requests.Session() as s:
                return s.get(f"{portal.url}/{i}", timeout=5).status_code

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(fetch, range(80)))
    assert codes.count(200) == 25
    assert codes.count(429) == 55
    assert portal.stats.accepted == 25


# -- ideal and scenarios -----------------------------------------------------------------------


def test_ideal_duration():
    assert ideal_duration(FixedWindow(10, 60), 10, start=START) == 0
    assert ideal_duration(FixedWindow(10, 60), 11, start=START) == 40
    assert ideal_duration(FixedWindow(10, 60), 31, start=START) == 160
    assert ideal_duration(SlidingWindow(10, 60), 21, start=START) == 120
    assert ideal_duration(LeakyBucket(2.0, 10), 20, start=START) == pytest.approx(5.0)
    assert ideal_duration(HourlyQuota(100), 250, start=START) == 2800 + 3600
    window = Maintenance(START + 10, START + 100)
    assert ideal_duration(FixedWindow(10, 60), 11, start=START, maintenance=window) == 100
    assert ideal_duration(Unlimited(), 0, start=START) == 0


def test_steady_duration_spreads_requests_at_the_long_run_rate():
    assert FixedWindow(40, 60).rate == pytest.approx(40 / 60)
    assert SlidingWindow(10, 5).rate == 2.0
    assert LeakyBucket(3.0, 50).rate == 3.0
    assert HourlyQuota(360).rate == 0.1
    assert math.isinf(Unlimited().rate)
    assert steady_duration(SlidingWindow(10, 5), 11, start=START) == 5.0
    assert steady_duration(LeakyBucket(3.0, 50), 1, start=START) == 0.0
    assert steady_duration(Unlimited(), 100, start=START) == 0.0
    # A request due during maintenance goes at its end; the rest follow at the rate.
    window = Maintenance(START + 2.5, START + 100)
    assert steady_duration(SlidingWindow(1, 1), 5, start=START, maintenance=window) == 101.0
    scenario = SCENARIOS["fixed_truthful"]
    assert scenario.steady_seconds(START) == pytest.approx(299 * 1.5)
    assert scenario.steady_seconds(START) > scenario.ideal_seconds(START)


def test_ideal_uses_a_fresh_limiter():
    used = FixedWindow(1, 60)
    used.consume(START)
    assert ideal_duration(used, 1, start=START) == 0


def test_scenarios_cover_every_kind_and_limiter():
    assert len(SCENARIOS) >= 14
    kinds = {s.kind for s in SCENARIOS.values()}
    assert kinds == {"truthful", "always_zero", "constant_overstated", "unreliable", "absent"}
    limiters = {type(s.limiter) for s in SCENARIOS.values()}
    assert {FixedWindow, SlidingWindow, LeakyBucket, HourlyQuota} <= limiters
    behaviours = {s.behaviour for s in SCENARIOS.values()}
    assert behaviours == set(BEHAVIOURS)
    for scenario in SCENARIOS.values():
        assert scenario.ideal_seconds(START) > 0  # every scenario needs more than one window


def test_every_scenario_builds_and_serves(clock, statuses):
    for scenario in SCENARIOS.values():
        with scenario.build(clock) as portal:
            assert statuses(portal, 1) == [200], scenario.name


def test_scaled_scenarios_shrink_windows(clock, statuses):
    small = standard_scenarios(scale=0.1, urls=30)
    fixed = small["fixed_truthful"].limiter
    assert isinstance(fixed, FixedWindow)
    assert math.isclose(fixed.window, 6.0)
    assert small["maintenance_503"].maintenance == pytest.approx((3.0, 63.0))
    assert small["constant_3600"].constant == 3600
    hourly = small["hourly_countdown"]
    assert isinstance(hourly.limiter, HourlyQuota)
    assert math.isclose(hourly.limiter.window, 360.0)
    with hourly.build(clock) as portal:
        statuses(portal, 13)
        # 1_700_000_000 is 80 s into a 360 s period.
        assert portal.stats.hits[-1].retry_after == "280"
    with pytest.raises(ValueError, match="scale"):
        standard_scenarios(scale=0)


def test_switch_and_maintenance_offsets_count_from_build(clock):
    scenario = SCENARIOS["maintenance_503"]
    clock.advance(1000)
    portal = scenario.build(clock)
    assert portal.maintenance == Maintenance(START + 1030, START + 1630)
    switch = SCENARIOS["switch_to_3600"].build(clock, start=START)
    assert switch.switch_at == START + 30


def test_nothing_is_built_when_the_module_is_imported(load_benchmark) -> None:
    with load_benchmark("scenarios", "scenarios_fresh") as module:
        assert module._SCENARIOS == {}  # built on first use, not at import
        assert sorted(module.SCENARIOS) == sorted(standard_scenarios())
        assert module.SCENARIOS is module.SCENARIOS
        with pytest.raises(AttributeError):
            module.NO_SUCH_NAME
