"""``RetryAfterAdapter`` against a real local server, on virtual time.

Each test scripts the ``server`` fixture (tests/conftest.py), sends through a session with the
adapter mounted, and asserts on what reached the wire, when (virtual time), and what the
adapter slept (``clock.sleeps``).
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import socket
import threading
from typing import List

import pytest
import requests
import urllib3
from _quota import stated_reset
from urllib3.util.retry import Retry

from requests_retryafter import (
    HostHeld,
    HostState,
    MemoryStore,
    Observation,
    Policy,
    RetryAfterAdapter,
    RetryAfterError,
    RetryDeadlineExceeded,
    RetryLimitExceeded,
    mount,
)

RA = "Retry-After"


# -- construction -------------------------------------------------------------------------------


def test_is_an_http_adapter_and_takes_its_arguments(make_adapter):
    adapter = make_adapter(pool_connections=3, pool_maxsize=7, pool_block=True)
    assert isinstance(adapter, requests.adapters.HTTPAdapter)
    assert adapter._pool_maxsize == 7
    assert adapter._pool_connections == 3
    assert adapter.poolmanager.connection_pool_kw["maxsize"] == 7
    assert adapter.poolmanager.connection_pool_kw["block"] is True


def test_issue_example_construction(clock):
    adapter = RetryAfterAdapter(
        policy=Policy(max_attempts=5, deadline=600.0, min_sleep=1.0, max_sleep=300.0),
        store="memory://",
        clock=clock,
        environ={},
    )
    try:
        assert adapter.policy.max_attempts == 5
        assert adapter.clock is clock
        assert isinstance(adapter.store, MemoryStore)
    finally:
        adapter.close()


def test_max_retries_is_for_connections_only(make_adapter):
    adapter = make_adapter(max_retries=3)
    retry = adapter.max_retries
    assert isinstance(retry, Retry)
    assert retry.total == 3
    assert retry.respect_retry_after_header is False
    assert not set(retry.status_forcelist or ()) & {429, 503}


def test_max_retries_retry_object_is_kept_but_never_sleeps_on_retry_after(make_adapter):
    adapter = make_adapter(max_retries=Retry(total=2, status_forcelist=[500, 502]))
    assert adapter.max_retries.total == 2
    assert adapter.max_retries.respect_retry_after_header is False


@pytest.mark.parametrize(
    ("statuses", "kept"),
    [([429], set()), ([503], set()), ([500, 429], {500}), ([413, 503], {413})],
)
def test_max_retries_keeps_its_statuses_but_429_and_503(make_adapter, statuses, kept):
    # The adapter retries 429/503 itself: they are taken out, the rest (413 too) are kept.
    adapter = make_adapter(max_retries=Retry(total=3, status_forcelist=statuses))
    assert set(adapter.max_retries.status_forcelist) == kept


@pytest.mark.parametrize(
    "max_retries",
    [3, Retry(total=3), Retry(total=3, status_forcelist=[500]), Retry(3, backoff_factor=2)],
    ids=["int", "Retry", "Retry-500", "Retry-backoff"],
)
def test_urllib3_never_retries_a_429_underneath(server, make_session, clock, max_retries):
    # A user's Retry must not make urllib3 resend (or sleep on) a 429 with Retry-After.
    server.replies((429, {RA: "5"}))
    session, _ = make_session(max_retries=max_retries, max_attempts=1)
    with pytest.raises(RetryLimitExceeded):
        session.get(server.url + "/x")
    assert server.count == 1
    assert clock.sleeps == []


def test_mount_helper_mounts_both_schemes(clock):
    session = requests.Session()
    adapter = mount(session, clock=clock, environ={}, store="memory://")
    try:
        assert isinstance(adapter, RetryAfterAdapter)
        assert session.get_adapter("http://example.org/") is adapter
        assert session.get_adapter("https://example.org/") is adapter
        other = RetryAfterAdapter(clock=clock, environ={})
        assert mount(session, other) is other
        assert session.get_adapter("https://example.org/") is other
        other.close()
    finally:
        adapter.close()
        session.close()


def test_close_twice_is_fine(server, make_adapter):
    adapter = make_adapter()
    session = requests.Session()
    session.mount("http://", adapter)
    assert session.get(server.url + "/").status_code == 200
    adapter.close()
    adapter.close()
    session.close()


def test_store_object_is_not_closed_but_used(server, make_session):
    store = MemoryStore()
    session, adapter = make_session(store=store)
    assert adapter.store is store
    server.replies((429, {RA: "2"}))
    session.get(server.url + "/")
    adapter.close()
    state = store.get(server.host)
    assert state is not None
    assert len(state.observations) == 1


def test_pickles_with_a_memory_store(server):
    adapter = RetryAfterAdapter(policy=Policy(max_attempts=2), store="memory://", environ={})
    try:
        clone = pickle.loads(pickle.dumps(adapter))
    finally:
        adapter.close()
    try:
        assert isinstance(clone, RetryAfterAdapter)
        assert clone.policy == adapter.policy
        assert clone.policy.max_attempts == 2
        assert isinstance(clone.store, MemoryStore)
        session = requests.Session()
        session.mount("http://", clone)
        assert session.get(server.url + "/after-pickle").status_code == 200
        session.close()
    finally:
        clone.close()


# -- settings from the environment --------------------------------------------------------------


def always(status, headers=None):
    return lambda seen: (status, headers or {})


def test_environ_sets_the_policy(server, make_session):
    server.respond(always(429, {RA: "1"}))
    session, adapter = make_session(environ={"REQUESTS_RETRYAFTER_MAX_ATTEMPTS": "2"})
    assert adapter.policy.max_attempts == 2
    with pytest.raises(RetryLimitExceeded):
        session.get(server.url + "/")
    assert server.count == 2


def test_explicit_arguments_win_over_the_environment(server, make_session, clock):
    env = {"REQUESTS_RETRYAFTER_MAX_ATTEMPTS": "9", "REQUESTS_RETRYAFTER_DEADLINE": "30"}
    session, adapter = make_session(environ=env, max_attempts=2)
    assert adapter.policy.max_attempts == 2
    assert adapter.policy.deadline == 30.0
    # The deadline from the environment applies: a trusted 45 s wait does not fit in 30 s.
    server.replies((429, {RA: "45"}))
    with pytest.raises(RetryDeadlineExceeded) as info:
        session.get(server.url + "/")
    assert info.value.remaining == 30.0
    assert clock.sleeps == []


def test_process_environment_is_read_when_the_adapter_is_built(monkeypatch, clock, server):
    monkeypatch.setenv("REQUESTS_RETRYAFTER_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("REQUESTS_RETRYAFTER_MAX_SLEEP", "120")
    adapter = RetryAfterAdapter(clock=clock, seed=0)  # default environ: os.environ
    try:
        assert adapter.policy.max_attempts == 2
        assert adapter.policy.max_sleep == 120.0
        # Changing the environment later changes nothing for a built adapter.
        monkeypatch.setenv("REQUESTS_RETRYAFTER_MAX_ATTEMPTS", "7")
        assert adapter.policy.max_attempts == 2
        session = requests.Session()
        session.mount("http://", adapter)
        server.respond(always(429))
        with pytest.raises(RetryLimitExceeded):
            session.get(server.url + "/")
        assert server.count == 2
        session.close()
    finally:
        adapter.close()


@pytest.mark.parametrize(
    ("var", "raw"),
    [
        ("MAX_ATTEMPTS", "many"),
        ("MAX_ATTEMPTS", "0"),
        ("DEADLINE", "-1"),
        ("PACE", "perhaps"),
        ("MAX_CONCURRENCY", "1.5"),
    ],
)
def test_bad_environment_value_raises_value_error_naming_it(clock, var, raw):
    name = "REQUESTS_RETRYAFTER_" + var
    with pytest.raises(ValueError, match=name):
        RetryAfterAdapter(clock=clock, environ={name: raw})


def test_environment_selects_the_store(clock):
    adapter = RetryAfterAdapter(clock=clock, environ={"REQUESTS_RETRYAFTER_STORE": "memory://"})
    try:
        assert isinstance(adapter.store, MemoryStore)
    finally:
        adapter.close()


def test_explicit_store_wins_over_the_environment(clock):
    env = {"REQUESTS_RETRYAFTER_STORE": "nosuchscheme://x"}
    adapter = RetryAfterAdapter(clock=clock, environ=env, store="memory://")
    try:
        assert isinstance(adapter.store, MemoryStore)
    finally:
        adapter.close()


def test_bad_store_variable_raises_value_error_naming_it(clock):
    env = {"REQUESTS_RETRYAFTER_STORE": "nosuchscheme://x"}
    with pytest.raises(ValueError, match="REQUESTS_RETRYAFTER_STORE"):
        RetryAfterAdapter(clock=clock, environ=env)


# -- statuses -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403, 407])
def test_authentication_answers_are_never_retried(server, make_session, clock, logs, status):
    server.respond(always(status, {RA: "5"}))
    session, _ = make_session()
    r = session.get(server.url + "/private")
    assert r.status_code == status
    assert server.count == 1
    assert clock.sleeps == []
    assert any(str(status) in m and server.host in m for m in logs.messages)


@pytest.mark.parametrize("status", [200, 201, 204, 404, 500, 502])
def test_retry_after_on_other_statuses_is_ignored_and_logged(
    server, make_session, clock, logs, status
):
    server.respond(always(status, {RA: "120"}))
    session, _ = make_session()
    for _ in range(3):
        assert session.get(server.url + "/").status_code == status
    assert server.count == 3
    assert clock.sleeps == []
    assert server.times == [clock.time()] * 3
    ignored = [m for m in logs.messages if "ignored" in m and f"on a {status}" in m]
    assert ignored
    assert all(server.host in m for m in ignored)


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_are_retried_after_the_header(server, make_session, clock, status):
    t0 = clock.time()
    server.replies((status, {RA: "7"}))
    session, _ = make_session()
    r = session.get(server.url + "/")
    assert r.status_code == 200
    assert clock.sleeps == [7.0]
    assert server.times == [t0, t0 + 7.0]


def test_rejection_body_is_drained_before_retrying(server, make_session):
    server.reply(429, {RA: "1"}, body=b"x" * 200_000)
    session, _ = make_session()
    r = session.get(server.url + "/")
    assert r.status_code == 200
    assert r.content == b"ok"


# -- replay --------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"])
def test_idempotent_methods_are_replayed(server, make_session, method):
    server.replies((429, {RA: "2"}))
    session, _ = make_session()
    body = b"payload" if method == "PUT" else None
    r = session.request(method, server.url + "/thing", data=body)
    assert r.status_code == 200
    assert [s.method for s in server.requests] == [method, method]
    assert server.requests[0].body == server.requests[1].body == (body or b"")


@pytest.mark.parametrize("method", ["POST", "PATCH"])
@pytest.mark.parametrize("kind", ["bytes", "str", "file", "form", "json"])
def test_keyed_requests_with_a_replayable_body_are_replayed(
    server, make_session, tmp_path, method, kind
):
    path = tmp_path / "body.bin"
    path.write_bytes(b"file \x00 body")
    server.replies((429, {RA: "2"}), (503, {RA: "1"}))
    session, _ = make_session()
    headers = {"Idempotency-Key": "key-123"}
    with open(path, "rb") as fh:
        if kind == "json":
            r = session.request(method, server.url + "/create", json={"a": [1, 2]}, headers=headers)
        else:
            data = {
                "bytes": b"raw \xff bytes",
                "str": "some text",
                "file": fh,
                "form": {"a": "1", "b": "two"},
            }[kind]
            r = session.request(method, server.url + "/create", data=data, headers=headers)
    assert r.status_code == 200
    assert server.count == 3
    assert [s.headers.get("Idempotency-Key") for s in server.requests] == ["key-123"] * 3
    bodies = {s.body for s in server.requests}
    assert len(bodies) == 1
    assert bodies.pop()  # not empty


def test_idempotency_key_header_name_is_case_insensitive(server, make_session):
    server.replies((429, {RA: "1"}))
    session, _ = make_session()
    r = session.post(server.url + "/", data=b"x", headers={"idempotency-key": "abc"})
    assert r.status_code == 200
    assert server.count == 2


def test_keyed_file_body_is_replayed_from_where_it_started(server, make_session, tmp_path):
    path = tmp_path / "body.bin"
    path.write_bytes(b"HEADER|payload")
    server.replies((429, {RA: "1"}))
    session, _ = make_session()
    with open(path, "rb") as fh:
        fh.seek(7)
        r = session.post(server.url + "/", data=fh, headers={"Idempotency-Key": "k"})
    assert r.status_code == 200
    assert [s.body for s in server.requests] == [b"payload", b"payload"]


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_keyless_post_and_patch_get_the_rejection_back_after_one_request(
    server, make_session, clock, logs, method
):
    server.replies((429, {RA: "2"}))
    session, _ = make_session()
    r = session.request(method, server.url + "/create", data=b"x")
    assert r.status_code == 429
    assert r.headers[RA] == "2"
    assert server.count == 1
    assert clock.sleeps == []
    assert any("Idempotency-Key" in m and server.host in m for m in logs.messages)


def test_keyless_post_gets_its_429_back_even_when_the_host_is_then_held(
    server, make_session, clock
):
    # The 429 goes back to the caller (one request on the wire); the hold still applies to
    # the host's next calls.
    reset = (clock.time() // 3600 + 1) * 3600
    server.replies(
        (429, {RA: str(int(reset - clock.time())), **stated_reset(reset - clock.time())})
    )
    session, _ = make_session()
    r = session.post(server.url + "/create", data=b"x")
    assert r.status_code == 429
    assert server.count == 1
    with pytest.raises(HostHeld):
        session.get(server.url + "/list")
    assert server.count == 1


@pytest.mark.parametrize("method", ["PURGE", "LOCK"])
def test_other_methods_are_not_replayed(server, make_session, method):
    server.replies((429, {RA: "2"}))
    session, _ = make_session()
    r = session.request(method, server.url + "/")
    assert r.status_code == 429
    assert server.count == 1


def test_keyed_generator_body_is_not_replayed(server, make_session, clock):
    server.replies((429, {RA: "2"}))
    session, _ = make_session()

    def chunks():
        yield b"one,"
        yield b"two"

    r = session.post(server.url + "/", data=chunks(), headers={"Idempotency-Key": "k"})
    assert r.status_code == 429
    assert server.count == 1
    assert server.requests[0].body == b"one,two"
    assert clock.sleeps == []


def test_keyed_unseekable_stream_is_not_replayed(server, make_session, clock):
    server.replies((429, {RA: "2"}))
    session, _ = make_session()
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"streamed body")
    os.close(write_fd)
    with open(read_fd, "rb") as stream:
        assert not stream.seekable()
        r = session.post(server.url + "/", data=stream, headers={"Idempotency-Key": "k"})
    assert r.status_code == 429
    assert server.count == 1
    assert server.requests[0].body == b"streamed body"


def test_keyed_stream_without_seek_is_not_replayed(server, make_session):
    class Stream(io.RawIOBase):
        def __init__(self):
            self.data = io.BytesIO(b"abc")

        def readable(self):
            return True

        def readinto(self, b):
            chunk = self.data.read(len(b))
            b[: len(chunk)] = chunk
            return len(chunk)

    server.replies((429, {RA: "2"}))
    session, _ = make_session()
    r = session.post(server.url + "/", data=Stream(), headers={"Idempotency-Key": "k"})
    assert r.status_code == 429
    assert server.count == 1
    assert server.requests[0].body == b"abc"


# -- waits, budgets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["0", "Sun, 06 Nov 1994 08:49:37 GMT", "banana", "-3", "0.2", None]
)
def test_floor_after_a_rejection(server, make_session, clock, value):
    server.replies((429, {} if value is None else {RA: value}))
    session, _ = make_session()
    assert session.get(server.url + "/").status_code == 200
    assert clock.sleeps == [1.0]
    assert server.times[1] - server.times[0] == 1.0


def test_floor_follows_min_sleep(server, make_session, clock):
    server.replies((429, {RA: "1"}), (429, {RA: "0"}))
    session, _ = make_session(min_sleep=3.0, max_sleep=300.0)
    assert session.get(server.url + "/").status_code == 200
    assert clock.sleeps == [3.0, 3.0]


def slow_unreliable_host(host: str, recovered: float) -> MemoryStore:
    """A store where ``host`` is unreliable and once took ``recovered`` s to recover."""
    store = MemoryStore()
    seen = Observation(at=1.0, status=429, header=5.0, recovered=recovered)
    store.set(host, HostState(host, category="unreliable", observations=(seen,)))
    return store


def test_ceiling_on_one_sleep(server, make_session, clock):
    # An unreliable host's large header is taken as a hint, and its own backoff (aiming at a
    # 400 s recovery) would be longer still; but one sleep never passes 300 s.
    store = slow_unreliable_host(server.host, 400.0)
    server.replies((429, {RA: "3600"}), (429, {RA: "3600"}))
    # (a deadline with room left for the last request after two full sleeps)
    session, _ = make_session(store=store, deadline=900.0, backoff_cap=1000.0)
    assert session.get(server.url + "/").status_code == 200
    assert clock.sleeps == [300.0, 300.0]


def test_max_sleep_ceiling_follows_the_policy(server, make_session, clock):
    store = slow_unreliable_host(server.host, 100.0)
    server.replies((429, {RA: "3600"}))
    session, _ = make_session(store=store, max_sleep=50.0)
    assert session.get(server.url + "/").status_code == 200
    assert clock.sleeps == [50.0]


def test_max_attempts_counts_every_request_of_a_call(server, make_session, clock):
    server.respond(always(429, {RA: "2"}))
    session, _ = make_session(max_attempts=3)
    with pytest.raises(RetryLimitExceeded) as info:
        session.get(server.url + "/")
    assert server.count == 3
    assert clock.sleeps == [2.0, 2.0]
    err = info.value
    assert err.host == server.host
    assert err.response is not None
    assert err.response.status_code == 429
    assert isinstance(err, RetryAfterError)
    assert isinstance(err, requests.exceptions.RetryError)


def test_max_attempts_one_never_retries(server, make_session, clock):
    server.respond(always(503, {RA: "2"}))
    session, _ = make_session(max_attempts=1)
    with pytest.raises(RetryLimitExceeded) as info:
        session.get(server.url + "/")
    assert server.count == 1
    assert clock.sleeps == []
    assert info.value.response.status_code == 503


def test_no_header_backoff_is_capped_exponential_with_jitter(server, make_session, clock):
    server.respond(always(429))
    session, _ = make_session(max_attempts=10, backoff_cap=16.0, deadline=10_000.0)
    with pytest.raises(RetryLimitExceeded):
        session.get(server.url + "/")
    assert len(clock.sleeps) == 9
    for k, slept in enumerate(clock.sleeps):
        assert 1.0 <= slept <= max(1.0, min(16.0, 2.0**k))
    assert len(set(clock.sleeps[2:])) > 1  # jittered, not a fixed schedule


def test_wait_longer_than_the_deadline_stops_before_sleeping(server, make_session, clock, logs):
    server.respond(always(429, {RA: "30"}))
    session, _ = make_session(deadline=20.0)
    with pytest.raises(RetryDeadlineExceeded) as info:
        session.get(server.url + "/")
    err = info.value
    assert clock.sleeps == []
    assert server.count == 1
    assert err.delay == 30.0
    assert err.remaining == 20.0
    assert err.host == server.host
    assert err.response is not None
    assert err.response.status_code == 429
    assert any("30" in m and server.host in m for m in logs.at(logging.WARNING))


def test_deadline_bounds_the_whole_call(server, make_session, clock):
    server.respond(always(429))
    session, _ = make_session(max_attempts=100, deadline=60.0, backoff_cap=20.0)
    with pytest.raises(RetryDeadlineExceeded) as info:
        session.get(server.url + "/")
    slept = sum(clock.sleeps)
    assert slept <= 60.0
    assert info.value.remaining == pytest.approx(60.0 - slept)
    assert info.value.delay > info.value.remaining
    assert server.times[-1] - server.times[0] <= 60.0


@pytest.fixture
def sent_timeouts(monkeypatch) -> List[object]:
    """The ``timeout`` each request went to urllib3 with, in order."""
    seen: List[object] = []
    real_send = requests.adapters.HTTPAdapter.send

    def spy(self, request, *args, **kwargs):
        seen.append(kwargs.get("timeout"))
        return real_send(self, request, *args, **kwargs)

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", spy)
    return seen


def test_each_request_timeout_is_capped_by_what_is_left(server, make_session, clock, sent_timeouts):
    seen = sent_timeouts
    session, _ = make_session(deadline=100.0, pace=False)
    server.replies((429, {RA: "30"}), (429, {RA: "30"}))
    assert session.get(server.url + "/", timeout=(5, 1000)).status_code == 200
    assert seen == [(5, 100.0), (5, 70.0), (5, 40.0)]
    seen.clear()
    server.replies((429, {RA: "30"}))
    assert session.get(server.url + "/").status_code == 200
    assert seen == [100.0, 70.0]
    seen.clear()
    server.replies((429, {RA: "30"}))
    assert session.get(server.url + "/", timeout=50).status_code == 200
    assert seen == [50.0, 50.0]


def test_urllib3_timeout_object_is_capped_too(server, make_session, sent_timeouts):
    # requests accepts a urllib3 Timeout as well as a number or a tuple.
    seen = sent_timeouts
    session, _ = make_session(deadline=100.0, pace=False)
    server.replies((429, {RA: "30"}))
    timeout = urllib3.Timeout(connect=5.0, read=1000.0)
    assert session.get(server.url + "/", timeout=timeout).status_code == 200
    assert len(seen) == 2
    for sent, left in zip(seen, (100.0, 70.0)):
        connect, read = (
            (sent.connect_timeout, sent.read_timeout) if isinstance(sent, urllib3.Timeout) else sent
        )
        assert connect == 5.0
        assert read == left


def test_host_wait_longer_than_the_deadline_stops_before_the_wire(server, make_session, clock):
    server.replies((429, {RA: "30"}))
    session, _ = make_session(deadline=20.0)
    assert session.post(server.url + "/", data=b"x").status_code == 429
    with pytest.raises(RetryDeadlineExceeded) as info:
        session.get(server.url + "/")
    assert info.value.delay == 30.0
    assert info.value.remaining == 20.0
    assert info.value.response is None
    assert server.count == 1
    assert clock.sleeps == []


# -- the wait belongs to the host ---------------------------------------------------------------


def test_next_call_waits_out_the_hosts_wait_after_a_refused_post(server, make_session, clock):
    t0 = clock.time()
    server.replies((429, {RA: "30"}))
    session, _ = make_session()
    assert session.post(server.url + "/create", data=b"x").status_code == 429
    clock.advance(10.0)  # the caller did something else for 10 s
    assert session.get(server.url + "/list").status_code == 200
    assert clock.sleeps == [20.0]
    assert server.times == [t0, t0 + 30.0]


def test_next_call_waits_out_the_hosts_wait_after_running_out_of_attempts(
    server, make_session, clock
):
    t0 = clock.time()
    server.replies((429, {RA: "30"}))
    session, _ = make_session(max_attempts=1)
    with pytest.raises(RetryLimitExceeded):
        session.get(server.url + "/a")
    assert session.get(server.url + "/b").status_code == 200
    assert clock.sleeps == [30.0]
    assert server.times == [t0, t0 + 30.0]


def test_next_call_waits_out_the_hosts_wait_after_a_deadline_stop(server, make_session, clock):
    t0 = clock.time()
    server.replies((429, {RA: "30"}))
    session, _ = make_session(deadline=20.0)
    with pytest.raises(RetryDeadlineExceeded):
        session.get(server.url + "/a")
    clock.advance(15.0)
    assert session.get(server.url + "/b").status_code == 200
    assert clock.sleeps == [15.0]
    assert server.times == [t0, t0 + 30.0]


def test_the_wait_is_per_host(server, make_session, clock):
    t0 = clock.time()
    server.replies((429, {RA: "30"}))
    session, _ = make_session()
    assert session.post(server.url + "/", data=b"x").status_code == 429
    # Same server under another name: another host key, no wait.
    other = f"http://localhost:{server.port}/"
    assert session.get(other).status_code == 200
    assert clock.sleeps == []
    assert server.times == [t0, t0]


def test_the_wait_is_shared_between_adapters_on_one_store(server, make_session, clock):
    t0 = clock.time()
    store = MemoryStore()
    server.replies((429, {RA: "30"}))
    first, _ = make_session(store=store)
    assert first.post(server.url + "/", data=b"x").status_code == 429
    second, _ = make_session(store=store)
    assert second.get(server.url + "/").status_code == 200
    _waited_the_shared_wait(clock.sleeps, 30.0)
    assert server.times == [t0, t0 + clock.sleeps[0]]


def test_the_wait_is_shared_with_an_adapter_that_already_knows_the_host(
    server, make_session, clock
):
    # Two adapters on one MemoryStore object; the second talked to the host before the first
    # was told to wait. It must still see the wait.
    store = MemoryStore()
    first, _ = make_session(store=store, sync_interval=0.0)
    second, _ = make_session(store=store, sync_interval=0.0)
    assert second.get(server.url + "/").status_code == 200
    t1 = clock.time()
    server.replies((429, {RA: "30"}))
    assert first.post(server.url + "/", data=b"x").status_code == 429
    assert second.get(server.url + "/").status_code == 200
    _waited_the_shared_wait(clock.sleeps, 30.0)
    assert server.times[-1] == t1 + clock.sleeps[0]


def _waited_the_shared_wait(sleeps: List[float], wait: float) -> None:
    """Assert one sleep: the wait another adapter's refusal set, and the second of two
    workers' turn by rank when it came back from it (half the 1 s floor, or none: the ranks
    follow the workers' random ids). Both are counted as the host's workers once the store
    makes them wait."""
    assert len(sleeps) == 1, sleeps
    assert sleeps[0] in (pytest.approx(wait), pytest.approx(wait + 0.5)), sleeps


def test_a_new_adapter_on_the_same_store_honours_a_hold(server, make_session, clock):
    store = MemoryStore()
    reset = (clock.time() // 3600 + 1) * 3600
    server.replies(
        (429, {RA: str(int(reset - clock.time())), **stated_reset(reset - clock.time())})
    )
    first, _ = make_session(store=store)
    with pytest.raises(HostHeld):
        first.get(server.url + "/")
    later, _ = make_session(store=store)  # e.g. the next run of the job
    with pytest.raises(HostHeld) as info:
        later.get(server.url + "/")
    assert info.value.until == reset
    assert server.count == 1


def test_a_new_adapter_on_the_same_store_starts_from_what_was_learned(
    server, make_session, clock, window_host
):
    store = MemoryStore()
    box = window_host(allow=2, window=20.0, header=lambda remaining, episode: "3600")
    first, _ = make_session(store=store, pace=False, max_attempts=20)
    while box.recovered < 3:
        assert first.get(server.url + "/").status_code == 200
    assert store.get(server.host).category == "constant_overstated"
    decisions = []
    later, _ = make_session(store=store, pace=False, on_decision=decisions.append)
    while box.recovered < 4:
        assert later.get(server.url + "/").status_code == 200
    waits = [d for d in decisions if d.event == "sleep"]
    assert waits
    assert waits[0].category == "constant_overstated"
    assert "clamped" in waits[0].reason
    assert sum(d.wait for d in waits) <= 2 * 20.0


# -- connection errors --------------------------------------------------------------------------


@pytest.fixture
def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@pytest.mark.parametrize(("method", "headers"), [("GET", {}), ("POST", {"Idempotency-Key": "k-1"})])
def test_connection_refused_is_retried_with_backoff(
    make_session, clock, closed_port, method, headers
):
    session, adapter = make_session()
    with pytest.raises(requests.ConnectionError) as info:
        session.request(method, f"http://127.0.0.1:{closed_port}/", data=b"x", headers=headers)
    assert not isinstance(info.value, RetryAfterError)
    assert len(clock.sleeps) == adapter.policy.connect_retries == 2
    assert all(s > 0 for s in clock.sleeps)


def test_a_request_that_may_not_be_replayed_is_not_retried_on_any_connection_error(
    make_session, clock, closed_port
):
    # Only requests that may be replayed are retried (issue #9 item 9), even when the
    # connection was refused: a plain adapter would not send it again either.
    session, _ = make_session()
    with pytest.raises(requests.ConnectionError) as info:
        session.post(f"http://127.0.0.1:{closed_port}/", data=b"x")
    assert not isinstance(info.value, RetryAfterError)
    assert clock.sleeps == []


def test_giving_up_after_connection_errors_is_logged(make_session, clock, closed_port, logs):
    session, _ = make_session()
    with pytest.raises(requests.ConnectionError):
        session.get(f"http://127.0.0.1:{closed_port}/")
    host = f"127.0.0.1:{closed_port}"
    about_host = [m for m in logs.messages if host in m]
    waits = [m for m in about_host if "waiting" in m]
    assert len(waits) == len(clock.sleeps) == 2
    # The stop is a decision too: logged with the host and why.
    assert len(about_host) > len(waits), about_host
    assert "ConnectionError" in about_host[-1]


def test_connection_retries_follow_the_policy(make_session, clock, closed_port):
    session, _ = make_session(connect_retries=4, max_attempts=10)
    with pytest.raises(requests.ConnectionError):
        session.get(f"http://127.0.0.1:{closed_port}/")
    assert len(clock.sleeps) == 4


def test_connection_retries_stay_within_max_attempts(make_session, clock, closed_port):
    session, _ = make_session(connect_retries=4, max_attempts=2)
    with pytest.raises(requests.ConnectionError):
        session.get(f"http://127.0.0.1:{closed_port}/")
    assert len(clock.sleeps) == 1


def test_read_error_is_retried_for_a_replayable_request(server, make_session, clock):
    server.replies(server.CLOSE)
    session, _ = make_session()
    r = session.get(server.url + "/")
    assert r.status_code == 200
    assert server.count == 2
    assert len(clock.sleeps) == 1


def test_read_error_is_not_retried_for_a_keyless_post(server, make_session, clock):
    server.replies(server.CLOSE)
    session, _ = make_session()
    with pytest.raises(requests.ConnectionError):
        session.post(server.url + "/", data=b"x")
    assert server.count == 1
    assert clock.sleeps == []


def test_not_retrying_a_read_error_is_logged(server, make_session, logs):
    server.replies(server.CLOSE)
    session, _ = make_session()
    with pytest.raises(requests.ConnectionError):
        session.post(server.url + "/", data=b"x")
    about_host = [m for m in logs.messages if server.host in m]
    assert any("Idempotency-Key" in m or "not retried" in m for m in about_host), about_host


def test_read_error_is_retried_for_a_keyed_post(server, make_session):
    server.replies(server.CLOSE)
    session, _ = make_session()
    r = session.post(server.url + "/", data=b"x", headers={"Idempotency-Key": "k"})
    assert r.status_code == 200
    assert [s.body for s in server.requests] == [b"x", b"x"]


# -- nothing a server sends raises anything else -------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        [(RA, "30"), (RA, "60")],  # two fields: requests joins them into "30, 60"
        [(RA, "\u0661\u0662".encode().decode("latin-1"))],
        [(RA, "9" * 5000)],
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "99999999999999"},
        {"RateLimit": "r=0;t=-5", "RateLimit-Policy": "q=0;w=0"},
        {"X-RateLimit-Limit": "0", "X-RateLimit-Remaining": "-1", "X-RateLimit-Reset": "x"},
        {RA: "", "X-RateLimit-Reset": ""},
    ],
)
def test_odd_headers_on_a_rejection_never_raise(server, make_session, clock, headers):
    server.replies((429, headers))
    session, _ = make_session()
    r = session.get(server.url + "/")
    assert r.status_code == 200
    assert all(1.0 <= s <= 300.0 for s in clock.sleeps)
    assert server.count == 2


@pytest.mark.parametrize(
    "headers",
    [
        {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1e9"},
        {"RateLimit-Policy": "q=0;w=60", "RateLimit": "r=0;t=1"},
        {"RateLimit-Policy": "q=1000000;w=1"},
        {RA: "banana"},
    ],
)
def test_odd_headers_on_a_success_never_raise(server, make_session, headers):
    server.respond(always(200, headers))
    session, _ = make_session()
    for _ in range(3):
        assert session.get(server.url + "/").status_code == 200


# -- logging and secrets -------------------------------------------------------------------------

SECRETS = ("SECRET", "secret/path", "user:pass", "token=", "dXNlcjpwYXNz")


def test_no_credentials_in_logs_errors_or_state(server, make_session, clock, logs):
    with_userinfo = f"http://user:pass@{server.host}/secret/path?token=SECRET"
    plain = f"{server.url}/secret/path?token=SECRET"
    bearer = {"Authorization": "Bearer SECRET"}
    errors = []
    adapters = []

    def flow(replies, calls, **policy):
        """Run ``calls`` ((method, body) pairs) on a fresh adapter, both ways of sending
        credentials."""
        for url, headers in ((with_userinfo, {}), (plain, bearer)):
            session, adapter = make_session(**policy)
            adapters.append(adapter)
            server.replies(*replies)
            for method, body in calls:
                try:
                    session.request(method, url, data=body, headers=headers)
                except RetryAfterError as exc:
                    errors.append(exc)

    get = ("GET", None)
    flow([(429, {RA: "2"})], [get])  # a sleep, then success
    flow([(503, {RA: "soon"})] * 2, [get], max_attempts=2)  # own backoff; attempts run out
    flow([(429, {RA: "2"})], [("POST", b"x")])  # a keyless POST is refused
    flow([(200, {RA: "5"}), (401, {RA: "5"})], [get, get])  # ignored header; auth answer
    flow([(429, {RA: "30"})], [get], deadline=20.0)  # the deadline stops a call
    reset = (clock.time() // 3600 + 1) * 3600
    flow(
        [(429, {RA: str(int(reset - clock.time())), **stated_reset(reset - clock.time())})],
        [get, get],
    )  # the host is held

    kinds = [type(e).__name__ for e in errors]
    assert kinds.count("RetryLimitExceeded") == 2
    assert kinds.count("RetryDeadlineExceeded") == 2
    assert kinds.count("HostHeld") == 4
    records = logs.records
    assert len(records) >= 20
    assert all(server.host in r.getMessage() for r in records if r.levelno >= logging.INFO)
    texts = [r.getMessage() for r in records] + [str(r.args) for r in records]
    texts += [str(e) for e in errors] + [repr(e.args) for e in errors]
    texts += [e.reason for e in errors if isinstance(e, HostHeld)]
    for adapter in adapters:
        texts += [state.to_json() for _, state in adapter.store.items()]
    assert sum(1 for t in texts if server.host in t) >= 30
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, (secret, text)
    # The server did get what was sent: the test is not vacuous.
    assert any(s.headers.get("Authorization") == "Bearer SECRET" for s in server.requests)
    assert any(s.headers.get("Authorization", "").startswith("Basic") for s in server.requests)
    assert all(s.path == "/secret/path?token=SECRET" for s in server.requests)


def test_every_decision_is_logged_with_its_reason_and_host(server, make_session, clock, logs):
    server.replies((429, {RA: "4"}), (429, {RA: "banana"}))
    session, _ = make_session()
    assert session.get(server.url + "/").status_code == 200
    messages = logs.at(logging.INFO)
    obeyed = [m for m in messages if "4.0 s" in m and "obeyed" in m]
    backoff = [m for m in messages if "own backoff" in m and "not delta-seconds" in m]
    assert obeyed
    assert backoff
    assert all(m.startswith(server.host) for m in obeyed + backoff)


def test_on_decision_hook_sees_every_decision_and_its_errors_are_contained(
    server, make_session, logs
):
    seen = []

    def hook(decision):
        seen.append(decision)
        raise RuntimeError("hook bug")

    server.replies((429, {RA: "3"}))
    session, _ = make_session(on_decision=hook)
    assert session.get(server.url + "/").status_code == 200
    sleeps = [d for d in seen if d.event == "sleep"]
    assert len(sleeps) == 1
    assert (sleeps[0].wait, sleeps[0].status, sleeps[0].header, sleeps[0].host) == (
        3.0,
        429,
        3.0,
        server.host,
    )
    assert any("hook" in m for m in logs.messages)


def test_lock_free_hook_can_call_the_adapter_again(server, make_session):
    # A hook that reads the store from another thread must not deadlock the adapter.
    done = threading.Event()
    session, adapter = make_session()

    def hook(decision):
        t = threading.Thread(target=lambda: (adapter.store.get(server.host), done.set()))
        t.start()
        t.join(5)

    adapter.on_decision = hook
    server.replies((429, {RA: "1"}))
    assert session.get(server.url + "/").status_code == 200
    assert done.is_set()


def test_host_held_error_carries_when_and_why(server, make_session, clock):
    reset = (clock.time() // 3600 + 1) * 3600
    server.replies(
        (429, {RA: str(int(reset - clock.time())), **stated_reset(reset - clock.time())})
    )
    session, adapter = make_session()
    with pytest.raises(HostHeld) as info:
        session.get(server.url + "/")
    err = info.value
    assert err.until == reset
    assert err.host == server.host
    assert "reset" in err.reason
    assert err.response.status_code == 429
    state = adapter.store.get(server.host)
    assert state is not None
    assert state.held_until == reset
