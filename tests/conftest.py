"""Fixtures shared by every test: a virtual clock and a scripted HTTP server on 127.0.0.1.

The server is a stdlib ``ThreadingHTTPServer`` on port 0. Each test scripts it: queue replies
with :meth:`ScriptedServer.reply`, or answer every request with a function set by
:meth:`ScriptedServer.respond`. It records every request that reaches it (method, path, headers,
body and the arrival time read from the test's :class:`FakeClock`), so tests assert on what
went on the wire and when, in virtual time. Nothing here sleeps for real.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import pytest
import requests
import urllib3

from requests_retryafter import FakeClock, RetryAfterAdapter

#: The fake clock's start: 2023-11-14 22:13:20 UTC. It is 800 s into an hour and 200 s into a
#: five-minute period, so that a constant header (3600, 86400) does not point at a round time.
START = 1_700_000_000.0

#: What a test logs through; every decision of the adapter goes to this logger or a child.
LOGGER = "requests_retryafter"


def pytest_report_header(config: pytest.Config) -> List[str]:
    return [f"requests {requests.__version__}, urllib3 {urllib3.__version__}"]


@dataclass
class Seen:
    """One request as the server received it."""

    index: int
    time: float
    method: str
    path: str
    headers: Dict[str, str]
    body: bytes


@dataclass
class Reply:
    """What the server answers. ``close=True`` drops the connection without answering."""

    status: int = 200
    #: A mapping, or ``(name, value)`` pairs to send a field more than once.
    headers: Union[Mapping[str, str], Sequence[Tuple[str, str]]] = field(default_factory=dict)
    body: bytes = b"ok"
    close: bool = False


ReplyLike = Union[Reply, int, Tuple[int, Any]]
Responder = Callable[[Seen], ReplyLike]

#: A reply that drops the connection without a status line.
CLOSE = Reply(close=True)


def _as_reply(value: ReplyLike) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, int):
        return Reply(value)
    status, headers = value
    return Reply(status, headers)


class ScriptedServer:
    """A real HTTP/1.1 server whose answers each test scripts.

    Replies queued with :meth:`reply` are used first, in order; then the function set with
    :meth:`respond`; then ``200 ok``.
    """

    Reply = Reply
    #: A reply that drops the connection without a status line.
    CLOSE = CLOSE

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        #: Whether each answer's ``Date`` reads the test's clock (else the real time, for a
        #: cache that judges freshness on the real clock, as cachecontrol does).
        self.dated_on_clock = True
        self.requests: List[Seen] = []
        self._script: List[Reply] = []
        self._responder: Optional[Responder] = None
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        #: Called (outside the lock) while a request is in flight, before answering.
        self.during: Optional[Callable[[Seen], None]] = None
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    # -- scripting ---------------------------------------------------------------------------

    def reply(self, status: int = 200, headers: Any = None, **kw: Any) -> None:
        """Queue one reply (``headers``: a mapping or ``(name, value)`` pairs)."""
        self._script.append(Reply(status, headers or {}, **kw))

    def replies(self, *items: ReplyLike) -> None:
        """Queue several replies."""
        self._script.extend(_as_reply(i) for i in items)

    def respond(self, fn: Responder) -> None:
        """Answer every request not covered by the queue with ``fn(seen)``."""
        self._responder = fn

    # -- what was seen -----------------------------------------------------------------------

    @property
    def times(self) -> List[float]:
        """Arrival times (virtual wall clock) of every request, in arrival order."""
        with self._lock:
            return [r.time for r in self.requests]

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    # -- machinery ---------------------------------------------------------------------------

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            if self._script:
                return self._script.pop(0)
            responder = self._responder
        if responder is not None:
            return _as_reply(responder(seen))
        return Reply()

    def _handler_class(self) -> type:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else each reply waits for a delayed ACK

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def date_time_string(self, timestamp: Optional[float] = None) -> str:
                # The Date follows the test's clock, as a host's follows its own: the
                # adapter reads a host's epoch resets and dates on the clock it shows.
                if timestamp is None and server.dated_on_clock:
                    timestamp = server.clock.time()
                return formatdate(timestamp, usegmt=True)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                with server._lock:
                    seen = Seen(
                        index=len(server.requests),
                        time=server.clock.time(),
                        method=self.command,
                        path=self.path,
                        headers=dict(self.headers.items()),
                        body=body,
                    )
                    server.requests.append(seen)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if server.during is not None:
                        server.during(seen)
                    reply = server._next(seen)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                if reply.close:
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                bodiless = self.command == "HEAD" or reply.status in (204, 304)
                payload = b"" if bodiless else reply.body
                pairs = (
                    reply.headers.items() if isinstance(reply.headers, Mapping) else reply.headers
                )
                for name, value in pairs:
                    self.send_header(name, value)
                if reply.status not in (204, 304):
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if payload:
                    self.wfile.write(payload)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _handle
            do_DELETE = do_OPTIONS = do_TRACE = do_PURGE = do_LOCK = _handle

        return Handler

    def start(self) -> ScriptedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


#: POSIX TZ strings (no tz database needed) on both sides of UTC, with and without DST.
TIME_ZONES = [
    "UTC0",
    "EST5EDT,M3.2.0,M11.1.0",
    "IST-5:30",
    "NZST-12NZDT,M9.5.0,M4.1.0/3",
    "<-12>12",
]


@pytest.fixture(params=TIME_ZONES)
def local_tz(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test with the process's local time zone set to each of ``TIME_ZONES``."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    # The zone really changed (else a test under it would prove nothing).
    assert (request.param == "UTC0") == ({time.timezone, time.altzone} == {0})
    try:
        yield request.param
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.fixture
def clock() -> FakeClock:
    """A virtual clock at :data:`START`."""
    return FakeClock(start=START)


@pytest.fixture
def server(clock: FakeClock) -> Iterator[ScriptedServer]:
    """A scripted server on 127.0.0.1 that reads arrival times from ``clock``."""
    srv = ScriptedServer(clock).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def make_adapter(clock: FakeClock) -> Iterator[Callable[..., RetryAfterAdapter]]:
    """Build adapters on the test's clock, seeded, isolated from the process environment.

    Keyword arguments go to the adapter (:class:`Policy` fields among them, explicit as a
    user's would be). Every adapter built is closed afterwards.
    """
    built: List[RetryAfterAdapter] = []

    def build(**kwargs: Any) -> RetryAfterAdapter:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("seed", 0)
        kwargs.setdefault("environ", {})
        kwargs.setdefault("store", "memory://")
        adapter = RetryAfterAdapter(**kwargs)
        built.append(adapter)
        return adapter

    yield build
    for adapter in built:
        adapter.close()


@pytest.fixture
def make_session(
    make_adapter: Callable[..., RetryAfterAdapter],
) -> Iterator[Callable[..., Tuple[requests.Session, RetryAfterAdapter]]]:
    """Build a session with a fresh adapter (see ``make_adapter``) mounted on both schemes."""
    sessions: List[requests.Session] = []

    def build(**kwargs: Any) -> Tuple[requests.Session, RetryAfterAdapter]:
        adapter = make_adapter(**kwargs)
        session = requests.Session()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        sessions.append(session)
        return session, adapter

    yield build
    for session in sessions:
        session.close()


class LibraryLogs:
    """The records the library logged (its logger or a child), captured at DEBUG."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog

    @property
    def records(self) -> List[logging.LogRecord]:
        return [
            r for r in self.caplog.records if r.name == LOGGER or r.name.startswith(LOGGER + ".")
        ]

    @property
    def messages(self) -> List[str]:
        return [r.getMessage() for r in self.records]

    def at(self, level: int) -> List[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]

    def clear(self) -> None:
        self.caplog.clear()


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> LibraryLogs:
    """What the library logs, at DEBUG and above."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    return LibraryLogs(caplog)


class _WatchedTokens:
    """A host's request slots' queue (``_hosts.Slots``), setting ``blocked`` when a taker
    blocks on it: a test waits for that instead of polling."""

    def __init__(self, tokens: Any, blocked: threading.Event) -> None:
        self._tokens = tokens
        self.blocked = blocked

    def get_nowait(self) -> None:
        return self._tokens.get_nowait()

    def get(self) -> None:
        self.blocked.set()
        return self._tokens.get()

    def put(self, item: None) -> None:
        self._tokens.put(item)


@pytest.fixture
def slot_blocked(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set when a request waits for a host's slot (``max_concurrency`` all in
    flight), in every ``Slots`` built during the test."""
    from requests_retryafter._hosts import Slots

    blocked = threading.Event()
    build = Slots.__init__

    def watched(self: Slots, size: int) -> None:
        build(self, size)
        self._tokens = _WatchedTokens(self._tokens, blocked)  # type: ignore[assignment]

    monkeypatch.setattr(Slots, "__init__", watched)
    return blocked
