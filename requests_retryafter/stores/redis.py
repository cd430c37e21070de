"""A store in Redis, shared by threads, processes and machines.

Spec: ``redis://[[user]:password@]HOST:PORT/DB[?prefix=NAME&ttl=SECONDS]`` (``rediss://`` for
TLS). The client options listed in :data:`CLIENT_OPTIONS` (``socket_timeout=...``) go to
:meth:`redis.Redis.from_url`; any other option, or a value of the wrong type, is refused with
:class:`~requests_retryafter.ConfigurationError` when the store is opened.

Each host is one key, ``prefix + host`` (default prefix ``requests_retryafter:``), whose value
is the host's JSON text and which expires ``ttl`` seconds after its last write (default 30
days; ``ttl=0`` keeps keys forever). :meth:`RedisStore.update` is an optimistic transaction
(``WATCH``/``MULTI``/``EXEC``, retried when another client wrote the key meanwhile), so
concurrent writers anywhere never lose each other's updates.

Needs the ``redis`` extra: ``pip install requests-retryafter[redis]``. The client library is
imported only when a Redis store is opened.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Type
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError, StoreError
from ..state import HostState, UnsupportedSchema
from .base import BaseStore, Updater, salvaged

if TYPE_CHECKING:
    import redis as redis_lib

__all__ = ["CLIENT_OPTIONS", "DEFAULT_PREFIX", "DEFAULT_TTL", "RedisStore"]

logger = logging.getLogger(__name__)

#: Prepended to every key this store writes.
DEFAULT_PREFIX = "requests_retryafter:"
#: Seconds a host's key lives after its last write (30 days).
DEFAULT_TTL = 30 * 24 * 3600
#: Seconds to wait for a connection or an answer unless the spec says otherwise: short, so
#: that a frozen server cannot hold a call up for long.
DEFAULT_SOCKET_TIMEOUT = 0.5
#: Optimistic-transaction attempts before :meth:`RedisStore.update` gives up.
MAX_TRANSACTION_ATTEMPTS = 1000
_SCAN_BATCH = 500


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError("not a positive number of seconds")
    return value


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(f"less than {minimum}")
        return value

    return parse


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("not a boolean (true/false, yes/no, on/off, 1/0)")


def _protocol(text: str) -> int:
    value = int(text)
    if value not in (2, 3):
        raise ValueError("not 2 or 3")
    return value


#: The client options a spec's query may set (besides ``prefix`` and ``ttl``), each with the
#: check its value must pass when the store is opened.
CLIENT_OPTIONS: Dict[str, Callable[[str], Any]] = {
    "socket_timeout": _seconds,
    "socket_connect_timeout": _seconds,
    "socket_keepalive": _flag,
    "retry_on_timeout": _flag,
    "health_check_interval": _count(0),
    "max_connections": _count(1),
    "client_name": str,
    "protocol": _protocol,
    "ssl_check_hostname": _flag,
}


def _import_redis() -> Any:
    try:
        import redis
    except ImportError as exc:
        raise ImportError(
            "the redis:// store needs the redis client library: "
            "pip install requests-retryafter[redis]"
        ) from exc
    return redis


def _escape_glob(text: str) -> str:
    """Escape Redis glob characters so that ``text`` matches only itself in SCAN MATCH."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisStore(BaseStore):
    """Host state in Redis; safe for threads, processes and machines sharing the server.

    Args:
        client: a :class:`redis.Redis` client (bytes responses; ``decode_responses`` off).
        prefix: prepended to each host to make its key.
        ttl: seconds a key lives after its last write; ``0`` or ``None``: forever.
        read_only: refuse every write with StoreError.

    Connection and server errors are raised as :class:`~requests_retryafter.StoreError`
    (the adapter then carries on with what it knows in memory). A key whose value is
    malformed is skipped with a warning; one written by a newer version is treated as absent
    and never overwritten.
    """

    scheme = "redis"
    shared = True

    def __init__(
        self,
        client: redis_lib.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: Optional[int] = DEFAULT_TTL,
        read_only: bool = False,
    ) -> None:
        super().__init__()
        redis = _import_redis()
        self._redis_error: Type[Exception] = redis.exceptions.RedisError
        self._watch_error: Type[Exception] = redis.exceptions.WatchError
        self.client = client
        self.prefix = prefix
        self.ttl = ttl or None
        self.read_only = read_only
        self._warned: Dict[str, bytes] = {}
        self._told_newer: Set[str] = set()
        self._closed = False
        self._where = "Redis"

    @classmethod
    def from_url(cls, url: str, *, read_only: bool = False) -> RedisStore:
        """Build from ``redis://HOST:PORT/DB?prefix=NAME&ttl=SECONDS`` (or ``rediss://``).

        Socket and connect timeouts default to :data:`DEFAULT_SOCKET_TIMEOUT` unless the spec
        sets them. Opening does not connect.

        Raises:
            ImportError: the redis client library is missing (names the extra to install).
            ConfigurationError: the spec is malformed, or names an unknown option or an
                option with a bad value (the message names the option, never the password).
        """
        redis = _import_redis()
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("redis", "rediss"):
            raise ConfigurationError("a Redis store spec starts with redis:// or rediss://")
        if parts.path.strip("/") and not parts.path.strip("/").isdigit():
            raise ConfigurationError(
                "the database of a Redis store spec is a number: redis://HOST:PORT/0"
            )
        prefix = DEFAULT_PREFIX
        ttl: Optional[int] = DEFAULT_TTL
        rest: List[Tuple[str, str]] = []
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name == "prefix":
                prefix = value
            elif name == "ttl":
                try:
                    ttl = int(value)
                except ValueError:
                    ttl = -1
                if ttl < 0:
                    raise ConfigurationError(
                        f"Redis store ttl must be a whole number of seconds >= 0, not {value!r}"
                    ) from None
            elif name in CLIENT_OPTIONS:
                try:
                    CLIENT_OPTIONS[name](value)
                except (TypeError, ValueError) as exc:
                    raise ConfigurationError(
                        f"Redis store option {name!r} has a bad value ({exc})"
                    ) from None
                rest.append((name, value))
            else:
                raise ConfigurationError(
                    f"unknown Redis store option {name!r}; known: "
                    + ", ".join(sorted({"prefix", "ttl", *CLIENT_OPTIONS}))
                )
        names = {name for name, _ in rest}
        for option in ("socket_timeout", "socket_connect_timeout"):
            if option not in names:
                rest.append((option, str(DEFAULT_SOCKET_TIMEOUT)))
        client_url = urlunsplit(parts._replace(query=urlencode(rest)))
        try:
            client = redis.Redis.from_url(client_url)
            # Build (without connecting) one connection, so that an option this client
            # library does not take fails now, not as a TypeError on a later request.
            pool = client.connection_pool
            pool.connection_class(**pool.connection_kwargs)
        except (ValueError, TypeError) as exc:
            # The message may quote the URL: say only what is wrong with it.
            raise ConfigurationError(
                f"malformed Redis store spec ({type(exc).__name__}); expected "
                "redis://HOST:PORT/DB?prefix=NAME&ttl=SECONDS"
            ) from None
        store = cls(client, prefix=prefix, ttl=ttl, read_only=read_only)
        store._where = f"Redis at {parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path}"
        return store

    def __repr__(self) -> str:  # never shows a password
        return f"RedisStore(<{self._where}>, prefix={self.prefix!r}, ttl={self.ttl!r})"

    def _key(self, host: str) -> str:
        return self.prefix + host

    def _fail(self, action: str, exc: Exception) -> StoreError:
        return StoreError(
            f"Redis store {self._where}: cannot {action} it: {type(exc).__name__}: {exc}"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"Redis store {self._where}: closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreError(f"Redis store {self._where}: opened read-only; not written")

    def _decode(self, host: str, raw: Any) -> Optional[HostState]:
        """The state in ``raw``; ``None`` (with a warning) when malformed. Raises
        :class:`UnsupportedSchema` for a state another version wrote."""
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            return salvaged(
                host,
                f"Redis {self._where}",
                raw,
                lambda dropped: HostState.from_json(text, dropped),
                self._warned,
            )
        except UnsupportedSchema:
            raise
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            if self._warned.get(host) != raw:
                self._warned[host] = raw
                logger.warning("skipping the stored state of host %s in Redis: %s", host, exc)
            return None

    def _lookup(self, host: str, raw: Any) -> Tuple[Optional[HostState], bool]:
        """The state in ``raw`` and whether another version wrote it (then left alone)."""
        if raw is None:
            return None, False
        try:
            return self._decode(host, raw), False
        except UnsupportedSchema as exc:
            self._note_newer(self._told_newer, host, "Redis", exc)
            return None, True

    def get(self, host: str) -> Optional[HostState]:
        """Return the stored state of ``host`` (one round trip)."""
        self._check_open()
        try:
            raw = self.client.get(self._key(host))
        except (self._redis_error, OSError) as exc:
            raise self._fail("read from", exc) from exc
        return self._lookup(host, raw)[0]

    def set(self, host: str, state: HostState) -> None:
        """Store ``state`` for ``host`` and restart its time to live (a state another version
        wrote is left as it is)."""
        self.update(host, lambda _current: state)

    def update(self, host: str, fn: Updater) -> HostState:
        """Replace the state of ``host`` with ``fn(current)`` in an optimistic transaction:
        when another client writes the key between the read and the write, read again and
        call ``fn`` again. Returns the state written. A state another version wrote is left as
        it is: ``fn(None)`` is returned, not written."""
        self._check_writable()
        key = self._key(host)
        errors = (self._redis_error, OSError)
        try:
            pipe = self.client.pipeline(transaction=True)
        except errors as exc:
            raise self._fail("write to", exc) from exc
        with pipe:  # resets the pipeline (unwatches) on the way out, whatever happens
            for _attempt in range(MAX_TRANSACTION_ATTEMPTS):
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    raw = pipe.get(key)
                except errors as exc:
                    raise self._fail("read from", exc) from exc
                current, newer = self._lookup(host, raw)
                new = fn(current)
                if newer or new is current:
                    return new  # a newer version's entry, or nothing changed
                try:
                    pipe.multi()
                    pipe.set(key, new.to_json(), ex=self.ttl)
                    pipe.execute()
                except self._watch_error:
                    logger.debug("host %s changed during an update; trying again", host)
                    continue
                except errors as exc:
                    raise self._fail("write to", exc) from exc
                return new
        raise StoreError(
            f"Redis store {self._where}: gave up updating host {host} after "
            f"{MAX_TRANSACTION_ATTEMPTS} conflicting writes"
        )

    def delete(self, host: str) -> None:
        """Forget ``host`` (a state another version wrote is left as it is)."""
        self._check_writable()
        key = self._key(host)
        errors = (self._redis_error, OSError)
        try:
            with self.client.pipeline(transaction=True) as pipe:
                for _attempt in range(MAX_TRANSACTION_ATTEMPTS):
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    if self._lookup(host, pipe.get(key))[1]:
                        return
                    try:
                        pipe.multi()
                        pipe.delete(key)
                        pipe.execute()
                    except self._watch_error:
                        continue
                    return
        except errors as exc:
            raise self._fail("write to", exc) from exc
        raise StoreError(
            f"Redis store {self._where}: gave up deleting host {host} after "
            f"{MAX_TRANSACTION_ATTEMPTS} conflicting writes"
        )

    def items(self) -> Iterator[Tuple[str, HostState]]:
        """Iterate over a snapshot of every ``(host, state)`` under the prefix, sorted by host
        (``SCAN`` then ``MGET`` in batches)."""
        self._check_open()
        match = _escape_glob(self.prefix) + "*"
        raw_pairs: List[Tuple[str, Any]] = []
        try:
            batch: List[Any] = []
            for key in self.client.scan_iter(match=match, count=_SCAN_BATCH):
                batch.append(key)
                if len(batch) >= _SCAN_BATCH:
                    raw_pairs.extend(zip(batch, _values(self.client.mget(batch))))
                    batch = []
            if batch:
                raw_pairs.extend(zip(batch, _values(self.client.mget(batch))))
        except (self._redis_error, OSError) as exc:
            raise self._fail("read from", exc) from exc
        pairs: List[Tuple[str, HostState]] = []
        skip = len(self.prefix.encode("utf-8"))
        for key, raw in raw_pairs:
            if raw is None:  # expired or deleted since SCAN saw it
                continue
            host = (key if isinstance(key, bytes) else str(key).encode())[skip:].decode(
                "utf-8", "replace"
            )
            state = self._lookup(host, raw)[0]
            if state is not None:
                pairs.append((host, state))
        pairs.sort(key=lambda p: p[0])
        return iter(pairs)

    def close(self) -> None:
        """Close the client's connections."""
        if self._closed:
            return
        self._closed = True
        try:
            self.client.close()
        except (self._redis_error, OSError) as exc:
            raise self._fail("close connections to", exc) from exc


def _values(reply: Any) -> List[Any]:
    """An ``MGET`` reply as a list. (redis-py's stubs type a reply as ``Awaitable | Any``, for
    its asyncio client; the synchronous client answers a list.)"""
    return list(reply)
