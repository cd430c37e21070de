"""The healthy host's short path: ``HostTracker.clear`` says a request may go with no wait and
nothing to decide only where a call's full turn would say so too.

The adapter asks ``clear`` before every send and skips the turn when it says yes (most
requests to a healthy host). These tests drive a tracker through random answers, stored
states and the passing of time, and compare the two at every step.
"""

from __future__ import annotations

import random
from typing import List, Optional, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from requests_retryafter import HostState, LimitEstimate, Policy, parse_retry_after
from requests_retryafter.calls import CallState
from requests_retryafter.engine import HostTracker
from requests_retryafter.parsing import parse_rate_limit

WALL = 1_700_000_000.0

#: One step: what happens after ``dt`` seconds (an answer, or only time passing).
STEP = st.tuples(
    st.sampled_from(["ok", "stated", "refused", "wait"]),
    st.floats(min_value=0.0, max_value=90.0),
    st.sampled_from([None, "0", "1", "2", "30", "3600", "Thu, 01 Jan 1970 00:00:00 GMT"]),
    st.integers(min_value=0, max_value=12),
)

STORED = st.one_of(
    st.none(),
    st.builds(
        lambda rate, burst: LimitEstimate(rate, window=burst / rate, burst=burst),
        st.floats(min_value=0.05, max_value=50.0),
        st.integers(min_value=1, max_value=100),
    ),
)


def _tracker(
    limit: Optional[LimitEstimate], held: float, blocked: float, pace: bool
) -> HostTracker:
    state = HostState(
        "h",
        limit=limit,
        held_until=WALL + held if held else 0.0,
        held_since=WALL - 1 if held else 0.0,
        hold_reason="stored" if held else "",
        blocked_until=WALL + blocked if blocked else 0.0,
        blocked_since=WALL - 1 if blocked else 0.0,
    )
    return HostTracker(state, Policy(pace=pace), random.Random(0))


def _turn(tracker: HostTracker, mono: float) -> Tuple[float, bool, bool]:
    call = CallState("h", tracker.policy, mono, rng=random.Random(0))
    turn = call.turn(tracker, mono, WALL + mono)
    return turn.wait, turn.decision is None, turn.shared


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    limit=STORED,
    held=st.sampled_from([0.0, -5.0, 20.0]),
    blocked=st.sampled_from([0.0, -5.0, 3.0, 40.0]),
    pace=st.booleans(),
    steps=st.lists(STEP, max_size=25),
)
def test_clear_only_where_the_full_turn_sends_at_once_deciding_nothing(
    limit: Optional[LimitEstimate],
    held: float,
    blocked: float,
    pace: bool,
    steps: List[Tuple[str, float, Optional[str], int]],
) -> None:
    tracker = _tracker(limit, held, blocked, pace)
    mono = 0.0
    for kind, dt, retry_after, remaining in [("wait", 0.0, None, 0), *steps]:
        mono += dt
        wall = WALL + mono
        if tracker.clear(mono):
            # Asked again, the full turn agrees: send now, nothing decided, no schedule.
            assert _turn(tracker, mono) == (0.0, True, False)
        else:
            _turn(tracker, mono)  # (as the adapter does: the turn counts the waits down)
        if kind == "ok":
            tracker.on_success(mono, wall, sent=mono)
        elif kind == "stated":
            headers = {
                "RateLimit-Limit": "10",
                "RateLimit-Remaining": str(remaining),
                "RateLimit-Reset": "1",
            }
            tracker.on_success(mono, wall, sent=mono)
            tracker.on_stated_limit(parse_rate_limit(headers, now=wall), mono, wall, sent=mono)
        elif kind == "refused":
            parsed = parse_retry_after(retry_after, now=wall)
            tracker.on_rejection(429, parsed, parse_rate_limit({}, now=wall), mono, wall, 1)


def test_a_healthy_host_is_clear_and_a_refused_one_until_its_wait_is_counted_down():
    tracker = _tracker(None, 0.0, 0.0, True)
    assert tracker.clear(0.0)  # a host never refused: the short path
    tracker.on_rejection(
        429, parse_retry_after("2", now=WALL), parse_rate_limit({}, now=WALL), 0.0, WALL, 1
    )
    assert not tracker.clear(0.5)  # its wait stands
    assert _turn(tracker, 0.5)[0] > 0
    assert not tracker.clear(1.0)
    # Once the wait, counted down by a turn, has run out, the host is clear again.
    _turn(tracker, 5.0)
    assert tracker.clear(5.0)


def test_a_paced_host_is_never_clear():
    tracker = _tracker(LimitEstimate(1.0, window=10.0, burst=10), 0.0, 0.0, True)
    assert not tracker.clear(0.0)
    unpaced = _tracker(LimitEstimate(1.0, window=10.0, burst=10), 0.0, 0.0, False)
    assert unpaced.clear(0.0)  # pace=False: a learned limit paces nothing
