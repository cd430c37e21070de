"""Stored host state: damage is refused, what a newer version wrote is kept."""

from __future__ import annotations

import json
import math

import pytest

from requests_retryafter import HostState, LimitEstimate
from requests_retryafter.state import UnsupportedSchema

WALL = 1_700_000_000.0


def stored(**changes: object) -> dict:
    data = HostState(
        "api.example.org",
        limit=LimitEstimate(2.0, window=10.0, burst=20, anchor=WALL),
        updated_at=WALL,
    ).to_dict()
    data.update(changes)
    return data


def with_limit(**changes: object) -> dict:
    data = stored()
    data["limit"].update(changes)
    return data


@pytest.mark.parametrize(
    "data",
    [
        with_limit(anchor=math.nan),
        with_limit(window=1e-310),
        with_limit(window=-5.0),
        with_limit(rate=0.0),
        with_limit(rate=math.inf),
        with_limit(burst=0),
        with_limit(shortest=0.0),
        with_limit(shortest="soon"),
        with_limit(shares=0),
        with_limit(shares=math.nan),
        with_limit(held=0),
        with_limit(held="some"),
        with_limit(opening=0),
        with_limit(opening=math.inf),
        with_limit(opening_clock="no"),
        with_limit(opening_clock=1),
        stored(held_until=math.inf),
        stored(blocked_until=-1.0),
        stored(updated_at=1e300),
        stored(limit_history=[[WALL, math.nan]]),
        stored(workers=[["w1", math.inf]]),
        stored(observations=[{"at": WALL, "status": 429, "header": math.nan}]),
        stored(observations=[{"at": WALL, "status": 99999, "header": None}]),
        stored(observations=[{"at": WALL, "status": 429, "header": None, "countdown": "yes"}]),
        stored(observations=7),
        stored(host=""),
        stored(host=["x"]),
    ],
    ids=lambda d: json.dumps(d, default=str)[:60],
)
def test_a_damaged_value_is_refused_as_a_value_error(data):
    with pytest.raises(ValueError):
        HostState.from_dict(data)


def test_non_finite_values_read_from_json_text_are_refused():
    text = json.dumps(stored(held_until=math.inf))  # Python writes Infinity
    assert "Infinity" in text
    with pytest.raises(ValueError, match="held_until"):
        HostState.from_json(text)


def test_a_deeply_nested_entry_is_a_value_error_not_a_recursion_error():
    text = '{"v": 1, "host": "h", "limit": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ValueError):
        HostState.from_json(text)


def test_state_is_never_written_with_nan():
    state = HostState("h", blocked_until=math.nan)
    with pytest.raises(ValueError):
        state.to_json()


def test_a_newer_versions_entry_is_unsupported_not_merely_malformed():
    with pytest.raises(UnsupportedSchema):
        HostState.from_dict(stored(v=2))


def test_fields_a_newer_version_added_are_kept_through_a_rewrite():
    data = stored(shaping={"lanes": [1, 2]}, zz_note="kept")
    state = HostState.from_dict(data)
    rewritten = state.replace(category="truthful", updated_at=WALL + 5).to_dict()
    assert rewritten["shaping"] == {"lanes": [1, 2]}
    assert rewritten["zz_note"] == "kept"
    # and through a merge with a state that never saw them
    merged = HostState("api.example.org", updated_at=WALL + 10).merge(state)
    assert merged.to_dict()["shaping"] == {"lanes": [1, 2]}


def test_a_wait_keeps_the_moment_it_was_granted_through_a_merge():
    a = HostState("h", blocked_until=WALL + 30, blocked_since=WALL, updated_at=WALL)
    b = HostState("h", blocked_until=WALL + 10, blocked_since=WALL - 5, updated_at=WALL + 1)
    merged = a.merge(b)
    assert (merged.blocked_until, merged.blocked_since) == (WALL + 30, WALL)
    assert HostState.from_dict(merged.to_dict()) == merged
