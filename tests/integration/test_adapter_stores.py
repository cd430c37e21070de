"""The adapter with persistent stores: knowledge survives runs, a broken store never stops a
job, and a healthy host costs the store nothing."""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any, List, Optional

import pytest

from requests_retryafter import HostState, MemoryStore, StoreError

RA = "Retry-After"


def _file_specs(tmp_path: Any) -> List[str]:
    return [f"json://{tmp_path}/hosts.json", f"sqlite://{tmp_path}/hosts.db"]


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_a_second_run_starts_with_the_category_the_first_learned(
    server, make_session, clock, window_host, tmp_path, kind
):
    spec = {s.split(":")[0]: s for s in _file_specs(tmp_path)}[kind]
    box = window_host(allow=2, window=20.0, header=lambda remaining, episode: "3600")
    first, _adapter = make_session(store=spec, pace=False, max_attempts=20)
    while box.recovered < 3:
        assert first.get(server.url + "/").status_code == 200
    first.close()  # flushes and closes the store it opened

    second, again = make_session(store=spec)
    state = again.store.get(server.host)
    assert state is not None
    assert state.category == "constant_overstated"
    assert len(state.observations) >= 3
    # and it acts on it at once: the next 3600 is clamped, never slept or held
    decisions: List[Any] = []
    again.on_decision = decisions.append
    clock.advance(25.0)
    while box.recovered < 4:
        assert second.get(server.url + "/").status_code == 200
    sleeps = [d.wait for d in decisions if d.event == "sleep"]
    assert sleeps
    assert max(sleeps) <= 60.0
    assert not [d for d in decisions if d.event == "hold"]


def test_a_store_that_cannot_be_opened_falls_back_to_memory(server, make_session, tmp_path, caplog):
    # Its directory is a regular file: the store cannot be opened. The warning says why,
    # naming the file and the OS error.
    (tmp_path / "plain").write_text("not a directory")
    path = tmp_path / "plain" / "hosts.json"
    caplog.set_level(logging.WARNING, logger="requests_retryafter")
    session, adapter = make_session(store=f"json://{path}")
    assert isinstance(adapter.store, MemoryStore)
    warnings = [r.getMessage() for r in caplog.records if "could not be opened" in r.getMessage()]
    assert len(warnings) == 1
    assert str(path) in warnings[0]
    assert "Not a directory" in warnings[0] or "ENOTDIR" in warnings[0]
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200


def _dead_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_an_unreachable_redis_never_fails_requests(server, make_session, clock, caplog):
    pytest.importorskip("redis")
    caplog.set_level(logging.WARNING, logger="requests_retryafter")
    session, _adapter = make_session(
        store=f"redis://127.0.0.1:{_dead_port()}/0", sync_interval=0, pace=False
    )
    server.replies((429, {RA: "5"}), 200, (429, {RA: "5"}), 200)
    for _ in range(4):
        assert session.get(server.url + "/").status_code == 200
    assert clock.sleeps == [5.0, 5.0]
    warnings = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(warnings) == 1, warnings


class CountingStore(MemoryStore):
    """A memory store that counts writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def update(self, host: str, fn: Any) -> HostState:
        self.writes += 1
        return super().update(host, fn)

    def set(self, host: str, state: HostState) -> None:
        self.writes += 1
        super().set(host, state)


def test_a_healthy_host_writes_nothing_to_the_store(server, make_session, clock):
    store = CountingStore()
    session, _ = make_session(store=store, sync_interval=0.0)
    for i in range(200):
        assert session.get(f"{server.url}/{i}").status_code == 200
        clock.advance(1.0)
    assert store.writes == 0


def test_a_rejection_is_written_at_once(server, make_session):
    store = CountingStore()
    session, _ = make_session(store=store)
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    assert store.writes >= 1
    stored: Optional[HostState] = store.get(server.host)
    assert stored is not None
    assert stored.observations


def test_close_flushes_what_is_not_yet_written(server, make_session, clock, tmp_path):
    spec = f"json://{tmp_path}/hosts.json"
    session, adapter = make_session(store=spec)
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    # a change that is batched, not written at once
    host = adapter._hosts.by_key[server.host]
    host.tracker.state = host.tracker.state.replace(evidence="batched", updated_at=clock.time())
    host.tracker.dirty = True
    session.close()
    assert os.path.exists(tmp_path / "hosts.json")
    _, again = make_session(store=spec)
    assert again.store.get(server.host).evidence == "batched"


def test_an_adapter_used_after_close_opens_its_store_again(server, make_session, logs, tmp_path):
    # A script closes its session and goes on using it, as a plain HTTPAdapter allows: the
    # store this adapter opened is opened again, not used closed (a warning, and what was
    # learned after close() lost).
    spec = f"json://{tmp_path}/hosts.json"
    session, _ = make_session(store=spec)
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    session.close()
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    assert logs.at(logging.WARNING) == []
    session.close()
    _, again = make_session(store=spec)
    stored = again.store.get(server.host)
    assert stored is not None
    assert len(stored.observations) == 2


def test_a_send_while_the_adapter_closes_does_not_open_it_again_midway(
    server, make_session, logs, tmp_path
):
    # Another thread sends while close() writes what is unsaved. Opened again in the
    # middle, the close closed the new store, left the first open, and took the adapter
    # off its hosts for good. The send goes on as the adapter is (nor does it wait for the
    # close: under a host's lock, a hook may send), and the next one opens it again.
    spec = f"sqlite:///{tmp_path}/hosts.db"
    session, adapter = make_session(store=spec)
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    first = adapter.store
    flushing, finish = threading.Event(), threading.Event()
    flush = adapter.flush

    def slow_flush() -> None:
        flushing.set()
        assert finish.wait(10)
        flush()

    adapter.flush = slow_flush  # type: ignore[method-assign]
    closing = threading.Thread(target=adapter.close)
    closing.start()
    assert flushing.wait(10)
    answers: List[int] = []
    sending = threading.Thread(
        target=lambda: answers.append(session.get(server.url + "/", timeout=5).status_code)
    )
    sending.start()
    sending.join(10)
    assert answers == [200]  # sent while the close still writes
    finish.set()
    closing.join(10)
    adapter.flush = flush  # type: ignore[method-assign]
    assert adapter.store is first  # not opened again midway...
    with pytest.raises(StoreError):
        first.get(server.host)  # ...and closed by the close
    assert session.get(server.url + "/").status_code == 200
    assert adapter.store is not first  # the next send opened it again
    assert adapter.store.get(server.host) is not None  # the same file
    assert not adapter._hosts._left


def test_a_send_from_the_closing_thread_does_not_open_the_adapter_midway(
    server, make_session, tmp_path
):
    # A hook that sends while close() writes (the same thread): opened again in the middle,
    # the close took the adapter off its hosts and out of the exit's flush for good.
    spec = f"sqlite:///{tmp_path}/hosts.db"
    session, adapter = make_session(store=spec)
    assert session.get(server.url + "/").status_code == 200
    first = adapter.store
    flush = adapter.flush
    answers: List[int] = []

    def flush_after_a_send() -> None:
        answers.append(session.get(server.url + "/", timeout=5).status_code)
        flush()

    adapter.flush = flush_after_a_send  # type: ignore[method-assign]
    adapter.close()
    adapter.flush = flush  # type: ignore[method-assign]
    assert answers == [200]
    assert adapter.store is first
    assert adapter._closed
    assert session.get(server.url + "/").status_code == 200
    assert adapter.store is not first
    assert not adapter._hosts._left


def test_an_adapter_that_cannot_open_its_store_again_goes_on_in_memory(
    server, make_session, logs, tmp_path
):
    spec = f"sqlite:///{tmp_path}/hosts.db"
    session, adapter = make_session(store=spec)
    assert session.get(server.url + "/").status_code == 200
    session.close()
    os.remove(tmp_path / "hosts.db")
    os.mkdir(tmp_path / "hosts.db")  # (no store can be opened there now)
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    assert any("could not be opened again" in m for m in logs.at(logging.WARNING))
    assert isinstance(adapter.store, MemoryStore)
    state = adapter.store.get(server.host)
    assert state is not None  # what it learned after close() is kept there
    assert state.observations


def test_an_in_memory_store_is_kept_when_the_adapter_is_used_again(server, make_session):
    session, adapter = make_session(store="memory://")
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    store = adapter.store
    session.close()
    assert session.get(server.url + "/").status_code == 200
    assert adapter.store is store
    assert store.get(server.host) is not None  # what it kept before close() is still there


def test_an_adapter_opened_again_keeps_the_file_it_opened_first(
    server, make_session, tmp_path, monkeypatch
):
    # A relative spec names a file in the working directory of the first opening; a script
    # that changed directory since gets that file back, not a new one where it is now.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    session, _ = make_session(store="json://state/hosts.json")
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    session.close()
    monkeypatch.chdir(tmp_path / "b")
    server.replies((429, {RA: "5"}))
    assert session.get(server.url + "/").status_code == 200
    session.close()
    assert not (tmp_path / "b" / "state").exists()
    _, again = make_session(store=f"json://{tmp_path}/a/state/hosts.json")
    stored = again.store.get(server.host)
    assert stored is not None
    assert len(stored.observations) == 2
