"""Test support: a local rate-limited HTTP server and the limits it enforces.

Start a :class:`RateLimitedServer` in your own tests to see what your code does when a host
says "too many requests". It serves real HTTP on ``127.0.0.1`` (on a free port), refuses
requests over its limit with 429 and a ``Retry-After`` header (truthful by default, or one of
the ways real hosts get it wrong, see :data:`BEHAVIOURS`), and counts every request. It reads
time from the clock you give it: share a :class:`~requests_retryafter.FakeClock` with the
adapter, and a client's virtual sleeps move the server's time too, so a test of minutes of
rate limiting takes milliseconds and never sleeps::

    import requests

    from requests_retryafter import FakeClock, RetryAfterAdapter
    from requests_retryafter.testing import FixedWindow, RateLimitedServer

    clock = FakeClock()
    with RateLimitedServer(FixedWindow(5, 60), clock=clock) as server:
        session = requests.Session()
        session.mount("http://", RetryAfterAdapter(clock=clock, store="memory://", environ={}))
        for i in range(6):
            session.get(f"{server.url}/items/{i}")
    assert server.rejected == 1  # the sixth request met the limit, waited, then passed

The limits: :class:`FixedWindow`, :class:`SlidingWindow`, :class:`TokenBucket` and
:class:`Unlimited`; anything with the methods of :class:`Limiter` will do. The pytest plugin
(:mod:`requests_retryafter.pytest_plugin`) has fixtures that build all of this for you.

This module uses the standard library only.

.. versionadded:: 0.1.0
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
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import (
    Callable,
    ClassVar,
    Dict,
    List,
    Optional,
    Protocol,
    Set,
    Tuple,
    TypeVar,
    Union,
    cast,
)

from .clock import Clock, SystemClock
from .state import host_key

__all__ = [
    "BEHAVIOURS",
    "RATE_HEADER_STYLES",
    "FixedWindow",
    "Hit",
    "Limiter",
    "Maintenance",
    "RateLimitedServer",
    "ServerStats",
    "SlidingWindow",
    "SlidingWindowCounter",
    "Sporadic",
    "TokenBucket",
    "Unlimited",
    "Unstated",
]

_EPS = 1e-6

#: Every Retry-After behaviour a :class:`RateLimitedServer` knows.
#:
#: - ``truthful``: delta-seconds, the ceiling of the real time until a request would pass.
#: - ``truthful_date``: the IMF-fixdate of that moment (rounded up to the second).
#: - ``zero``: always ``0``.
#: - ``constant``: always the same value (``constant``, default 3600), whatever the window.
#: - ``random``: a uniform random integer in ``random_range`` (seeded with ``seed``).
#: - ``absent``: no header at all.
#: - ``past_date``: an HTTP-date ``past_offset`` seconds in the past.
#: - ``garbage``: cycles through ``soon``, ``1.5``, ``30, 60`` and ``-5``.
#: - ``on_200``: truthful on 429, and ``Retry-After: on_200_value`` on every 200 too.
#: - ``maintenance``: needs ``maintenance``; its 503s carry the HTTP-date of the end of the
#:   window, its 429s are truthful delta-seconds.
#: - ``switch``: truthful before ``switch_at`` (epoch seconds), ``constant`` from then on.
#: - ``countdown``: seconds until the end of the quota period (the limiter's window for a
#:   :class:`FixedWindow`, else the next top of the hour).
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

#: The generations of rate-limit fields a :class:`RateLimitedServer` can send on every
#: answer, 200s included, as limiter libraries do. Every stated reset but a decimal one is
#: rounded UP to a whole second, as real limiters round, so it can be up to a second late.
#:
#: - ``x-ratelimit``: ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (epoch seconds).
#: - ``x-ratelimit-delta``: the same with ``X-RateLimit-Reset`` in seconds from now.
#: - ``x-ratelimit-decimal``: the same as ``x-ratelimit`` in decimals, as Reddit and Discord
#:   send theirs: counts as ``5.0``, and the epoch reset rounded up to the millisecond, not
#:   to a whole second.
#: - ``x-rate-limit``: the same as ``x-ratelimit``, spelled ``X-Rate-Limit-*`` as Twitter and
#:   Okta spell it.
#: - ``draft6``: ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (seconds from now) and
#:   ``RateLimit-Policy: 5;w=1``.
#: - ``draft7``: one combined ``RateLimit: limit=5, remaining=0, reset=1`` and
#:   ``RateLimit-Policy: 5;w=1``.
RATE_HEADER_STYLES: Tuple[str, ...] = (
    "x-ratelimit",
    "x-ratelimit-delta",
    "x-ratelimit-decimal",
    "x-rate-limit",
    "draft6",
    "draft7",
)

#: The values the ``garbage`` behaviour cycles through, in order.
_GARBAGE_VALUES: Tuple[str, ...] = ("soon", "1.5", "30, 60", "-5")


def _format_http_date(epoch: float) -> str:
    """Return the IMF-fixdate (RFC 9110 §5.6.7) of ``epoch``, e.g.
    ``Tue, 14 Nov 2023 22:13:20 GMT``.

    >>> _format_http_date(0)
    'Thu, 01 Jan 1970 00:00:00 GMT'
    """
    return email.utils.formatdate(epoch, usegmt=True)


def _ceil_seconds(seconds: float) -> int:
    """Whole seconds, rounded up, ignoring float noise below ``_EPS``."""
    return max(0, math.ceil(seconds - _EPS))


# --------------------------------------------------------------------------------------------
# Enforced limits
# --------------------------------------------------------------------------------------------


class Limiter(Protocol):
    """An enforced limit. Not thread-safe on its own: :class:`RateLimitedServer` calls it
    under a lock.

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


class Sporadic:
    """Another limiter (``inner``: :class:`Unlimited` by default) whose host also refuses a
    ``share`` of requests at random, whatever the pace: its load, or other clients behind the
    same limit. Such a refusal lasts ``seconds`` (the time a request would pass again).

    Which moments are refused is a pure function of ``seed`` and the moment, so that
    ``next_free`` changes nothing and a benchmark's perfect client meets the same refusals.
    """

    def __init__(
        self, share: float, inner: Optional[Limiter] = None, seed: int = 0, seconds: float = 1.0
    ) -> None:
        if not 0.0 <= share < 1.0:
            raise ValueError("share must be in [0, 1)")
        if seconds <= 0:
            raise ValueError("seconds must be positive")
        self.share = float(share)
        self.inner: Limiter = Unlimited() if inner is None else inner
        self.seed = int(seed)
        self.seconds = float(seconds)

    def _refused(self, now: float) -> bool:
        return random.Random(f"{self.seed}:{now!r}").random() < self.share

    def next_free(self, now: float) -> float:
        """The inner limiter's answer; ``seconds`` later if ``now`` is refused at random."""
        moment = self.inner.next_free(now)
        if moment <= now and self._refused(now):
            return now + self.seconds
        return moment

    def consume(self, now: float) -> None:
        """Recorded by the inner limiter."""
        self.inner.consume(now)

    def fresh(self) -> Sporadic:
        """The same settings, and a fresh inner limiter."""
        return type(self)(self.share, self.inner.fresh(), self.seed, self.seconds)

    @property
    def rate(self) -> float:
        """The inner limiter's."""
        return self.inner.rate

    def __repr__(self) -> str:
        return f"Sporadic({self.share!r}, {self.inner!r}, seed={self.seed!r})"


class Unstated:
    """Two limits on one host, of which its rate-limit fields state only ``stated`` (a long
    quota, such as 5000 requests an hour) while ``unstated`` refuses too (a short limit,
    such as 5 a second, that no field mentions): as GitHub's REST API states its primary
    limit on every answer and refuses by secondary limits it does not state. A request is
    accepted when both limits accept it, and counted by both."""

    def __init__(self, stated: Limiter, unstated: Limiter) -> None:
        self.stated = stated
        self.unstated = unstated

    def next_free(self, now: float) -> float:
        """The later of the two limits' answers (a limit that has room keeps it until a
        request is counted)."""
        return max(self.stated.next_free(now), self.unstated.next_free(now))

    def consume(self, now: float) -> None:
        """Counted by both limits."""
        self.stated.consume(now)
        self.unstated.consume(now)

    def quota(self, now: float) -> Optional[Tuple[int, int, float]]:
        """What the fields state: the ``stated`` limit's quota."""
        return _quota(self.stated, now)

    def fresh(self) -> Unstated:
        """The same settings, and fresh limits."""
        return type(self)(self.stated.fresh(), self.unstated.fresh())

    @property
    def rate(self) -> float:
        """The lower of the two limits' rates."""
        return min(self.stated.rate, self.unstated.rate)

    def __repr__(self) -> str:
        return f"Unstated({self.stated!r}, {self.unstated!r})"


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

    def _window_index(self, now: float) -> int:
        """The number of the window of the clock that ``now`` falls in (``[k*window,
        (k+1)*window)``)."""
        index = math.floor(now / self.window)
        if (index + 1) * self.window <= now + _EPS:  # float noise at a boundary
            index += 1
        return index

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


class SlidingWindowCounter(_Window):
    """The sliding window counter of ``limits``' ``sliding-window-counter`` strategy (and of
    Flask-Limiter, Cloudflare's and Kong's sliding limits): counts per window aligned to
    multiples of ``window`` in epoch time, with the previous window's count weighted by the
    share of the current window still to come. A request is accepted while that weighted
    count, rounded down, is below ``limit``.

    So a window's budget sent at its start keeps most of the next window shut: its places
    free a little at a time (one each ``window / limit`` seconds), not at a reset.

    Args:
        limit: requests per window.
        window: seconds.
        from_first: windows follow one another from the first request counted, not from
            multiples of ``window`` in epoch time, and start again at the next request after
            two windows with none: HAProxy's ``http_req_rate`` (its frequency counters) does.

    .. versionadded:: 0.2.0
    """

    def __init__(self, limit: int, window: float, *, from_first: bool = False) -> None:
        super().__init__(limit, window)
        self.from_first = from_first
        self._origin = 0.0  # where windows are counted from (from_first: the first request)
        self._index: Optional[int] = None
        self._current = 0
        self._previous = 0

    def fresh(self) -> SlidingWindowCounter:
        """A new limiter of the same kind and settings, nothing counted yet."""
        return type(self)(self.limit, self.window, from_first=self.from_first)

    def __repr__(self) -> str:
        first = ", from_first=True" if self.from_first else ""
        return f"{type(self).__name__}(limit={self.limit}, window={self.window:g}{first})"

    def _counts(self, now: float) -> Tuple[int, int, float]:
        """``(previous window's count, current window's, share of the current window gone)``
        at ``now``."""
        now -= self._origin
        index = self._window_index(now)
        gone = min(1.0, max(0.0, now / self.window - index))
        if self._index is None or index > self._index + 1:
            return 0, 0, gone
        if index == self._index + 1:
            return self._current, 0, gone
        return self._previous, self._current, gone

    def _free(self, now: float) -> bool:
        """Whether a request at ``now`` would be accepted: the weighted count, rounded down as
        ``limits`` rounds it, is below ``limit``."""
        previous, current, gone = self._counts(now)
        return math.floor(previous * (1.0 - gone) + current) < self.limit

    def next_free(self, now: float) -> float:
        """``now`` while the weighted count, rounded down, is below ``limit``; else when the
        previous window's weight has fallen enough, or the next window's start."""
        if self._free(now):
            return now
        previous, current, gone = self._counts(now)
        start = now - gone * self.window
        if previous > 0 and current < self.limit:
            # previous * (1 - gone) + current < limit from this share of the window on
            at = max(now, start + (1.0 - (self.limit - current) / previous) * self.window)
        else:
            at = start + self.window
        # Float noise at that moment: the first moment a hair later that is free.
        step = _EPS * self.window
        while not self._free(at):
            at += step
            step *= 2.0
        return at

    def consume(self, now: float) -> None:
        """Count one request in the window of ``now`` (``from_first``: the first request, or
        the first after two windows with none, starts a window)."""
        if self.from_first and (
            self._index is None or self._window_index(now - self._origin) > self._index + 1
        ):
            self._origin, self._index = now, None
        previous, current, _ = self._counts(now)
        index = self._window_index(now - self._origin)
        self._index, self._previous, self._current = index, previous, current + 1

    def quota(self, now: float) -> Tuple[int, int, float]:
        """``(limit, remaining, reset_at)`` as ``limits`` states them: what the weighted
        count, rounded down, leaves of ``limit``, and the next moment the count falls (the
        previous window's weight losing one request, or the window's end); ``now`` when
        nothing is counted."""
        previous, current, gone = self._counts(now)
        remaining = max(0, self.limit - math.floor(previous * (1.0 - gone) + current))
        if not (previous or current):
            return self.limit, remaining, now
        to_end = (1.0 - gone) * self.window
        reset_in = to_end
        if previous:
            reset_in = min(reset_in, to_end % (self.window / previous))
        return self.limit, remaining, now + reset_in


class TokenBucket:
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

    def fresh(self) -> TokenBucket:
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
        return f"{type(self).__name__}(rate={self.rate:g}, burst={self.burst})"


def _quota(limiter: Limiter, now: float) -> Optional[Tuple[int, int, float]]:
    """``(limit, remaining, reset_at)`` as a limiter library would state them for ``limiter``
    at ``now`` (``reset_at`` in epoch seconds, not rounded), or ``None`` when the limiter
    states nothing (:class:`Unlimited`, or a limiter without a ``quota`` method)."""
    method = getattr(limiter, "quota", None)
    stated = None if method is None else method(now)
    if stated is None:
        return None
    limit, remaining, reset_at = stated
    return int(limit), int(remaining), float(reset_at)


def _policy_window(limiter: Limiter) -> Optional[float]:
    inner = getattr(limiter, "inner", getattr(limiter, "stated", None))
    if inner is not None:  # Sporadic's limiter's, or the one Unstated states
        return _policy_window(inner)
    window = getattr(limiter, "window", None)
    if window is not None:
        return float(window)
    burst = getattr(limiter, "burst", None)
    if burst is not None and limiter.rate > 0:
        return float(burst) / limiter.rate
    return None


def _rate_limit_headers(style: str, limiter: Limiter, now: float) -> Dict[str, str]:
    """The rate-limit fields of generation ``style`` (one of :data:`RATE_HEADER_STYLES`) for
    ``limiter`` at ``now``, with the reset rounded UP to a whole second (so up to a second
    late), or to the millisecond in ``x-ratelimit-decimal``. Empty when the limiter states nothing.

    >>> window = FixedWindow(5, 1)
    >>> _rate_limit_headers("draft7", window, 100.25)
    {'RateLimit': 'limit=5, remaining=5, reset=1', 'RateLimit-Policy': '5;w=1'}
    """
    if style not in RATE_HEADER_STYLES:
        raise ValueError(f"unknown rate header style {style!r}; known: {RATE_HEADER_STYLES}")
    stated = _quota(limiter, now)
    if stated is None:
        return {}
    limit, remaining, reset_at = stated
    delta = _ceil_seconds(reset_at - now)
    window = _policy_window(limiter)
    policy = f"{limit};w={max(1, _ceil_seconds(window))}" if window else str(limit)
    if style.startswith("x-rate"):  # X-RateLimit-*, or X-Rate-Limit-* in "x-rate-limit"
        prefix = "X-Rate-Limit-" if style == "x-rate-limit" else "X-RateLimit-"
        count = "{}.0" if style == "x-ratelimit-decimal" else "{}"
        if style == "x-ratelimit-delta":
            reset = str(delta)
        elif style == "x-ratelimit-decimal":  # the epoch, rounded up to the millisecond
            reset = f"{math.ceil(reset_at * 1000.0 - _EPS) / 1000.0:.3f}"
        else:
            reset = str(math.ceil(reset_at - _EPS))
        return {
            prefix + "Limit": count.format(limit),
            prefix + "Remaining": count.format(remaining),
            prefix + "Reset": reset,
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


def _next_open(limiter: Limiter, maintenance: Optional[Maintenance], now: float) -> float:
    """Return the earliest time ``>= now`` at which ``limiter`` would accept a request and no
    ``maintenance`` is under way (without changing the limiter)."""
    moment = limiter.next_free(now)
    if maintenance is not None and maintenance.active(moment):
        moment = limiter.next_free(maintenance.end)
    return moment


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One request as the server saw it."""

    #: The server clock's epoch time when the request arrived.
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


class ServerStats:
    """Thread-safe record of every request a :class:`RateLimitedServer` answered, in arrival
    order."""

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
# The server
# --------------------------------------------------------------------------------------------


_S = TypeVar("_S", bound="RateLimitedServer")


class _Advancing(Protocol):
    def advance(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class _Answer:
    status: int
    retry_after: Optional[str]
    body: bytes
    headers: Tuple[Tuple[str, str], ...] = ()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default backlog of 5 drops SYNs under concurrent clients
    owner: RateLimitedServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30.0
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and
    # delayed ACKs add ~40 ms to every keep-alive response.
    disable_nagle_algorithm = True

    @property
    def _owner(self) -> RateLimitedServer:
        return cast(_HTTPServer, self.server).owner

    def setup(self) -> None:
        super().setup()
        self._owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self._owner._track(self.connection, add=False)

    def version_string(self) -> str:
        return self._owner.server_header

    def date_time_string(self, timestamp: Optional[float] = None) -> str:
        # The Date header follows the server's clock, so virtual time stays consistent.
        return _format_http_date(self._owner.clock.time() if timestamp is None else timestamp)

    def log_message(self, format: str, *args: object) -> None:
        """Silence the per-request log lines."""

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(length)
        answer = self._owner._answer(self.command, self.path)
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


class RateLimitedServer:
    """A local HTTP server that enforces a limit and answers requests over it with 429 and a
    ``Retry-After`` header, truthful or not.

    Every method and path is served: an accepted request gets 200 with a small JSON body and
    consumes quota; a refused one gets 429 (503 during ``maintenance``) and consumes nothing,
    unless ``count_refused``.
    Use it as a context manager (or :meth:`start`/:meth:`stop`); :attr:`url` is its base URL
    and :attr:`host` the key the adapter knows it by.

    Args:
        limiter: the enforced limit (a :class:`Limiter`); default ``FixedWindow(10, 60)``,
            ten requests a minute. It is used as given, and keeps what it counted: two
            servers given one limiter (a test parametrised with a limiter object, a second
            run meant to start afresh) share its windows. Give each its own, or
            ``limiter.fresh()``.
        retry_after: how the ``Retry-After`` header is sent, one of :data:`BEHAVIOURS`
            (default ``"truthful"``: the whole seconds until a request would pass).
        clock: where the server reads the time (default
            :class:`~requests_retryafter.SystemClock`). Give it the same
            :class:`~requests_retryafter.FakeClock` as the adapter under test, or the server's
            windows never pass while the client sleeps virtually.
        name: a label, echoed in response bodies.
        maintenance: a :class:`Maintenance` window answered with 503.
        constant: the value of the ``constant`` behaviour (and of ``switch`` after the switch).
        random_range: inclusive bounds of the ``random`` behaviour.
        seed: seed of the ``random`` behaviour.
        past_offset: how far in the past the ``past_date`` behaviour's date lies (seconds).
        on_200_value: the ``Retry-After`` the ``on_200`` behaviour puts on 200s.
        switch_at: epoch time at which the ``switch`` behaviour turns from truthful to
            ``constant`` (required for ``switch``).
        countdown_period: period of the ``countdown`` behaviour (default: the window of a
            :class:`FixedWindow` limiter, else 3600).
        rate_headers: one of :data:`RATE_HEADER_STYLES`: send that generation's rate-limit
            fields (stated after the request is counted) on every answer, 200s included;
            ``None`` (default) sends none.
        service_time: virtual seconds each request takes, added to the clock after it is
            answered (with ``clock.advance`` when the clock has it, else ``clock.sleep``).
        latency: virtual seconds each request takes to reach the server, added to the clock
            (in the same way) before it is counted: a real server counts a request a little
            after it was sent, so windows opened by a request open off the whole second. A
            callable is asked for each request's (a network's latencies vary: a sliding
            window refuses a request that reaches it a hair less than a window after the
            one it replaces).
        count_refused: a request refused with 429 is counted by the limiter too, as an
            accepted one is: HAProxy's counters (``track-sc`` before ``http-request deny``)
            count every request, so a client that keeps knocking keeps itself shut out.
        address: the address to bind (default ``127.0.0.1``).
        port: the port to bind (default 0: any free port).

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0
       ``count_refused``.
    """

    #: The ``Server`` header sent on every answer.
    server_header: ClassVar[str] = "requests-retryafter-testing/1"
    #: The key under which a response body names the server.
    _body_key: ClassVar[str] = "server"

    def __init__(
        self,
        limiter: Optional[Limiter] = None,
        retry_after: str = "truthful",
        *,
        clock: Optional[Clock] = None,
        name: str = "rate-limited",
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
        latency: Union[float, Callable[[], float]] = 0.0,
        count_refused: bool = False,
        address: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if limiter is None:
            limiter = FixedWindow(10, 60)
        if retry_after not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {retry_after!r}; known: {', '.join(BEHAVIOURS)}")
        if retry_after == "switch" and switch_at is None:
            raise ValueError("the 'switch' behaviour needs switch_at")
        if retry_after == "maintenance" and maintenance is None:
            raise ValueError("the 'maintenance' behaviour needs a maintenance window")
        if random_range[0] > random_range[1]:
            raise ValueError("random_range must be (low, high) with low <= high")
        if service_time < 0 or (not callable(latency) and latency < 0):
            raise ValueError("service_time and latency cannot be negative")
        if rate_headers is not None and rate_headers not in RATE_HEADER_STYLES:
            raise ValueError(
                f"unknown rate_headers {rate_headers!r}; known: {', '.join(RATE_HEADER_STYLES)}"
            )
        self.name = name
        #: The enforced limit.
        self.limiter: Limiter = limiter
        #: The ``Retry-After`` behaviour, one of :data:`BEHAVIOURS`.
        self.behaviour = retry_after
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
        #: Whether a request refused with 429 is counted by the limiter too.
        self.count_refused = bool(count_refused)
        self.latency: Union[float, Callable[[], float]] = (
            latency if callable(latency) else float(latency)
        )
        #: Every request answered (see :class:`ServerStats`).
        self.stats = ServerStats()
        self._bind = (address, port)
        self._random = random.Random(seed)
        self._garbage = 0
        self._lock = threading.Lock()
        self._server: Optional[_HTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._connections: Set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> str:
        """Start serving in a daemon thread and return the base URL (``http://host:port``)."""
        if self._server is not None:
            raise RuntimeError(f"server {self.name!r} is already running")
        server = _HTTPServer(self._bind, _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"rate-limited-{self.name}",
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

    def __enter__(self: _S) -> _S:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port served on (only while running)."""
        if self._server is None:
            raise RuntimeError(f"server {self.name!r} is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT`` (only while running)."""
        return f"http://{self._bind[0]}:{self.port}"

    @property
    def host(self) -> str:
        """The key the adapter, its store and its errors know this server by
        (``127.0.0.1:PORT``, see :func:`~requests_retryafter.host_key`); only while running."""
        return host_key(self.url)

    # -- counts ------------------------------------------------------------------------------

    @property
    def hits(self) -> List[Hit]:
        """Every request answered so far, in arrival order (a snapshot)."""
        return self.stats.hits

    @property
    def requests(self) -> int:
        """Requests answered so far."""
        return self.stats.requests

    @property
    def accepted(self) -> int:
        """Requests answered 200."""
        return self.stats.accepted

    @property
    def rejected(self) -> int:
        """Requests refused with 429 or 503."""
        return self.stats.rejected

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._connections_lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    # -- answers -----------------------------------------------------------------------------

    def _answer(self, method: str, path: str) -> _Answer:
        latency = self.latency() if callable(self.latency) else self.latency
        if latency > 0:
            self._advance(latency)
        with self._lock:
            now = self.clock.time()
            if self.maintenance is not None and self.maintenance.active(now):
                status = 503
                retry_at = _next_open(self.limiter, self.maintenance, self.maintenance.end)
            else:
                retry_at = _next_open(self.limiter, self.maintenance, now)
                status = 200 if retry_at <= now else 429
            if status == 200:
                self.limiter.consume(now)
                retry_after = str(self.on_200_value) if self.behaviour == "on_200" else None
                body: Dict[str, object] = {self._body_key: self.name, "path": path, "ok": True}
            else:
                retry_after = self._retry_after(now, retry_at, status)
                body = {self._body_key: self.name, "path": path, "error": _REASONS[status]}
                if status == 429 and self.count_refused:
                    self.limiter.consume(now)
            extra: Tuple[Tuple[str, str], ...] = ()
            if self.rate_headers is not None:
                fields = _rate_limit_headers(self.rate_headers, self.limiter, now)
                extra = tuple(fields.items())
            self.stats.record(Hit(now, status, method, path, retry_after))
        if self.service_time > 0:
            self._advance(self.service_time)
        return _Answer(status, retry_after, json.dumps(body).encode(), extra)

    def _advance(self, seconds: float) -> None:
        """Let ``seconds`` pass on the server's clock (virtually when it can advance)."""
        if getattr(self.clock, "advance", None) is not None:
            cast(_Advancing, self.clock).advance(seconds)
        else:
            self.clock.sleep(seconds)

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
            return _format_http_date(math.ceil(retry_at - _EPS))
        if kind == "zero":
            return "0"
        if kind == "constant":
            return str(self.constant)
        if kind == "random":
            return str(self._random.randint(*self.random_range))
        if kind == "absent":
            return None
        if kind == "past_date":
            return _format_http_date(math.floor(now - self.past_offset))
        if kind == "garbage":
            value = _GARBAGE_VALUES[self._garbage % len(_GARBAGE_VALUES)]
            self._garbage += 1
            return value
        if kind == "countdown":
            period = self.countdown_period
            reset = (math.floor(now / period + _EPS) + 1) * period
            return str(max(1, _ceil_seconds(reset - now)))
        raise AssertionError(f"unhandled behaviour {kind!r}")  # pragma: no cover

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.limiter!r}, {self.behaviour!r}, name={self.name!r}, "
            f"maintenance={self.maintenance!r})"
        )


_REASONS = {429: "Too Many Requests", 503: "Service Unavailable"}
