"""What every store must do, as one test class each backend's test module subclasses.

A subclass overrides :meth:`StoreContract.location` (where the store lives: a path in
``tmp_path``, a Redis key prefix), :meth:`StoreContract.make_store` (open a store there) and,
for backends that serialise, :meth:`StoreContract.put_raw` (plant raw JSON text for a host, as
another program or another version of this library would) and :meth:`StoreContract.raw_dump`
(every byte the backend persisted).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable, ClassVar, Iterator, List, Optional, Set, Tuple

import pytest

from requests_retryafter.state import HostState, LimitEstimate, Observation, host_key
from requests_retryafter.stores import STORES, StateStore

THREADS = 8
UPDATES_PER_THREAD = 25


def full_state(host: str, n: int = 3) -> HostState:
    """A state using every field, with ``n`` observations."""
    state = HostState(
        host=host,
        category="constant_overstated",
        evidence="headers say 3600 s, recovered after 20 s",
        limit=LimitEstimate(
            rate=0.66,
            window=60.0,
            documented=1.0,
            updated_at=1_700_000_100.5,
            burst=40,
            anchor=1_700_000_040.0,
            by="worker-a",
            even=True,
            shortest=55.0,
        ),
        limit_history=((1_700_000_000.0, 1.0), (1_700_000_100.5, 0.66)),
        blocked_until=1_700_000_200.25,
        held_until=1_700_000_300.0,
        hold_reason="needs 3600 s, more than the 300 s ceiling",
        category_changed_at=1_700_000_050.0,
        updated_at=1_700_000_100.5,
    )
    for i in range(n):
        state = state.with_observation(
            Observation(
                at=1_700_000_000.0 + i,
                status=429,
                header=3600.0,
                form="delta",
                recovered=20.0 + i,
                failed_until=10.0,
                countdown=False,
                served=40,
                span=60.0,
            )
        )
    return state


def add_token(host: str, token: str) -> Callable[[Optional[HostState]], HostState]:
    """An updater that adds ``token`` to the comma-separated set in ``evidence`` (so that a
    lost update shows as a missing token) and records an observation."""

    def fn(current: Optional[HostState]) -> HostState:
        base = current if current is not None else HostState(host=host)
        tokens = {t for t in base.evidence.split(",") if t}
        tokens.add(token)
        n = len(tokens)
        return base.replace(
            evidence=",".join(sorted(tokens)), updated_at=float(n)
        ).with_observation(Observation(at=1_700_000_000.0 + n, status=429, header=None))

    return fn


def tokens_of(state: Optional[HostState]) -> Set[str]:
    """The tokens :func:`add_token` put into ``state``."""
    assert state is not None
    return {t for t in state.evidence.split(",") if t}


class StoreContract:
    """The shared store tests. Subclasses set the class attributes and override the methods."""

    #: The store keeps data after close() (a reopened store sees it).
    persistent: ClassVar[bool] = True
    #: The value of the backend's ``shared`` attribute.
    expected_shared: ClassVar[bool] = True
    #: The backend's scheme in STORES.
    scheme: ClassVar[str] = ""

    # -- to override -----------------------------------------------------------------------

    def location(self, tmp_path: Any, request: pytest.FixtureRequest) -> Any:
        """Where the store lives (a path, a URL...)."""
        return tmp_path

    def make_store(self, location: Any) -> Any:
        """Open a store at ``location``."""
        raise NotImplementedError

    def put_raw(self, store: Any, location: Any, host: str, text: str) -> None:
        """Store ``text`` verbatim as the value of ``host``, bypassing HostState."""
        pytest.skip("this backend keeps objects, not text")

    def raw_dump(self, store: Any, location: Any) -> bytes:
        """Every byte the backend persisted (keys and values)."""
        return json.dumps({h: s.to_dict() for h, s in store.items()}).encode()

    # -- fixtures --------------------------------------------------------------------------

    @pytest.fixture
    def loc(self, tmp_path: Any, request: pytest.FixtureRequest) -> Any:
        return self.location(tmp_path, request)

    @pytest.fixture
    def store(self, loc: Any) -> Iterator[Any]:
        store = self.make_store(loc)
        yield store
        store.close()

    # -- the contract ----------------------------------------------------------------------

    def test_is_a_registered_state_store(self, store: Any) -> None:
        assert isinstance(store, StateStore)
        assert type(store).scheme == self.scheme  # type: ignore[attr-defined]
        assert STORES[self.scheme] == (type(store).__module__, type(store).__name__)
        assert store.shared is self.expected_shared  # type: ignore[attr-defined]

    def test_round_trip(self, store: Any) -> None:
        state = full_state("api.example.org")
        store.set("api.example.org", state)
        assert store.get("api.example.org") == state

    def test_missing_host_returns_none(self, store: Any) -> None:
        assert store.get("nowhere.example") is None

    def test_set_replaces(self, store: Any) -> None:
        store.set("a.example", full_state("a.example", 1))
        store.set("a.example", HostState(host="a.example", category="truthful"))
        assert store.get("a.example") == HostState(host="a.example", category="truthful")

    def test_delete_is_idempotent(self, store: Any) -> None:
        store.delete("never-stored.example")
        store.set("a.example", HostState(host="a.example"))
        store.set("b.example", HostState(host="b.example"))
        store.delete("a.example")
        store.delete("a.example")
        assert store.get("a.example") is None
        assert store.get("b.example") == HostState(host="b.example")

    def test_items_lists_all(self, store: Any) -> None:
        expected = {f"h{i}.example": full_state(f"h{i}.example", i) for i in range(5)}
        for host, state in expected.items():
            store.set(host, state)
        store.delete("h4.example")
        del expected["h4.example"]
        assert dict(store.items()) == expected

    def test_items_is_empty_for_a_new_store(self, store: Any) -> None:
        assert list(store.items()) == []

    def test_host_keys_with_ports_ipv6_and_unicode(self, store: Any) -> None:
        hosts = ["127.0.0.1:8080", "[::1]:8443", "data.stadt-köln.de", "x" * 200 + ".example"]
        for host in hosts:
            store.set(host, HostState(host=host, evidence=host))
        for host in hosts:
            assert store.get(host) == HostState(host=host, evidence=host)
        assert sorted(h for h, _ in store.items()) == sorted(hosts)

    def test_update_receives_current_and_returns_new(self, store: Any) -> None:
        seen: List[Optional[HostState]] = []

        def fn(current: Optional[HostState]) -> HostState:
            seen.append(current)
            n = 0 if current is None else int(current.evidence)
            return HostState(host="a.example", evidence=str(n + 1))

        first = store.update("a.example", fn)
        second = store.update("a.example", fn)
        assert seen == [None, first]
        assert second == HostState(host="a.example", evidence="2")
        assert store.get("a.example") == second

    def test_an_update_that_returns_current_writes_nothing(
        self, store: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A worker waiting for the shared schedule's next send reads it in an update that
        # changes nothing; a write would make every other worker's update start again.
        store.set("a.example", HostState(host="a.example", evidence="kept"))
        writes = _spy_writes(self.scheme, store, monkeypatch)
        kept = store.update("a.example", lambda current: current)
        assert writes == []
        assert kept == HostState(host="a.example", evidence="kept")
        store.update("a.example", lambda current: current.replace(evidence="changed"))
        assert writes, "the spy saw no write of a changed state"
        assert store.get("a.example") == HostState(host="a.example", evidence="changed")

    def test_update_merges_with_stored_state(self, store: Any) -> None:
        stored = full_state("a.example", 2)
        store.set("a.example", stored)
        mine = HostState(host="a.example", blocked_until=9e9, updated_at=1.0).with_observation(
            Observation(at=1_800_000_000.0, status=503, header=5.0)
        )
        merged = store.update("a.example", mine.merge)
        assert store.get("a.example") == merged
        assert merged.blocked_until == 9e9
        assert len(merged.observations) == 3
        assert merged.limit == stored.limit

    def test_update_that_raises_changes_nothing(self, store: Any) -> None:
        store.set("a.example", HostState(host="a.example", evidence="kept"))

        def boom(current: Optional[HostState]) -> HostState:
            raise RuntimeError("updater failed")

        with pytest.raises(RuntimeError, match="updater failed"):
            store.update("a.example", boom)
        with pytest.raises(RuntimeError, match="updater failed"):
            store.update("b.example", boom)
        assert store.get("a.example") == HostState(host="a.example", evidence="kept")
        assert store.get("b.example") is None
        store.set("c.example", HostState(host="c.example"))  # the store still works

    def test_concurrent_threads_lose_nothing(self, store: Any) -> None:
        errors: List[BaseException] = []
        start = threading.Barrier(THREADS)

        def work(t: int) -> None:
            try:
                start.wait()
                for i in range(UPDATES_PER_THREAD):
                    store.update("shared.example", add_token("shared.example", f"{t}:{i}"))
                    store.update(f"t{t}.example", add_token(f"t{t}.example", str(i)))
                    store.get("shared.example")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert tokens_of(store.get("shared.example")) == {
            f"{t}:{i}" for t in range(THREADS) for i in range(UPDATES_PER_THREAD)
        }
        for t in range(THREADS):
            assert tokens_of(store.get(f"t{t}.example")) == {
                str(i) for i in range(UPDATES_PER_THREAD)
            }

    def test_newer_schema_version_is_not_returned_and_left_untouched(
        self, store: Any, loc: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        store.set("good.example", HostState(host="good.example"))
        future = HostState(host="new.example").to_dict()
        future["v"] = 2
        future["field_of_v2"] = [1, 2]
        self.put_raw(store, loc, "new.example", json.dumps(future))
        with caplog.at_level(logging.INFO):
            assert store.get("new.example") is None
            assert dict(store.items()) == {"good.example": HostState(host="good.example")}
        assert "new.example" in caplog.text
        assert "leaving it as it is" in caplog.text
        # Neither update, set nor delete touches what another version wrote: the updater
        # sees nothing and its result is returned without being written.
        seen: List[Optional[HostState]] = []

        def fresh(current: Optional[HostState]) -> HostState:
            seen.append(current)
            return HostState(host="new.example", evidence="mine")

        assert store.update("new.example", fresh) == HostState(host="new.example", evidence="mine")
        assert seen == [None]
        store.set("new.example", HostState(host="new.example", evidence="mine"))
        store.delete("new.example")
        store.set("other.example", HostState(host="other.example"))  # a rewrite of the rest
        assert store.get("new.example") is None
        assert json.dumps(future, sort_keys=True) in self.raw_entries(store, loc)

    def raw_entries(self, store: Any, loc: Any) -> str:
        """The raw JSON entries of every host, one ``json.dumps(sort_keys=True)`` a line."""
        raise NotImplementedError

    def test_malformed_entry_is_skipped_with_a_warning(
        self, store: Any, loc: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        store.set("good.example", HostState(host="good.example"))
        self.put_raw(store, loc, "bad.example", '{"v": 1, "host": "bad.example", "observations": 7')
        self.put_raw(store, loc, "worse.example", json.dumps({"v": 1, "observations": [{}]}))
        with caplog.at_level(logging.WARNING):
            assert store.get("bad.example") is None
            assert store.get("worse.example") is None
            assert dict(store.items()) == {"good.example": HostState(host="good.example")}
        assert "bad.example" in caplog.text
        assert "worse.example" in caplog.text
        store.set("bad.example", HostState(host="bad.example"))
        assert store.get("bad.example") == HostState(host="bad.example")

    def test_an_entry_with_a_malformed_part_keeps_the_rest_with_a_warning(
        self, store: Any, loc: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        held = HostState(host="held.example", category="truthful", held_until=1_800_000_000.0)
        entry = held.to_dict()
        entry["limit"] = {"rate": -1}  # a hand edit, say
        self.put_raw(store, loc, "held.example", json.dumps(entry))
        with caplog.at_level(logging.WARNING):
            # The hold and the category survive; only the limit is left out.
            assert store.get("held.example") == held
            assert dict(store.items()) == {"held.example": held}
        assert "held.example" in caplog.text
        assert "limit" in caplog.text

    def test_deeply_nested_entry_is_dropped_not_raised(
        self, store: Any, loc: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        store.set("good.example", HostState(host="good.example"))
        self.put_raw(store, loc, "deep.example", "[" * 100_000)
        with caplog.at_level(logging.WARNING):
            assert store.get("deep.example") is None
            assert dict(store.items()) == {"good.example": HostState(host="good.example")}
        assert "deep.example" in caplog.text

    def test_close_then_reopen_keeps_data(self, loc: Any) -> None:
        if not self.persistent:
            pytest.skip("this backend keeps nothing after close()")
        state = full_state("api.example.org")
        with self.make_store(loc) as first:
            first.set("api.example.org", state)
            first.set("gone.example", state)
            first.delete("gone.example")
        second = self.make_store(loc)
        try:
            assert second.get("api.example.org") == state
            assert dict(second.items()) == {"api.example.org": state}
        finally:
            second.close()

    def test_close_is_idempotent(self, loc: Any) -> None:
        store = self.make_store(loc)
        store.close()
        store.close()

    def test_nothing_but_host_keys_and_states_is_persisted(self, store: Any, loc: Any) -> None:
        url = "https://analyst:s3cr3t-pw@Permits.County.example:8443/v2/records?token=TOKEN-123"
        host = host_key(url)
        assert host == "permits.county.example:8443"
        store.set(host, full_state(host))
        store.update(host, add_token(host, "t"))
        dump = self.raw_dump(store, loc)
        assert host.encode() in dump
        for secret in (b"s3cr3t", b"analyst", b"TOKEN-123", b"token=", b"/v2", b"records"):
            assert secret not in dump
        assert [h for h, _ in store.items()] == [host]


def dump_dir(path: Any, exclude_suffixes: Tuple[str, ...] = (".lock",)) -> bytes:
    """Every byte of every file under ``path`` (file names included)."""
    chunks: List[bytes] = []
    for item in sorted(path.rglob("*")):
        if item.is_file() and not item.name.endswith(exclude_suffixes):
            chunks.append(item.name.encode() + b"\n" + item.read_bytes())
    return b"\n".join(chunks)


def _spy_writes(scheme: str, store: Any, monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """A list that each write of ``store``'s backend appends to (its own write path)."""
    writes: List[str] = []

    def spied(name: str) -> None:
        real = getattr(store, name)

        def spy(*args: Any, **kwargs: Any) -> Any:
            writes.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(store, name, spy)

    if scheme in ("memory", "json", "shelve"):
        spied({"memory": "set", "json": "_write", "shelve": "_put"}[scheme])
    elif scheme == "sqlite":
        writable = store._writable

        class Recording:
            def __init__(self, conn: Any) -> None:
                self._conn = conn

            def execute(self, sql: str, *args: Any) -> Any:
                if sql.lstrip().upper().startswith(("INSERT", "DELETE")):
                    writes.append(sql)
                return self._conn.execute(sql, *args)

        monkeypatch.setattr(store, "_writable", lambda: Recording(writable()))
    elif scheme == "redis":
        pipeline = store.client.pipeline

        def recording(*args: Any, **kwargs: Any) -> Any:
            pipe = pipeline(*args, **kwargs)
            real = pipe.execute

            def execute(*a: Any, **k: Any) -> Any:
                writes.append("execute")
                return real(*a, **k)

            pipe.execute = execute
            return pipe

        monkeypatch.setattr(store.client, "pipeline", recording)
    else:
        raise AssertionError(f"no write spy for {scheme!r}")
    return writes
