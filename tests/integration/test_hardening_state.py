"""Issue #9, items 10, 12 and 13 (the adapter's parts): per-host state is evicted, a Session
with a store object pickles, bytes-like bodies are replayable, and a failing store is skipped
for a while and warned about once per outage.
"""

from __future__ import annotations

import gc
import logging
import pickle
import weakref
from typing import Any, List, Optional, Tuple

import pytest
import requests

from requests_retryafter import (
    Decision,
    Event,
    HostState,
    MemoryStore,
    Policy,
    RetryAfterAdapter,
    StoreError,
    _hosts,
    mount,
)
from requests_retryafter.calls import CallState
from requests_retryafter.stores.jsonfile import JsonFileStore

RA = "Retry-After"


# -- per-host state is bounded --------------------------------------------------------------------


def _via_proxy(session: requests.Session, proxy: str, host: str) -> requests.Response:
    # The scripted server answers as an HTTP proxy would: one real server, many host keys.
    return session.get(f"http://{host}/", proxies={"http": proxy})


@pytest.mark.slow  # 3000 real requests: about 3 ms each on a loaded machine
def test_a_crawler_of_3000_hosts_keeps_a_bounded_number_in_memory(server, make_session):
    session, ad = make_session()
    for i in range(3000):
        assert _via_proxy(session, server.url, f"h{i}.example").status_code == 200
    assert server.count == 3000
    assert len(ad._hosts.by_key) <= _hosts.MAX_HOSTS
    assert "h2999.example" in ad._hosts.by_key  # the most recent are kept


def _crowded_out(session, server, monkeypatch) -> None:
    """Keep at most 20 hosts in memory (down to 10 once over), and visit 60 others: the
    hosts visited before, unless held or in use, leave memory."""
    monkeypatch.setattr(_hosts, "MAX_HOSTS", 20)
    monkeypatch.setattr(_hosts, "HOSTS_LOW_WATER", 10)
    for i in range(60):
        assert _via_proxy(session, server.url, f"h{i}.example").status_code == 200
    assert len(session.get_adapter(server.url)._hosts.by_key) <= 20


def test_evicted_hosts_keep_what_matters_in_the_store(server, make_session, clock, monkeypatch):
    store = MemoryStore()
    session, ad = make_session(store=store)
    # A host that refused once, then recovered: its observation is worth keeping.
    server.replies((429, {RA: "2"}))
    assert _via_proxy(session, server.url, "learned.example").status_code == 200
    # A host that is held must stay in memory (nothing of a hold may be lost).
    assert _via_proxy(session, server.url, "held.example").status_code == 200
    held = ad._hosts.by_key["held.example"].tracker
    wall = clock.time()
    held.state = held.state.replace(held_until=wall + 3600, held_since=wall, hold_reason="test")
    ad._hosts.by_key["learned.example"].tracker.dirty = True  # unsaved news: flushed, not lost
    _crowded_out(session, server, monkeypatch)
    assert "learned.example" not in ad._hosts.by_key
    assert "held.example" in ad._hosts.by_key
    stored: Optional[HostState] = store.get("learned.example")
    assert stored is not None
    assert len(stored.observations) == 1
    # Back in memory from the store, with what it had learned.
    _via_proxy(session, server.url, "learned.example")
    assert len(ad._hosts.by_key["learned.example"].tracker.state.observations) == 1


class _SharedMemoryStore(MemoryStore):
    """A memory store that says it is shared, as SQLite and Redis are."""

    shared = True


def test_an_evicted_host_is_left_by_its_worker(server, make_session, clock, monkeypatch):
    # A worker that paced a host through a shared store and drops it from memory (a crawl
    # of many hosts) no longer paces it: the other workers take its share at their next
    # read, as when its adapter closes, not only once its heartbeat is WORKER_TTL old.
    store = _SharedMemoryStore()
    session, ad = make_session(store=store)
    server.replies((429, {RA: "2"}))
    assert _via_proxy(session, server.url, "paced.example").status_code == 200
    before = store.get("paced.example")
    assert before is not None
    assert before.active_worker_ids(clock.time()), "the worker was never counted"
    _crowded_out(session, server, monkeypatch)
    assert "paced.example" not in ad._hosts.by_key
    after = store.get("paced.example")
    assert after is not None
    assert after.active_worker_ids(clock.time()) == ()
    # Back at the host, it is counted again.
    server.replies((429, {RA: "2"}))
    _via_proxy(session, server.url, "paced.example")
    again = store.get("paced.example")
    assert again is not None
    assert again.active_worker_ids(clock.time())


def test_a_host_in_use_is_never_evicted(make_adapter, monkeypatch):
    monkeypatch.setattr(_hosts, "MAX_HOSTS", 4)
    monkeypatch.setattr(_hosts, "HOSTS_LOW_WATER", 2)
    ad = make_adapter()
    busy = ad._hosts.use("https://busy.example/")  # counted as in use until done_with
    for i in range(10):
        key = f"h{i}.example"
        ad._hosts.done_with(ad._hosts.use(f"https://{key}/"), CallState(key, ad.policy, 0.0))
    assert ad._hosts.by_key.get("busy.example") is busy
    ad._hosts.done_with(busy, CallState("busy.example", ad.policy, 0.0))


def test_a_hosts_urls_share_its_runtime_and_the_least_recently_used_leave_memory_first(
    make_adapter, clock, monkeypatch
):
    monkeypatch.setattr(_hosts, "MAX_HOSTS", 4)
    monkeypatch.setattr(_hosts, "HOSTS_LOW_WATER", 2)
    ad = make_adapter()
    hosts = ad._hosts

    def visit(url: str) -> _hosts.Host:
        host = hosts.use(url)
        hosts.done_with(host, CallState(host.tracker.host, ad.policy, clock.monotonic()))
        clock.advance(1.0)
        return host

    first = visit("https://API.example.org/v1")
    # The same host key however the URL spells it; no credential or query in the key.
    assert visit("https://user:pw@api.example.org:443/v2?token=x") is first
    assert list(hosts.by_key) == ["api.example.org"]
    visit("https://old.example/")
    seen = []
    for i in range(3):
        seen.append(visit(f"https://h{i}.example/"))
        visit("https://API.example.org/v1")  # used again: the most recent, kept
    # Five hosts crowded the memory: the least recently used left, whatever came first.
    assert set(hosts.by_key) == {"api.example.org", "h2.example"}
    assert hosts.by_key["api.example.org"] is first
    # A host that left memory is read again by its URL, not found as it was.
    again = visit("https://h0.example/x")
    assert again is not seen[0]
    assert hosts.by_key["h0.example"] is again
    assert first.tally.calls == 5
    assert first.tally.requests == 0


# -- pickling and replayable bodies ---------------------------------------------------------------


def _session(**kwargs: Any) -> requests.Session:
    # The system clock: a test's FakeClock holds a lock and does not pickle.
    session = requests.Session()
    mount(session, environ={}, **kwargs)
    return session


def test_a_session_whose_adapter_has_a_store_object_pickles(server, tmp_path):
    store = JsonFileStore(str(tmp_path / "hosts.json"))
    session = _session(store=store, policy=Policy(min_sleep=0.0, pace=False))
    server.replies((429, {RA: "1"}))
    assert session.get(server.url + "/").status_code == 200
    clone = pickle.loads(pickle.dumps(session))
    try:
        copy = clone.get_adapter(server.url)
        assert isinstance(copy, RetryAfterAdapter)
        assert isinstance(copy.store, JsonFileStore)
        assert copy.store.path == store.path
        assert copy.store.get(server.host) is not None  # the same file, not a new store
        assert clone.get(server.url + "/").status_code == 200
    finally:
        clone.close()
        session.close()
        store.close()


def test_a_memory_store_object_is_pickled_as_a_new_memory_store(server):
    session = _session(store=MemoryStore())
    clone = pickle.loads(pickle.dumps(session))
    try:
        assert isinstance(clone.get_adapter(server.url).store, MemoryStore)
        assert clone.get(server.url + "/").status_code == 200
    finally:
        clone.close()
        session.close()


def test_an_adapter_dropped_without_close_is_freed_at_once(server, clock):
    # As a plain HTTPAdapter is, with what it opened (a store's connection), rather than at
    # some later garbage collection: its parts that announce decisions hold it weakly.
    decided: List[Decision] = []
    session = requests.Session()
    adapter = mount(session, clock=clock, environ={}, on_decision=decided.append)
    server.replies((429, {RA: "1"}))
    assert session.get(server.url + "/").status_code == 200
    assert Event.CATEGORY in {d.event for d in decided}  # announced by its parts (Turns)
    gone = weakref.ref(adapter)
    collecting = gc.isenabled()
    gc.disable()
    try:
        del session, adapter
        assert gone() is None
    finally:
        if collecting:
            gc.enable()


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_a_put_with_a_bytes_like_body_is_replayed(server, make_session, kind):
    server.replies((429, {RA: "1"}))
    session, _ = make_session()
    r = session.put(server.url + "/", data=kind(b"payload"))
    assert r.status_code == 200
    assert [s.body for s in server.requests] == [b"payload", b"payload"]


# -- a store that fails ---------------------------------------------------------------------------


class FlakyStore(MemoryStore):
    """A memory store whose calls fail while ``down`` (writes only, with ``writes_only``),
    counting the calls it got."""

    def __init__(self, *, writes_only: bool = False) -> None:
        super().__init__()
        self.down = True
        self.writes_only = writes_only
        self.calls: List[str] = []

    def _maybe_fail(self, name: str, write: bool) -> None:
        self.calls.append(name)
        if self.down and (write or not self.writes_only):
            raise StoreError("JSON store /data/hosts.json: cannot write: No space left on device")

    def get(self, host: str) -> Optional[HostState]:
        self._maybe_fail("get", False)
        return super().get(host)

    def update(self, host: str, fn: Any) -> HostState:
        self._maybe_fail("update", True)
        return super().update(host, fn)

    def set(self, host: str, state: HostState) -> None:
        self._maybe_fail("set", True)
        super().set(host, state)

    def __repr__(self) -> str:
        return "FlakyStore('/data/hosts.json')"


def _rejections(session: requests.Session, server: Any, n: int) -> None:
    for _ in range(n):
        server.replies((429, {RA: "1"}))
        assert session.get(server.url + "/").status_code == 200


def _store_warnings(caplog: pytest.LogCaptureFixture) -> Tuple[List[str], List[str]]:
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return (
        [m for m in messages if "unavailable" in m],
        [m for m in messages if "reachable again" in m],
    )


@pytest.fixture
def warnings_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="requests_retryafter")
    return caplog


def test_a_failed_store_is_skipped_for_a_while_then_tried_again(
    server, make_session, clock, warnings_log
):
    store = FlakyStore()
    session, _ = make_session(store=store, sync_interval=0.0)
    _rejections(session, server, 5)
    assert len(store.calls) == 1  # skipped after the first failure
    down, _ = _store_warnings(warnings_log)
    assert len(down) == 1
    assert "FlakyStore('/data/hosts.json')" in down[0]
    assert "No space left on device" in down[0]
    clock.advance(31.0)
    store.down = False
    _rejections(session, server, 3)
    assert len(store.calls) > 1
    down, up = _store_warnings(warnings_log)
    assert len(down) == 1
    assert len(up) == 1
    assert "FlakyStore('/data/hosts.json')" in up[0]


def test_a_full_disk_warns_once_not_a_pair_per_request(server, make_session, clock, warnings_log):
    store = FlakyStore(writes_only=True)
    session, _ = make_session(store=store, sync_interval=0.0)
    for i in range(20):
        # A new host each time: its state is read (which works), its 429 written (which
        # fails), and the store is past its pause each time.
        server.replies((429, {RA: "1"}))
        assert _via_proxy(session, server.url, f"h{i}.example").status_code == 200
        clock.advance(400.0)
    down, up = _store_warnings(warnings_log)
    assert len(down) == 1, down
    assert up == []


def test_close_gives_a_failed_store_one_more_try(server, make_session, clock):
    store = FlakyStore()
    session, ad = make_session(store=store)
    _rejections(session, server, 1)
    store.down = False
    ad.close()
    assert store.get(server.host) is not None
