"""CacheControl in front of the adapter, against a real local server on virtual time."""

from __future__ import annotations

import importlib
import sys

import pytest
import requests
from cachecontrol.adapter import CacheControlAdapter
from cachecontrol.cache import DictCache

from requests_retryafter import (
    HostState,
    LimitEstimate,
    MemoryStore,
    RetryAfterAdapter,
    RetryLimitExceeded,
)
from requests_retryafter.contrib.cachecontrol import CachingRetryAfterAdapter, caching_session

FRESH = {"Cache-Control": "max-age=60", "Content-Type": "application/json"}


@pytest.fixture(autouse=True)
def real_dates(server):
    """cachecontrol judges freshness on the real clock: the server's Date reads it too."""
    server.dated_on_clock = False


@pytest.fixture
def wire_sends(monkeypatch):
    """Count the calls that reach RetryAfterAdapter.send (the retry loop and the wire)."""
    calls = []
    original = RetryAfterAdapter.send

    def spy(self, request, *args, **kwargs):
        calls.append(request.url)
        return original(self, request, *args, **kwargs)

    monkeypatch.setattr(RetryAfterAdapter, "send", spy)
    return calls


@pytest.fixture
def session(clock):
    sessions = []

    def build(**kw):
        kw.setdefault("clock", clock)
        kw.setdefault("environ", {})
        kw.setdefault("seed", 0)
        s = caching_session(**kw)
        sessions.append(s)
        return s

    yield build
    for s in sessions:
        s.close()


def test_cache_is_checked_before_the_retry_adapter():
    mro = CachingRetryAfterAdapter.__mro__
    assert mro.index(CacheControlAdapter) < mro.index(RetryAfterAdapter)
    assert mro.index(RetryAfterAdapter) < mro.index(requests.adapters.HTTPAdapter)


def test_caching_session_mounts_one_adapter_for_both_schemes(session):
    s = session()
    adapter = s.get_adapter("https://x.example")
    assert isinstance(adapter, CachingRetryAfterAdapter)
    assert s.get_adapter("http://x.example") is adapter
    assert "CachingRetryAfterAdapter(cache=" in repr(adapter)


def test_cache_hit_sends_nothing_and_never_waits(server, clock, session, wire_sends):
    # The host has a learned limit of one request a minute: anything that reaches the
    # adapter is paced, so a hit that waited or went on the wire would show.
    store = MemoryStore()
    store.set(
        server.host,
        HostState(
            server.host,
            limit=LimitEstimate(rate=1 / 60, window=60.0, updated_at=clock.time()),
            updated_at=clock.time(),
        ),
    )
    s = session(store=store)
    server.respond(lambda seen: (200, FRESH))
    first = s.get(server.url + "/permits", timeout=5)
    first.content  # consuming the body stores it in the cache
    assert first.from_cache is False
    waited = list(clock.sleeps)
    for _ in range(5):
        again = s.get(server.url + "/permits", timeout=5)
        assert again.from_cache is True
        assert again.status_code == 200
    assert server.count == 1
    assert wire_sends == [server.url + "/permits"]
    assert clock.sleeps == waited  # no pacing wait for a hit
    # A miss for another URL is still paced.
    s.get(server.url + "/other", timeout=5)
    assert len(clock.sleeps) > len(waited)
    assert server.count == 2


def test_429_is_retried_and_never_cached_then_200_is(server, clock, session):
    s = session()
    server.replies(
        (429, {"Retry-After": "2", **FRESH}),
        (200, FRESH),
    )
    first = s.get(server.url + "/records", timeout=5)
    assert first.status_code == 200
    assert first.from_cache is False
    first.content
    assert server.count == 2
    assert clock.sleeps
    assert clock.sleeps[-1] >= 2.0
    second = s.get(server.url + "/records", timeout=5)
    assert (second.status_code, second.from_cache) == (200, True)
    assert server.count == 2


def test_a_429_that_is_given_up_on_is_not_cached(server, clock, session):
    from requests_retryafter import Policy

    s = session(policy=Policy(max_attempts=1))
    server.replies((429, {"Retry-After": "2", **FRESH}), (200, FRESH))
    with pytest.raises(RetryLimitExceeded):
        s.get(server.url + "/x", timeout=5)
    after = s.get(server.url + "/x", timeout=5)
    assert (after.status_code, after.from_cache) == (200, False)
    assert server.count == 2


def test_uncacheable_responses_go_to_the_wire_each_time(server, session):
    s = session()
    server.respond(lambda seen: (200, {"Cache-Control": "no-store"}))
    for _ in range(3):
        s.get(server.url + "/live", timeout=5).content
    assert server.count == 3


def test_etag_revalidation_goes_through_the_adapter(server, clock, session):
    s = session(cache_etags=True)
    server.replies(
        (200, {"ETag": '"v1"', "Cache-Control": "max-age=0"}),
        (304, {"ETag": '"v1"'}),
    )
    s.get(server.url + "/doc", timeout=5).content
    again = s.get(server.url + "/doc", timeout=5)
    assert again.status_code == 200
    assert server.requests[1].headers.get("If-None-Match") == '"v1"'


def test_own_cache_and_retry_arguments_are_passed_on(clock):
    cache = DictCache()
    adapter = CachingRetryAfterAdapter(cache, clock=clock, environ={}, pool_maxsize=3)
    try:
        assert adapter.cache is cache
        assert adapter.clock is clock
        assert adapter._pool_maxsize == 3
    finally:
        adapter.close()


def test_import_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cachecontrol", None)
    monkeypatch.setitem(sys.modules, "cachecontrol.adapter", None)
    monkeypatch.delitem(sys.modules, "requests_retryafter.contrib.cachecontrol")
    with pytest.raises(ImportError, match=r"pip install requests-retryafter\[cachecontrol\]"):
        importlib.import_module("requests_retryafter.contrib.cachecontrol")
    monkeypatch.undo()
    importlib.import_module("requests_retryafter.contrib.cachecontrol")
