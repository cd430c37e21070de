"""``HostTracker`` and answers to requests that were on the wire together (an adapter's
threads): an answer to a request sent before a rejection episode began belongs before it."""

from __future__ import annotations

import random
from typing import List, Optional, Tuple

from requests_retryafter import HostState, LimitEstimate, Policy
from requests_retryafter.engine import HostTracker
from requests_retryafter.parsing import RateLimitInfo, parse_retry_after

WALL = 1_700_000_000.0


def tracker() -> HostTracker:
    return HostTracker(HostState("h"), Policy(), random.Random(0))


def ok(t: HostTracker, at: float, sent: Tuple[float, int]) -> None:
    """A 2xx at ``at`` to the request ``sent`` (its time and number)."""
    t.on_success(at, WALL + at, sent=sent[0], seq=sent[1])


def refused(t: HostTracker, at: float, sent: Tuple[float, int]) -> float:
    """A bare 429 at ``at`` to the request ``sent`` (its time and number); the wait
    decided."""
    parsed = parse_retry_after(None, now=WALL + at)
    return t.on_rejection(429, parsed, RateLimitInfo(), at, WALL + at, 1, sent[1]).wait


def send(t: HostTracker, at: float) -> Tuple[float, int]:
    """A request going at ``at``: its time and number."""
    return at, t.number()


def crawl(
    concurrent_refusal: bool = False, concurrent_success: bool = False
) -> Tuple[Optional[LimitEstimate], List[float]]:
    """A host that lets one request through and refuses the next (a bucket without a burst,
    nginx's ``limit_req``): two requests go at 0 and the second is refused; the retry 1.5 s
    later gets through, and the client then sends 12 requests as the pace lets it (no
    refusal: the search for a larger budget goes on). With
    ``concurrent_refusal`` or ``concurrent_success``, another thread's request, sent a
    moment before the refusal came back, is answered after it. Returns the learned limit and
    the times the paced requests went."""
    t = tracker()
    first, second = send(t, 0.0), send(t, 0.0)  # (a clock may read the same twice)
    other = send(t, 0.0)
    ok(t, 0.001, first)
    refused(t, 0.002, second)
    if concurrent_success:
        ok(t, 0.003, other)
    if concurrent_refusal:
        refused(t, 0.004, other)
    ok(t, 1.501, send(t, 1.5))
    limit = t.state.limit
    now, times = 1.501, []
    for _ in range(12):
        now += t.reserve(now, WALL + now)
        times.append(round(now, 6))
        ok(t, now, send(t, now))
    return limit, times


def test_a_refusal_of_a_request_sent_before_the_episode_is_no_retry():
    # Refused together with the first, it says nothing more of the host: the same limit is
    # learned and the host is paced the same (counted as a failed retry, it made the budget
    # exact, not a lower bound to search upward, and eight threads went at 1.4 a second on
    # nginx's 10).
    alone = crawl()
    assert alone[0] is not None
    assert crawl(concurrent_refusal=True) == alone
    # (The pace searched upward from the one request per 1.5 s first learned.)
    gaps = [b - a for a, b in zip(alone[1], alone[1][1:])]
    assert gaps[-1] < gaps[0] / 4


def test_a_success_of_a_request_sent_before_the_episode_is_no_recovery():
    # Let through before the refusal, it counts with the burst before it; the episode
    # lasts until the retry's success (taken for the recovery, it measured the host's
    # window as 2 ms).
    limit, _ = crawl(concurrent_success=True)
    alone, _ = crawl()
    assert limit is not None
    assert alone is not None
    assert limit.burst == 2 * (alone.burst or 0)
    assert limit.window == alone.window
    assert limit.window is not None
    assert limit.window > 1.0


def test_a_retry_refused_is_counted_as_before():
    # A request sent after the episode began (a retry) and refused: a failure of the
    # episode as always (the concurrent case above must differ from it to mean anything).
    t = tracker()
    first, second = send(t, 0.0), send(t, 0.001)
    ok(t, 0.001, first)
    refused(t, 0.002, second)
    refused(t, 1.01, send(t, 1.0))
    ok(t, 2.5, send(t, 2.5))
    retried, (alone, _) = t.state.limit, crawl()
    assert retried is not None
    assert alone is not None
    assert (retried.burst, retried.window) != (alone.burst, alone.window)
