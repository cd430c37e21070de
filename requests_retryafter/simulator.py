"""A *lying portal*: a local HTTP server that rate-limits like a real open-data portal and sends
``Retry-After`` the way real portals do, truthfully or not.

The server runs on ``127.0.0.1`` (port 0 by default, so the OS picks a free port) and reads
time from an injectable :class:`~requests_retryafter.clock.Clock`. With a
:class:`~requests_retryafter.clock.FakeClock` shared by the portal and the client, a client's
sleeps move the portal's time, so hours of rate limiting run in seconds of wall time::

    from requests_retryafter.clock import FakeClock
    from requests_retryafter.simulator import FixedWindow, Portal

    clock = FakeClock()
    with Portal("county", FixedWindow(40, 60), "constant", clock, constant=3600) as portal:
        requests.get(portal.url + "/records/1")   # 200, then 429 with Retry-After: 3600
        print(portal.stats.rejected)

A portal is made of an **enforced limit** (:class:`FixedWindow`, :class:`FirstRequestWindow`,
:class:`SlidingWindow`, :class:`LeakyBucket` and :func:`nginx_limit_req`, :class:`HourlyQuota`,
:class:`Unlimited`), an optional :class:`Maintenance` window (503 while it lasts), a
**Retry-After behaviour** (one of :data:`BEHAVIOURS`) and optionally **rate-limit fields** of
one generation (one of :data:`RATE_HEADER_STYLES`) sent on every answer, 200s included, as
limiter libraries do. Accepted requests get 200 and consume quota; rejected ones get 429 (503
during maintenance) and consume nothing. :class:`PortalStats` records every request.

:func:`standard_scenarios` builds the standard set of portals used by the benchmarks and the
CLI ``demo``; :func:`extra_scenarios` adds shapes the standard set lacks (short windows,
long crawls, rounded stated resets, windows that start at the first request, nginx-like
buckets). This module uses the standard library only.
"""

from __future__ import annotations

import bisect
import contextlib
import email.utils
import json
import math
import random
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Protocol, Set, Tuple, TypeVar, cast

from .clock import Clock, SystemClock

__all__ = [
    "BEHAVIOURS",
    "RATE_HEADER_STYLES",
    "SCENARIOS",
    "FirstRequestWindow",
    "FixedWindow",
    "Hit",
    "HourlyQuota",
    "LeakyBucket",
    "Limiter",
    "Maintenance",
    "Portal",
    "PortalStats",
    "Scenario",
    "SlidingWindow",
    "Unlimited",
    "format_http_date",
    "extra_scenarios",
    "ideal_duration",
    "next_open",
    "nginx_limit_req",
    "quota",
    "rate_limit_headers",
    "standard_scenarios",
    "steady_duration",
]

#: Tolerance for comparing float epoch times (an ulp of a 2020s epoch time is ~2.4e-7 s).
_EPS = 1e-6

#: Every Retry-After behaviour a :class:`Portal` knows.
#:
#: - ``truthful``: delta-seconds, the ceiling of the real time until a request would pass.
#: - ``truthful_date``: the IMF-fixdate of that moment (rounded up to the second).
#: - ``zero``: always ``0``.
#: - ``constant``: always the same value (``constant``, default 3600), whatever the window.
#: - ``random``: a uniform random integer in ``random_range`` (seeded with ``seed``).
#: - ``absent``: no header at all.
#: - ``past_date``: an HTTP-date ``past_offset`` seconds in the past.
#: - ``garbage``: cycles through :data:`GARBAGE_VALUES`.
#: - ``on_200``: truthful on 429, and ``Retry-After: on_200_value`` on every 200 too.
#: - ``maintenance``: needs ``maintenance``; its 503s carry the HTTP-date of the end of the
#:   window, its 429s are truthful delta-seconds.
#: - ``switch``: truthful before ``switch_at`` (epoch seconds), ``constant`` from then on.
#: - ``countdown``: seconds until the end of the quota period (the limiter's window for a
#:   :class:`FixedWindow`/:class:`HourlyQuota`, else the next top of the hour).
BEHAVIOURS: Tuple[str, ...] = (
    "truthful",
    "truthful_date",
    "zero",
    "constant",
    "random",
    "absent",
    "past_date",
    "garbage",
    "on_200",
    "maintenance",
    "switch",
    "countdown",
)

#: The generations of rate-limit fields a :class:`Portal` can send on every answer (see
#: :func:`rate_limit_headers`). Every stated reset is rounded UP to a whole second, as real
#: limiters round, so it can be up to a second late.
#:
#: - ``x-ratelimit``: ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (epoch seconds).
#: - ``x-ratelimit-delta``: the same with ``X-RateLimit-Reset`` in seconds from now.
#: - ``draft6``: ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (seconds from now) and
#:   ``RateLimit-Policy: 5;w=1``.
#: - ``draft7``: one combined ``RateLimit: limit=5, remaining=0, reset=1`` and
#:   ``RateLimit-Policy: 5;w=1``.
RATE_HEADER_STYLES: Tuple[str, ...] = ("x-ratelimit", "x-ratelimit-delta", "draft6", "draft7")

#: The values the ``garbage`` behaviour cycles through, in order.
GARBAGE_VALUES: Tuple[str, ...] = ("soon", "1.5", "30, 60", "-5")


def format_http_date(epoch: float) -> str:
    """Return the IMF-fixdate (RFC 9110 §5.6.7) of ``epoch``, e.g.
    ``Tue, 14 Nov 2023 22:13:20 GMT``.

    >>> format_http_date(0)
    'Thu, 01 Jan 1970 00:00:00 GMT'
    """
    return email.utils.formatdate(epoch, usegmt=True)


def _ceil_seconds(seconds: float) -> int:
    """Whole seconds, rounded up, ignoring float noise below :data:`_EPS`."""
    return max(0, math.ceil(seconds - _EPS))


# --------------------------------------------------------------------------------------------
# Enforced limits
# --------------------------------------------------------------------------------------------


class Limiter(Protocol):
    """An enforced limit. Not thread-safe on its own: :class:`Portal` calls it under a lock.

    ``next_free`` must not change the limiter's state; ``consume`` records an accepted
    request. Times are the clock's epoch seconds and never go backwards between calls.
    """

    def next_free(self, now: float) -> float:
        """Return the earliest time ``>= now`` at which a request would be accepted
        (``now`` itself when one would be accepted now)."""

    def consume(self, now: float) -> None:
        """Record a request accepted at ``now``."""

    def fresh(self) -> Limiter:
        """Return a new limiter with the same settings and no history."""

    @property
    def rate(self) -> float:
        """The long-run requests per second the limit allows (``inf`` for none)."""


class Unlimited:
    """No limit: every request is accepted (useful with :class:`Maintenance` alone)."""

    def next_free(self, now: float) -> float:
        """Always ``now``."""
        return now

    def consume(self, now: float) -> None:
        """Nothing to record."""

    def fresh(self) -> Unlimited:
        """A new :class:`Unlimited`."""
        return Unlimited()

    @property
    def rate(self) -> float:
        """No limit: ``inf``."""
        return math.inf

    def __repr__(self) -> str:
        return "Unlimited()"


_W = TypeVar("_W", bound="_Window")


class _Window:
    """What a limit of ``limit`` requests per ``window`` seconds has, however it counts."""

    def __init__(self, limit: int, window: float) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if window <= 0:
            raise ValueError("window must be positive")
        self.limit = int(limit)
        self.window = float(window)

    def fresh(self: _W) -> _W:
        """A new limiter of the same kind and settings, nothing counted yet."""
        return type(self)(self.limit, self.window)

    @property
    def rate(self) -> float:
        """``limit / window``."""
        return self.limit / self.window

    def __repr__(self) -> str:
        return f"{type(self).__name__}(limit={self.limit}, window={self.window:g})"


class FixedWindow(_Window):
    """At most ``limit`` requests per window of ``window`` seconds; windows are aligned to
    multiples of ``window`` in epoch time (``[k*window, (k+1)*window)``)."""

    def __init__(self, limit: int, window: float) -> None:
        super().__init__(limit, window)
        self._index: Optional[int] = None
        self._count = 0

    def _window_index(self, now: float) -> int:
        index = math.floor(now / self.window)
        if (index + 1) * self.window <= now + _EPS:  # float noise at a boundary
            index += 1
        return index

    def next_free(self, now: float) -> float:
        """``now`` while the current window has room, else the start of the next window."""
        index = self._window_index(now)
        used = self._count if index == self._index else 0
        if used < self.limit:
            return now
        return (index + 1) * self.window

    def consume(self, now: float) -> None:
        """Count one request in the window of ``now``."""
        index = self._window_index(now)
        if index != self._index:
            self._index = index
            self._count = 0
        self._count += 1

    def quota(self, now: float) -> Tuple[int, int, float]:
        """``(limit, remaining, reset_at)``: the end of the window of ``now``."""
        index = self._window_index(now)
        used = self._count if index == self._index else 0
        return self.limit, max(0, self.limit - used), (index + 1) * self.window


class FirstRequestWindow(_Window):
    """At most ``limit`` requests per window of ``window`` seconds, where a window starts at
    the first request accepted after the previous one expired (not on the clock), as a
    counter with an expiry set at its first hit does (e.g. a Redis ``INCR`` + ``EXPIRE``).
    Yesterday's phase means nothing here."""

    def __init__(self, limit: int, window: float) -> None:
        super().__init__(limit, window)
        self._start: Optional[float] = None
        self._count = 0

    def _active(self, now: float) -> bool:
        return self._start is not None and now < self._start + self.window - _EPS

    def next_free(self, now: float) -> float:
        """``now`` while the current window has room or none is open, else its end."""
        if self._active(now) and self._count >= self.limit:
            assert self._start is not None
            return self._start + self.window
        return now

    def consume(self, now: float) -> None:
        """Count a request, opening a window at ``now`` when none is open."""
        if not self._active(now):
            self._start = now
            self._count = 0
        self._count += 1

    def quota(self, now: float) -> Tuple[int, int, float]:
        """``(limit, remaining, reset_at)``: the open window's end (``now + window`` if none)."""
        if not self._active(now):
            return self.limit, self.limit, now + self.window
        assert self._start is not None
        return self.limit, max(0, self.limit - self._count), self._start + self.window


class HourlyQuota(FixedWindow):
    """At most ``limit`` requests per hour; the quota resets at the top of each hour of the
    clock's epoch time (multiples of 3600 s). ``period`` changes the hour (for short demos)."""

    def __init__(self, limit: int, period: float = 3600.0) -> None:
        super().__init__(limit, period)

    def __repr__(self) -> str:
        if self.window == 3600.0:
            return f"HourlyQuota(limit={self.limit})"
        return f"HourlyQuota(limit={self.limit}, period={self.window:g})"


class SlidingWindow(_Window):
    """At most ``limit`` requests in any interval of ``window`` seconds (a log of accepted
    timestamps: a request accepted at ``t`` counts until ``t + window``)."""

    def __init__(self, limit: int, window: float) -> None:
        super().__init__(limit, window)
        self._log: List[float] = []

    def next_free(self, now: float) -> float:
        """``now`` while fewer than ``limit`` requests are in the window, else the moment the
        oldest one that must go leaves it."""
        first = bisect.bisect_right(self._log, now - self.window + _EPS)
        in_window = len(self._log) - first
        if in_window < self.limit:
            return now
        return max(now, self._log[first + in_window - self.limit] + self.window)

    def consume(self, now: float) -> None:
        """Log a request at ``now`` and forget those that left the window."""
        self._log.append(now)
        first = bisect.bisect_right(self._log, now - self.window + _EPS)
        if first > 1024:
            del self._log[:first]

    def quota(self, now: float) -> Tuple[int, int, float]:
        """``(limit, remaining, reset_at)``: when the oldest request in the window leaves it
        (``now + window`` when the window is empty), as moving-window libraries state it."""
        first = bisect.bisect_right(self._log, now - self.window + _EPS)
        in_window = len(self._log) - first
        if in_window == 0:
            return self.limit, self.limit, now + self.window
        return self.limit, max(0, self.limit - in_window), self._log[first] + self.window


class LeakyBucket:
    """A token bucket: holds at most ``burst`` tokens (full at first), gains ``rate`` tokens
    per second; each accepted request takes one."""

    def __init__(self, rate: float, burst: int) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self.rate = float(rate)
        self.burst = int(burst)
        self._tokens = float(burst)
        self._last: Optional[float] = None

    def _tokens_at(self, now: float) -> float:
        if self._last is None:
            return self._tokens
        return min(float(self.burst), self._tokens + max(0.0, now - self._last) * self.rate)

    def next_free(self, now: float) -> float:
        """``now`` while a token is left, else when the next one arrives."""
        tokens = self._tokens_at(now)
        if tokens >= 1.0 - _EPS:
            return now
        return now + (1.0 - tokens) / self.rate

    def consume(self, now: float) -> None:
        """Take a token at ``now``."""
        self._tokens = max(0.0, self._tokens_at(now) - 1.0)
        self._last = now

    def fresh(self) -> LeakyBucket:
        """A new, full bucket with the same settings."""
        return type(self)(self.rate, self.burst)

    def quota(self, now: float) -> Tuple[int, int, float]:
        """``(burst, whole tokens left, reset_at)``: the next token when the bucket is empty,
        else the moment it is full again."""
        tokens = self._tokens_at(now)
        if tokens < 1.0 - _EPS:
            return self.burst, 0, now + (1.0 - tokens) / self.rate
        whole = math.floor(tokens + _EPS)
        return self.burst, whole, now + max(0.0, self.burst - tokens) / self.rate

    def __repr__(self) -> str:
        return f"LeakyBucket(rate={self.rate:g}, burst={self.burst})"


def nginx_limit_req(rate: float, burst: int = 0) -> LeakyBucket:
    """The bucket nginx's ``limit_req zone=... rate=RATEr/s [burst=BURST] nodelay`` enforces:
    a request is refused sooner than ``1 / rate`` after the last accepted one unless ``burst``
    requests of excess are left, so it is a :class:`LeakyBucket` of depth ``burst + 1``.

    >>> nginx_limit_req(10)
    LeakyBucket(rate=10, burst=1)
    """
    if burst < 0:
        raise ValueError("burst cannot be negative")
    return LeakyBucket(rate, burst + 1)


def quota(limiter: Limiter, now: float) -> Optional[Tuple[int, int, float]]:
    """``(limit, remaining, reset_at)`` as a limiter library would state them for ``limiter``
    at ``now`` (``reset_at`` in epoch seconds, not rounded), or ``None`` when the limiter
    states nothing (:class:`Unlimited`, or a limiter without a ``quota`` method)."""
    method = getattr(limiter, "quota", None)
    if method is None:
        return None
    limit, remaining, reset_at = method(now)
    return int(limit), int(remaining), float(reset_at)


def _policy_window(limiter: Limiter) -> Optional[float]:
    window = getattr(limiter, "window", None)
    if window is not None:
        return float(window)
    burst = getattr(limiter, "burst", None)
    if burst is not None and limiter.rate > 0:
        return float(burst) / limiter.rate
    return None


def rate_limit_headers(style: str, limiter: Limiter, now: float) -> Dict[str, str]:
    """The rate-limit fields of generation ``style`` (one of :data:`RATE_HEADER_STYLES`) for
    ``limiter`` at ``now``, with the reset rounded UP to a whole second (so up to a second
    late). Empty when the limiter states nothing.

    >>> window = FixedWindow(5, 1)
    >>> rate_limit_headers("draft7", window, 100.25)
    {'RateLimit': 'limit=5, remaining=5, reset=1', 'RateLimit-Policy': '5;w=1'}
    """
    if style not in RATE_HEADER_STYLES:
        raise ValueError(f"unknown rate header style {style!r}; known: {RATE_HEADER_STYLES}")
    stated = quota(limiter, now)
    if stated is None:
        return {}
    limit, remaining, reset_at = stated
    delta = _ceil_seconds(reset_at - now)
    window = _policy_window(limiter)
    policy = f"{limit};w={max(1, _ceil_seconds(window))}" if window else str(limit)
    if style == "x-ratelimit":
        return {
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(math.ceil(reset_at - _EPS)),
        }
    if style == "x-ratelimit-delta":
        return {
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(delta),
        }
    if style == "draft6":
        return {
            "RateLimit-Limit": str(limit),
            "RateLimit-Remaining": str(remaining),
            "RateLimit-Reset": str(delta),
            "RateLimit-Policy": policy,
        }
    return {
        "RateLimit": f"limit={limit}, remaining={remaining}, reset={delta}",
        "RateLimit-Policy": policy,
    }


@dataclass(frozen=True)
class Maintenance:
    """A maintenance window ``[start, end)`` in epoch seconds: every request gets 503."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError("a maintenance window must end after it starts")

    def active(self, now: float) -> bool:
        """Whether ``now`` falls inside the window."""
        return self.start <= now < self.end


def next_open(limiter: Limiter, maintenance: Optional[Maintenance], now: float) -> float:
    """Return the earliest time ``>= now`` at which ``limiter`` would accept a request and no
    ``maintenance`` is under way (without changing the limiter)."""
    moment = limiter.next_free(now)
    if maintenance is not None and maintenance.active(moment):
        moment = limiter.next_free(maintenance.end)
    return moment


def ideal_duration(
    limiter: Limiter,
    count: int,
    *,
    start: float,
    maintenance: Optional[Maintenance] = None,
) -> float:
    """Seconds a perfect client needs for ``count`` accepted requests, starting at ``start``.

    The perfect client knows the enforced limit, sends each request at the first moment it
    would be accepted and never gets a rejection; service time is zero. The result is the time
    of the last accepted request minus ``start`` (a fresh copy of ``limiter`` is used).
    """
    fresh = limiter.fresh()
    moment = start
    for _ in range(max(0, count)):
        moment = next_open(fresh, maintenance, moment)
        fresh.consume(moment)
    return moment - start


def steady_duration(
    limiter: Limiter,
    count: int,
    *,
    start: float,
    maintenance: Optional[Maintenance] = None,
) -> float:
    """Seconds a client sending evenly at exactly ``limiter.rate`` needs for ``count``
    requests from ``start`` (one every ``1 / rate`` seconds, the first at ``start``, none
    during ``maintenance``: a request due in it goes at its end and the rest follow).

    Unlike :func:`ideal_duration` this uses no burst: it is the time at the limit's long-run
    rate, which a client pacing at a fraction of a learned limit is measured against.
    """
    if count <= 0 or math.isinf(limiter.rate):
        return 0.0
    gap = 1.0 / limiter.rate
    moment = start
    for index in range(count):
        if index:
            moment += gap
        if maintenance is not None and maintenance.active(moment):
            moment = maintenance.end
    return moment - start


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One request as the portal saw it."""

    #: The portal clock's epoch time when the request arrived.
    time: float
    #: The status answered: 200, 429 or 503.
    status: int
    #: The request's method and path (with its query string).
    method: str
    path: str
    #: The ``Retry-After`` value sent, or ``None``.
    retry_after: Optional[str]

    @property
    def rejected(self) -> bool:
        """Whether the request was refused (429 or 503)."""
        return self.status != 200


class PortalStats:
    """Thread-safe record of every request a portal answered, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits: List[Hit] = []

    def record(self, hit: Hit) -> None:
        """Append ``hit``."""
        with self._lock:
            self._hits.append(hit)

    @property
    def hits(self) -> List[Hit]:
        """A snapshot of every request, in arrival order."""
        with self._lock:
            return list(self._hits)

    @property
    def requests(self) -> int:
        """Requests received."""
        with self._lock:
            return len(self._hits)

    @property
    def accepted(self) -> int:
        """Requests answered 200."""
        with self._lock:
            return sum(1 for h in self._hits if not h.rejected)

    @property
    def rejected(self) -> int:
        """Requests answered 429 or 503."""
        with self._lock:
            return sum(1 for h in self._hits if h.rejected)

    @property
    def request_times(self) -> List[float]:
        """Clock time of every request."""
        with self._lock:
            return [h.time for h in self._hits]

    @property
    def rejection_times(self) -> List[float]:
        """Clock time of every rejected request."""
        with self._lock:
            return [h.time for h in self._hits if h.rejected]

    def by_status(self) -> Dict[int, int]:
        """Number of requests per status answered."""
        counts: Dict[int, int] = {}
        for hit in self.hits:
            counts[hit.status] = counts.get(hit.status, 0) + 1
        return counts

    def requests_after_rejection(self, within: float = 1.0) -> int:
        """Requests that arrived less than ``within`` seconds after the latest rejection
        before them (the requests a well-behaved client never sends)."""
        count = 0
        last_rejection: Optional[float] = None
        for hit in self.hits:
            if last_rejection is not None and hit.time - last_rejection < within:
                count += 1
            if hit.rejected:
                last_rejection = hit.time
        return count


# --------------------------------------------------------------------------------------------
# The portal
# --------------------------------------------------------------------------------------------


class _Advancing(Protocol):
    def advance(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class _Answer:
    status: int
    retry_after: Optional[str]
    body: bytes
    headers: Tuple[Tuple[str, str], ...] = ()


class _PortalServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default backlog of 5 drops SYNs under concurrent clients
    portal: Portal


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30.0
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and
    # delayed ACKs add ~40 ms to every keep-alive response.
    disable_nagle_algorithm = True

    @property
    def _portal(self) -> Portal:
        return cast(_PortalServer, self.server).portal

    def setup(self) -> None:
        super().setup()
        self._portal._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self._portal._track(self.connection, add=False)

    def version_string(self) -> str:
        return "lying-portal/1"

    def date_time_string(self, timestamp: Optional[float] = None) -> str:
        # The Date header follows the portal's clock, so virtual time stays consistent.
        return format_http_date(self._portal.clock.time() if timestamp is None else timestamp)

    def log_message(self, format: str, *args: object) -> None:
        """Silence the per-request log lines."""

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(length)
        answer = self._portal._answer(self.command, self.path)
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.body)))
        if answer.retry_after is not None:
            self.send_header("Retry-After", answer.retry_after)
        for name, value in answer.headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    do_GET = _handle
    do_HEAD = _handle
    do_POST = _handle
    do_PUT = _handle
    do_PATCH = _handle
    do_DELETE = _handle
    do_OPTIONS = _handle


class Portal:
    """A rate-limited HTTP server that lies (or not) in its ``Retry-After`` headers.

    Args:
        name: a label (shown in bodies and reports).
        limiter: the enforced limit (a :class:`Limiter`).
        behaviour: one of :data:`BEHAVIOURS`.
        clock: the portal's time (default :class:`~requests_retryafter.clock.SystemClock`);
            share a :class:`~requests_retryafter.clock.FakeClock` with the client to run on
            virtual time.
        maintenance: a :class:`Maintenance` window answered with 503.
        constant: the value of the ``constant`` behaviour (and of ``switch`` after the switch).
        random_range: inclusive bounds of the ``random`` behaviour.
        seed: seed of the ``random`` behaviour.
        past_offset: how far in the past the ``past_date`` behaviour's date lies (seconds).
        on_200_value: the ``Retry-After`` the ``on_200`` behaviour puts on 200s.
        switch_at: epoch time at which the ``switch`` behaviour turns from truthful to
            ``constant`` (required for ``switch``).
        countdown_period: period of the ``countdown`` behaviour (default: the window of a
            :class:`FixedWindow`/:class:`HourlyQuota` limiter, else 3600).
        rate_headers: one of :data:`RATE_HEADER_STYLES`: send that generation's rate-limit
            fields (:func:`rate_limit_headers`, stated after the request is counted) on
            every answer, 200s included; ``None`` (default) sends none.
        service_time: virtual seconds each request takes, added to the clock after it is
            answered (with ``clock.advance`` when the clock has it, else ``clock.sleep``).
        host: the address to bind (default ``127.0.0.1``).
        port: the port to bind (default 0: any free port).

    Use :meth:`start`/:meth:`stop` or a ``with`` block; :attr:`stats` counts every request.
    """

    def __init__(
        self,
        name: str,
        limiter: Limiter,
        behaviour: str = "truthful",
        clock: Optional[Clock] = None,
        *,
        maintenance: Optional[Maintenance] = None,
        constant: int = 3600,
        random_range: Tuple[int, int] = (0, 120),
        seed: int = 0,
        past_offset: float = 3600.0,
        on_200_value: int = 120,
        switch_at: Optional[float] = None,
        countdown_period: Optional[float] = None,
        rate_headers: Optional[str] = None,
        service_time: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; known: {', '.join(BEHAVIOURS)}")
        if behaviour == "switch" and switch_at is None:
            raise ValueError("the 'switch' behaviour needs switch_at")
        if behaviour == "maintenance" and maintenance is None:
            raise ValueError("the 'maintenance' behaviour needs a maintenance window")
        if random_range[0] > random_range[1]:
            raise ValueError("random_range must be (low, high) with low <= high")
        if service_time < 0:
            raise ValueError("service_time cannot be negative")
        if rate_headers is not None and rate_headers not in RATE_HEADER_STYLES:
            raise ValueError(
                f"unknown rate_headers {rate_headers!r}; known: {', '.join(RATE_HEADER_STYLES)}"
            )
        self.name = name
        self.limiter = limiter
        self.behaviour = behaviour
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.maintenance = maintenance
        self.constant = int(constant)
        self.random_range = (int(random_range[0]), int(random_range[1]))
        self.past_offset = float(past_offset)
        self.on_200_value = int(on_200_value)
        self.switch_at = switch_at
        if countdown_period is None:
            countdown_period = limiter.window if isinstance(limiter, FixedWindow) else 3600.0
        self.countdown_period = float(countdown_period)
        self.rate_headers = rate_headers
        self.service_time = float(service_time)
        self.stats = PortalStats()
        self._bind = (host, port)
        self._random = random.Random(seed)
        self._garbage = 0
        self._lock = threading.Lock()
        self._server: Optional[_PortalServer] = None
        self._thread: Optional[threading.Thread] = None
        self._connections: Set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> str:
        """Start serving in a daemon thread and return the base URL (``http://host:port``)."""
        if self._server is not None:
            raise RuntimeError(f"portal {self.name!r} is already running")
        server = _PortalServer(self._bind, _Handler)
        server.portal = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"portal-{self.name}",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving, close open keep-alive connections and free the port (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Portal:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port served on (only while running)."""
        if self._server is None:
            raise RuntimeError(f"portal {self.name!r} is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT`` (only while running)."""
        return f"http://{self._bind[0]}:{self.port}"

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._connections_lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    # -- answers -----------------------------------------------------------------------------

    def _answer(self, method: str, path: str) -> _Answer:
        with self._lock:
            now = self.clock.time()
            if self.maintenance is not None and self.maintenance.active(now):
                status = 503
                retry_at = next_open(self.limiter, self.maintenance, self.maintenance.end)
            else:
                retry_at = next_open(self.limiter, self.maintenance, now)
                status = 200 if retry_at <= now else 429
            if status == 200:
                self.limiter.consume(now)
                retry_after = str(self.on_200_value) if self.behaviour == "on_200" else None
                body = {"portal": self.name, "path": path, "ok": True}
            else:
                retry_after = self._retry_after(now, retry_at, status)
                body = {"portal": self.name, "path": path, "error": _REASONS[status]}
            extra: Tuple[Tuple[str, str], ...] = ()
            if self.rate_headers is not None:
                fields = rate_limit_headers(self.rate_headers, self.limiter, now)
                extra = tuple(fields.items())
            self.stats.record(Hit(now, status, method, path, retry_after))
        if self.service_time > 0:
            advance = getattr(self.clock, "advance", None)
            if advance is not None:
                cast(_Advancing, self.clock).advance(self.service_time)
            else:
                self.clock.sleep(self.service_time)
        return _Answer(status, retry_after, json.dumps(body).encode(), extra)

    def _retry_after(self, now: float, retry_at: float, status: int) -> Optional[str]:
        """The Retry-After value for a rejection at ``now`` of a request that would pass at
        ``retry_at`` (called under the lock)."""
        kind = self.behaviour
        if kind == "switch":
            assert self.switch_at is not None
            kind = "truthful" if now < self.switch_at else "constant"
        if kind == "maintenance":
            kind = "truthful_date" if status == 503 else "truthful"
        if kind in ("truthful", "on_200"):
            return str(max(1, _ceil_seconds(retry_at - now)))
        if kind == "truthful_date":
            return format_http_date(math.ceil(retry_at - _EPS))
        if kind == "zero":
            return "0"
        if kind == "constant":
            return str(self.constant)
        if kind == "random":
            return str(self._random.randint(*self.random_range))
        if kind == "absent":
            return None
        if kind == "past_date":
            return format_http_date(math.floor(now - self.past_offset))
        if kind == "garbage":
            value = GARBAGE_VALUES[self._garbage % len(GARBAGE_VALUES)]
            self._garbage += 1
            return value
        if kind == "countdown":
            period = self.countdown_period
            reset = (math.floor(now / period + _EPS) + 1) * period
            return str(max(1, _ceil_seconds(reset - now)))
        raise AssertionError(f"unhandled behaviour {kind!r}")  # pragma: no cover

    def __repr__(self) -> str:
        return (
            f"Portal({self.name!r}, {self.limiter!r}, {self.behaviour!r}, "
            f"maintenance={self.maintenance!r})"
        )


_REASONS = {429: "Too Many Requests", 503: "Service Unavailable"}


# --------------------------------------------------------------------------------------------
# Standard scenarios
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A portal recipe with times relative to when it is built.

    ``limiter`` is a template (each :meth:`build` uses a fresh copy). ``maintenance`` and
    ``switch_after`` are offsets in seconds from the clock's time at :meth:`build`.
    ``kind`` is the DOMAIN category a good client should judge the host to be.
    """

    name: str
    description: str
    limiter: Limiter
    behaviour: str
    kind: str
    urls: int = 300
    maintenance: Optional[Tuple[float, float]] = None
    switch_after: Optional[float] = None
    constant: int = 3600
    random_range: Tuple[int, int] = (0, 120)
    seed: int = 0
    tags: Tuple[str, ...] = field(default=())
    #: One of :data:`RATE_HEADER_STYLES`, sent on every answer; ``None`` for none.
    rate_headers: Optional[str] = None

    @property
    def period(self) -> float:
        """The limiter's natural period: its window, a bucket's refill time from empty to
        full (``burst / rate``), else 60 s. Start phases of benchmark sweeps are spread over
        it."""
        window = _policy_window(self.limiter)
        return window if window is not None and window > 0 else 60.0

    def maintenance_window(self, start: float) -> Optional[Maintenance]:
        """The maintenance window for a portal built at ``start``."""
        if self.maintenance is None:
            return None
        return Maintenance(start + self.maintenance[0], start + self.maintenance[1])

    def build(self, clock: Clock, *, port: int = 0, start: Optional[float] = None) -> Portal:
        """Return a (not yet started) :class:`Portal` for this scenario on ``clock``; offsets
        count from ``start`` (default: ``clock.time()`` now)."""
        origin = clock.time() if start is None else start
        return Portal(
            self.name,
            self.limiter.fresh(),
            self.behaviour,
            clock,
            maintenance=self.maintenance_window(origin),
            constant=self.constant,
            random_range=self.random_range,
            seed=self.seed,
            switch_at=None if self.switch_after is None else origin + self.switch_after,
            rate_headers=self.rate_headers,
            port=port,
        )

    def ideal_seconds(self, start: float, count: Optional[int] = None) -> float:
        """:func:`ideal_duration` of ``count`` (default :attr:`urls`) requests from ``start``."""
        return ideal_duration(
            self.limiter,
            self.urls if count is None else count,
            start=start,
            maintenance=self.maintenance_window(start),
        )

    def steady_seconds(self, start: float, count: Optional[int] = None) -> float:
        """:func:`steady_duration` of ``count`` (default :attr:`urls`) requests from ``start``."""
        return steady_duration(
            self.limiter,
            self.urls if count is None else count,
            start=start,
            maintenance=self.maintenance_window(start),
        )


def standard_scenarios(scale: float = 1.0, urls: int = 300) -> Dict[str, Scenario]:
    """Build the standard scenarios, keyed by name.

    Args:
        scale: multiplies every window, period, maintenance and switch time and divides every
            rate, and scales the ``random`` range (e.g. ``0.1`` for a real-time demo with 6 s
            windows). The overstated ``constant`` (3600) and the ``on_200`` value stay as
            they are: those lies do not shrink with the window.
        urls: requests per scenario (5/3 of it for the three ~100-per-minute portals, half of
            it for the 12-per-minute one; the hourly quota is 2/5 of it).
    """
    if scale <= 0:
        raise ValueError("scale must be positive")
    if urls < 1:
        raise ValueError("urls must be at least 1")
    s = float(scale)
    high = max(1, round(120 * s))
    hourly_limit = max(1, (urls * 2) // 5)
    many = urls * 5 // 3  # the portals with ~100/min limits get 5 windows' worth too
    items = [
        Scenario(
            "fixed_truthful",
            "fixed window 40/60 s (documented 60), truthful delta-seconds",
            FixedWindow(40, 60 * s),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "truthful_date",
            "fixed window 40/60 s, truthful IMF-fixdate",
            FixedWindow(40, 60 * s),
            "truthful_date",
            "truthful",
            urls,
        ),
        Scenario(
            "sliding_truthful",
            "sliding window 40/60 s, truthful delta-seconds",
            SlidingWindow(40, 60 * s),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "leaky_truthful",
            "token bucket 1/s, burst 20, truthful delta-seconds",
            LeakyBucket(1.0 / s, 20),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "always_zero",
            "fixed window 12/60 s (documented 30), Retry-After: 0 on every 429",
            FixedWindow(12, 60 * s),
            "zero",
            "always_zero",
            max(1, urls // 2),
        ),
        Scenario(
            "constant_3600",
            "fixed window 60/60 s, Retry-After: 3600 on every 429",
            FixedWindow(60, 60 * s),
            "constant",
            "constant_overstated",
            urls,
        ),
        Scenario(
            "random",
            f"sliding window 100/60 s, Retry-After uniform in 0..{high} (seeded)",
            SlidingWindow(100, 60 * s),
            "random",
            "unreliable",
            many,
            random_range=(0, high),
        ),
        Scenario(
            "absent",
            "fixed window 100/60 s (documented: none), no Retry-After",
            FixedWindow(100, 60 * s),
            "absent",
            "absent",
            many,
        ),
        Scenario(
            "past_date",
            "fixed window 118/60 s (documented 120), an HTTP-date an hour in the past",
            FixedWindow(118, 60 * s),
            "past_date",
            "always_zero",
            many,
        ),
        Scenario(
            "garbage",
            "token bucket 1/s, burst 30, Retry-After cycling 'soon', '1.5', '30, 60', '-5'",
            LeakyBucket(1.0 / s, 30),
            "garbage",
            # Unusable values are treated as no header at all.
            "absent",
            urls,
        ),
        Scenario(
            "retry_after_on_200",
            "fixed window 40/60 s, truthful on 429 and Retry-After: 120 on every 200",
            FixedWindow(40, 60 * s),
            "on_200",
            "truthful",
            urls,
        ),
        Scenario(
            "maintenance_503",
            "fixed window 60/60 s, 503 maintenance from +30 s to +10.5 min (HTTP-date of end)",
            FixedWindow(60, 60 * s),
            "maintenance",
            "truthful",
            urls,
            maintenance=(30 * s, 630 * s),
        ),
        Scenario(
            "switch_to_3600",
            "fixed window 40/60 s, truthful until +30 s, then Retry-After: 3600",
            FixedWindow(40, 60 * s),
            "switch",
            "constant_overstated",
            urls,
            switch_after=30 * s,
        ),
        Scenario(
            "hourly_countdown",
            f"hourly quota {hourly_limit}/h (resets at the top of the hour), truthful countdown",
            HourlyQuota(hourly_limit, 3600 * s),
            "countdown",
            "truthful",
            urls,
            tags=("hourly",),
        ),
    ]
    return {scenario.name: scenario for scenario in items}


def extra_scenarios(scale: float = 1.0, urls: int = 300) -> Dict[str, Scenario]:
    """Build the scenarios the standard set lacks, keyed by name (names do not clash with
    :func:`standard_scenarios`):

    - fixed windows of 5 to 30 s with 20 to 100 requests each, under several headers;
    - a crawl of at least 1,000 URLs;
    - stated resets rounded up to the next whole second, in ``X-RateLimit-*``, draft-6 and
      draft-7 fields sent on every answer (200s included), on 1 s windows where waiting for
      a late reset costs the most;
    - a sliding window with no header at all;
    - fixed windows that start at the client's first request, not on the clock;
    - nginx ``limit_req``-like buckets at 10 r/s, without a burst and with ``burst=5``.

    Args:
        scale: as for :func:`standard_scenarios` (windows times ``scale``, rates divided).
        urls: requests per scenario; the long crawl has ``max(1000, 4 * urls)``.
    """
    if scale <= 0:
        raise ValueError("scale must be positive")
    if urls < 1:
        raise ValueError("urls must be at least 1")
    s = float(scale)
    crawl = max(1000, 4 * urls)
    items = [
        Scenario(
            "fixed_5s_absent",
            "fixed window 20/5 s, no Retry-After",
            FixedWindow(20, 5 * s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "fixed_10s_truthful",
            "fixed window 50/10 s, truthful delta-seconds",
            FixedWindow(50, 10 * s),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "fixed_15s_past_date",
            "fixed window 30/15 s, an HTTP-date an hour in the past",
            FixedWindow(30, 15 * s),
            "past_date",
            "always_zero",
            urls,
        ),
        Scenario(
            "fixed_20s_zero",
            "fixed window 60/20 s, Retry-After: 0 on every 429",
            FixedWindow(60, 20 * s),
            "zero",
            "always_zero",
            urls,
        ),
        Scenario(
            "fixed_30s_constant",
            "fixed window 100/30 s, Retry-After: 3600 on every 429",
            FixedWindow(100, 30 * s),
            "constant",
            "constant_overstated",
            urls,
        ),
        Scenario(
            "crawl_1000",
            f"a {crawl}-URL crawl of a fixed window 100/60 s, no Retry-After",
            FixedWindow(100, 60 * s),
            "absent",
            "absent",
            crawl,
        ),
        Scenario(
            "reset_xratelimit",
            "moving window 5/1 s, X-RateLimit-* on every answer (reset: epoch, rounded up), "
            "Retry-After rounded up",
            SlidingWindow(5, 1 * s),
            "truthful",
            "truthful",
            urls,
            rate_headers="x-ratelimit",
        ),
        Scenario(
            "reset_draft6",
            "windows of 5/1 s from the first request, draft-6 RateLimit-* on every answer "
            "(reset rounded up), Retry-After rounded up",
            FirstRequestWindow(5, 1 * s),
            "truthful",
            "truthful",
            urls,
            rate_headers="draft6",
        ),
        Scenario(
            "reset_draft7",
            "windows of 5/1 s from the first request, draft-7 combined RateLimit on every "
            "answer (reset rounded up), no Retry-After",
            FirstRequestWindow(5, 1 * s),
            "absent",
            "absent",
            urls,
            rate_headers="draft7",
        ),
        Scenario(
            "sliding_absent",
            "sliding window 30/20 s, no header at all",
            SlidingWindow(30, 20 * s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "first_request_absent",
            "windows of 40/30 s that start at the first request, no Retry-After",
            FirstRequestWindow(40, 30 * s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "first_request_truthful",
            "windows of 20/10 s that start at the first request, truthful delta-seconds",
            FirstRequestWindow(20, 10 * s),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "nginx_10rs",
            "nginx limit_req rate=10r/s nodelay (no burst), 429 without Retry-After",
            nginx_limit_req(10.0 / s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "nginx_10rs_burst5",
            "nginx limit_req rate=10r/s burst=5 nodelay, 429 without Retry-After",
            nginx_limit_req(10.0 / s, 5),
            "absent",
            "absent",
            urls,
        ),
    ]
    return {scenario.name: scenario for scenario in items}


#: The standard scenarios at full scale (:func:`standard_scenarios` with defaults).
SCENARIOS: Dict[str, Scenario] = standard_scenarios()
