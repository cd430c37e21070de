"""RedisStore: the contract against a real server, keys and TTLs, conflicts, errors.

The tests marked ``redis`` need a server: set REQUESTS_RETRYAFTER_TEST_REDIS_URL (for instance
with ``source .ci/redis.sh; start_redis``). Without it they are skipped; with it set to a
server that does not answer they fail.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from typing import Any, Iterator, Optional

import pytest

from requests_retryafter.errors import ConfigurationError, StoreError
from requests_retryafter.state import HostState
from requests_retryafter.stores import open_store
from requests_retryafter.stores.redis import DEFAULT_PREFIX, DEFAULT_TTL, RedisStore

from .conftest import with_query
from .contract import StoreContract, add_token, tokens_of

redis = pytest.importorskip("redis")


def client_for(url: str) -> Any:
    return redis.Redis.from_url(url)


@pytest.mark.redis
class TestRedisStore(StoreContract):
    scheme = "redis"

    def location(self, tmp_path: Any, request: pytest.FixtureRequest) -> str:
        url = request.getfixturevalue("redis_url")
        return with_query(url, prefix=request.getfixturevalue("redis_prefix"))

    def make_store(self, location: str) -> RedisStore:
        store = open_store(location)
        assert isinstance(store, RedisStore)
        return store

    def put_raw(self, store: Any, location: str, host: str, text: str) -> None:
        store.client.set(store.prefix + host, text)

    def raw_entries(self, store: Any, location: str) -> str:
        keys = sorted(store.client.scan_iter(match=store.prefix + "*"))
        return "\n".join(json.dumps(json.loads(store.client.get(k)), sort_keys=True) for k in keys)

    def raw_dump(self, store: Any, location: str) -> bytes:
        chunks = []
        for key in sorted(store.client.scan_iter(match=store.prefix + "*")):
            chunks.append(key + b"\n" + store.client.get(key))
        return b"\n".join(chunks)


@pytest.fixture
def store(redis_url: str, redis_prefix: str) -> Iterator[RedisStore]:
    store = open_store(with_query(redis_url, prefix=redis_prefix, ttl="3600"))
    assert isinstance(store, RedisStore)
    yield store
    store.close()


@pytest.mark.redis
def test_one_key_per_host_with_prefix_and_ttl(store: RedisStore) -> None:
    store.set("a.example", HostState(host="a.example"))
    store.update("b.example", add_token("b.example", "x"))
    client: Any = store.client
    keys = sorted(client.scan_iter(match=store.prefix + "*"))
    assert keys == [(store.prefix + h).encode() for h in ("a.example", "b.example")]
    assert HostState.from_json(client.get(keys[0]).decode()) == HostState(host="a.example")
    for key in keys:
        assert 3500 < client.ttl(key) <= 3600


@pytest.mark.redis
def test_ttl_zero_keeps_keys_forever(redis_url: str, redis_prefix: str) -> None:
    store: Any
    with open_store(with_query(redis_url, prefix=redis_prefix, ttl="0")) as store:  # type: ignore[attr-defined]
        store.set("a.example", HostState(host="a.example"))
        assert store.client.ttl(store.prefix + "a.example") == -1


@pytest.mark.redis
def test_prefixes_keep_stores_apart(redis_url: str, redis_prefix: str) -> None:
    a = open_store(with_query(redis_url, prefix=redis_prefix + "a:"))
    # Glob characters in a prefix match only themselves when listing.
    b = open_store(with_query(redis_url, prefix=redis_prefix + "*"))
    try:
        a.set("x.example", HostState(host="x.example"))
        b.set("y.example", HostState(host="y.example"))
        assert b.get("x.example") is None
        assert [h for h, _ in a.items()] == ["x.example"]
        assert [h for h, _ in b.items()] == ["y.example"]
    finally:
        a.close()
        b.close()


@pytest.mark.redis
def test_items_reads_many_hosts_in_batches(store: RedisStore) -> None:
    pipe = store.client.pipeline()
    for i in range(1234):
        pipe.set(store.prefix + f"h{i:04}.example", HostState(host=f"h{i:04}.example").to_json())
    pipe.execute()
    hosts = [h for h, _ in store.items()]
    assert hosts == [f"h{i:04}.example" for i in range(1234)]


@pytest.mark.redis
def test_update_retries_when_another_client_writes_meanwhile(
    store: RedisStore, redis_url: str
) -> None:
    store.set("a.example", HostState(host="a.example", evidence="first"))
    other = client_for(redis_url)
    calls = []

    def fn(current: Optional[HostState]) -> HostState:
        calls.append(current)
        if len(calls) == 1:  # another worker writes between our read and our write
            other.set(
                store.prefix + "a.example", add_token("a.example", "other")(current).to_json()
            )
        return add_token("a.example", "mine")(current)

    try:
        result = store.update("a.example", fn)
    finally:
        other.close()
    assert len(calls) == 2
    assert calls[1] is not None
    assert tokens_of(calls[1]) == {"first", "other"}
    assert tokens_of(result) == {"first", "other", "mine"}
    assert store.get("a.example") == result


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_server_down_raises_store_error() -> None:
    url = f"redis://127.0.0.1:{unused_port()}/0?socket_connect_timeout=1"
    store = open_store(url)  # opening does not connect
    calls = {
        "get": lambda: store.get("a.example"),
        "set": lambda: store.set("a.example", HostState(host="a.example")),
        "update": lambda: store.update("a.example", add_token("a.example", "x")),
        "delete": lambda: store.delete("a.example"),
        "items": lambda: list(store.items()),
    }
    for name, call in calls.items():
        with pytest.raises(StoreError) as info:
            call()  # type: ignore[no-untyped-call]
        assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError), name
        assert "127.0.0.1" in str(info.value)
    store.close()


def test_spec_parsing_and_defaults() -> None:
    store = open_store("redis://:hunter2@cache.internal:6380/3?prefix=job7:&ttl=60")
    assert isinstance(store, RedisStore)
    assert (store.prefix, store.ttl) == ("job7:", 60)
    kwargs = store.client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("cache.internal", 6380, 3)
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 0.5
    assert "hunter2" not in repr(store)
    assert "cache.internal:6380/3" in repr(store)
    default = open_store("redis://localhost:6379/0")
    assert isinstance(default, RedisStore)
    assert (default.prefix, default.ttl) == (DEFAULT_PREFIX, DEFAULT_TTL)
    tls = open_store("rediss://localhost:6379/0?socket_timeout=2")
    assert isinstance(tls, RedisStore)
    assert tls.client.connection_pool.connection_kwargs["socket_timeout"] == 2.0


@pytest.mark.parametrize(
    "spec",
    [
        "redis://localhost:6379/0?ttl=soon",
        "redis://localhost:6379/0?ttl=-5",
        "redis://:hunter2@localhost:6379/zero",
        "redis://localhost:port/0",
    ],
)
def test_malformed_spec_raises_configuration_error_without_the_password(spec: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_store(spec)
    assert "hunter2" not in str(info.value)


def test_import_never_imports_redis() -> None:
    code = (
        "import sys\n"
        "import requests_retryafter\n"
        "import requests_retryafter.stores.jsonfile, requests_retryafter.stores.sqlite\n"
        "import requests_retryafter.stores.shelf\n"
        "requests_retryafter.open_store('memory://')\n"
        "assert 'redis' not in sys.modules, 'redis was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("query", "option"),
    [
        ("socket_timout=1", "socket_timout"),
        ("sockettimeout=1", "sockettimeout"),
        ("password_file=x", "password_file"),
        ("socket_timeout=soon", "socket_timeout"),
        ("socket_timeout=-1", "socket_timeout"),
        ("socket_timeout=nan", "socket_timeout"),
        ("socket_keepalive=maybe", "socket_keepalive"),
        ("max_connections=0", "max_connections"),
        ("protocol=9", "protocol"),
    ],
)
def test_unknown_or_bad_option_is_refused_at_open_naming_it(query: str, option: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_store(f"redis://:hunter2@localhost:6379/0?{query}")
    assert repr(option) in str(info.value)
    assert "hunter2" not in str(info.value)


def test_known_options_are_passed_on_with_their_types() -> None:
    store = open_store(
        "redis://localhost:6379/0?socket_timeout=2&socket_keepalive=true&health_check_interval=3"
    )
    assert isinstance(store, RedisStore)
    kwargs = store.client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 2.0
    assert kwargs["socket_connect_timeout"] == 0.5
    assert kwargs["socket_keepalive"] is True
    assert kwargs["health_check_interval"] == 3
    store.close()


def test_a_frozen_server_cannot_hold_a_call_up_for_long() -> None:
    # A server that accepts connections and never answers, as a SIGSTOPped Redis does.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        store = open_store(f"redis://127.0.0.1:{port}/0")
        started = time.monotonic()
        with pytest.raises(StoreError) as info:
            store.get("a.example")
        assert time.monotonic() - started < 2.5  # 0.5 s default, plus redis-py's own retries
        assert "127.0.0.1" in str(info.value)
        store.close()


@pytest.mark.redis
def test_read_only_store_refuses_writes(redis_url: str, redis_prefix: str) -> None:
    writer = open_store(with_query(redis_url, prefix=redis_prefix))
    writer.set("a.example", HostState(host="a.example"))
    reader = open_store(with_query(redis_url, prefix=redis_prefix), read_only=True)
    try:
        assert reader.get("a.example") == HostState(host="a.example")
        for write in (
            lambda: reader.set("b.example", HostState(host="b.example")),
            lambda: reader.update("b.example", lambda s: HostState(host="b.example")),
            lambda: reader.delete("a.example"),
        ):
            with pytest.raises(StoreError, match="read-only"):
                write()
        assert [h for h, _ in writer.items()] == ["a.example"]
    finally:
        reader.close()
        writer.close()
