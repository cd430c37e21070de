"""``HostTracker`` and answers to requests that were on the wire together (an adapter's
threads): an answer to a request sent before a rejection episode began belongs before it."""

from __future__ import annotations

import random
from typing import List, Optional, Tuple

import pytest

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


def _stating(t: HostTracker, at: float, seq: int, left: int, reset: float) -> float:
    """A 2xx at ``at`` to the request numbered ``seq`` (sent at once), stating 5 per window,
    ``left`` remaining, the reset at ``reset``, recorded as the adapter records it. Returns
    when the next request may go."""
    t.on_success(at, WALL + at, sent=at, seq=seq)
    info = RateLimitInfo(limit=5, remaining=left, reset_after=reset - at)
    t.on_stated_limit(info, at, WALL + at, sent=at, seq=seq)
    t.returned()
    return at + t.gate(at, WALL + at)


def test_answers_out_of_the_order_counted_are_no_other_clients_requests():
    # Windows of 5 per 1 s opened at a request (a length shown in an earlier run), the
    # reset an epoch second rounded up. The first, sent one request at a time, runs out at
    # 0.7 and is predicted to free at 1.3. The second's five go together (threads): the
    # host counts the second before the first, and the last place's answer comes back
    # while the fourth request is on the wire. Read in the order they came, ``remaining``
    # fell by two between answers (another client, it seemed: only the stated reset, 3.0,
    # was waited for), and the window's fifth most recent answer was the first window's
    # (a reset predicted at 1.7: early). Counted from its own first request, the second
    # window frees a second after it went.
    t = HostTracker(
        HostState("h", limit=LimitEstimate(5.0, 1.0, 5.0, source="stated")),
        Policy(),
        random.Random(0),
    )
    margin = t.tuning.reset_margin
    for at, left in zip((0.3, 0.4, 0.5, 0.6, 0.7), (4, 3, 2, 1, 0)):
        freed = _stating(t, at, t.number(), left, 2.0)
    assert freed == pytest.approx(1.3 + margin)
    seqs = [t.number() for _ in range(5)]  # all sent at ``freed``
    at = freed + 0.001
    counted = {seqs[1]: 4, seqs[0]: 3, seqs[2]: 2, seqs[3]: 1, seqs[4]: 0}
    for seq in (seqs[1], seqs[2], seqs[0], seqs[4]):
        free = _stating(t, at, seq, counted[seq], 3.0)
    assert free == pytest.approx(at + 1.0 + margin)
    assert _stating(t, at, seqs[3], counted[seqs[3]], 3.0) == pytest.approx(free)


def test_another_clients_request_between_two_answers_is_still_seen():
    # The same two windows, one request at a time, and another client's request counted
    # between two of this run's: only the stated reset is waited for, as before.
    t = HostTracker(
        HostState("h", limit=LimitEstimate(5.0, 1.0, 5.0, source="stated")),
        Policy(),
        random.Random(0),
    )
    for at, left in zip((0.3, 0.4, 0.5, 0.6, 0.7), (4, 3, 2, 1, 0)):
        freed = _stating(t, at, t.number(), left, 2.0)
    for at, left in zip((freed, 1.4, 1.5, 1.6), (4, 3, 1, 0)):
        free = _stating(t, at, t.number(), left, 3.0)
    assert free == pytest.approx(3.0)


def test_the_last_place_stated_is_answered_before_the_next_request_goes():
    t = tracker()
    first = t.number()
    assert t.answered_first(first)  # the run's first: its answer may say what remains
    _stating(t, 0.0, first, 2, 1.0)
    assert not t.answered_first(t.number())  # two places left
    third = t.number()
    assert t.answered_first(third)  # the last, with the second on the wire
    # Answered out of order: the third's answer says one remains, the second is still on
    # the wire (the host may count it after): the next takes the last place again.
    _stating(t, 0.01, third, 1, 1.0)
    assert t.answered_first(t.number())


def _refused_beside(limit: int, left: int) -> Tuple[HostTracker, bool]:
    """A host that states ``limit`` per window: four answers, the last saying ``left``
    remain; two requests then go together (threads), and the second is refused (its reset
    0.95 s away) and retried with success at 1.8. Returns the tracker and whether the
    refused request went past the places the statements left it (``outruns``)."""
    t = HostTracker(HostState("h"), Policy(), random.Random(0))
    for i, remaining in enumerate(range(left + 3, left - 1, -1)):
        seq = t.number()
        t.on_success(0.01 * i, WALL + 0.01 * i, sent=0.01 * i, seq=seq)
        info = RateLimitInfo(limit=limit, remaining=remaining, reset_after=0.95)
        t.on_stated_limit(info, 0.01 * i, WALL + 0.01 * i, sent=0.01 * i, seq=seq)
        t.returned()
    first = t.number()
    assert not t.outruns(first)  # alone on the wire
    second = t.number()
    outran = t.outruns(second)
    parsed = parse_retry_after("1", now=WALL + 0.05)
    info = RateLimitInfo(limit=limit, remaining=0, reset_after=0.95)
    t.on_rejection(429, parsed, info, 0.05, WALL + 0.05, 1, second, outran=outran)
    t.returned()
    t.on_success(0.06, WALL + 0.06, sent=0.04, seq=first)
    t.returned()
    retry = t.number()
    t.on_success(1.8, WALL + 1.8, sent=1.8, seq=retry)
    t.returned()
    return t, outran


def test_a_refusal_of_threads_outrunning_the_statements_teaches_no_limit():
    # The last answer said one place remains; two requests go together, and the second,
    # past that place, is refused: it says only that the threads outran the statements,
    # which pace the host. (Learned from, it paced a moving window of 5 a second at 5 per
    # 1.8 s, the wait for a reset stated rounded up taken for the host's window.)
    t, outran = _refused_beside(5, 1)
    assert outran
    assert t.state.limit is None


def test_a_refusal_the_statements_left_a_place_for_teaches_a_limit():
    # The answers state an hour's quota of 5000 with thousands left, and the host refuses
    # by another limit it does not state (a second's: as GitHub states its primary limit
    # and not its secondary ones). The refused request had a place by the statements: the
    # refusal is of a limit they do not state, learned from as any refusal is. (Taken for
    # threads outrunning the statements, eight threads were refused together after every
    # recovery: more refusals than successes.)
    t, outran = _refused_beside(5000, 4000)
    assert not outran
    assert t.state.limit is not None


def test_answers_overtaken_by_a_later_ones_do_not_bring_places_back():
    # Three requests go with three places left; the host counts them in the order they
    # went, and their answers come back in the opposite order: the latest says none
    # remains, the older ones (one and two left) only say what it was before it.
    t = tracker()
    _stating(t, 0.0, t.number(), 3, 1.0)
    seqs = [t.number() for _ in range(3)]
    for seq, left in zip(reversed(seqs), (0, 1, 2)):
        _stating(t, 0.01, seq, left, 1.0)
    assert t.answered_first(t.number())


def test_once_a_request_came_back_threads_go_together_on_a_host_that_states_nothing():
    t = tracker()
    first = t.number()
    assert t.answered_first(first)
    t.on_success(0.01, WALL + 0.01, sent=0.0, seq=first)
    t.returned()
    assert not any(t.answered_first(t.number()) for _ in range(8))


def test_statements_of_none_remaining_the_host_refuted_do_not_hold_the_threads():
    # A host whose statements of none remaining its own answers refuted (requests let
    # through before the reset they stated, see _Refuted): they do not make each request
    # wait for its answer before the next goes (eight threads would go one at a time).
    t = HostTracker(HostState("h", stated_refuted=True), Policy(), random.Random(0))
    for at in (0.0, 0.01, 0.02):
        _stating(t, at, t.number(), 0, 86_400.0)
    assert not t.answered_first(t.number())


def test_an_answer_counted_before_the_run_out_but_recorded_after_it_changes_nothing():
    # Four requests go with four places left; the host counts the fourth before the third
    # (1 left, then none), and the third's answer, saying none remains, is recorded first.
    # The fourth's, numbered later but on the wire as the third's came, says only how the
    # window stood before: the wait for the window to free a place stands, and the next
    # request is answered before another goes. (Taken for a place freed, it let a request
    # go into the full window: refused.)
    t = tracker()
    _stating(t, 0.0, t.number(), 4, 10.0)
    seqs = [t.number() for _ in range(4)]
    for seq, left in zip(seqs[:3], (3, 2, 0)):
        free = _stating(t, 0.01, seq, left, 10.0)
    assert free > 5.0
    assert _stating(t, 0.02, seqs[3], 1, 10.0) == pytest.approx(free)
    assert t.answered_first(t.number())
