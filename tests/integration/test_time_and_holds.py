"""Over real HTTP: no sleep beyond this adapter's max_sleep, no hold beyond its max_hold, and no
wait that grows when the wall clock steps back."""

from __future__ import annotations

import pytest

from requests_retryafter import HostHeld, HostState, MemoryStore

RA = "Retry-After"


def test_a_long_wait_another_adapter_stored_is_a_hold_here_not_a_sleep(server, make_session, clock):
    store = MemoryStore()
    now = clock.time()
    # An adapter with max_sleep=3600 obeyed a truthful 1800 s header and stored the wait.
    store.set(server.host, HostState(server.host, blocked_until=now + 1800, blocked_since=now))
    session, _ = make_session(store=store, max_sleep=30)
    with pytest.raises(HostHeld) as info:
        session.get(server.url + "/")
    assert server.count == 0
    assert clock.sleeps == []
    assert info.value.until == pytest.approx(now + 1800)
    assert "max_sleep" in str(info.value)


def test_a_stored_hold_far_in_the_future_lasts_max_hold_at_most(server, make_session, clock):
    store = MemoryStore()
    now = clock.time()
    store.set(server.host, HostState(server.host, held_until=now + 1e10, hold_reason="stored"))
    session, _ = make_session(store=store, max_hold=3600)
    with pytest.raises(HostHeld) as info:
        session.get(server.url + "/")
    assert info.value.until <= now + 3600
    clock.advance(3600)
    assert session.get(server.url + "/").status_code == 200


def test_an_absurd_stated_window_never_holds_the_host(server, make_session, clock):
    server.respond(lambda seen: (200, {"RateLimit-Policy": "1;w=999999999999"}))
    store = MemoryStore()
    session, _ = make_session(store=store)
    for _ in range(5):
        assert session.get(server.url + "/").status_code == 200
    assert server.count == 5
    assert max(clock.sleeps, default=0.0) <= 300
    stored = store.get(server.host)
    assert stored is None or stored.limit is None


def test_a_backward_wall_clock_step_does_not_stretch_the_hosts_wait(server, make_session, clock):
    server.replies((429, {RA: "5"}))
    session, _ = make_session(pace=False)
    assert session.get(server.url + "/").status_code == 200
    assert clock.sleeps == [5.0]
    # After the wait, NTP steps the wall clock back two hours; monotonic time goes on.
    clock.step_wall(-7200)
    for _ in range(3):
        assert session.get(server.url + "/").status_code == 200
    assert clock.sleeps == [5.0]


def test_a_damaged_state_a_store_hands_over_is_dropped_and_replaced(
    server, make_session, clock, caplog
):
    store = MemoryStore()
    now = clock.time()
    damaged = HostState(server.host, held_until=float("inf"), blocked_until=float("nan"))
    store.set(server.host, damaged)
    server.replies((429, {RA: "2"}))
    session, _ = make_session(store=store)
    with caplog.at_level("WARNING", logger="requests_retryafter"):
        assert session.get(server.url + "/").status_code == 200
    assert any("stored state dropped" in r.getMessage() for r in caplog.records)
    written = store.get(server.host)
    assert written is not None
    assert written is not damaged
    assert HostState.from_dict(written.to_dict()).blocked_until <= now + 2 + 1e-6


def test_a_hold_names_its_end_as_a_utc_time(server, make_session, clock):
    store = MemoryStore()
    store.set(server.host, HostState(server.host, held_until=1_700_003_600.0, hold_reason="r"))
    session, _ = make_session(store=store)
    with pytest.raises(HostHeld, match=r"held until 2023-11-14T23:13:20Z"):
        session.get(server.url + "/")
