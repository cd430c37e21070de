"""``CallState``: one call's budgets and verdicts, decided without I/O (time is passed in)."""

from __future__ import annotations

import random
from typing import Optional

import pytest

from requests_retryafter import Code, Decision, Event, HostState, Policy, parse_retry_after
from requests_retryafter.calls import AUTH_STATUSES, MIN_CONNECTION_WAIT, CallState, Turn
from requests_retryafter.engine import HostTracker
from requests_retryafter.parsing import RateLimitInfo

WALL = 1_700_000_000.0
HOST = "api.example.org"


def call(policy: Optional[Policy] = None, **options) -> CallState:
    return CallState(HOST, policy or Policy(), 0.0, rng=random.Random(0), **options)


def tracker(policy: Optional[Policy] = None) -> HostTracker:
    return HostTracker(HostState(HOST), policy or Policy(), random.Random(0))


def rejection(t: HostTracker, c: CallState, header: Optional[str], at: float) -> Decision:
    """Send one request at ``at`` (monotonic; wall ``WALL + at``) and have it refused."""
    c.sent()
    parsed = parse_retry_after(header, now=WALL + at)
    decision = t.on_rejection(429, parsed, RateLimitInfo(), at, WALL + at, c.attempts)
    return c.rejected(decision, at)


def test_a_first_turn_on_a_fresh_host_sends_at_once():
    turn = call().turn(tracker(), 0.0, WALL)
    assert turn.wait == 0
    assert turn.decision is None
    assert not turn.stops


def test_a_retry_waits_its_own_announced_sleep_without_a_new_decision():
    t, c = tracker(), call()
    verdict = rejection(t, c, "5", 0.0)
    assert verdict.event == Event.SLEEP
    assert verdict.wait >= 1.0
    turn = c.turn(t, 0.0, WALL)
    assert turn.wait == pytest.approx(verdict.wait)
    assert turn.decision is None  # the sleep decision already said so


def test_a_wait_another_call_set_is_announced_as_a_shared_wait():
    t, first, second = tracker(), call(), call()
    verdict = rejection(t, first, "5", 0.0)
    turn = second.turn(t, 0.0, WALL)
    assert turn.decision is not None
    assert turn.decision.event == Event.WAIT
    assert turn.decision.code == Code.SHARED_WAIT
    assert turn.wait == pytest.approx(verdict.wait)


def test_a_wait_for_the_reset_the_host_stated_is_announced_as_pacing():
    # A call alone on the host: its answer said none of the window remains. The wait for
    # the stated reset is pacing, not another call's rejection.
    t, c = tracker(), call()
    c.sent()
    t.on_success(0.0, WALL)
    t.on_stated_limit(RateLimitInfo(limit=5, remaining=0, reset_after=30.0), 0.0, WALL)
    turn = c.turn(t, 0.0, WALL)
    assert turn.wait == pytest.approx(30.0)
    assert turn.decision is not None
    assert turn.decision.event == Event.WAIT
    assert turn.decision.code == Code.PACING
    assert "reset it states" in turn.decision.reason
    # A rejection's wait that ends later is still announced as a rejection's.
    rejection(t, call(), "60", 1.0)
    turn = c.turn(t, 1.0, WALL + 1.0)
    assert turn.decision is not None
    assert turn.decision.code == Code.SHARED_WAIT


def test_the_last_attempt_gives_up_with_the_attempts_code():
    t, c = tracker(), call(Policy(max_attempts=2))
    assert rejection(t, c, "1", 0.0).event == Event.SLEEP
    verdict = rejection(t, c, "1", 5.0)
    assert verdict.event == Event.GIVE_UP
    assert verdict.code == Code.ATTEMPTS


def test_a_wait_past_the_deadline_gives_up_with_what_was_left():
    t, c = tracker(), call(Policy(deadline=3.0))
    verdict = rejection(t, c, "10", 0.0)  # a 10 s header is obeyed on first sight
    assert verdict.event == Event.GIVE_UP
    assert verdict.code == Code.DEADLINE
    assert c.left == pytest.approx(3.0)


def test_a_request_that_may_not_be_sent_twice_is_refused_not_retried():
    t = tracker()
    c = call(replayable=False, why_not="POST without an Idempotency-Key header")
    verdict = rejection(t, c, "1", 0.0)
    assert verdict.event == Event.REFUSE
    assert verdict.code == Code.NOT_REPLAYABLE


def test_a_held_host_stops_the_turn():
    t, c = tracker(Policy(max_sleep=60.0)), call()
    stated = parse_retry_after("7200", now=WALL)
    # A long header with a stated reset that agrees is corroborated: the host is held.
    info = RateLimitInfo(remaining=0, reset_after=7200.0)
    c.sent()
    decision = t.on_rejection(429, stated, info, 0.0, WALL, 1)
    assert c.rejected(decision, 0.0).event == Event.HOLD
    turn = c.turn(t, 1.0, WALL + 1.0)
    assert turn.stops
    assert turn.decision is not None
    assert turn.decision.event == Event.HOLD
    assert turn.decision.until > WALL + 3600


@pytest.mark.parametrize("status", sorted(AUTH_STATUSES))
def test_authentication_answers_are_refused(status):
    (decision,) = call().answered(status)
    assert decision.event == Event.REFUSE
    assert decision.code == Code.AUTH


def test_a_header_on_a_success_is_ignored_and_a_plain_success_decides_nothing():
    c = call()
    assert c.answered(200) == []
    (decision,) = c.answered(200, retry_after=True)
    assert decision.event == Event.IGNORE
    assert decision.code == Code.HEADER_ON_SUCCESS


def test_connection_failures_back_off_within_the_connection_retries():
    c = call(Policy(connect_retries=2, backoff_base=1.0, backoff_cap=8.0))
    waits = []
    for _ in range(2):
        c.sent()
        decision = c.connection_failed("connect", "ConnectionError", 0.0)
        assert decision.event == Event.SLEEP
        assert decision.code == Code.CONNECTION
        waits.append(decision.wait)
    c.sent()
    last = c.connection_failed("connect", "ConnectionError", 0.0)
    assert last.event == Event.GIVE_UP
    assert "2 connection retries" in last.reason
    assert all(MIN_CONNECTION_WAIT <= w <= 8.0 for w in waits)


@pytest.mark.parametrize(
    ("kind", "replayable", "words"),
    [(None, True, "never retried"), ("connect", False, "not retried")],
)
def test_a_failure_that_is_not_transient_or_not_replayable_gives_up(kind, replayable, words):
    c = call(replayable=replayable, why_not="DELETE body stream")
    c.sent()
    decision = c.connection_failed(kind, "ReadTimeout", 0.0)
    assert decision.event == Event.GIVE_UP
    assert words in decision.reason


def test_a_backoff_past_the_deadline_gives_up():
    c = call(Policy(deadline=0.4))
    c.sent()
    decision = c.connection_failed("connect", "ConnectionError", 0.0)
    assert decision.event == Event.GIVE_UP
    assert "deadline" in decision.reason


def test_a_turn_on_the_shared_schedule_waits_holds_or_gives_up():
    c = call(Policy(max_sleep=60.0, max_hold=600.0, deadline=1000.0))
    assert c.scheduled(100.0, 0.0, 100.0, 3) == Turn()
    wait = c.scheduled(130.0, 0.0, 100.0, 3)
    assert wait.wait == 30.0
    assert wait.decision is not None
    assert wait.decision.code == Code.PACING
    # No sleep is longer than max_sleep: a turn further off holds the host instead.
    held = c.scheduled(400.0, 0.0, 100.0, 3)
    assert held.stops
    assert held.decision is not None
    assert held.decision.event == Event.HOLD
    assert held.decision.until == 400.0
    late = call(Policy(deadline=10.0)).scheduled(130.0, 0.0, 100.0, 3)
    assert late.stops
    assert late.decision is not None
    assert late.decision.event == Event.GIVE_UP
