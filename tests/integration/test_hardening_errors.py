"""Issue #9, items 5, 7, 8 and 9: only requests exceptions leave ``send()``, as a plain
``HTTPAdapter`` raises them; only plainly transient failures are retried; the user's own
``Retry`` keeps its backoff; no connection backoff exceeds ``max_sleep``.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import logging
import socket
import ssl
import threading
import time
from typing import Any, List, Tuple

import pytest
import requests
import urllib3
from urllib3.util.retry import Retry

from requests_retryafter import (
    HostState,
    LimitEstimate,
    MemoryStore,
    _gates,
    _sending,
    _traces,
    _turns,
    engine,
)

RA = "Retry-After"


# -- TLS: an untrusted certificate is never retried ---------------------------------------------


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> Tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (untrusted by any CA bundle)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


class OneShotTLSServer:
    """Accepts one connection, attempts a TLS handshake with an untrusted certificate, then
    goes away (the port is closed): a retry can only meet a refused connection."""

    def __init__(self, cert: Tuple[str, str]) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(*cert)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.accepted += 1
        self.sock.close()
        try:
            with self.context.wrap_socket(conn, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def _plain_error(url: str, **kwargs: Any) -> BaseException:
    session = requests.Session()
    try:
        session.get(url, **kwargs)
    except BaseException as exc:
        return exc
    finally:
        session.close()
    raise AssertionError("a plain adapter did not raise")


def test_an_untrusted_certificate_raises_ssl_error_at_once(self_signed, make_session, clock):
    srv = OneShotTLSServer(self_signed)
    try:
        session, _ = make_session()
        with pytest.raises(requests.exceptions.SSLError) as info:
            session.get(f"https://127.0.0.1:{srv.port}/")
    finally:
        srv.close()
    assert srv.accepted == 1
    assert clock.sleeps == []
    # As a plain adapter gives it: requests' SSLError around urllib3's MaxRetryError.
    assert type(info.value) is requests.exceptions.SSLError
    reason = getattr(info.value.args[0], "reason", None)
    assert isinstance(reason, urllib3.exceptions.SSLError)


@pytest.mark.parametrize(
    ("url", "kwargs"),
    [
        ("http://127.0.0.1:{port}/", {"proxies": {"http": "http://"}}),  # InvalidProxyURL
        ("http://127.0.0.1:{port}/", {"headers": {"X-Bad": "a\nb"}}),  # InvalidHeader
        ("http://127.0.0.1:{port}/", {"proxies": {"http": "socks9://x:1"}}),  # InvalidSchema
        ("http://nonexistent.invalid:{port}/", {}),  # a name that does not resolve
    ],
    ids=["invalid-proxy-url", "invalid-header", "invalid-proxy-schema", "unresolvable"],
)
def test_errors_that_are_not_transient_reach_the_caller_unchanged_and_unretried(
    server, make_session, clock, url, kwargs
):
    url = url.format(port=server.port)
    plain = _plain_error(url, **kwargs)
    session, _ = make_session()
    with pytest.raises(BaseException) as info:
        session.get(url, **kwargs)
    assert type(info.value) is type(plain)
    assert isinstance(info.value, requests.RequestException)
    assert clock.sleeps == []
    assert server.count == 0


def test_invalid_url_from_the_transport_is_not_retried(make_adapter, clock):
    adapter = make_adapter()
    request = requests.Request("GET", "http://127.0.0.1:80/").prepare()
    request.url = "http://:80/"  # past requests' own checks: the transport refuses it
    plain = requests.adapters.HTTPAdapter()
    with pytest.raises(requests.RequestException) as expected:
        plain.send(request)
    with pytest.raises(requests.RequestException) as info:
        adapter.send(request)
    assert type(info.value) is type(expected.value)
    assert clock.sleeps == []


def test_a_garbled_answer_is_not_retried(make_session, clock):
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    seen: List[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            seen.append(1)
            conn.recv(65536)
            conn.sendall(b"this is not HTTP\r\n\r\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        session, _ = make_session()
        with pytest.raises(requests.ConnectionError):
            session.get(f"http://127.0.0.1:{port}/")
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (closing alone does not)
        sock.close()
        thread.join(5)
    assert len(seen) == 1
    assert clock.sleeps == []


# -- the user's own Retry -----------------------------------------------------------------------


@pytest.fixture
def urllib3_sleeps(monkeypatch: pytest.MonkeyPatch) -> List[float]:
    """The backoff urllib3's Retry would sleep between its own retries (not slept)."""
    sleeps: List[float] = []

    def sleep(self: Retry, response: Any = None) -> None:
        sleeps.append(self.get_backoff_time())

    monkeypatch.setattr(Retry, "sleep", sleep)
    return sleeps


def test_the_users_retry_keeps_its_backoff(server, make_session, clock, urllib3_sleeps):
    user_retry = Retry(total=4, backoff_factor=0.5, status_forcelist=[502])
    server.replies(502, 502, 502, 502)
    plain = requests.Session()
    plain.mount("http://", requests.adapters.HTTPAdapter(max_retries=user_retry))
    assert plain.get(server.url + "/").status_code == 200
    plain.close()
    expected = list(urllib3_sleeps)
    assert expected
    assert any(s > 0 for s in expected)
    urllib3_sleeps.clear()

    server.replies(502, 502, 502, 502)
    session, adapter = make_session(max_retries=user_retry)
    handed = adapter.max_retries
    assert handed.backoff_factor == 0.5
    assert handed.total == 4
    assert set(handed.status_forcelist) == {502}
    assert handed.respect_retry_after_header is False
    assert session.get(server.url + "/").status_code == 200
    assert urllib3_sleeps == expected
    assert server.count == 10


def test_413_may_be_retried_by_the_users_retry(server, make_session):
    session, adapter = make_session(max_retries=Retry(total=2, status_forcelist=[413, 429]))
    assert set(adapter.max_retries.status_forcelist) == {413}
    server.replies(413)
    assert session.get(server.url + "/").status_code == 200
    assert server.count == 2


# -- timeouts -----------------------------------------------------------------------------------


@pytest.fixture
def sent_timeouts(monkeypatch: pytest.MonkeyPatch) -> List[object]:
    seen: List[object] = []
    real_send = requests.adapters.HTTPAdapter.send

    def spy(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("timeout"))
        return real_send(self, request, *args, **kwargs)

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", spy)
    return seen


@pytest.mark.parametrize(
    "timeout",
    [
        urllib3.Timeout(total=5),
        urllib3.Timeout(total=5, connect=2),
        urllib3.Timeout(total=500, read=3),
        urllib3.Timeout(connect=1),
        urllib3.Timeout(),
        (None, None),
        (None, 7),
        1e10,
        float("inf"),
        (float("inf"), 1e12),
    ],
    ids=repr,
)
def test_any_timeout_form_works_and_is_capped_by_the_deadline(
    server, make_session, sent_timeouts, timeout
):
    session, _ = make_session(deadline=60.0)
    assert session.get(server.url + "/", timeout=timeout).status_code == 200
    (sent,) = sent_timeouts
    if isinstance(sent, urllib3.Timeout):
        parts = [sent.total, sent._connect, sent._read]
        assert all(isinstance(p, (int, float)) for p in parts[1:])
        assert all(p is None or p <= 60.0 for p in parts)
    elif isinstance(sent, tuple):
        assert all(p <= 60.0 for p in sent)
    else:
        assert sent <= 60.0


# -- failures of the adapter's own logic -------------------------------------------------------


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("injected")


@pytest.mark.parametrize(
    ("owner", "method", "replies", "status"),
    [
        (engine.HostTracker, "clear", [], 200),
        (engine.HostTracker, "on_success", [], 200),
        (engine.HostTracker, "on_rejection", [(429, {RA: "1"})], 429),
        # A healthy host's turn is only ``clear``; after a rejection, its gates are asked.
        (_gates.Gates, "check", [(429, {RA: "1"})], 429),
    ],
)
def test_an_internal_failure_never_escapes_and_the_request_goes_on(
    server, make_session, logs, monkeypatch, owner, method, replies, status
):
    monkeypatch.setattr(owner, method, _boom)
    server.replies(*replies)
    session, _ = make_session()
    r = session.get(server.url + "/")
    assert r.status_code == status
    errors = logs.at(logging.ERROR)
    assert errors
    assert server.host in errors[0]
    assert "internal error" in errors[0]


def test_a_failure_to_count_a_call_never_breaks_it(server, make_session, monkeypatch):
    monkeypatch.setattr(_traces.Tally, "count", _boom)
    session, adapter = make_session()
    assert session.get(server.url + "/").status_code == 200
    # The host is released all the same: not held in memory as in use.
    assert adapter._hosts.by_key[server.host].users == 0


def test_an_internal_failure_in_a_paced_hosts_turn_never_escapes(
    server, make_session, logs, monkeypatch, clock
):
    # A host with a learned limit is paced: its turn asks for its place (``reserve``).
    store = MemoryStore()
    limit = LimitEstimate(rate=1 / 60, window=60.0, updated_at=clock.time())
    store.set(server.host, HostState(server.host, limit=limit, updated_at=clock.time()))
    monkeypatch.setattr(engine.HostTracker, "reserve", _boom)
    session, _ = make_session(store=store)
    assert session.get(server.url + "/").status_code == 200
    assert "internal error" in logs.at(logging.ERROR)[0]


@pytest.mark.parametrize(("owner", "name"), [(_sending, "drain"), (_turns.Turns, "wait_for_turn")])
def test_an_internal_failure_after_a_rejection_returns_it_and_sends_nothing_more(
    server, make_session, logs, monkeypatch, owner, name
):
    # Failing while releasing a 429 (or while waiting for the retry's turn), the adapter
    # gives the caller the 429, as a plain adapter would; sending again at once would skip
    # the floor's wait.
    session, _ = make_session()
    real = getattr(owner, name)

    def after_a_rejection(*args: Any, **kwargs: Any) -> Any:
        if server.count:
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, after_a_rejection)
    server.replies((429, {RA: "1"}), 200)
    r = session.get(server.url + "/")
    assert (r.status_code, server.count) == (429, 1)
    assert "internal error" in logs.at(logging.ERROR)[0]


@pytest.mark.parametrize(
    ("owner", "method"), [(engine.HostTracker, "on_rejection"), (_gates.Gates, "check")]
)
def test_after_an_internal_failure_on_a_rejection_the_host_waits_the_floor(
    server, make_session, logs, monkeypatch, owner, method
):
    # The engine fails on every 429 (``on_rejection``), or before every send (``check``:
    # the host's hold and wait cannot be known), and the caller loops without looking at the
    # status (as a benchmark's client did: 300 to 500 requests a second to nginx). Each 429
    # goes back to the caller as a plain adapter gives it, and the host's next request waits
    # the floor, which the adapter keeps itself where the engine cannot.
    monkeypatch.setattr(owner, method, _boom)
    server.respond(lambda seen: (429, {}))
    session, adapter = make_session()
    for _ in range(5):
        assert session.get(server.url + "/").status_code == 429
    times = server.times
    assert len(times) == 5
    floor = adapter.policy.min_sleep
    assert all(b - a >= floor - 1e-9 for a, b in zip(times, times[1:]))
    assert "internal error" in logs.at(logging.ERROR)[0]
    assert any("waits" in m and "min_sleep" in m for m in logs.at(logging.WARNING))


def test_a_store_that_raises_anything_never_fails_a_request(server, make_session, logs):
    class Broken:
        """A store whose every method raises something unexpected. (The methods are defined,
        not served by ``__getattr__``: from Python 3.12 a runtime Protocol check looks them
        up statically.)"""

        shared = True
        get = set = update = delete = items = close = staticmethod(_boom)

    session, _ = make_session(store=Broken())
    server.replies((429, {RA: "1"}))
    assert session.get(server.url + "/").status_code == 200
    assert [m for m in logs.at(logging.WARNING) if "unavailable" in m]


# -- connection backoff ---------------------------------------------------------------------------


@pytest.fixture
def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_connection_backoff_never_exceeds_max_sleep(make_session, clock, closed_port):
    session, _ = make_session(
        min_sleep=0.1,
        max_sleep=0.7,
        backoff_base=10.0,
        backoff_cap=100.0,
        connect_retries=5,
        max_attempts=10,
    )
    with pytest.raises(requests.ConnectionError):
        session.get(f"http://127.0.0.1:{closed_port}/")
    assert len(clock.sleeps) == 5
    assert max(clock.sleeps) <= 0.7


def test_a_read_timeout_is_not_retried_as_with_a_plain_adapter(server, make_session, clock):
    # The server answers only after the client's read timeout: a plain adapter raises
    # ReadTimeout once; so must this one (the server may still be working on the request).
    arrived = threading.Event()

    def slow(seen: Any) -> None:
        arrived.set()
        time.sleep(0.3)  # real time: a socket's read timeout

    server.during = slow
    session, _ = make_session()
    with pytest.raises(requests.exceptions.ReadTimeout):
        session.get(server.url + "/slow", timeout=(5, 0.05))
    # On a loaded machine the server's thread may read the request only after the client
    # gave up on it: wait for it (real time) before counting.
    assert arrived.wait(5.0)
    time.sleep(0.5)  # real time: a retry, if one were sent, would arrive by now
    assert server.count == 1
    assert clock.sleeps == []
