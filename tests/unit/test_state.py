"""``host_key`` and ``HostState``: keys without credentials, JSON round trips, merging."""

from __future__ import annotations

import dataclasses
import json

import pytest

from requests_retryafter import CATEGORIES, HostState, LimitEstimate, Observation, host_key
from requests_retryafter.state import MAX_OBSERVATIONS, SCHEMA_VERSION, WORKER_TTL


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://api.example.org/v1", "api.example.org"),
        ("https://API.Example.ORG/v1", "api.example.org"),
        ("https://api.example.org:443/v1", "api.example.org"),
        ("http://api.example.org:80/", "api.example.org"),
        ("HTTP://api.example.org:80/", "api.example.org"),
        ("https://api.example.org:80/", "api.example.org:80"),
        ("http://api.example.org:443/", "api.example.org:443"),
        ("http://api.example.org:8080/", "api.example.org:8080"),
        ("http://127.0.0.1:8080/x", "127.0.0.1:8080"),
        ("https://user:pass@api.example.org/p?token=x", "api.example.org"),
        ("https://user:p%40ss@api.example.org:8443/p", "api.example.org:8443"),
        ("https://user@api.example.org/", "api.example.org"),
        ("https://a@b:c@api.example.org/", "api.example.org"),
        ("http://[::1]:8080/", "[::1]:8080"),
        ("http://[::1]/", "[::1]"),
        ("https://[2001:DB8::1]:443/", "[2001:db8::1]"),
        ("https://api.example.org/secret/path?token=SECRET#frag", "api.example.org"),
    ],
)
def test_host_key(url: str, key: str):
    assert host_key(url) == key


@pytest.mark.parametrize(
    "url",
    [
        "https://user:SECRET@api.example.org/",
        "https://SECRET@api.example.org:8443/",
        "http://user:SECRET@127.0.0.1:99999/",
        "http://user:SECRET@127.0.0.1:port/",
    ],
)
def test_host_key_never_carries_userinfo(url: str):
    key = host_key(url)
    assert "SECRET" not in key
    assert "@" not in key
    assert "user" not in key


def _state() -> HostState:
    return HostState(
        host="api.example.org",
        category="truthful",
        evidence="3 recoveries matched the header",
        observations=(
            Observation(at=100.0, status=429, header=30.0, form="delta", recovered=30.5),
            Observation(at=200.0, status=503, header=None, failed_until=4.0, countdown=False),
            Observation(at=210.0, status=429, header=None, recovered=1.0, at_random=True),
        ),
        limit=LimitEstimate(
            rate=0.5,
            window=60.0,
            documented=1.0,
            updated_at=150.0,
            shortest=50.0,
            shares=3,
            opening=30,
            opening_clock=False,
        ),
        limit_history=((150.0, 0.5),),
        blocked_until=230.0,
        held_until=0.0,
        category_changed_at=131.0,
        updated_at=231.0,
    )


def test_categories():
    assert CATEGORIES == (
        "unknown",
        "truthful",
        "always_zero",
        "constant_overstated",
        "unreliable",
        "absent",
    )
    assert HostState("h").category == "unknown"


def test_json_round_trip():
    state = _state()
    text = state.to_json()
    assert HostState.from_json(text) == state
    data = json.loads(text)
    assert data["v"] == SCHEMA_VERSION
    assert data["host"] == "api.example.org"
    assert data["category"] == "truthful"


def test_json_round_trip_of_an_empty_state():
    state = HostState("h:1")
    assert HostState.from_json(state.to_json()) == state


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        "null",
        '{"v": 999, "host": "h"}',
        '{"host": "h"}',
        '{"v": 1}',
        '{"v": 1, "host": "h", "category": "liar"}',
        '{"v": 1, "host": "h", "observations": [{"status": 429}]}',
        '{"v": 1, "host": "h", "observations": [{"at": "x", "status": 429, "header": null}]}',
        '{"v": 1, "host": "h", "limit": {"window": 3}}',
        '{"v": 1, "host": "h", "blocked_until": "soon"}',
    ],
)
def test_from_json_rejects_bad_text_with_value_error(text: str):
    with pytest.raises(ValueError):
        HostState.from_json(text)


def test_from_json_keeps_the_newest_observations():
    obs = [Observation(at=float(i), status=429, header=1.0) for i in range(MAX_OBSERVATIONS + 5)]
    data = HostState("h", observations=tuple(obs)).to_dict()
    state = HostState.from_dict(data)
    assert len(state.observations) == MAX_OBSERVATIONS
    assert state.observations[-1].at == float(MAX_OBSERVATIONS + 4)


def test_with_observation_replaces_the_same_episode():
    open_ = Observation(at=100.0, status=429, header=30.0)
    closed = dataclasses.replace(open_, recovered=31.0)
    state = HostState("h").with_observation(open_).with_observation(closed)
    assert state.observations == (closed,)
    # A record without recovery never replaces one with it.
    assert state.with_observation(open_).observations == (closed,)


def test_an_episode_taken_for_a_refusal_at_random_stays_one_whichever_writer_is_newer():
    seen = Observation(at=100.0, status=429, header=None, recovered=1.0)
    marked = dataclasses.replace(seen, at_random=True)
    a = HostState("h", observations=(marked,), updated_at=10.0)
    b = HostState("h", observations=(seen,), updated_at=20.0)
    for merged in (a.merge(b), b.merge(a), a.with_observation(seen)):
        assert merged.observations == (marked,)


def test_a_stored_at_random_that_is_no_boolean_is_refused():
    data = _state().to_dict()
    data["observations"][-1]["at_random"] = "yes"
    with pytest.raises(ValueError, match="at_random"):
        HostState.from_dict(data)
    del data["observations"][-1]["at_random"]  # written before the field: not at random
    assert not HostState.from_dict(data).observations[-1].at_random


def test_with_observation_keeps_at_most_the_window_and_orders_by_time():
    state = HostState("h")
    for i in reversed(range(MAX_OBSERVATIONS + 3)):
        state = state.with_observation(Observation(at=float(i), status=429, header=None))
    ats = [o.at for o in state.observations]
    assert ats == sorted(ats)
    assert len(ats) == MAX_OBSERVATIONS
    assert ats[-1] == float(MAX_OBSERVATIONS + 2)


def test_merge_unites_observations_and_takes_later_waits():
    a = HostState(
        "h",
        category="truthful",
        observations=(Observation(at=1.0, status=429, header=5.0, recovered=5.0),),
        blocked_until=50.0,
        held_until=0.0,
        updated_at=10.0,
    )
    b = HostState(
        "h",
        category="absent",
        observations=(Observation(at=2.0, status=429, header=None, recovered=3.0),),
        blocked_until=40.0,
        held_until=400.0,
        hold_reason="scheduled reset",
        updated_at=20.0,
    )
    for merged in (a.merge(b), b.merge(a)):
        assert [o.at for o in merged.observations] == [1.0, 2.0]
        assert merged.blocked_until == 50.0
        assert merged.held_until == 400.0
        assert merged.hold_reason == "scheduled reset"
        assert merged.category == "absent"  # from the state changed last
    assert a.merge(None) is a


def test_state_json_has_no_credentials_from_the_url():
    key = host_key("http://user:pass@127.0.0.1:8080/secret/path?token=SECRET")
    text = HostState(key).to_json()
    for secret in ("SECRET", "secret/path", "user:pass", "token="):
        assert secret not in text


def test_workers_concurrent_estimates_are_averaged_and_carry_no_bracket():
    def estimate(by: str, burst: int, window: float) -> HostState:
        limit = LimitEstimate(
            burst / window, window, updated_at=100.0, burst=burst, by=by, shortest=window - 5
        )
        return HostState("h", limit=limit, updated_at=100.0)

    merged = estimate("a", 10, 20.0).merge(estimate("b", 14, 30.0))
    assert merged.limit is not None
    assert (merged.limit.burst, merged.limit.window) == (12, 25.0)
    # Each worker bracketed its own view of the window; the average is no bracket.
    assert merged.limit.shortest is None
    # An estimate made among more workers is still a guess in the average.
    among = estimate("b", 14, 30.0)
    assert among.limit is not None
    among = among.replace(limit=dataclasses.replace(among.limit, shares=4))
    merged = estimate("a", 10, 20.0).merge(among)
    assert merged.limit is not None
    assert merged.limit.shares == 4


def test_an_estimate_stored_before_shares_were_recorded_was_learned_alone():
    data = _state().to_dict()
    assert data["limit"]["shares"] == 3
    del data["limit"]["shares"]
    loaded = HostState.from_dict(data)
    assert loaded.limit is not None
    assert loaded.limit.shares == 1


def test_a_malformed_part_is_left_out_and_the_rest_kept_when_asked():
    good = HostState(
        host="portal.example",
        category="always_zero",
        observations=(Observation(at=1.0, status=429, header=0.0, recovered=5.0),),
        limit=LimitEstimate(2.0, 10.0, burst=20),
        held_until=1_700_000_000.0,
    ).to_dict()
    bad = dict(good)
    bad["observations"] = [good["observations"][0], {"at": "soon"}]
    bad["limit"] = {"rate": "fast"}
    bad["blocked_until"] = -5
    with pytest.raises(ValueError, match="observation"):
        HostState.from_dict(bad)  # strict, as before
    dropped: list = []
    state = HostState.from_dict(bad, dropped)
    assert state.category == "always_zero"
    assert state.observations == HostState.from_dict(good).observations
    assert state.held_until == 1_700_000_000.0
    assert (state.limit, state.blocked_until) == (None, 0.0)
    assert [d.split(" ")[0] for d in dropped] == ["observations[1]", "limit", "blocked_until"]


def test_an_entry_without_a_host_name_is_refused_even_when_parts_may_be_left_out():
    with pytest.raises(ValueError, match="host"):
        HostState.from_dict({"v": 1, "category": "absent"}, [])


def test_a_worker_that_left_is_no_longer_counted_until_it_is_seen_again():
    state = HostState("h").with_worker("a", 100.0).with_worker("b", 105.0)
    assert state.active_worker_ids(110.0) == ("a", "b")
    gone = state.with_worker_left("a", 108.0)
    assert gone.active_worker_ids(110.0) == ("b",)
    # A worker whose last heartbeat is later than its departure is back.
    assert gone.with_worker("a", 112.0).active_worker_ids(113.0) == ("a", "b")
    # Leaving a host one never paced records nothing.
    assert state.with_worker_left("c", 108.0) is state


def test_a_departure_survives_merges_and_the_store_but_not_its_worker():
    mine = HostState("h", updated_at=1.0).with_worker("a", 100.0).with_worker("b", 100.0)
    stored = HostState("h", updated_at=2.0).with_worker("a", 101.0).with_worker("b", 101.0)
    left = mine.merge(stored).with_worker_left("a", 102.0)
    for merged in (left.merge(stored), stored.merge(left)):
        assert merged.active_worker_ids(103.0) == ("b",)
    assert HostState.from_json(left.to_json()) == left
    # Once its heartbeat is forgotten (another worker's is two TTLs newer), so is its
    # departure: the entry does not grow with every adapter that ever closed.
    later = HostState("h", updated_at=3.0).with_worker("b", 100.0 + 3 * WORKER_TTL)
    assert later.merge(left).left == ()


def test_an_entry_from_before_departures_were_recorded_loads_and_a_bad_one_is_dropped():
    data = HostState("h").with_worker("a", 100.0).with_worker_left("a", 101.0).to_dict()
    del data["left"]
    assert HostState.from_dict(data).active_worker_ids(102.0) == ("a",)
    data["left"] = [["a", -1]]
    dropped: list = []
    assert HostState.from_dict(data, dropped).left == ()
    assert len(dropped) == 1
    assert dropped[0].startswith("left[0]")
    assert "left out of range" in dropped[0]


def test_a_kept_even_pace_round_trips_and_a_bad_one_is_dropped():
    state = HostState("h", even_pace=(4.75, 2.0))
    assert HostState.from_json(state.to_json()).even_pace == (4.75, 2.0)
    data = state.to_dict()
    del data["even_pace"]  # an entry from before paces were kept
    assert HostState.from_dict(data).even_pace is None
    for bad in ([0, 2.0], [4.0, -1], [4.0, 0], [float("inf"), 1.0], "fast", [4.0]):
        data["even_pace"] = bad
        dropped: list = []
        assert HostState.from_dict(data, dropped).even_pace is None
        assert [d.split(" ")[0] for d in dropped] == ["even_pace"], bad
        with pytest.raises(ValueError):
            HostState.from_dict(data)


def test_a_rate_on_trial_is_stored_with_the_budget_that_held_before_it():
    state = _state()
    assert state.limit is not None
    trial = dataclasses.replace(state.limit, burst=31, even=True, held=30)
    data = json.loads(json.dumps(state.replace(limit=trial).to_dict()))
    assert data["limit"]["held"] == 30
    loaded = HostState.from_dict(data)
    assert loaded.limit is not None
    assert loaded.limit.held == 30
    del data["limit"]["held"]  # stored before the field existed: no rate on trial
    loaded = HostState.from_dict(data)
    assert loaded.limit is not None
    assert loaded.limit.held is None


def test_a_refutation_of_stated_resets_round_trips_and_merges_by_when_it_was_set():
    refuted = HostState("h", updated_at=50.0, stated_refuted=True, stated_refuted_at=40.0)
    assert HostState.from_json(refuted.to_json()).stated_refuted
    data = refuted.to_dict()
    del data["stated_refuted"], data["stated_refuted_at"]  # an entry from before the field
    assert not HostState.from_dict(data).stated_refuted
    data["stated_refuted"] = "yes"
    with pytest.raises(ValueError, match="stated_refuted"):
        HostState.from_dict(data)
    # A refusal restored the statements later, in an entry otherwise older: it wins.
    restored = HostState("h", updated_at=10.0, stated_refuted=False, stated_refuted_at=45.0)
    assert not refuted.merge(restored).stated_refuted
    assert not restored.merge(refuted).stated_refuted
    again = HostState("h", updated_at=5.0, stated_refuted=True, stated_refuted_at=46.0)
    assert restored.merge(again).stated_refuted
