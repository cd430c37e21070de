"""No hold beyond max_hold, no sleep beyond max_sleep, and no wait longer than it was granted,
whatever a header, the store or the wall clock says."""

from __future__ import annotations

import logging
import random

from requests_retryafter import HostState, LimitEstimate, Policy, parse_retry_after
from requests_retryafter.engine import HostTracker
from requests_retryafter.parsing import RateLimitInfo, parse_rate_limit

WALL = 1_700_000_000.0


def tracker(policy: Policy = Policy(), **state: object) -> HostTracker:
    return HostTracker(HostState("h", **state), policy, random.Random(0))  # type: ignore[arg-type]


def test_an_absurd_stated_window_is_ignored_with_a_reason(caplog):
    t = tracker()
    info = parse_rate_limit({"RateLimit-Policy": "1;w=999999999999"}, now=WALL)
    with caplog.at_level(logging.INFO, logger="requests_retryafter"):
        t.on_stated_limit(info, 0.0, WALL)
        t.on_stated_limit(info, 1.0, WALL + 1)
    assert t.state.limit is None
    assert t.reserve(0.0, WALL) == 0.0
    ignored = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(ignored) == 1  # said once, not per response
    assert "longer than max_hold" in ignored[0]


def test_a_sane_stated_window_still_seeds_pacing():
    t = tracker()
    t.on_stated_limit(RateLimitInfo(limit=10, window=60.0), 0.0, WALL)
    assert t.state.limit is not None
    assert t.state.limit.source == "stated"


def test_pacing_never_asks_for_longer_than_max_hold():
    policy = Policy(max_sleep=30, max_hold=600)
    limit = LimitEstimate(1e-6, window=1e6, burst=1)  # one request per 11 days, from a store
    t = tracker(policy, limit=limit)
    assert t.reserve(0.0, WALL) == 0.0
    assert t.reserve(0.0, WALL) <= 600


def test_a_stored_hold_is_cut_to_this_adapters_max_hold():
    t = tracker(Policy(max_hold=3600), held_until=WALL + 1e9, hold_reason="stored")
    left, why = t.hold(WALL, 0.0)
    assert left == 3600
    assert why == "stored"
    assert t.held(WALL + 3599, 3599.0)
    assert not t.held(WALL + 3600, 3600.0)


def test_a_shared_wait_longer_than_max_sleep_is_a_hold_not_a_sleep():
    # Another adapter, with a larger max_sleep, stored a wait of 1800 s.
    t = tracker(Policy(max_sleep=30), blocked_until=WALL + 1800, blocked_since=WALL)
    left, why = t.hold(WALL, 0.0)
    assert left == 1800
    assert "max_sleep" in why
    # A shared wait within max_sleep is an ordinary wait.
    t = tracker(Policy(max_sleep=30), blocked_until=WALL + 20, blocked_since=WALL)
    assert t.hold(WALL, 0.0) == (0.0, "")
    assert t.gate(0.0, WALL) == 20


def test_a_backward_wall_clock_step_never_lengthens_a_wait():
    t = tracker()
    d = t.on_rejection(429, parse_retry_after("5", now=WALL), RateLimitInfo(), 0.0, WALL, 1)
    assert d.wait == 5
    assert t.gate(0.0, WALL) == 5
    # NTP steps the wall clock back two hours; monotonic time goes on.
    assert t.gate(1.0, WALL - 7200 + 1) == 4
    assert t.gate(5.0, WALL - 7200 + 5) == 0
    assert not t.held(WALL - 7200 + 5, 5.0)


def test_a_stored_wait_seen_after_a_clock_step_lasts_no_longer_than_granted():
    # Another process granted 60 s at WALL; this process's clock is two hours behind.
    t = tracker(blocked_until=WALL + 60, blocked_since=WALL)
    assert t.gate(0.0, WALL - 7200) == 60
    assert t.gate(60.0, WALL - 7200 + 60) == 0
    # A hold likewise.
    t = tracker(held_until=WALL + 600, held_since=WALL, hold_reason="r")
    assert t.hold(WALL - 7200, 0.0)[0] == 600
    assert not t.held(WALL - 7200 + 600, 600.0)


def test_a_wait_from_an_older_store_without_since_is_bounded_by_max_hold():
    t = tracker(Policy(max_hold=1000), blocked_until=WALL + 5000)
    assert t.gate(0.0, WALL) == 1000


def test_a_limit_beyond_what_a_store_keeps_is_not_adopted(caplog):
    # A store drops the whole state of a host whose limit is out of its range: such a limit
    # is not adopted, and the one before it stands.
    from requests_retryafter._context import HostContext
    from requests_retryafter.tuning import Tuning

    ctx = HostContext(HostState("h"), Policy(), random.Random(0), "w", Tuning())
    sane = LimitEstimate(rate=10.0, window=1.0, burst=10)
    ctx.set_limit(sane, WALL)
    with caplog.at_level(logging.WARNING, logger="requests_retryafter"):
        ctx.set_limit(LimitEstimate(rate=1e28, window=1.0, burst=10**28), WALL + 1)
    assert ctx.state.limit == sane
    assert "not kept" in caplog.text
    assert HostState.from_dict(ctx.state.to_dict()).limit == sane
