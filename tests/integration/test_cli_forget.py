"""``forget HOST`` and ``unhold HOST``: an operator's way to drop or release a host in a store,
and a hold the adapter set cleared for real requests."""

from __future__ import annotations

import time

import pytest
import requests

from requests_retryafter import HostHeld, HostState, RetryAfterAdapter, cli, open_store

RA = "Retry-After"


@pytest.fixture
def spec(tmp_path):
    return f"json://{tmp_path}/hosts.json"


def put(spec, *states):
    store = open_store(spec)
    try:
        for state in states:
            store.set(state.host, state)
    finally:
        store.close()


def stored(spec, host):
    store = open_store(spec)
    try:
        return store.get(host)
    finally:
        store.close()


def test_forget_drops_the_host(spec, capsys):
    put(spec, HostState("api.example.org", category="truthful"), HostState("other.example"))
    assert cli.main(["forget", "API.example.org", "--store", spec]) == 0
    assert "api.example.org: forgotten" in capsys.readouterr().out
    assert stored(spec, "api.example.org") is None
    assert stored(spec, "other.example") is not None


def test_forget_takes_a_url(spec, capsys):
    put(spec, HostState("127.0.0.1:8080"))
    assert cli.main(["forget", "http://user:pw@127.0.0.1:8080/x?token=t", "--store", spec]) == 0
    assert stored(spec, "127.0.0.1:8080") is None
    assert "pw" not in capsys.readouterr().out


@pytest.mark.parametrize("command", ["forget", "unhold"])
def test_a_missing_host_says_so_and_exits_1(spec, command, capsys):
    put(spec, HostState("api.example.org"))
    assert cli.main([command, "api.example", "--store", spec]) == 1
    err = capsys.readouterr().err
    assert "api.example: not in the store; did you mean api.example.org?" in err
    assert stored(spec, "api.example.org") is not None


@pytest.mark.parametrize("command", ["forget", "unhold"])
def test_a_missing_store_file_is_not_created(tmp_path, command, capsys):
    path = tmp_path / "nope.json"
    assert cli.main([command, "h", "--store", f"json://{path}"]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert not path.exists()


@pytest.mark.parametrize("command", ["forget", "unhold"])
def test_store_is_required(command, monkeypatch, capsys):
    monkeypatch.delenv("REQUESTS_RETRYAFTER_STORE", raising=False)
    assert cli.main([command, "h"]) == 2
    assert "no store given" in capsys.readouterr().err


def test_unhold_clears_hold_and_shared_wait_and_keeps_the_rest(spec, capsys):
    now = time.time()
    put(
        spec,
        HostState(
            "api.example.org",
            category="truthful",
            held_until=1_900_000_000.0,
            held_since=now,
            hold_reason="Retry-After 7200 obeyed",
            blocked_until=now + 100,
            blocked_since=now,
        ),
    )
    assert cli.main(["unhold", "api.example.org", "--store", spec]) == 0
    out = capsys.readouterr().out
    assert "hold until 2030-03-17T17:46:40Z cleared (Retry-After 7200 obeyed)" in out
    assert "shared wait until " in out
    assert "Z cleared" in out
    state = stored(spec, "api.example.org")
    assert (state.held_until, state.hold_reason, state.blocked_until) == (0.0, "", 0.0)
    assert state.category == "truthful"


def test_unhold_of_a_host_not_held(spec, capsys):
    put(spec, HostState("api.example.org"))
    assert cli.main(["unhold", "api.example.org", "--store", spec]) == 0
    assert "not held" in capsys.readouterr().out


def test_unhold_releases_a_hold_the_adapter_set(server, clock, spec, capsys):
    """A real hold (a trusted wait past max_sleep) stops calls; after ``unhold`` the next
    adapter on the store sends again. Virtual time starts at the real time here, so that the
    CLI's "now" and the adapter's agree."""
    clock.advance(time.time() - clock.time())
    server.replies((429, {RA: "3600"}), 200)
    env = {"REQUESTS_RETRYAFTER_PLAUSIBLE_WAIT": "7200"}

    def session_on_store():
        adapter = RetryAfterAdapter(store=spec, clock=clock, environ=env, seed=0)
        session = requests.Session()
        session.mount("http://", adapter)
        return session, adapter

    session, adapter = session_on_store()
    with pytest.raises(HostHeld):
        session.get(server.url + "/x")
    adapter.close()
    session, adapter = session_on_store()
    with pytest.raises(HostHeld):
        session.get(server.url + "/x")  # the stored hold stops it before the wire
    adapter.close()
    assert server.count == 1
    assert cli.main(["unhold", server.host, "--store", spec]) == 0
    assert "cleared" in capsys.readouterr().out
    session, adapter = session_on_store()
    assert session.get(server.url + "/x").status_code == 200
    adapter.close()
    assert server.count == 2
