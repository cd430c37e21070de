"""Characterisation against real servers: each kind of host ends in its category, and the
adapter treats it as DOMAIN.md says (time is virtual; nothing sleeps for real).

The hosts are fixed windows (``window_host``): the real recovery after a refusal is what is left
of the window. Pacing is off where the test needs the host to keep refusing, episode after
episode (with pacing on, a well-behaved client stops being refused).
"""

from __future__ import annotations

import logging
import math
from typing import List, Tuple

import pytest
from _crawling import crawl

from requests_retryafter import Decision, HostHeld, RetryAfterAdapter
from requests_retryafter.clock import FakeClock
from requests_retryafter.testing import FixedWindow, Limiter, RateLimitedServer, SlidingWindow


def countdown(remaining: float, episode: int) -> str:
    """A truthful header: the whole seconds until the host recovers."""
    return str(math.ceil(remaining))


def drive(session, url: str, box, episodes: int, max_calls: int = 300) -> None:
    """Make calls until the host has recovered from ``episodes`` rejection episodes."""
    for _ in range(max_calls):
        if box.recovered >= episodes:
            return
        r = session.get(url, timeout=5)
        assert r.status_code == 200
    pytest.fail(f"only {box.recovered} episodes after {max_calls} calls")


def sleeps(decisions: List[Decision]) -> List[Decision]:
    """The waits decided after a rejection."""
    return [d for d in decisions if d.event == "sleep" and d.status in (429, 503)]


def test_truthful_host(window_host, make_session, server, clock):
    box = window_host(allow=2, window=20.0, header=countdown)
    decisions: List[Decision] = []
    session, adapter = make_session(on_decision=decisions.append, pace=False, max_attempts=10)
    drive(session, server.url + "/data", box, episodes=4)
    state = adapter.store.get(server.host)
    assert state is not None
    assert state.category == "truthful"
    # Obeyed as sent: one refusal per episode, each followed by a wait of exactly the header.
    assert box.refusals[:4] == [1, 1, 1, 1]
    for d in sleeps(decisions):
        assert d.trusted
        assert d.wait == d.header
    assert min(clock.sleeps) >= 0


def test_always_zero_host(window_host, make_session, server, clock):
    box = window_host(allow=2, window=10.0, header=lambda remaining, episode: "0")
    decisions: List[Decision] = []
    session, adapter = make_session(on_decision=decisions.append, pace=False, max_attempts=20)
    drive(session, server.url + "/data", box, episodes=4)
    state = adapter.store.get(server.host)
    assert state is not None
    assert state.category == "always_zero"
    waits = sleeps(decisions)
    # Never a hot loop: every wait after a refusal is at least the floor, none trusts the 0.
    assert waits
    assert all(d.wait >= 1.0 and not d.trusted for d in waits)
    # On the wire, a request after a refusal comes at least 1 s later.
    after_refusal = [b[0] - a[0] for a, b in zip(box.log, box.log[1:]) if a[1] == 429]
    assert len(after_refusal) >= 4
    assert min(after_refusal) >= 1.0
    # Once the real recovery is learned, an episode needs few refusals.
    assert box.refusals[-1] <= 2


def test_constant_overstated_host(window_host, make_session, server, clock):
    box = window_host(allow=2, window=20.0, header=lambda remaining, episode: "3600")
    decisions: List[Decision] = []
    session, adapter = make_session(on_decision=decisions.append, pace=False, max_attempts=20)
    drive(session, server.url + "/data", box, episodes=5)
    state = adapter.store.get(server.host)
    assert state is not None
    assert state.category == "constant_overstated"
    # Never slept 3600 (nor anything near it), never held the host.
    assert max(clock.sleeps) <= 300.0
    assert all(d.event != "hold" for d in decisions)
    assert state.held_until == 0.0
    # It probed with its own backoff at first ...
    first = sleeps(decisions)[0]
    assert not first.trusted
    assert first.wait < 20.0
    # ... and later clamps to the recovery it learned: the last episodes need at most two
    # refusals, and their waits add up to no more than two windows.
    assert max(box.refusals[-2:]) <= 2
    last_episode = sleeps(decisions)[-box.refusals[-1] :]
    assert sum(d.wait for d in last_episode) <= 2 * 20.0


def test_unreliable_host(window_host, make_session, server, clock):
    values = ["2", "600", "3", "900"]
    box = window_host(
        allow=2, window=30.0, header=lambda remaining, episode: values[(episode - 1) % 4]
    )
    decisions: List[Decision] = []
    session, adapter = make_session(on_decision=decisions.append, pace=False, max_attempts=30)
    drive(session, server.url + "/data", box, episodes=4)
    state = adapter.store.get(server.host)
    assert state is not None
    assert state.category == "unreliable"
    waits = sleeps(decisions)
    assert all(1.0 <= d.wait <= 300.0 for d in waits)
    # Once unreliable, a header is only a hint: a short one does not shorten own backoff,
    # a long one stretches it at most twice (never to 600 or 900 s).
    later = [d for d in waits if d.category == "unreliable" and d.header is not None]
    assert {d.header for d in later} >= {3.0, 600.0, 900.0}
    assert all(d.wait >= d.header for d in later if d.header < 10)
    assert all(d.wait < 250.0 for d in later)


def test_absent_header_host(window_host, make_session, server, clock):
    box = window_host(allow=2, window=10.0, header=lambda remaining, episode: None)
    decisions: List[Decision] = []
    session, adapter = make_session(on_decision=decisions.append, pace=False, max_attempts=20)
    drive(session, server.url + "/data", box, episodes=3)
    state = adapter.store.get(server.host)
    assert state is not None
    assert state.category == "absent"
    assert all(1.0 <= d.wait <= 300.0 and d.header is None for d in sleeps(decisions))


def test_503_host_is_characterised_too(window_host, make_session, server):
    box = window_host(allow=2, window=10.0, header=lambda r, e: "0", status=503)
    session, adapter = make_session(pace=False, max_attempts=20)
    drive(session, server.url + "/data", box, episodes=2)
    state = adapter.store.get(server.host)
    assert state is not None
    assert state.category == "always_zero"
    assert {o.status for o in state.observations} == {503}


# -- a countdown to the top of the hour -----------------------------------------------------


def to_next_hour(now: float) -> float:
    return math.floor(now / 3600.0 + 1) * 3600.0


def test_hourly_countdown_is_held_once_a_second_rejection_counts_it_down(
    server, make_session, clock, logs
):
    reset = to_next_hour(clock.time())

    def hourly(seen):
        if seen.time < reset:
            return 429, {"Retry-After": str(math.ceil(reset - seen.time))}
        return 200, {}

    server.respond(hourly)
    session, _ = make_session()
    with pytest.raises(HostHeld) as info:
        session.get(server.url + "/data")
    held = info.value
    assert held.until == reset
    assert held.host == server.host
    assert held.reason
    assert held.response is not None
    assert held.response.status_code == 429
    # One probe after the floor (1 s), whose header counted down to the same reset: held
    # after at most two rejections, never by clock arithmetic on the first.
    assert server.count == 2
    assert clock.sleeps == [1.0]

    # Until the reset, no request touches the wire: every call raises at once.
    start = clock.time()
    for at in (start + 60.0, start + 660.0, reset - 1.0):
        clock.advance(at - clock.time())
        with pytest.raises(HostHeld) as again:
            session.get(server.url + "/other")
        assert again.value.until == reset
        assert again.value.response is None
    assert server.count == 2
    assert clock.sleeps == [1.0]

    # At the reset, requests go through.
    clock.advance(reset - clock.time())
    assert session.get(server.url + "/data").status_code == 200
    assert server.count == 3
    assert [t >= reset for t in server.times] == [False, False, True]
    # Held is logged as a warning with the host.
    assert any(server.host in m and "held" in m for m in logs.at(logging.WARNING))


def test_large_truthful_countdown_is_not_constant_overstated(server, make_session, clock):
    # Three requests an hour; then 429 with the seconds to the top of the hour.
    served = {}
    refused = {}

    def hourly(seen):
        hour = math.floor(seen.time / 3600.0)
        if served.get(hour, 0) < 3:
            served[hour] = served.get(hour, 0) + 1
            return 200, {}
        refused[hour] = refused.get(hour, 0) + 1
        return 429, {"Retry-After": str(math.ceil(to_next_hour(seen.time) - seen.time))}

    server.respond(hourly)
    session, adapter = make_session()
    holds = []
    for _ in range(5):  # five hours
        for _ in range(5):
            try:
                assert session.get(server.url + "/data").status_code == 200
            except HostHeld as exc:
                holds.append(exc.until)
                clock.advance(exc.until - clock.time())
                break
    # Held every hour, each time until the top of the next hour.
    assert len(holds) == 5
    assert all(until % 3600 == 0 for until in holds)
    state = adapter.store.get(server.host)
    assert state is not None
    assert state.category == "truthful"
    # Held after at most two refusals in the first hour (the second, 1 s on, counted the
    # header down), and after one in every later hour (the host is known truthful by then):
    # once held, nothing more went on the wire that hour.
    hours = sorted(refused)
    assert refused[hours[0]] <= 2
    assert all(refused[hour] == 1 for hour in hours[1:])
    assert all(served[hour] == 3 for hour in served)


# -- drift ------------------------------------------------------------------------------------


def test_drift_from_truthful_to_constant_overstated_is_logged_and_followed(
    window_host, make_session, server, clock, logs
):
    phase = {"liar": False}

    def header(remaining: float, episode: int) -> str:
        return "3600" if phase["liar"] else countdown(remaining, episode)

    box = window_host(allow=2, window=20.0, header=header)
    categories: List[str] = []
    session, adapter = make_session(pace=False, max_attempts=20)

    def category() -> str:
        state = adapter.store.get(server.host)
        assert state is not None
        return state.category

    drive(session, server.url + "/d", box, episodes=3)
    assert category() == "truthful"
    logs.clear()
    phase["liar"] = True
    for n in range(4, 16):
        drive(session, server.url + "/d", box, episodes=n)
        categories.append(category())
    # The change away from truthful comes within a few overstated episodes, as a warning.
    assert "truthful" not in categories[3:]
    warnings = logs.at(logging.WARNING)
    assert any("category truthful ->" in m and server.host in m for m in warnings)
    # It is followed: once the window holds only the new behaviour, it is constant_overstated.
    assert categories[-1] == "constant_overstated"
    # And no sleep ever went near the 3600 s asked for.
    assert max(clock.sleeps) <= 300.0


def crawl_giving_up(behaviour: str, limiter: Limiter, calls: int = 200) -> Tuple[int, int]:
    """``calls`` URLs, one at a time, on virtual time, from ``limiter`` behind a server whose
    Retry-After is ``behaviour`` (``constant`` sends 1), each call that gave up
    (:class:`RetryLimitExceeded`, default attempts) made again: how many gave up, and the
    requests refused."""
    clock = FakeClock(start=1_700_000_000.0)
    with RateLimitedServer(limiter, behaviour, clock=clock, constant=1) as portal:
        adapter = RetryAfterAdapter(clock=clock, store="memory://", environ={}, seed=0)
        return crawl(portal, adapter, calls), portal.rejected


@pytest.mark.parametrize("window", [FixedWindow(20, 60), SlidingWindow(20, 60)])
def test_a_constant_retry_after_1_costs_no_more_than_no_header(window):
    # "Retry-After: 1" on every 429 of a window of a minute, a lie as "0" is but above the
    # floor: obeyed each second, the host refusing each time, a call used its ten attempts
    # inside the window and gave up, and the next did the same (4 to 6 calls of 200 gave
    # up, 47 to 61 refused). Refused past twice, the header is a hint and own backoff
    # searches for the recovery, as on a host that sends no header.
    gave_up, refused = crawl_giving_up("constant", window.fresh())
    none_gave_up, none_refused = crawl_giving_up("absent", window.fresh())
    assert gave_up <= none_gave_up
    assert refused <= none_refused + 2
