"""Fuzz ``send()`` end to end: hostile headers, damaged stored state and random settings.

A real HTTP server on 127.0.0.1 answers each example's script of replies (200, 429, 503, 401,
500, with ``Retry-After``, ``X-RateLimit-*``, ``RateLimit`` and ``RateLimit-Policy`` values
drawn from huge, negative, non-finite, date-like, comma-joined and garbage text). The adapter
runs on a virtual clock that records every sleep asked of it, with a random :class:`Policy`
within its ranges and a random (often damaged) :class:`HostState` put in its store first.

Properties (issue #9):

- only :class:`requests.RequestException` subclasses (or nothing) leave ``session.get()``;
- no single sleep exceeds ``policy.max_sleep``, and every sleep is a finite number;
- no :class:`HostHeld` (and no hold the adapter stores) ends later than ``now + max_hold``;
- the sleeps of one call add up to no more than ``policy.deadline``;
- what the adapter writes back to its store is valid (damaged values are dropped).

Hypothesis runs derandomized (the same examples on every run, so CI is reproducible) and
without a database.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import warnings
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import pytest
import requests
import urllib3
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict

from requests_retryafter import (
    CATEGORIES,
    FakeClock,
    HostHeld,
    HostState,
    LimitEstimate,
    MemoryStore,
    Observation,
    Policy,
    RetryAfterAdapter,
    parse_rate_limit,
    parse_retry_after,
)
from requests_retryafter.policy import MAX_HOLD_SECONDS, MAX_SECONDS

NOW = 1_700_000_000.0
#: A call that has not returned after this many real seconds hangs (the clock is virtual).
HANG = 15.0

FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- hostile header values -----------------------------------------------------------------------

#: Text a server can put in a header value and a client reads back as it was: Latin-1 (what
#: http.client decodes with) without the characters that end a header line for it.
_LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85"
HEADER_TEXT = st.text(
    alphabet=st.characters(max_codepoint=0xFF, exclude_characters=_LINE_BREAKS),
    max_size=40,
)

NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [0, 1, -1, 2**31, 2**63, 10**12, 10**400, 1e-310, 5e-324, 1e308, -0.0, 0.5, 59.999]
    ),
)
NUMBER_TEXT = st.one_of(
    NUMBERS.map(str),
    NUMBERS.map(lambda n: f" {n} "),
    NUMBERS.map(lambda n: f"+{n}"),
    st.sampled_from(
        ["NaN", "nan", "inf", "-inf", "Infinity", "1e999", "1e10", "0x10", "1_000", "\xb2", "007"]
    ),
)


def _date_text(moment: dt.datetime, form: int) -> str:
    if form == 0:  # IMF-fixdate
        return moment.strftime("%a, %d %b %Y %H:%M:%S GMT")
    if form == 1:  # RFC 850
        return moment.strftime("%A, %d-%b-%y %H:%M:%S GMT")
    if form == 2:  # asctime
        return moment.strftime("%a %b ") + f"{moment.day:2d}" + moment.strftime(" %H:%M:%S %Y")
    return moment.isoformat()  # not an HTTP-date at all


DATES = st.builds(
    _date_text,
    st.one_of(
        st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)),
        st.floats(min_value=-1e6, max_value=1e9).map(
            lambda offset: dt.datetime.fromtimestamp(NOW + offset, dt.timezone.utc).replace(
                tzinfo=None
            )
        ),
    ),
    st.integers(min_value=0, max_value=3),
)

ATOMS = st.one_of(NUMBER_TEXT, DATES, HEADER_TEXT)
STRUCTURED = st.one_of(
    st.builds("limit={}, remaining={}, reset={}".format, ATOMS, ATOMS, ATOMS),
    st.builds("{};w={}".format, ATOMS, ATOMS),
    st.builds('"p";q={};w={}'.format, ATOMS, ATOMS),
    st.builds('"p";r={};t={}'.format, ATOMS, ATOMS),
)
HEADER_VALUES = st.one_of(
    ATOMS,
    st.lists(ATOMS, min_size=2, max_size=4).map(", ".join),
    STRUCTURED,
)

HEADER_NAMES = [
    "Retry-After",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "RateLimit",
    "RateLimit-Policy",
]


def _clean(value: str) -> str:
    # Leading/trailing white space is not part of a field value on the wire.
    return value.strip(" \t") or "0"


@dataclass(frozen=True)
class Answer:
    """One reply of the server."""

    status: int
    headers: Tuple[Tuple[str, str], ...]
    body: bytes


ANSWERS = st.builds(
    Answer,
    status=st.sampled_from([200, 429, 503, 401, 500]),
    headers=st.lists(
        st.tuples(st.sampled_from(HEADER_NAMES), HEADER_VALUES.map(_clean)), max_size=5
    ).map(tuple),
    body=st.binary(max_size=64),
)
SCRIPTS = st.lists(ANSWERS, min_size=1, max_size=6)

# -- settings within their ranges ----------------------------------------------------------------


def _seconds(low: float, high: float) -> st.SearchStrategy[float]:
    """Seconds in ``[low, high]``: either bound a quarter of the time, else anything between."""
    between = st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)
    return st.one_of(st.sampled_from([low, high]), between, between, between)


@st.composite
def everyday_policies(draw: Any) -> Policy:
    """A :class:`Policy` as users set it: round values, where a stored wait or a header's can
    fall between ``max_sleep`` and ``deadline``."""
    max_sleep = draw(st.sampled_from([0.0, 1.0, 30.0, 300.0]))
    return Policy(
        max_attempts=draw(st.integers(1, 8)),
        deadline=draw(st.sampled_from([1.0, 60.0, 600.0, 3600.0, MAX_SECONDS])),
        min_sleep=min(max_sleep, draw(st.sampled_from([0.0, 1.0]))),
        max_sleep=max_sleep,
        max_hold=max(max_sleep, draw(st.sampled_from([0.0, 60.0, 3600.0, 86400.0]))),
        plausible_wait=draw(st.sampled_from([0.0, 60.0, 3600.0])),
        pace=draw(st.booleans()),
        sync_interval=draw(st.sampled_from([0.0, 2.0])),
    )


@st.composite
def any_policies(draw: Any) -> Policy:
    """A random :class:`Policy`, every field within its range."""
    max_sleep = draw(_seconds(0.0, MAX_SECONDS))
    backoff_cap = draw(_seconds(5e-324, MAX_SECONDS))
    return Policy(
        max_attempts=draw(st.one_of(st.integers(1, 8), st.just(1000))),
        # At least 1 s: what is left of the deadline is the socket timeout, in real time.
        deadline=draw(st.one_of(_seconds(1.0, MAX_SECONDS), st.sampled_from([1.0, 600.0]))),
        min_sleep=draw(_seconds(0.0, max_sleep)),
        max_sleep=max_sleep,
        backoff_base=draw(_seconds(5e-324, backoff_cap)),
        backoff_cap=backoff_cap,
        max_hold=draw(_seconds(max_sleep, MAX_HOLD_SECONDS)),
        plausible_wait=draw(_seconds(0.0, MAX_SECONDS)),
        max_concurrency=draw(st.integers(1, 1000)),
        pace=draw(st.booleans()),
        utilization=draw(st.floats(min_value=0.0, max_value=1.0, exclude_min=True)),
        window=draw(st.integers(2, 10000)),
        sync_interval=draw(_seconds(0.0, MAX_SECONDS)),
        connect_retries=draw(st.integers(0, 100)),
    )


# -- damaged stored state ------------------------------------------------------------------------

HOSTILE_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 1e-310, 5e-324, 1e300, 1e20, NOW, NOW + 7200, NOW - 7200]),
    st.floats(min_value=-1e6, max_value=1e12).map(lambda offset: NOW + offset),
    st.sampled_from([1.0, 30.0, 61.0, 301.0, 3600.0, 7200.0, 86401.0, 1e6, 1e12]).map(
        lambda offset: NOW + offset
    ),
)
HOSTILE_INTS = st.one_of(
    st.integers(min_value=-5, max_value=50), st.sampled_from([0, -1, 10**9, 10**30])
)
OPTIONAL_FLOATS = st.one_of(st.none(), HOSTILE_FLOATS)

OBSERVATIONS = st.builds(
    Observation,
    at=HOSTILE_FLOATS,
    status=st.sampled_from([429, 503, 200, 0, -1, 999]),
    header=OPTIONAL_FLOATS,
    form=st.sampled_from([None, "delta", "date", "bogus"]),
    recovered=OPTIONAL_FLOATS,
    failed_until=HOSTILE_FLOATS,
    countdown=st.sampled_from([None, True, False]),
    served=HOSTILE_INTS,
    span=HOSTILE_FLOATS,
    misses=HOSTILE_INTS,
    scattered=st.booleans(),
)
LIMITS = st.builds(
    LimitEstimate,
    rate=HOSTILE_FLOATS,
    window=OPTIONAL_FLOATS,
    documented=OPTIONAL_FLOATS,
    updated_at=HOSTILE_FLOATS,
    source=st.sampled_from(["observed", "stated", "bogus"]),
    burst=st.one_of(st.none(), HOSTILE_INTS),
    anchor=OPTIONAL_FLOATS,
    even=st.booleans(),
)


def states(host: str) -> st.SearchStrategy[Optional[HostState]]:
    """Nothing stored, or a stored state of ``host`` whose numbers may be anything."""
    return st.one_of(
        st.none(),
        st.builds(
            HostState,
            host=st.just(host),
            category=st.sampled_from([*CATEGORIES, "bogus"]),
            evidence=st.just("fuzz"),
            observations=st.lists(OBSERVATIONS, max_size=3).map(tuple),
            limit=st.one_of(st.none(), LIMITS),
            limit_history=st.lists(st.tuples(HOSTILE_FLOATS, HOSTILE_FLOATS), max_size=2).map(
                tuple
            ),
            blocked_until=HOSTILE_FLOATS,
            held_until=HOSTILE_FLOATS,
            hold_reason=st.just("fuzz"),
            category_changed_at=HOSTILE_FLOATS,
            updated_at=HOSTILE_FLOATS,
            workers=st.lists(
                st.tuples(st.sampled_from(["w1", "w2"]), HOSTILE_FLOATS), max_size=2
            ).map(tuple),
            blocked_since=HOSTILE_FLOATS,
            held_since=HOSTILE_FLOATS,
        ),
    )


TIMEOUTS = st.sampled_from([None, 5.0, (3.0, 5.0), urllib3.Timeout(total=5)])

# -- the server ----------------------------------------------------------------------------------


class ScriptServer:
    """A real HTTP/1.1 server answering each request with the next reply of the script, then
    ``200 ok``. Header values go on the wire as Latin-1 bytes, as they are."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: List[Answer] = []
        self.count = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with server._lock:
                    server.count += 1
                    answer = server._script.pop(0) if server._script else Answer(200, (), b"ok")
                head = [f"HTTP/1.1 {answer.status} Fuzz".encode("latin-1")]
                for name, value in answer.headers:
                    head.append(name.encode("latin-1") + b": " + value.encode("latin-1"))
                head.append(b"Content-Length: %d" % len(answer.body))
                self.wfile.write(b"\r\n".join(head) + b"\r\n\r\n" + answer.body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.host = f"127.0.0.1:{self._httpd.server_address[1]}"
        self.url = f"http://{self.host}/fuzz"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def script(self, answers: Sequence[Answer]) -> None:
        with self._lock:
            self._script = list(answers)
            self.count = 0

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[ScriptServer]:
    server = ScriptServer()
    yield server
    server.stop()


# -- one call ------------------------------------------------------------------------------------


class RecordingClock(FakeClock):
    """A :class:`FakeClock` that also records each sleep exactly as asked (NaN included)."""

    def __init__(self) -> None:
        super().__init__(NOW)
        self.asked: List[float] = []

    def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        if isinstance(seconds, float) and math.isnan(seconds):
            return  # time.sleep would raise; record it and let the property say so
        super().sleep(seconds)


@dataclass
class Outcome:
    """What one ``session.get()`` did."""

    policy: Policy
    clock: RecordingClock
    error: Optional[BaseException] = None
    status: Optional[int] = None
    stored: Optional[HostState] = None
    before: Optional[HostState] = None
    hung: bool = False
    warned: List[str] = field(default_factory=list)

    @property
    def held(self) -> Optional[HostHeld]:
        return self.error if isinstance(self.error, HostHeld) else None


def call(
    server: ScriptServer,
    policy: Policy,
    script: Sequence[Answer],
    state: Optional[HostState],
    timeout: Any,
) -> Outcome:
    """Run one ``session.get()`` against ``script`` with ``state`` stored beforehand."""
    clock = RecordingClock()
    outcome = Outcome(policy=policy, clock=clock, before=state)
    store = MemoryStore()
    if state is not None:
        store.set(server.host, state)
    server.script(script)
    box: List[Any] = []

    def run() -> None:
        session = requests.Session()
        try:
            adapter = RetryAfterAdapter(policy=policy, store=store, clock=clock, environ={}, seed=0)
            session.mount("http://", adapter)
            box.append(session.get(server.url, timeout=timeout).status_code)
        except BaseException as exc:  # the property is about which ones escape
            box.append(exc)
        finally:
            session.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(HANG)
    outcome.warned = [f"{w.category.__name__}: {w.message}" for w in caught]
    if worker.is_alive():
        outcome.hung = True
        return outcome
    result = box[0]
    if isinstance(result, BaseException):
        outcome.error = result
    else:
        outcome.status = result
    outcome.stored = store.get(server.host)
    return outcome


def scenario() -> st.SearchStrategy[Tuple[Policy, List[Answer], Any]]:
    """A policy, a script of replies and a timeout (the stored state is drawn by ``_run``, as
    it names the server's host)."""
    return st.tuples(st.one_of(everyday_policies(), any_policies()), SCRIPTS, TIMEOUTS)


def _run(server: ScriptServer, drawn: Tuple[Policy, List[Answer], Any], data: Any) -> Outcome:
    policy, script, timeout = drawn
    state = data.draw(states(server.host), label="stored state")
    outcome = call(server, policy, script, state, timeout)
    assert not outcome.hung, f"session.get() still running after {HANG} s (virtual clock)"
    return outcome


# -- the properties ------------------------------------------------------------------------------


@FUZZ
@given(drawn=scenario(), data=st.data())
def test_only_requests_exceptions_leave_send(fuzz_server, drawn, data):
    outcome = _run(fuzz_server, drawn, data)
    if outcome.error is not None:
        assert isinstance(outcome.error, requests.RequestException), repr(outcome.error)


@FUZZ
@given(drawn=scenario(), data=st.data())
def test_no_sleep_exceeds_max_sleep(fuzz_server, drawn, data):
    outcome = _run(fuzz_server, drawn, data)
    for asked in outcome.clock.asked:
        assert isinstance(asked, (int, float)), f"slept {asked!r}"
        assert math.isfinite(asked), f"slept {asked!r}"
        assert asked <= outcome.policy.max_sleep + 1e-9, (
            f"slept {asked!r} with max_sleep={outcome.policy.max_sleep!r}"
        )


@FUZZ
@given(drawn=scenario(), data=st.data())
def test_no_hold_exceeds_max_hold(fuzz_server, drawn, data):
    outcome = _run(fuzz_server, drawn, data)
    latest = outcome.clock.time() + outcome.policy.max_hold + 1e-6
    held = outcome.held
    if held is not None:
        assert math.isfinite(held.until), f"HostHeld until {held.until!r}"
        assert held.until <= latest, (
            f"HostHeld until now + {held.until - outcome.clock.time()!r} s "
            f"with max_hold={outcome.policy.max_hold!r}"
        )
    stored, before = outcome.stored, outcome.before
    granted = before is None or stored is None or stored.held_until != before.held_until
    if stored is not None and stored.held_until and granted:  # a hold this call stored
        assert math.isfinite(stored.held_until), f"stored a hold until {stored.held_until!r}"
        assert stored.held_until <= latest, (
            f"stored a hold until now + {stored.held_until - outcome.clock.time()!r} s "
            f"with max_hold={outcome.policy.max_hold!r}"
        )


@FUZZ
@given(drawn=scenario(), data=st.data())
def test_the_sleeps_of_a_call_fit_its_deadline(fuzz_server, drawn, data):
    outcome = _run(fuzz_server, drawn, data)
    total = math.fsum(s for s in outcome.clock.asked if math.isfinite(s))
    deadline = outcome.policy.deadline
    assert total <= deadline * (1 + 1e-9) + 1e-9, f"slept {total!r} s with deadline={deadline!r}"


@settings(FUZZ, phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: minutes
@given(drawn=scenario(), data=st.data())
def test_what_the_adapter_stores_is_valid(fuzz_server, drawn, data):
    # A damaged stored value (a NaN, an infinite hold, a window of 1e-310) is dropped, not
    # written back: whatever the adapter stores reads back through the stores' own check.
    outcome = _run(fuzz_server, drawn, data)
    stored = outcome.stored
    if stored is not None and stored is not outcome.before:
        HostState.from_dict(stored.to_dict())


# -- the parsers the adapter reads those headers with --------------------------------------------

UNICODE_VALUES = st.one_of(HEADER_VALUES, st.text(max_size=40))


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    value=st.one_of(st.none(), UNICODE_VALUES),
    # A clock's reading: RFC 850's two-digit years are resolved from it, even past the year
    # 9999 (2.5e11), where datetime cannot.
    now=st.floats(min_value=0.0, max_value=1e13),
)
def test_parse_retry_after_never_raises_and_gives_a_finite_wait(value, now):
    parsed = parse_retry_after(value, now=now)
    if parsed.seconds is not None:
        assert math.isfinite(parsed.seconds), parsed
        assert parsed.seconds >= 0, parsed


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    headers=st.lists(st.tuples(st.sampled_from(HEADER_NAMES), UNICODE_VALUES), max_size=6),
    now=st.one_of(st.just(NOW), HOSTILE_FLOATS),
)
def test_parse_rate_limit_never_raises_and_gives_finite_numbers(headers, now):
    info = parse_rate_limit(CaseInsensitiveDict(headers), now=now)
    for name, value in vars(info).items():
        if isinstance(value, float):
            assert math.isfinite(value), f"{name}={value!r}"
