"""Issue #9, items 2 and 6: a refused body is read off the wire boundedly, in bytes and in
time, never decompressed, and never while the host's concurrency slot is held.

The servers here are real (``ThreadingHTTPServer`` on 127.0.0.1) and write their bodies as
they go, so the tests measure what went on the wire, not what a header claimed.
"""

from __future__ import annotations

import functools
import threading
import time
import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, List, Optional

import pytest
import requests

from requests_retryafter import Policy, RetryAfterAdapter, RetryDeadlineExceeded, mount

MiB = 1 << 20


class BodyServer:
    """A server whose first ``refusals`` answers are a 429 with a body written by ``body``
    (a generator of chunks); later ones are ``200 ok``. Counts the bytes it managed to send
    and the client ports it served (one per connection)."""

    def __init__(
        self,
        body: Callable[[], Iterator[bytes]],
        *,
        refusals: int = 1,
        headers: Optional[dict] = None,
        chunked: bool = True,
    ) -> None:
        self.body = body
        self.refusals = refusals
        self.headers = headers or {}
        self.chunked = chunked
        self.sent = 0
        self.count = 0
        self.ports: List[int] = []
        self.lock = threading.Lock()
        self.trickling = threading.Event()
        self.stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def _handler(self) -> type:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with server.lock:
                    server.count += 1
                    index = server.count
                    server.ports.append(self.client_address[1])
                if index > server.refusals:
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                    return
                self.send_response(429)
                for name, value in server.headers.items():
                    self.send_header(name, value)
                chunks = list(server.body()) if not server.chunked else None
                if chunks is None:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(sum(map(len, chunks))))
                self.end_headers()
                try:
                    for chunk in chunks if chunks is not None else server.body():
                        if server.stop.is_set():
                            break
                        if chunks is None:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        else:
                            self.wfile.write(chunk)
                        self.wfile.flush()
                        with server.lock:
                            server.sent += len(chunk)
                        server.trickling.set()
                    if chunks is None:
                        self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    self.close_connection = True

        return Handler

    def close(self) -> None:
        self.stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


@pytest.fixture
def body_server() -> Iterator[Callable[..., BodyServer]]:
    servers: List[BodyServer] = []

    def start(*args: Any, **kwargs: Any) -> BodyServer:
        srv = BodyServer(*args, **kwargs)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


def trickle(seconds: float = 60.0) -> Iterator[bytes]:
    """One byte every 0.5 s, for ``seconds`` (forever, as far as a test is concerned)."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        yield b"x"
        time.sleep(0.5)  # the hostile server's pace, in real time


def huge(total: int = 400 * MiB, chunk: int = 64 * 1024) -> Iterator[bytes]:
    block = b"y" * chunk
    for _ in range(total // chunk):
        yield block


@functools.lru_cache(maxsize=1)
def gzip_bomb(expanded: int = 200 * MiB) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    zeros = bytes(MiB)
    parts = [compressor.compress(zeros) for _ in range(expanded // MiB)]
    parts.append(compressor.flush())
    return b"".join(parts)


def test_a_429_whose_body_never_ends_ends_within_the_deadline_plus_one_timeout(body_server):
    # Real time on purpose (bounded): the body trickles in real time.
    srv = body_server(trickle, refusals=100, headers={"Retry-After": "1"})
    session = requests.Session()
    adapter = mount(
        session,
        policy=Policy(deadline=2.0, min_sleep=0.0, max_sleep=1.0),
        environ={},
        store="memory://",
    )
    started = time.monotonic()
    try:
        with pytest.raises(requests.RequestException):
            session.get(srv.url + "/", timeout=1)
    finally:
        elapsed = time.monotonic() - started
        session.close()
        adapter.close()
    assert elapsed <= 2.0 + 1.0 + 0.5, elapsed


@pytest.mark.parametrize("stream", [False, True])
def test_a_chunked_400_mib_429_is_not_read_beyond_the_bound(
    body_server, make_session, clock, stream
):
    srv = body_server(huge, headers={"Retry-After": "1"})
    session, _ = make_session()
    r = session.get(srv.url + "/", stream=stream)
    assert r.status_code == 200
    assert r.content == b"ok"
    # What the server got onto the wire: the bound, plus what socket buffers hold.
    assert srv.sent < 16 * MiB, srv.sent
    assert srv.count == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_gzip_bomb_429_is_never_decompressed(body_server, make_session, stream):
    bomb = gzip_bomb()
    assert len(bomb) < MiB
    srv = body_server(
        lambda: iter([bomb]),
        chunked=False,
        headers={"Retry-After": "1", "Content-Encoding": "gzip"},
    )
    session, _ = make_session()
    tracemalloc.start()
    try:
        r = session.get(srv.url + "/", stream=stream)
        assert r.status_code == 200
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MiB, peak


def test_a_small_refused_body_is_read_and_the_connection_reused(body_server, make_session):
    srv = body_server(
        lambda: iter([b"slow down" * 100]), chunked=False, headers={"Retry-After": "1"}
    )
    session, _ = make_session()
    assert session.get(srv.url + "/").content == b"ok"
    assert len(srv.ports) == 2
    assert srv.ports[0] == srv.ports[1]  # one connection: the body was read, not dropped


def test_a_refused_body_beyond_the_bound_closes_the_connection(body_server, make_session):
    srv = body_server(lambda: huge(4 * MiB), headers={"Retry-After": "1"})
    session, _ = make_session()
    assert session.get(srv.url + "/").content == b"ok"
    assert len(srv.ports) == 2
    assert srv.ports[0] != srv.ports[1]


def test_the_refused_body_stays_readable_on_the_error(body_server, make_session):
    srv = body_server(
        lambda: iter([b'{"error": "slow down"}']),
        chunked=False,
        refusals=10,
        headers={"Retry-After": "30"},
    )
    session, _ = make_session(deadline=10.0)
    with pytest.raises(RetryDeadlineExceeded) as info:
        session.get(srv.url + "/")
    assert info.value.response is not None
    assert info.value.response.status_code == 429
    assert info.value.response.content == b'{"error": "slow down"}'


def test_reading_a_refused_body_holds_up_no_other_call(body_server, make_session, clock):
    # One request at a time to the host: the first call's 429 trickles its body; a second
    # call must not wait for that body to be read.
    srv = body_server(lambda: trickle(5.0), headers={"Retry-After": "1"})
    session, _ = make_session(max_concurrency=1)
    done: List[float] = []
    results: List[int] = []

    def call() -> None:
        results.append(session.get(srv.url + "/").status_code)
        done.append(time.monotonic())

    first = threading.Thread(target=call)
    first.start()
    assert srv.trickling.wait(5)
    started = time.monotonic()
    second = threading.Thread(target=call)
    second.start()
    second.join(10)
    first.join(10)
    assert not first.is_alive()
    assert not second.is_alive()
    assert results == [200, 200]
    # The second call did not wait for the first's drain (up to a second of real time).
    assert done[0] - started < 0.5, done[0] - started


def test_draining_does_not_hold_the_hosts_slot_with_a_plain_adapter_in_mind(body_server, clock):
    # A user's own adapter subclass sees the same: a refused body is released before the
    # call's next step, and a plain request to the host still works afterwards.
    srv = body_server(lambda: iter([b"z" * 10]), chunked=True, headers={"Retry-After": "1"})
    adapter = RetryAfterAdapter(clock=clock, environ={}, store="memory://", seed=0)
    session = requests.Session()
    session.mount("http://", adapter)
    try:
        assert session.get(srv.url + "/").status_code == 200
        assert session.get(srv.url + "/").status_code == 200
    finally:
        session.close()
        adapter.close()
